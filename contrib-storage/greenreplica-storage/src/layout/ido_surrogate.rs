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
    /// same state again).
    pub fn apply(&mut self, r: &LayoutRecord) -> Result<(), String> {
        let w = words(&r.payload)?;
        match (r.kind, w.as_slice()) {
            (DMAP_ADD_RECORD, &[d, len, s]) => self.dmap.insert(d, len, s),
            (DMAP_TRIM_RECORD, &[d, len]) => self.dmap.remove(d, len),
            (MIGRATED_RECORD, &[z, s]) => {
                self.migrated.insert(z as usize, s);
            }
            (UNMIGRATED_RECORD, &[ALL_ZONES]) => self.migrated.clear(),
            (UNMIGRATED_RECORD, &[z]) => {
                self.migrated.remove(&(z as usize));
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
            .map(|&s| s + zone_bytes)
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

    pub fn load(&mut self, image: &[u8]) -> Result<(), String> {
        let w = words(image)?;
        let bad = || "surrogate image is truncated".to_string();
        let n = *w.first().ok_or_else(bad)? as usize;
        let entries = w.get(1..1 + 3 * n).ok_or_else(bad)?;
        let mut dmap = DMap::default();
        for e in entries.chunks_exact(3) {
            dmap.insert(e[0], e[1], e[2]);
        }
        let at = 1 + 3 * n;
        let m = *w.get(at).ok_or_else(bad)? as usize;
        let zones = w.get(at + 1..at + 1 + 2 * m).ok_or_else(bad)?;
        if w.len() != at + 1 + 2 * m {
            return Err("surrogate image has trailing bytes".into());
        }
        self.dmap = dmap;
        self.migrated = zones
            .chunks_exact(2)
            .map(|p| (p[0] as usize, p[1]))
            .collect();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            back.apply(r).unwrap();
        }
        assert_eq!(back.dmap, s.dmap);
        assert_eq!(back.migrated, s.migrated);
        // An image taken part way, with the records after it replayed from the start of
        // the journal's tail (some of them again).
        let mut mid = SurState::default();
        for r in &records[..3] {
            mid.apply(r).unwrap();
        }
        let image = mid.image();
        let mut again = SurState::default();
        again.load(&image).unwrap();
        for r in &records[1..] {
            again.apply(r).unwrap();
        }
        assert_eq!(again.dmap, s.dmap);
        assert_eq!(again.migrated, s.migrated);
        assert!(SurState::default().load(&image[..image.len() - 8]).is_err());
        assert!(back
            .apply(&LayoutRecord {
                kind: DMAP_ADD_RECORD,
                payload: vec![1, 2, 3]
            })
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
