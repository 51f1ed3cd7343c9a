//! The write-intent bitmap (MD's md-bitmap, simplified): one bit per region of member
//! offsets, set and made durable before the first write to a clean region, cleared lazily
//! once the region has been idle and its writes flushed. After an unclean stop the set bits
//! are exactly the regions whose mirrors may differ, so only those are resynced.
//!
//! The bitmap lives in a small file beside the agent's state (not on the members): setting a
//! bit is then one small write and fdatasync that neither flushes the members' page cache
//! nor wakes a sleeping disk.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use crate::clock::Seconds;
use crate::member::Member;
use crate::sync::lock;

const MAGIC: &[u8; 8] = b"GRWIBM01";
/// Most regions a bitmap may have (keeps the file and every rewrite of it small).
const MAX_REGIONS: u64 = 1 << 20;
/// A region is cleared only after it has been idle this long (MD's daemon_sleep).
pub const CLEAR_AFTER_IDLE_S: f64 = 5.0;

/// Region size for a member: at least `wanted`, a multiple of 4 KiB, and few enough regions.
pub fn region_bytes(member_data_bytes: u64, wanted: u64) -> u64 {
    let floor = member_data_bytes.div_ceil(MAX_REGIONS);
    wanted.max(floor).max(4096).div_ceil(4096) * 4096
}

/// Bytes of the bitmap file for a region count.
pub fn file_bytes(regions: u64) -> u64 {
    header_bytes() + regions.div_ceil(8)
}

fn header_bytes() -> u64 {
    (MAGIC.len() + 8 + 8 + 32) as u64
}

#[derive(Debug)]
struct State {
    /// Bits known to be on stable storage.
    durable: BTreeSet<u64>,
    /// Writes in progress per region.
    inflight: HashMap<u64, u32>,
    /// (time, write epoch) of the last completed write per durable region.
    last_write: HashMap<u64, (Seconds, u64)>,
    write_epoch: u64,
    /// Writes up to this epoch are known to be flushed on every member.
    flushed_epoch: u64,
    /// Regions whose copies may differ (from an unclean stop), not yet resynced.
    needs_resync: BTreeSet<u64>,
    /// Regions writers wait to see durable: the next bitmap write takes all of them at once
    /// (a group commit: one fdatasync for every writer queued behind the one in progress).
    wanted: BTreeSet<u64>,
}

#[derive(Debug)]
pub struct WriteIntent {
    region_bytes: u64,
    regions: u64,
    volume_id: String,
    store: Arc<dyn Member>,
    state: Mutex<State>,
    /// Serializes bitmap rewrites (a set and a clear must not overtake each other).
    persist: Mutex<()>,
}

/// What an existing bitmap file said at assembly.
#[derive(Debug, PartialEq)]
pub enum Recovered {
    /// A valid bitmap of this volume with these bits set.
    Bits(BTreeSet<u64>),
    /// No usable bitmap (missing, other volume, other geometry).
    Unknown,
}

impl WriteIntent {
    /// A bitmap kept in `store` for `member_data_bytes` of member space.
    pub fn new(
        store: Arc<dyn Member>,
        volume_id: &str,
        region: u64,
        member_data_bytes: u64,
    ) -> Self {
        let regions = member_data_bytes.div_ceil(region).max(1);
        Self {
            region_bytes: region,
            regions,
            volume_id: volume_id.to_string(),
            store,
            state: Mutex::new(State {
                durable: BTreeSet::new(),
                inflight: HashMap::new(),
                last_write: HashMap::new(),
                write_epoch: 0,
                flushed_epoch: 0,
                needs_resync: BTreeSet::new(),
                wanted: BTreeSet::new(),
            }),
            persist: Mutex::new(()),
        }
    }

    pub fn region_bytes(&self) -> u64 {
        self.region_bytes
    }

    pub fn regions(&self) -> u64 {
        self.regions
    }

    /// Regions covering member bytes `start..end`.
    pub fn regions_of(&self, start: u64, end: u64) -> std::ops::Range<u64> {
        if end <= start {
            return 0..0;
        }
        (start / self.region_bytes)..((end - 1) / self.region_bytes + 1).min(self.regions)
    }

    fn encode(&self, bits: &BTreeSet<u64>) -> Vec<u8> {
        let mut out = vec![0u8; file_bytes(self.regions) as usize];
        out[..8].copy_from_slice(MAGIC);
        out[8..16].copy_from_slice(&self.region_bytes.to_le_bytes());
        out[16..24].copy_from_slice(&self.regions.to_le_bytes());
        let id = self.volume_id.as_bytes();
        let id_len = id.len().min(32);
        out[24..24 + id_len].copy_from_slice(&id[..id_len]);
        let base = header_bytes() as usize;
        for &bit in bits {
            out[base + (bit / 8) as usize] |= 1 << (bit % 8);
        }
        out
    }

    /// Read the bits an earlier run left behind.
    pub fn recover(&self) -> Recovered {
        let mut buf = vec![0u8; file_bytes(self.regions) as usize];
        if self.store.size() < buf.len() as u64 || self.store.read_at(&mut buf, 0).is_err() {
            return Recovered::Unknown;
        }
        let expected = self.encode(&BTreeSet::new());
        let header = header_bytes() as usize;
        if buf[..header] != expected[..header] {
            return Recovered::Unknown;
        }
        let bits = (0..self.regions)
            .filter(|b| buf[header + (b / 8) as usize] & (1 << (b % 8)) != 0)
            .collect();
        Recovered::Bits(bits)
    }

    /// Start from `dirty` as both the durable bits and the regions to resync.
    pub fn set_recovered(&self, dirty: BTreeSet<u64>) {
        let mut s = lock(&self.state);
        s.needs_resync = dirty.clone();
        s.durable = dirty;
    }

    fn write_out(&self, bits: &BTreeSet<u64>) -> std::io::Result<()> {
        self.store.write_at(&self.encode(bits), 0)?;
        self.store.flush()
    }

    /// Write the current durable bits (a new volume's empty bitmap, for instance).
    pub fn store_now(&self) -> std::io::Result<()> {
        let _p = lock(&self.persist);
        let bits = lock(&self.state).durable.clone();
        self.write_out(&bits)
    }

    /// Declare writes to `regions`; returns once their bits are durable.
    pub fn start_write(&self, regions: &[u64]) -> std::io::Result<()> {
        {
            let mut s = lock(&self.state);
            for r in regions {
                *s.inflight.entry(*r).or_default() += 1;
            }
            if regions.iter().all(|r| s.durable.contains(r)) {
                return Ok(());
            }
            s.wanted.extend(regions.iter().copied());
        }
        let _p = lock(&self.persist);
        let target = {
            let s = lock(&self.state);
            if regions.iter().all(|r| s.durable.contains(r)) {
                return Ok(());
            }
            let mut t = s.durable.clone();
            t.extend(s.wanted.iter().copied());
            t.extend(regions.iter().copied());
            t
        };
        let result = self.write_out(&target);
        if result.is_ok() {
            let mut s = lock(&self.state);
            s.wanted.retain(|r| !target.contains(r));
            s.durable = target;
        } else {
            self.end_write(regions, f64::NEG_INFINITY);
        }
        result
    }

    /// Writes to `regions` finished (successfully or not) at `now`.
    pub fn end_write(&self, regions: &[u64], now: Seconds) {
        let mut s = lock(&self.state);
        s.write_epoch += 1;
        let epoch = s.write_epoch;
        for r in regions {
            if let Some(n) = s.inflight.get_mut(r) {
                *n -= 1;
                if *n == 0 {
                    s.inflight.remove(r);
                }
            }
            s.last_write.insert(*r, (now, epoch));
        }
    }

    /// The epoch a flush starting now will cover once it succeeds.
    pub fn flush_started(&self) -> u64 {
        lock(&self.state).write_epoch
    }

    pub fn flushed(&self, epoch: u64) {
        let mut s = lock(&self.state);
        s.flushed_epoch = s.flushed_epoch.max(epoch);
    }

    /// Durable regions idle since `idle_since` or earlier whose writes are not yet flushed
    /// (a flush would make them clearable).
    pub fn awaiting_flush(&self, idle_since: Seconds) -> bool {
        let s = lock(&self.state);
        s.durable.iter().any(|r| {
            !s.inflight.contains_key(r)
                && !s.needs_resync.contains(r)
                && s.last_write
                    .get(r)
                    .is_some_and(|&(t, e)| t <= idle_since && e > s.flushed_epoch)
        })
    }

    /// Clear the bits of regions idle since `idle_since` whose writes are flushed; returns
    /// how many were cleared.
    pub fn clear_idle(&self, idle_since: Seconds) -> std::io::Result<usize> {
        let _p = lock(&self.persist);
        let (target, cleared) = {
            let mut s = lock(&self.state);
            let clearable: Vec<u64> = s
                .durable
                .iter()
                .copied()
                .filter(|r| {
                    !s.inflight.contains_key(r)
                        && !s.needs_resync.contains(r)
                        && s.last_write
                            .get(r)
                            .is_none_or(|&(t, e)| t <= idle_since && e <= s.flushed_epoch)
                })
                .collect();
            if clearable.is_empty() {
                return Ok(0);
            }
            // Dropped from `durable` before the rewrite: a writer arriving meanwhile sees the
            // bit missing and waits for `persist` to set it again.
            for r in &clearable {
                s.durable.remove(r);
                s.last_write.remove(r);
            }
            (s.durable.clone(), clearable.len())
        };
        self.write_out(&target)?;
        Ok(cleared)
    }

    pub fn dirty_regions(&self) -> usize {
        lock(&self.state).durable.len()
    }

    pub fn needs_resync(&self, region: u64) -> bool {
        lock(&self.state).needs_resync.contains(&region)
    }

    pub fn next_to_resync(&self) -> Option<u64> {
        lock(&self.state).needs_resync.first().copied()
    }

    pub fn resync_pending(&self) -> usize {
        lock(&self.state).needs_resync.len()
    }

    /// The region's copies agree again (its bit stays until the copy is flushed and idle).
    pub fn resynced(&self, region: u64, now: Seconds) {
        let mut s = lock(&self.state);
        if s.needs_resync.remove(&region) {
            s.write_epoch += 1;
            let epoch = s.write_epoch;
            s.last_write.insert(region, (now, epoch));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::{FileMember, MemberKind};

    fn bitmap(name: &str, id: &str) -> (std::path::PathBuf, WriteIntent) {
        let dir = std::env::temp_dir().join(format!("grs-bm-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let regions = 100;
        let file =
            FileMember::open_or_create(MemberKind::File, &dir.join("b"), file_bytes(regions))
                .unwrap();
        (
            dir,
            WriteIntent::new(Arc::new(file), id, 4096, regions * 4096),
        )
    }

    #[test]
    fn a_bit_is_durable_before_the_write_and_cleared_only_when_idle_and_flushed() {
        let (dir, b) = bitmap("life", "vol-a");
        assert_eq!(b.recover(), Recovered::Unknown, "nothing written yet");
        b.store_now().unwrap();
        assert_eq!(b.recover(), Recovered::Bits(BTreeSet::new()));
        b.start_write(&[3, 7]).unwrap();
        assert_eq!(b.recover(), Recovered::Bits([3, 7].into()));
        assert_eq!(b.clear_idle(100.0).unwrap(), 0, "writes in flight");
        b.end_write(&[3, 7], 1.0);
        assert_eq!(b.clear_idle(100.0).unwrap(), 0, "not flushed yet");
        let epoch = b.flush_started();
        b.flushed(epoch);
        assert_eq!(b.clear_idle(0.5).unwrap(), 0, "not idle long enough");
        assert_eq!(b.clear_idle(1.0).unwrap(), 2);
        assert_eq!(b.recover(), Recovered::Bits(BTreeSet::new()));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn another_volumes_bitmap_is_not_trusted() {
        let (dir, b) = bitmap("other", "vol-a");
        b.start_write(&[1]).unwrap();
        let file = FileMember::open_or_create(MemberKind::File, &dir.join("b"), 0).unwrap();
        let other = WriteIntent::new(Arc::new(file), "vol-b", 4096, 100 * 4096);
        assert_eq!(other.recover(), Recovered::Unknown);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn region_size_grows_to_bound_the_bitmap() {
        assert_eq!(region_bytes(1 << 30, 4 << 20), 4 << 20);
        assert!(region_bytes(1 << 50, 4 << 20) >= (1u64 << 50) / MAX_REGIONS);
        assert_eq!(region_bytes(1 << 20, 1000), 4096);
    }

    /// Random interleavings of writes, flushes and clears: a region with a write in flight
    /// or written since the last flush always has its bit on stable storage.
    #[test]
    fn property_a_region_that_may_differ_is_always_marked_on_disk() {
        let (dir, b) = bitmap("prop", "vol-p");
        b.store_now().unwrap();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut inflight: Vec<Vec<u64>> = Vec::new();
        let mut unflushed: BTreeSet<u64> = BTreeSet::new();
        let mut now = 0.0;
        for _ in 0..5000 {
            now += 1.0;
            match next(4) {
                0 => {
                    let regions: Vec<u64> = (0..1 + next(3)).map(|_| next(20)).collect();
                    b.start_write(&regions).unwrap();
                    inflight.push(regions);
                }
                1 if !inflight.is_empty() => {
                    let i = next(inflight.len() as u64) as usize;
                    let regions = inflight.swap_remove(i);
                    b.end_write(&regions, now);
                    unflushed.extend(regions);
                }
                2 => {
                    let epoch = b.flush_started();
                    b.flushed(epoch);
                    unflushed.clear();
                }
                _ => {
                    b.clear_idle(now - next(10) as f64).unwrap();
                }
            }
            let Recovered::Bits(on_disk) = b.recover() else {
                panic!("bitmap unreadable");
            };
            for r in inflight.iter().flatten().chain(unflushed.iter()) {
                assert!(
                    on_disk.contains(r),
                    "region {r} may differ but is clear on disk"
                );
            }
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
