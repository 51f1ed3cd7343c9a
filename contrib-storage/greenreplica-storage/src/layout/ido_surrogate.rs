//! IDO's surrogate set (Wu et al., FAST'12, section 3): a RAID1 pair beside the array that
//! takes, during a reconstruction, copies of the hot zones (migrated while they are rebuilt)
//! and every user write (appended sequentially, indexed by the D Map). Its space is one log:
//! migrated zones and redirected writes are appended at `head`; the log starts over once
//! the reclaim has moved everything home and that is durable in the journal.
//!
//! The state here is the authoritative copy of what the surrogate holds; it is journaled
//! (records below) before the write that created it is acknowledged, and carried in the
//! layout's checkpoint image, so a crash loses none of it.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::ido_dmap::DMap;
use super::LayoutRecord;

/// Journal record kinds (after the zone table's 0x1701/0x1702).
pub const DMAP_ADD_RECORD: u16 = 0x1703;
pub const DMAP_TRIM_RECORD: u16 = 0x1704;
pub const MIGRATED_RECORD: u16 = 0x1705;
pub const UNMIGRATED_RECORD: u16 = 0x1706;
/// Marks the combined checkpoint image (zone table, then this state); an image without it
/// is a zone table alone (journals written before the surrogate set existed).
pub const IMAGE_MAGIC: u8 = 0x17;
/// `UNMIGRATED_RECORD` payload that clears every zone.
const ALL_ZONES: u64 = u64::MAX;

/// How a degraded `*-ido` volume is reconstructed (the paper's comparators as one option of
/// the same personality: the data placement is the same, only the policy differs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// MD's default: address order, nothing redirected.
    Pr,
    /// WorkOut (Wu et al., FAST'09): address order; popularity counted only since the
    /// failure, per request; writes and popular read requests go to the surrogate (a read
    /// request's bytes are copied there once it is popular).
    WorkOut,
    /// VDF (Wan et al., "Victim Disk First", as the IDO paper applies it to the surrogate
    /// set): address order; writes go to the surrogate; a read request that needed the
    /// failed member's bytes (reconstructed from the survivors: the expensive kind) is
    /// copied to the surrogate at its first read, so the failed disk's blocks stay there;
    /// reads served by the survivors alone are not kept (they are the first evicted).
    Vdf,
    /// IDO: hot zones first (popularity tracked before the failure, and the hint), each
    /// migrated to the surrogate as it is rebuilt; writes go to the surrogate.
    Ido,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pr" => Ok(Mode::Pr),
            "workout" => Ok(Mode::WorkOut),
            "ido" => Ok(Mode::Ido),
            "vdf" => Ok(Mode::Vdf),
            other => Err(format!(
                "unknown rebuild mode {other:?}; use one of pr, workout, vdf, ido"
            )),
        }
    }
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Pr => "pr",
            Mode::WorkOut => "workout",
            Mode::Vdf => "vdf",
            Mode::Ido => "ido",
        }
    }
}

/// Reads of a request range since the failure that make it popular for WorkOut.
pub const WORKOUT_POPULAR: u32 = 2;
/// Request ranges WorkOut counts at most (its table in NVRAM is bounded too).
pub const WORKOUT_TRACKED: usize = 1 << 20;

/// What a surrogate write in flight is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    /// A redirected user write of volume bytes (offset, len).
    Write(u64, u64),
    /// Zone `z` being migrated.
    Migration(usize),
    /// Part of zone `z` handed over by its rebuild: the rebuild has read the zone's member
    /// bytes up to `end` and written their stripes to the surrogate.
    HandedOver(usize, u64),
}

/// A hot zone whose rebuild is handing its stripes to the surrogate as it reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handover {
    /// Surrogate offset of the zone's copy (its space is reserved at the first step).
    pub s: u64,
    /// Member offset up to which the zone's stripes are on the surrogate.
    pub copied_to: u64,
}

#[derive(Debug, Default)]
pub struct SurState {
    pub dmap: DMap,
    /// Zone → surrogate offset of its migrated copy.
    pub migrated: BTreeMap<usize, u64>,
    /// Next free surrogate offset.
    pub head: u64,
    /// Surrogate writes planned, by surrogate offset.
    pub planned: HashMap<u64, Pending>,
    /// Home writes planned while the surrogate held something, by their first member write
    /// (member, member offset): the volume ranges they make current at home.
    pub home: HashMap<(usize, u64), (u64, u64)>,
    /// Zones waiting to be migrated.
    pub queue: VecDeque<usize>,
    /// Zones being handed over by their rebuild (`Ido::rebuild_plan`).
    pub handover: BTreeMap<usize, Handover>,
    /// WorkOut: reads per request range (offset, len) since the failure, and the popular
    /// ranges waiting to be copied to the surrogate.
    pub since_failure: HashMap<(u64, u64), u32>,
    pub popular: VecDeque<(u64, u64)>,
    /// The array was degraded when last seen (writes are redirected).
    pub degraded: bool,
    /// An empty background plan is clearing every migrated zone.
    pub clearing: bool,
    /// Records of completed changes, for `journal_records`.
    pub outbox: Vec<LayoutRecord>,
    /// Bytes of user writes redirected to the surrogate, and read from it (statistics).
    pub redirected_writes: u64,
    pub surrogate_reads: u64,
}

/// What the journal of a volume may name: a record read back from disk is checked against
/// these before it is applied (a damaged or forged record is an error, never a wrap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Volume bytes.
    pub capacity: u64,
    /// Bytes of each surrogate member.
    pub surrogate: u64,
    /// Volume bytes of a zone (the last one may be shorter).
    pub zone_bytes: u64,
}

impl Bounds {
    fn zones(&self) -> u64 {
        self.capacity.div_ceil(self.zone_bytes.max(1))
    }

    /// A D Map entry: volume bytes `d..d+len` redirected to surrogate bytes `s..s+len`.
    fn check_entry(&self, d: u64, len: u64, s: u64) -> Result<(), String> {
        if d.checked_add(len).is_none_or(|end| end > self.capacity) {
            return Err(format!(
                "D Map entry of volume bytes {d}+{len} lies outside the volume's {} bytes",
                self.capacity
            ));
        }
        if s.checked_add(len).is_none_or(|end| end > self.surrogate) {
            return Err(format!(
                "D Map entry of surrogate bytes {s}+{len} lies outside the surrogate's {} bytes",
                self.surrogate
            ));
        }
        Ok(())
    }

    fn check_zone(&self, z: u64) -> Result<(), String> {
        if z >= self.zones() {
            return Err(format!(
                "zone {z} is not one of the volume's {} zones",
                self.zones()
            ));
        }
        Ok(())
    }

    /// A migrated zone `z` whose copy starts at surrogate offset `s`.
    fn check_migrated(&self, z: u64, s: u64) -> Result<(), String> {
        self.check_zone(z)?;
        let len = self
            .zone_bytes
            .min(self.capacity - z * self.zone_bytes.max(1));
        if s.checked_add(len).is_none_or(|end| end > self.surrogate) {
            return Err(format!(
                "zone {z} migrated to surrogate bytes {s}+{len}, outside the surrogate's {} bytes",
                self.surrogate
            ));
        }
        Ok(())
    }
}

fn words(payload: &[u8]) -> Result<Vec<u64>, String> {
    if !payload.len().is_multiple_of(8) {
        return Err(format!(
            "surrogate record of {} bytes is not whole words",
            payload.len()
        ));
    }
    Ok(payload
        .chunks_exact(8)
        .map(|w| {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            u64::from_le_bytes(b)
        })
        .collect())
}

fn zone_index(z: u64) -> Result<usize, String> {
    usize::try_from(z).map_err(|_| format!("zone {z} does not fit this machine's words"))
}

fn record(kind: u16, values: &[u64]) -> LayoutRecord {
    LayoutRecord {
        kind,
        payload: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

impl SurState {
    /// Something lives on the surrogate, or a hand-over is filling its reserved space.
    pub fn in_use(&self) -> bool {
        !self.dmap.is_empty() || !self.migrated.is_empty() || !self.handover.is_empty()
    }

    /// The log may start over: nothing lives on the surrogate and nothing is in flight.
    pub fn reset_if_empty(&mut self) {
        if !self.in_use() && self.planned.is_empty() && self.outbox.is_empty() {
            self.head = 0;
        }
    }

    pub fn add(&mut self, d: u64, len: u64, s: u64) {
        self.dmap.insert(d, len, s);
        self.outbox.push(record(DMAP_ADD_RECORD, &[d, len, s]));
    }

    pub fn trim(&mut self, d: u64, len: u64) {
        if self.dmap.lookup(d, len).iter().any(|f| f.2.is_some()) {
            self.dmap.remove(d, len);
            self.outbox.push(record(DMAP_TRIM_RECORD, &[d, len]));
        }
    }

    pub fn migrate(&mut self, zone: usize, s: u64) {
        self.migrated.insert(zone, s);
        self.outbox.push(record(MIGRATED_RECORD, &[zone as u64, s]));
    }

    pub fn unmigrate(&mut self, zone: usize) {
        if self.migrated.remove(&zone).is_some() {
            self.outbox.push(record(UNMIGRATED_RECORD, &[zone as u64]));
        }
    }

    pub fn unmigrate_all(&mut self) {
        if !self.migrated.is_empty() {
            self.migrated.clear();
            self.outbox.push(record(UNMIGRATED_RECORD, &[ALL_ZONES]));
        }
    }

    /// Whether `kind` is one of this state's records.
    pub fn owns(kind: u16) -> bool {
        (DMAP_ADD_RECORD..=UNMIGRATED_RECORD).contains(&kind)
    }

    /// Apply a journaled record (idempotent: a record the image already reflects sets the
    /// same state again), checked against the volume's `bounds`.
    pub fn apply(&mut self, r: &LayoutRecord, bounds: &Bounds) -> Result<(), String> {
        let w = words(&r.payload)?;
        let bad = |problem: String| format!("surrogate record {:#x}: {problem}", r.kind);
        match (r.kind, w.as_slice()) {
            (DMAP_ADD_RECORD, &[d, len, s]) => {
                bounds.check_entry(d, len, s).map_err(bad)?;
                self.dmap.insert(d, len, s)
            }
            (DMAP_TRIM_RECORD, &[d, len]) => {
                if d.checked_add(len).is_none_or(|end| end > bounds.capacity) {
                    return Err(bad(format!(
                        "trim of volume bytes {d}+{len} outside the volume's {} bytes",
                        bounds.capacity
                    )));
                }
                self.dmap.remove(d, len)
            }
            (MIGRATED_RECORD, &[z, s]) => {
                bounds.check_migrated(z, s).map_err(bad)?;
                self.migrated.insert(zone_index(z).map_err(bad)?, s);
            }
            (UNMIGRATED_RECORD, &[ALL_ZONES]) => self.migrated.clear(),
            (UNMIGRATED_RECORD, &[z]) => {
                bounds.check_zone(z).map_err(bad)?;
                self.migrated.remove(&zone_index(z).map_err(bad)?);
            }
            (kind, w) => {
                return Err(format!(
                    "surrogate record {kind:#x} with {} words is malformed",
                    w.len()
                ))
            }
        }
        self.head = self.head.max(self.used_end());
        Ok(())
    }

    /// The end of the surrogate bytes something lives in (after a replay the log goes on
    /// from there; what lay above was trimmed durably).
    fn used_end(&self) -> u64 {
        self.dmap.surrogate_end()
    }

    pub fn set_head_after_replay(&mut self, zone_bytes: u64) {
        let migrated = self
            .migrated
            .values()
            .map(|&s| s.saturating_add(zone_bytes))
            .max()
            .unwrap_or(0);
        self.head = self.used_end().max(migrated);
    }

    /// The state as words: D Map entries, then migrated zones.
    pub fn image(&self) -> Vec<u8> {
        let mut w = vec![self.dmap.entries() as u64];
        for (d, l, s) in self.dmap.iter() {
            w.extend([d, l, s]);
        }
        w.push(self.migrated.len() as u64);
        for (&z, &s) in &self.migrated {
            w.extend([z as u64, s]);
        }
        w.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// Load an image written by `image`, checked against the volume's `bounds`.
    pub fn load(&mut self, image: &[u8], bounds: &Bounds) -> Result<(), String> {
        let w = words(image)?;
        let bad = || format!("surrogate image of {} words is truncated", w.len());
        // `count` items of `width` words from word `at`, all inside the image.
        let span = |at: usize, count: u64, width: u64| -> Result<(usize, usize), String> {
            let end = count
                .checked_mul(width)
                .and_then(|n| usize::try_from(n).ok())
                .and_then(|n| n.checked_add(at))
                .filter(|&end| end <= w.len())
                .ok_or_else(|| {
                    format!(
                        "surrogate image says {count} items at word {at} of {}",
                        w.len()
                    )
                })?;
            Ok((at, end))
        };
        let (from, to) = span(1, *w.first().ok_or_else(bad)?, 3)?;
        let mut dmap = DMap::default();
        for e in w[from..to].chunks_exact(3) {
            bounds
                .check_entry(e[0], e[1], e[2])
                .map_err(|p| format!("surrogate image: {p}"))?;
            dmap.insert(e[0], e[1], e[2]);
        }
        let (zfrom, zto) = span(to + 1, *w.get(to).ok_or_else(bad)?, 2)?;
        if w.len() != zto {
            return Err("surrogate image has trailing bytes".into());
        }
        let mut migrated = BTreeMap::new();
        for p in w[zfrom..zto].chunks_exact(2) {
            bounds
                .check_migrated(p[0], p[1])
                .map_err(|e| format!("surrogate image: {e}"))?;
            migrated.insert(zone_index(p[0])?, p[1]);
        }
        self.dmap = dmap;
        self.migrated = migrated;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A volume and surrogate large enough for every record of these tests.
    const WIDE: Bounds = Bounds {
        capacity: 1 << 30,
        surrogate: 1 << 30,
        zone_bytes: 1 << 20,
    };

    #[test]
    fn records_and_the_image_rebuild_the_same_state_in_any_replay_order_of_a_suffix() {
        let mut s = SurState::default();
        s.add(0, 100, 0);
        s.migrate(3, 100);
        s.add(50, 100, 4196);
        s.trim(0, 10);
        s.unmigrate(3);
        s.migrate(4, 9000);
        let records = std::mem::take(&mut s.outbox);
        let mut back = SurState::default();
        for r in &records {
            back.apply(r, &WIDE).unwrap();
        }
        assert_eq!(back.dmap, s.dmap);
        assert_eq!(back.migrated, s.migrated);
        // An image taken part way, with the records after it replayed from the start of
        // the journal's tail (some of them again).
        let mut mid = SurState::default();
        for r in &records[..3] {
            mid.apply(r, &WIDE).unwrap();
        }
        let image = mid.image();
        let mut again = SurState::default();
        again.load(&image, &WIDE).unwrap();
        for r in &records[1..] {
            again.apply(r, &WIDE).unwrap();
        }
        assert_eq!(again.dmap, s.dmap);
        assert_eq!(again.migrated, s.migrated);
        assert!(SurState::default()
            .load(&image[..image.len() - 8], &WIDE)
            .is_err());
        assert!(back
            .apply(
                &LayoutRecord {
                    kind: DMAP_ADD_RECORD,
                    payload: vec![1, 2, 3]
                },
                &WIDE
            )
            .is_err());
    }

    #[test]
    fn modes_parse_and_an_unknown_one_names_the_four() {
        assert_eq!("ido".parse::<Mode>(), Ok(Mode::Ido));
        assert_eq!("workout".parse::<Mode>(), Ok(Mode::WorkOut));
        assert_eq!("pr".parse::<Mode>(), Ok(Mode::Pr));
        assert_eq!("vdf".parse::<Mode>(), Ok(Mode::Vdf));
        for m in [Mode::Pr, Mode::WorkOut, Mode::Vdf, Mode::Ido] {
            assert_eq!(m.name().parse::<Mode>(), Ok(m));
        }
        assert!("md"
            .parse::<Mode>()
            .unwrap_err()
            .contains("pr, workout, vdf, ido"));
    }
}

#[cfg(test)]
mod hostile_tests {
    use super::*;

    /// 64 MiB volume in zones of 4 MiB (16 zones); surrogate members of 32 MiB.
    const B: Bounds = Bounds {
        capacity: 64 << 20,
        surrogate: 32 << 20,
        zone_bytes: 4 << 20,
    };

    fn apply(kind: u16, values: &[u64]) -> Result<SurState, String> {
        let mut st = SurState::default();
        st.apply(&record(kind, values), &B)?;
        st.set_head_after_replay(B.zone_bytes);
        Ok(st)
    }

    #[test]
    fn forged_records_are_refused_by_name_not_applied_or_wrapped() {
        let cases: [(u16, Vec<u64>, &str); 9] = [
            (
                DMAP_ADD_RECORD,
                vec![u64::MAX - 10, 100, 0],
                "outside the volume",
            ),
            (
                DMAP_ADD_RECORD,
                vec![0, 4096, u64::MAX - 100],
                "outside the surrogate",
            ),
            (DMAP_ADD_RECORD, vec![64 << 20, 1, 0], "outside the volume"),
            (
                DMAP_ADD_RECORD,
                vec![0, 4096, 32 << 20],
                "outside the surrogate",
            ),
            (DMAP_TRIM_RECORD, vec![u64::MAX, 2], "outside the volume"),
            (
                MIGRATED_RECORD,
                vec![16, 0],
                "not one of the volume's 16 zones",
            ),
            (
                MIGRATED_RECORD,
                vec![3, u64::MAX - 5],
                "outside the surrogate",
            ),
            (
                MIGRATED_RECORD,
                vec![3, (32 << 20) - 4096],
                "outside the surrogate",
            ),
            (
                UNMIGRATED_RECORD,
                vec![1 << 40],
                "not one of the volume's 16 zones",
            ),
        ];
        for (kind, values, want) in cases {
            let e = apply(kind, &values).expect_err(&format!("{kind:#x} {values:?}"));
            assert!(e.contains(want), "{kind:#x} {values:?}: {e}");
            assert!(e.contains(&format!("{kind:#x}")), "names the record: {e}");
        }
        // At the edges, still accepted.
        assert!(apply(
            DMAP_ADD_RECORD,
            &[(64 << 20) - 4096, 4096, (32 << 20) - 4096]
        )
        .is_ok());
        assert!(apply(MIGRATED_RECORD, &[15, (32 << 20) - (4 << 20)]).is_ok());
        assert!(apply(UNMIGRATED_RECORD, &[ALL_ZONES]).is_ok());
    }

    #[test]
    fn a_forged_image_is_refused_whatever_its_counts_say() {
        let words = |w: &[u64]| -> Vec<u8> { w.iter().flat_map(|v| v.to_le_bytes()).collect() };
        let cases: [(Vec<u64>, &str); 6] = [
            (vec![u64::MAX], "items"),
            (vec![u64::MAX / 3 + 1, 0], "items"),
            (vec![0, u64::MAX / 2 + 1], "items"),
            (vec![1, u64::MAX - 1, 4, 0, 0], "outside the volume"),
            (vec![0, 1, 99, 0], "not one of the volume's 16 zones"),
            (vec![0, 1, 2, u64::MAX], "outside the surrogate"),
        ];
        for (image, want) in cases {
            let e = SurState::default()
                .load(&words(&image), &B)
                .expect_err(&format!("{image:?}"));
            assert!(e.contains(want), "{image:?}: {e}");
        }
        let mut good = SurState::default();
        good.add(4096, 4096, 0);
        good.migrate(2, 8192);
        let mut back = SurState::default();
        back.load(&good.image(), &B).unwrap();
        assert_eq!((back.dmap, back.migrated), (good.dmap, good.migrated));
    }
}
