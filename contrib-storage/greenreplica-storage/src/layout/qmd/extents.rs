//! QMD's flash space: fixed-size extents, a bitmap of the ones in use, and the volume-info
//! record (the volume's extents in allocation order and the next offset in the last one).
//! Writes are appended to the last extent (sequential flash writes); an extent is freed
//! only when nothing in it is live any more and the records that emptied it are durable.
//!
//! With an agent-level flash pool (`src/flash_pool.rs`) the extents are the pool's: a new
//! one is taken from the pool (committed in the pool journal before it is written), a
//! reclaimed one given back, and after replay the volume keeps only what the pool agrees it
//! holds (`settle`). The local bitmap then marks the volume's own extents.

use std::sync::Arc;

use crate::flash_pool::FlashPool;

/// The volume-info record: its extents (oldest first) and the next free offset in the last.
/// (The paper's 1 MB staging buffer is not kept: every write goes to flash directly; the
/// address blocks are appended here too.)
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumeInfo {
    pub extents: Vec<u32>,
    pub next: u64,
}

/// The pool a volume's extents come from, and the volume's name in it.
#[derive(Debug, Clone)]
pub struct PoolLease {
    pub pool: Arc<FlashPool>,
    pub volume: String,
}

#[derive(Debug, Clone)]
pub struct Extents {
    extent_bytes: u64,
    count: usize,
    /// One bit per extent: set while a volume holds it.
    used: Vec<u64>,
    /// Live (referenced by the index) bytes per extent.
    live: Vec<u64>,
    pub info: VolumeInfo,
    /// Extents come from (and go back to) this shared pool; None: the volume's own member.
    pool: Option<PoolLease>,
}

impl Extents {
    pub fn new(flash_bytes: u64, extent_bytes: u64) -> Self {
        let count = (flash_bytes / extent_bytes.max(1)) as usize;
        Self {
            extent_bytes,
            count,
            used: vec![0; count.div_ceil(64)],
            live: vec![0; count],
            info: VolumeInfo::default(),
            pool: None,
        }
    }

    /// Extents of a shared flash pool (its extent size and count).
    pub fn pooled(lease: PoolLease) -> Self {
        let mut x = Self::new(
            lease.pool.count() as u64 * lease.pool.extent_bytes(),
            lease.pool.extent_bytes(),
        );
        x.pool = Some(lease);
        x
    }

    /// The flash pool's name, when the extents are a pool's.
    pub fn pool_name(&self) -> Option<&str> {
        self.pool.as_ref().map(|l| l.pool.name())
    }

    /// A free extent: the lowest of the member's own, or one the pool gives (durably).
    fn take_free(&self) -> Option<usize> {
        let Some(lease) = &self.pool else {
            return self.first_free();
        };
        match lease.pool.take(&lease.volume) {
            Ok(e) => e.map(|e| e as usize).filter(|&e| e < self.count),
            Err(e) => {
                tracing::warn!(pool = lease.pool.name(), volume = %lease.volume, error = %e,
                    "cannot take a flash extent from the pool: the write goes to the disks");
                None
            }
        }
    }

    /// After replay, with a pool: keep the extents both the volume info and the pool say
    /// the volume holds; the pool takes back those the volume never recorded.
    pub fn settle(&mut self) -> Result<(), String> {
        let Some(lease) = &self.pool else {
            return Ok(());
        };
        let kept = lease
            .pool
            .settle(&lease.volume, &self.info.extents)
            .map_err(|e| format!("{e:#}"))?;
        if kept.last() != self.info.extents.last() {
            // The extent being filled went: the next write starts a fresh one.
            self.info.next = self.extent_bytes;
        }
        let info = VolumeInfo {
            extents: kept,
            next: self.info.next,
        };
        self.restore(info)
    }

    pub fn extent_bytes(&self) -> u64 {
        self.extent_bytes
    }

    pub fn count(&self) -> usize {
        self.count
    }

    #[cfg(test)]
    pub fn is_used(&self, extent: usize) -> bool {
        extent < self.count && self.used[extent / 64] & (1 << (extent % 64)) != 0
    }

    fn set_used(&mut self, extent: usize, used: bool) {
        let bit = 1u64 << (extent % 64);
        if used {
            self.used[extent / 64] |= bit;
        } else {
            self.used[extent / 64] &= !bit;
        }
    }

    /// The lowest free extent.
    fn first_free(&self) -> Option<usize> {
        self.used.iter().enumerate().find_map(|(word, bits)| {
            let free = !bits;
            let e = word * 64 + free.trailing_zeros() as usize;
            (free != 0 && e < self.count).then_some(e)
        })
    }

    /// Flash offset for `len` more bytes (at most one extent): in the last extent if it has
    /// room, else in a newly taken one. The bool says the volume info changed.
    pub fn allocate(&mut self, len: u64) -> Option<(u64, bool)> {
        if len == 0 || len > self.extent_bytes {
            return None;
        }
        if let Some(&last) = self.info.extents.last() {
            if self.info.next + len <= self.extent_bytes {
                let at = u64::from(last) * self.extent_bytes + self.info.next;
                self.info.next += len;
                return Some((at, false));
            }
        }
        let e = self.take_free()?;
        self.set_used(e, true);
        self.info.extents.push(e as u32);
        self.info.next = len;
        Some((e as u64 * self.extent_bytes, true))
    }

    /// Live bytes of `extent` (compaction picks nearly empty ones).
    pub fn live_of(&self, extent: usize) -> u64 {
        self.live.get(extent).copied().unwrap_or(0)
    }

    /// Whether `allocate(len)` would find room (without taking it).
    pub fn fits(&self, len: u64) -> bool {
        let in_last = !self.info.extents.is_empty() && self.info.next + len <= self.extent_bytes;
        len > 0 && len <= self.extent_bytes && (in_last || self.first_free().is_some())
    }

    pub fn extent_of(&self, flash_off: u64) -> usize {
        (flash_off / self.extent_bytes) as usize
    }

    pub fn add_live(&mut self, flash_off: u64, len: u64) {
        if let Some(l) = self.live.get_mut((flash_off / self.extent_bytes) as usize) {
            *l += len;
        }
    }

    pub fn sub_live(&mut self, flash_off: u64, len: u64) {
        if let Some(l) = self.live.get_mut((flash_off / self.extent_bytes) as usize) {
            *l = l.saturating_sub(len);
        }
    }

    /// Free every extent of the volume with nothing live in it, except those `pending`
    /// says writes are still landing in; true if the volume info changed.
    pub fn reclaim(&mut self, pending: impl Fn(usize) -> bool) -> bool {
        let before = self.info.extents.len();
        let last = self.info.extents.last().copied();
        let mut freed = Vec::new();
        self.info.extents.retain(|&e| {
            let keep = self.live[e as usize] > 0 || pending(e as usize);
            if !keep {
                freed.push(e as usize);
            }
            keep
        });
        for e in freed {
            self.set_used(e, false);
            if let Some(lease) = &self.pool {
                if let Err(err) = lease.pool.release(&lease.volume, e as u32) {
                    tracing::warn!(pool = lease.pool.name(), volume = %lease.volume, extent = e,
                        error = %err, "cannot give a flash extent back to the pool");
                }
            }
        }
        if self.info.extents.last().copied() != last {
            // The extent being filled went: the next write starts a fresh one.
            self.info.next = self.extent_bytes;
        }
        self.info.extents.len() != before
    }

    /// Share of the extents in use (the buffer's fill).
    pub fn fill(&self) -> f64 {
        // A shared pool's fill is the pool's: any volume's flush frees space for all.
        if let Some(lease) = &self.pool {
            return lease.pool.fill();
        }
        if self.count == 0 {
            return 1.0;
        }
        self.info.extents.len() as f64 / self.count as f64
    }

    /// Take a volume-info record as the truth (replay): the bitmap follows it.
    pub fn restore(&mut self, info: VolumeInfo) -> Result<(), String> {
        if let Some(&bad) = info.extents.iter().find(|&&e| e as usize >= self.count) {
            return Err(format!(
                "volume info names extent {bad} of {} on the flash member",
                self.count
            ));
        }
        if info.next > self.extent_bytes {
            return Err(format!(
                "volume info's next offset {} is beyond an extent of {} bytes",
                info.next, self.extent_bytes
            ));
        }
        self.used.iter_mut().for_each(|w| *w = 0);
        for &e in &info.extents {
            self.set_used(e as usize, true);
        }
        self.info = info;
        Ok(())
    }

    /// Forget live counts (replay recounts them from the index).
    pub fn clear_live(&mut self) {
        self.live.iter_mut().for_each(|l| *l = 0);
    }

    /// After replay: never append below the end of a live entry in the last extent.
    pub fn raise_next(&mut self, flash_end: u64) {
        if let Some(&last) = self.info.extents.last() {
            let start = u64::from(last) * self.extent_bytes;
            if flash_end > start && flash_end <= start + self.extent_bytes {
                self.info.next = self.info.next.max(flash_end - start);
            }
        }
    }
}

impl super::Qmd {
    /// Take the volume's flash extents from `pool` (before replay; nothing buffered yet).
    /// The pool's extents must be whole stripe units and lie within the volume's member
    /// size (flash addresses are checked against it).
    pub(super) fn attach_pool(&self, pool: Arc<FlashPool>, volume: &str) -> Result<(), String> {
        let mut st = crate::sync::lock(&self.state);
        if !st.extents.info.extents.is_empty() || st.index.iter().any(|i| !i.is_empty()) {
            return Err("qmd: the flash pool is attached before anything is buffered".into());
        }
        let su = self.stripe_unit;
        if !pool.extent_bytes().is_multiple_of(su) {
            return Err(format!(
                "flash {}: extents of {} bytes are not whole stripe units of {su} bytes",
                pool.name(),
                pool.extent_bytes()
            ));
        }
        let end = pool.count() as u64 * pool.extent_bytes();
        if end > self.member_bytes {
            return Err(format!(
                "flash {}: its {end} bytes of extents exceed the volume's {}-byte members (a \
                 QMD volume addresses its flash within its member size); use a smaller pool",
                pool.name(),
                self.member_bytes
            ));
        }
        st.extents = Extents::pooled(PoolLease {
            pool,
            volume: volume.to_string(),
        });
        Ok(())
    }
}

pub fn volume_info_payload(info: &VolumeInfo) -> Vec<u8> {
    let mut p = (info.extents.len() as u32).to_le_bytes().to_vec();
    for e in &info.extents {
        p.extend(e.to_le_bytes());
    }
    p.extend(info.next.to_le_bytes());
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_fill_the_last_extent_then_take_the_lowest_free_one() {
        let mut x = Extents::new(4 * 100, 100);
        assert_eq!(x.count(), 4);
        assert_eq!(x.allocate(60), Some((0, true)));
        assert_eq!(x.allocate(40), Some((60, false)));
        assert_eq!(x.allocate(1), Some((100, true)));
        assert_eq!(x.allocate(101), None, "larger than an extent");
        x.add_live(0, 60);
        x.add_live(60, 40);
        x.add_live(100, 1);
        assert_eq!(x.info.extents, vec![0, 1]);
        assert!(x.is_used(0) && x.is_used(1) && !x.is_used(2));
        assert_eq!(x.fill(), 0.5);
        // Extent 0 empties: reclaimed, and the lowest free extent is taken next.
        x.sub_live(0, 60);
        x.sub_live(60, 40);
        assert!(x.reclaim(|_| false));
        assert_eq!(x.info.extents, vec![1]);
        assert!(!x.is_used(0));
        assert_eq!(x.allocate(99), Some((101, false)));
        assert_eq!(x.allocate(50), Some((0, true)));
        assert_eq!(x.info.extents, vec![1, 0]);
    }

    #[test]
    fn a_full_buffer_refuses_and_pending_extents_are_kept() {
        let mut x = Extents::new(2 * 64, 64);
        assert!(x.allocate(64).is_some());
        assert!(x.allocate(64).is_some());
        assert_eq!(x.allocate(1), None, "no free extent");
        assert_eq!(x.fill(), 1.0);
        assert!(!x.reclaim(|e| e == 0 || e == 1), "writes still land there");
        assert!(x.reclaim(|e| e == 0));
        assert_eq!(x.info.extents, vec![0]);
        assert_eq!(
            x.allocate(8),
            Some((64, true)),
            "the filled extent is not appended to"
        );
    }

    #[test]
    fn volume_info_is_checked_when_restored() {
        let mut x = Extents::new(10 * 64, 64);
        assert!(x
            .restore(VolumeInfo {
                extents: vec![3, 10],
                next: 0
            })
            .is_err());
        assert!(x
            .restore(VolumeInfo {
                extents: vec![3],
                next: 65
            })
            .is_err());
        x.restore(VolumeInfo {
            extents: vec![3, 5],
            next: 8,
        })
        .unwrap();
        assert!(x.is_used(3) && x.is_used(5) && !x.is_used(0));
        x.raise_next(5 * 64 + 40);
        assert_eq!(x.allocate(4), Some((5 * 64 + 40, false)));
        assert_eq!(volume_info_payload(&x.info).len(), 4 + 8 + 8);
    }
}
