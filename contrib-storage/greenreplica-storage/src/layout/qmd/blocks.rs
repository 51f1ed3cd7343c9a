//! QMD's address blocks on the engine (`address.rs` has their format):
//!
//! * every index change marks the spans it touches **dirty**;
//! * a volume flush asks for the dirty spans' blocks (`take_blocks`), writes them to fresh
//!   flash space and makes them durable; only then (`blocks_written`) the new root entries
//!   become records, appended and committed by the same flush. A write is acknowledged by
//!   that flush, so its index entry is in a durable block the durable root points at — or
//!   inline in the journal when the flash could not take the block;
//! * a replaced block's flash space is freed once the root that replaced it is committed;
//! * at start the root comes back from the journal and the blocks from flash
//!   (`load_blocks`). A block that is torn or stale (checksum, generation, span) loses only
//!   index entries whose data the active disk also holds (a flash-only run is written only
//!   after its block is durable): the span is recovered from the active disk — it is the
//!   truth there, writes to it go in place to both disks, and the background work copies
//!   it to the second disk; then the span gets a fresh block.

use std::collections::{BTreeMap, BTreeSet};

use super::address::{self, Bounds, Place, RootEntry, SpanKey};
use super::extents::VolumeInfo;
use super::{volume_info_record, Qmd, State, REC_ROOT};
use crate::layout::{LayoutRecord, MemberView, MetadataBlock};
use crate::sync::lock;

/// Spans per mirror at most (a span is at least one stripe unit).
const SPANS: u64 = 256;

#[derive(Debug)]
struct Pending {
    key: SpanKey,
    entry: Option<RootEntry>,
    bytes: Vec<u8>,
}

#[derive(Debug, Default)]
pub struct AddressState {
    /// Home bytes per span, and spans per mirror.
    pub span: u64,
    spans: u64,
    /// The address root: the last block of each span with entries, as journaled.
    pub root: BTreeMap<SpanKey, RootEntry>,
    /// Spans whose entries changed since their block was written.
    pub dirty: BTreeSet<SpanKey>,
    /// Blocks handed to the engine and not yet confirmed durable.
    pending: Vec<Pending>,
    /// Flash runs of replaced blocks: free once the root replacing them is committed.
    retiring: Vec<(u64, u64)>,
    /// The next block's generation.
    generation: u64,
    /// Records of the blocks being written (a new extent's volume info), handed out with
    /// the root records.
    records: Vec<LayoutRecord>,
    /// Per pair, home ranges whose block was lost: the active disk is the truth there
    /// until they are copied to the second disk.
    pub resync: Vec<Vec<(u64, u64)>>,
}

impl AddressState {
    pub fn new(pairs: usize, member_bytes: u64, su: u64) -> Self {
        let span = member_bytes.div_ceil(SPANS).div_ceil(su).max(1) * su;
        Self {
            span,
            spans: member_bytes.div_ceil(span).max(1),
            resync: vec![Vec::new(); pairs],
            ..Self::default()
        }
    }

    pub fn reset(&mut self) {
        let (span, spans, pairs) = (self.span, self.spans, self.resync.len());
        *self = Self {
            span,
            spans,
            resync: vec![Vec::new(); pairs],
            ..Self::default()
        };
    }

    /// Mark the spans of home bytes `start..=end` changed (an index change at `start..end`
    /// may leave an entry starting at `end`).
    pub fn touch(&mut self, pair: usize, start: u64, end: u64) {
        let last = (end / self.span).min(self.spans - 1);
        for s in (start / self.span).min(last)..=last {
            self.dirty.insert((pair, s));
        }
    }

    /// Home bytes `start..end` of `pair` lie in a range recovered from the active disk.
    pub fn in_resync(&self, pair: usize, start: u64, end: u64) -> bool {
        self.resync[pair].iter().any(|&(s, e)| s < end && start < e)
    }

    /// The second disk of `pair` took home bytes `start..end`: current there again.
    pub fn second_written(&mut self, pair: usize, start: u64, end: u64) {
        if !self.in_resync(pair, start, end) {
            return;
        }
        let mut left = Vec::new();
        for &(s, e) in &self.resync[pair] {
            if s < start {
                left.push((s, e.min(start)));
            }
            if e > end {
                left.push((s.max(end), e));
            }
        }
        self.resync[pair] = left;
        // The span may get a fresh block now (its lost one stays in the root until then).
        self.touch(pair, start, end);
    }

    /// Every index change is in a committed block: the in-memory index is the durable one.
    pub fn quiet(&self) -> bool {
        self.dirty.is_empty() && self.pending.is_empty() && self.records.is_empty()
    }
}

impl Qmd {
    pub(super) fn span_home(&self, span: u64, key: SpanKey) -> (u64, u64) {
        let start = key.1.saturating_mul(span);
        (start, start.saturating_add(span).min(self.member_bytes))
    }

    /// The blocks of the dirty spans, to be written to the flash before the root is
    /// journaled; spans still being recovered keep their old (lost) block until done.
    pub(super) fn take_blocks(&self, views: &[MemberView]) -> Vec<MetadataBlock> {
        let mut st = lock(&self.state);
        let flash = self.flash();
        let flash_ok = views[flash].writable && views[flash].holds(0, self.member_bytes);
        let dirty = std::mem::take(&mut st.address.dirty);
        let mut blocks = Vec::new();
        for key in dirty {
            let (start, end) = self.span_home(st.address.span, key);
            if st.address.in_resync(key.0, start, end) {
                st.address.dirty.insert(key);
                continue;
            }
            let entries = st.index[key.0].starting_in(start, end);
            if entries.is_empty() {
                if !st.address.root.contains_key(&key) {
                    continue;
                }
                st.address.pending.push(Pending {
                    key,
                    entry: None,
                    bytes: Vec::new(),
                });
                continue;
            }
            let generation = st.address.generation;
            st.address.generation += 1;
            let (bytes, crc) = address::encode(key, generation, &entries);
            let len = bytes.len() as u64;
            let slot = if flash_ok {
                st.extents
                    .allocate(len)
                    .filter(|(off, _)| views[flash].holds(*off, len))
            } else {
                None
            };
            let place = match slot {
                Some((off, new_extent)) => {
                    if new_extent {
                        let info = st.extents.info.clone();
                        st.address.records.push(volume_info_record(&info));
                    }
                    st.extents.add_live(off, len);
                    blocks.push(MetadataBlock {
                        member: flash,
                        offset: off,
                        bytes: bytes.clone(),
                    });
                    Place::Flash { off, len }
                }
                None => Place::Inline(bytes.clone()),
            };
            st.address.pending.push(Pending {
                key,
                entry: Some(RootEntry {
                    generation,
                    crc,
                    place,
                }),
                bytes,
            });
        }
        blocks
    }

    /// The blocks `take_blocks` gave are durable (or, `durable` false, could not be
    /// written: their entries go inline in the journal); the new root entries become
    /// records, and the replaced blocks retire.
    pub(super) fn blocks_written(&self, durable: bool) -> Vec<LayoutRecord> {
        let mut st = lock(&self.state);
        let pending = std::mem::take(&mut st.address.pending);
        let mut out = std::mem::take(&mut st.address.records);
        for Pending { key, entry, bytes } in pending {
            let entry = entry.map(|mut e| {
                if let (false, Place::Flash { off, len }) = (durable, &e.place) {
                    st.extents.sub_live(*off, *len);
                    e.place = Place::Inline(bytes);
                }
                e
            });
            if let Some(old) = st.address.root.remove(&key) {
                if let Place::Flash { off, len } = old.place {
                    st.address.retiring.push((off, len));
                }
            }
            out.push(root_record(key, entry.as_ref()));
            if let Some(e) = entry {
                st.address.root.insert(key, e);
            }
        }
        Self::after_change(&mut st);
        out
    }

    /// The journal is committed: replaced blocks' flash space is free.
    pub(super) fn retire_committed(st: &mut State) {
        for (off, len) in std::mem::take(&mut st.address.retiring) {
            st.extents.sub_live(off, len);
        }
    }

    /// A root record at replay.
    pub(super) fn apply_root(&self, st: &mut State, payload: &[u8]) -> Result<(), String> {
        let (key, entry) = address::parse_root(payload, st.extents.extent_bytes())?;
        if key.0 >= self.pairs || key.1 >= st.address.spans {
            return Err(format!(
                "qmd address root of pair {} span {} is outside the volume",
                key.0, key.1
            ));
        }
        match entry {
            Some(e) => {
                if let Place::Flash { off, len } = e.place {
                    let buffer = st.extents.count() as u64 * st.extents.extent_bytes();
                    if off.checked_add(len).is_none_or(|end| end > buffer) {
                        return Err(format!(
                            "qmd address block at flash {off}+{len} is beyond the buffer"
                        ));
                    }
                }
                st.address.generation = st.address.generation.max(e.generation + 1);
                st.address.root.insert(key, e);
            }
            None => {
                st.address.root.remove(&key);
            }
        }
        Ok(())
    }

    pub(super) fn root_records(st: &State) -> Vec<LayoutRecord> {
        st.address
            .root
            .iter()
            .map(|(k, e)| root_record(*k, Some(e)))
            .collect()
    }

    /// After `replay`: read the root's blocks (`read(member, offset, len)`, None when the
    /// member cannot be read) and rebuild the index from them.
    pub(super) fn load_blocks(
        &self,
        read: &mut dyn FnMut(usize, u64, u64) -> Option<Vec<u8>>,
    ) -> Result<(), String> {
        let mut st = lock(&self.state);
        // Spans marked by records of the journal's per-entry format stay dirty: their
        // entries get blocks at the next flush.
        let legacy = std::mem::take(&mut st.address.dirty);
        let span = st.address.span;
        let root: Vec<(SpanKey, RootEntry)> = st
            .address
            .root
            .iter()
            .map(|(k, e)| (*k, e.clone()))
            .collect();
        for (key, e) in root {
            let (start, end) = self.span_home(span, key);
            let bytes = match &e.place {
                Place::Flash { off, len } => {
                    st.extents.add_live(*off, *len);
                    read(self.flash(), *off, *len)
                }
                Place::Inline(b) => Some(b.clone()),
            };
            let bounds = Bounds {
                home_start: start,
                home_end: end,
                flash_end: st.extents.count() as u64 * st.extents.extent_bytes(),
            };
            let decoded = bytes
                .ok_or_else(|| "the flash member cannot be read".to_string())
                .and_then(|b| address::decode(&b, key, &e, bounds));
            // The span's entries are the block's, whatever the per-entry records said.
            for (home, old) in st.index[key.0].starting_in(start, end) {
                Self::set_range(&mut st, key.0, home, old.len, None);
            }
            match decoded {
                Ok(entries) => {
                    for (home, entry) in entries {
                        Self::set_range(&mut st, key.0, home, entry.len, Some(entry));
                    }
                }
                Err(problem) => {
                    tracing::warn!(pair = key.0, start, end, %problem,
                        "qmd address block lost; the active disk is taken as current there");
                    st.address.resync[key.0].push((start, end));
                }
            }
        }
        st.address.dirty = legacy;
        self.finish_replay(&mut st)
    }

    /// Background work: the next piece of a range recovered from the active disk, to be
    /// copied to the second disk (within one stripe unit, so it is one volume range).
    pub(super) fn resync_work(&self, st: &State, views: &[MemberView]) -> Option<(u64, u64)> {
        (0..self.pairs).find_map(|p| {
            let &(start, end) = st.address.resync[p].first()?;
            let n = (end - start).min(self.stripe_unit - start % self.stripe_unit);
            (views[2 * p + 1].writable && views[2 * p].holds(start, n))
                .then(|| (self.volume_offset(p, start), n))
        })
    }

    /// The flash member was replaced: its blocks are gone; every span is written again
    /// (inline in the journal until the flash is rebuilt).
    pub(super) fn flash_replaced(&self) {
        let mut st = lock(&self.state);
        let keys: Vec<SpanKey> = st.address.root.keys().copied().collect();
        st.address.dirty.extend(keys);
    }

    /// Every live entry's and block's extent is held, and appends go past their ends.
    pub(super) fn finish_replay(&self, st: &mut State) -> Result<(), String> {
        let State {
            index,
            extents,
            address,
            ..
        } = st;
        let mut info: VolumeInfo = extents.info.clone();
        let mut runs: Vec<(u64, u64)> = index
            .iter()
            .flat_map(|i| i.iter().map(|(_, e)| (e.flash_off, e.len)))
            .collect();
        runs.extend(address.root.values().filter_map(|e| match e.place {
            Place::Flash { off, len } => Some((off, len)),
            Place::Inline(_) => None,
        }));
        for &(off, _) in &runs {
            let ext = extents.extent_of(off) as u32;
            if !info.extents.contains(&ext) {
                return Err(format!(
                    "qmd index points into flash extent {ext}, which the volume does not hold"
                ));
            }
        }
        info.next = info.next.min(extents.extent_bytes());
        extents.restore(info)?;
        for (off, len) in runs {
            extents.raise_next(off + len);
        }
        Self::after_change(st);
        Ok(())
    }
}

pub(super) fn root_record(key: SpanKey, entry: Option<&RootEntry>) -> LayoutRecord {
    LayoutRecord {
        kind: REC_ROOT,
        payload: address::root_payload(key, entry),
    }
}
