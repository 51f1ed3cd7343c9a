//! QMD, quasi mirrored disks (Wang et al.): RAID10 pairs plus a flash member (the last)
//! that buffers writes while the second disk of a pair sleeps. Member 2p is pair p's
//! active disk, 2p+1 its second disk (the one the power policy lets sleep).
//!
//! * Writes: while the second disk sleeps (or its pair still has buffered runs), a write
//!   goes to the active disk and is appended to the flash buffer; the per-mirror index
//!   records disk address → flash address. With both disks up and nothing buffered, writes
//!   go in place to both (plain RAID10). A full buffer falls back to both disks.
//! * Reads: buffered runs hit in flash; the rest goes to the readiest disk holding them.
//! * Flush (`flush.rs`, the paper's Figure 4): background write-back, elevator order, K
//!   per foreground request, when the second disk is up or the buffer is over its fill threshold.
//! * Crash safety: the index is in address blocks on flash, the address root and the
//!   volume info in the metadata journal (the paper's NVRAM); a flush writes the changed
//!   blocks, makes them durable, then journals the root before it acknowledges
//!   (`address.rs`, `blocks.rs`); extents are freed only after the records that emptied
//!   them are durable.

mod address;
mod blocks;
mod extents;
mod flush;
mod index;
mod temperature;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use super::mirror;
use super::pair_striped::{decode_image, encode_image, PairStripe, Piece, Reader};
use super::registry::check_chunk;
use super::{
    Buf, LayoutError, LayoutKind, LayoutRecord, MemberIo, MemberView, MetadataBlock, Personality,
    Plan, Reconcile, Reserved, Role, Shape, ShapeProblem, SyncCopy, SYNC_BLOCK,
};
use crate::clock::Seconds;
use crate::service_model::IoKind;
use crate::sync::lock;

use extents::{Extents, VolumeInfo};
use flush::Flush;
pub use flush::FlushParams;
use index::{Entry, MirrorIndex};
use temperature::{Temperature, Temperatures};

const REC_BUFFERED: u16 = 1;
const REC_CLEAN: u16 = 2;
const REC_VOLUME_INFO: u16 = 3;
/// The whole temperature table (hot and cold ranges), after each change.
const REC_TEMPERATURE: u16 = 4;
/// A buffered run whose only copy is in flash (both disks of its pair slept).
const REC_SOLE: u16 = 5;
/// An address root entry: a span's address block (on flash or inline), or none.
const REC_ROOT: u16 = 6;

/// Largest flash extent (the paper's 1 GB).
const MAX_EXTENT: u64 = 1 << 30;
/// Extents the flash is cut into at least (so that space frees as mirrors flush).
const MIN_EXTENTS: u64 = 16;
/// A second disk is "up" when it can serve within this long of the readiest member.
const UP_SLACK_S: Seconds = 0.1;

#[derive(Debug)]
struct State {
    index: Vec<MirrorIndex>,
    extents: Extents,
    flush: Flush,
    /// Flash writes planned and not yet completed: flash offset → (pair, home, len, sole).
    planned: HashMap<u64, (usize, u64, u64, bool)>,
    outbox: Vec<LayoutRecord>,
    /// Hot and cold volume ranges (partial on-line mirrors).
    temperatures: Temperatures,
    /// Per pair: cold (may sleep whole), from `temperatures`.
    cold: Vec<bool>,
    /// The address root, the spans changed since their block, recovered ranges.
    address: blocks::AddressState,
}

#[derive(Debug)]
pub struct Qmd {
    pairs: usize,
    stripe_unit: u64,
    member_bytes: u64,
    state: Mutex<State>,
}

impl Qmd {
    pub fn check(members: usize, chunk: u64) -> Result<(), ShapeProblem> {
        if members < 3 || members.is_multiple_of(2) {
            return Err(ShapeProblem {
                key: "member",
                problem: format!(
                    "layout qmd needs mirrored pairs plus one flash member (an odd number, at \
                     least 3), got {members}"
                ),
            });
        }
        check_chunk(chunk)
    }

    pub fn new(shape: &Shape) -> Result<Self, LayoutError> {
        Self::with_params(shape, FlushParams::default(), 0)
    }

    /// `extent_bytes` 0: the flash over 16 extents, at most 1 GiB, whole stripe units.
    pub fn with_params(
        shape: &Shape,
        params: FlushParams,
        extent_bytes: u64,
    ) -> Result<Self, LayoutError> {
        let kind = LayoutKind::QMD;
        Self::check(shape.members, shape.chunk).map_err(|p| kind.shape_error(p))?;
        let su = shape.chunk;
        let member_bytes = shape.member_bytes / su * su;
        let problem = |problem: String| {
            kind.shape_error(ShapeProblem {
                key: "member",
                problem,
            })
        };
        let extents =
            flash_extents(member_bytes, member_bytes, extent_bytes, su).map_err(problem)?;
        check_params(&params).map_err(problem)?;
        let pairs = shape.members / 2;
        Ok(Self {
            pairs,
            stripe_unit: su,
            member_bytes,
            state: Mutex::new(State {
                index: vec![MirrorIndex::default(); pairs],
                extents,
                flush: Flush::new(pairs, params),
                planned: HashMap::new(),
                outbox: Vec::new(),
                temperatures: Temperatures::default(),
                cold: vec![false; pairs],
                address: blocks::AddressState::new(pairs, member_bytes, su),
            }),
        })
    }

    fn flash(&self) -> usize {
        2 * self.pairs
    }

    fn stripe(&self) -> PairStripe {
        PairStripe::new(self.pairs, self.stripe_unit)
    }

    fn map(&self, offset: u64, len: u64) -> Vec<Piece> {
        self.stripe().map(offset, len)
    }

    fn volume_offset(&self, pair: usize, home: u64) -> u64 {
        self.stripe().volume_offset(pair, home)
    }

    /// The pairs volume bytes `start..end` touch (every pair once the range spans a row).
    fn pairs_of(&self, start: u64, end: u64) -> Vec<usize> {
        if start >= end {
            return Vec::new();
        }
        let (first, last) = (start / self.stripe_unit, (end - 1) / self.stripe_unit);
        if last - first + 1 >= self.pairs as u64 {
            return (0..self.pairs).collect();
        }
        let mut pairs: Vec<usize> = (first..=last)
            .map(|c| (c % self.pairs as u64) as usize)
            .collect();
        pairs.sort_unstable();
        pairs.dedup();
        pairs
    }

    /// Pairs holding cold bytes and no hot ones: the policy may let both disks sleep.
    fn cold_pairs(&self, temperatures: &Temperatures) -> Vec<usize> {
        let pairs_of = |s, e| self.pairs_of(s, e);
        let cold = temperatures.pairs_marked(Temperature::Cold, self.pairs, pairs_of);
        let hot = temperatures.pairs_marked(Temperature::Hot, self.pairs, pairs_of);
        (0..self.pairs).filter(|&p| cold[p] && !hot[p]).collect()
    }

    /// The second disk of `pair` is up: it can serve about as soon as the readiest member
    /// (views give no power state; a sleeping disk is a spin-up away, seconds).
    /// A cold pair whose active disk is far from ready sleeps whole: its second disk is not
    /// up even when it would be as ready as the active one.
    fn second_up(&self, st: &State, pair: usize, views: &[MemberView]) -> bool {
        let now = views
            .iter()
            .map(|v| v.ready_at)
            .fold(Seconds::INFINITY, Seconds::min);
        let s = views[2 * pair + 1].ready_at;
        s <= now + UP_SLACK_S
            || (s <= views[2 * pair].ready_at && !self.pair_asleep(st, pair, views))
    }

    /// Both disks of a cold `pair` sleep: a write lands in flash alone (issue 16 item 5).
    fn pair_asleep(&self, st: &State, pair: usize, views: &[MemberView]) -> bool {
        let now = views
            .iter()
            .map(|v| v.ready_at)
            .fold(Seconds::INFINITY, Seconds::min);
        let down = |m: usize| views[m].ready_at > now + UP_SLACK_S;
        st.cold[pair] && down(2 * pair) && down(2 * pair + 1)
    }

    fn set_temperatures(&self, st: &mut State, t: Temperatures) {
        let cold = self.cold_pairs(&t);
        st.cold = (0..self.pairs).map(|p| cold.contains(&p)).collect();
        st.temperatures = t;
    }

    /// Buffered bytes (live index entries) of all mirrors.
    pub fn buffered_bytes(&self) -> u64 {
        let st = lock(&self.state);
        st.index
            .iter()
            .flat_map(|i| i.iter().map(|(_, e)| e.len))
            .sum()
    }

    /// Share of the flash extents in use.
    pub fn fill(&self) -> f64 {
        lock(&self.state).extents.fill()
    }

    fn set_range(st: &mut State, pair: usize, home: u64, len: u64, entry: Option<Entry>) {
        let from = st.index[pair].covering(home).unwrap_or(home);
        st.address.touch(pair, from, home + len);
        let State { index, extents, .. } = st;
        let mut dropped = Vec::new();
        let mut kept = Vec::new();
        index[pair].set_range(
            home,
            len,
            entry,
            |off, n| dropped.push((off, n)),
            |off, n| kept.push((off, n)),
        );
        for (off, n) in dropped {
            extents.sub_live(off, n);
        }
        for (off, n) in kept {
            extents.add_live(off, n);
        }
    }

    fn after_change(st: &mut State) {
        let fill = st.extents.fill();
        st.flush.update(fill, &st.index);
    }

    fn plan_write(
        &self,
        pieces: Vec<Piece>,
        offset: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        let mut st = lock(&self.state);
        let mut plan = Plan::default();
        let flash = self.flash();
        for (buf_offset, pair, home, len) in pieces {
            let (a, s) = (2 * pair, 2 * pair + 1);
            let active_ok = views[a].writable && views[a].holds(home, len);
            let second_ok = views[s].writable && views[s].holds(home, len);
            if !(active_ok || second_ok) {
                // The slots planned for earlier pieces are never written: release them.
                Self::release(&mut st, &plan);
                return Err(LayoutError::NoLiveCopy {
                    offset: offset + buf_offset,
                    end: offset + buf_offset + len,
                });
            }
            let io = |member, member_offset| MemberIo {
                member,
                member_offset,
                len,
                buf: Buf::Caller(buf_offset),
            };
            // Both disks asleep: the flash alone holds the write until the write-back.
            let sole = self.pair_asleep(&st, pair, views);
            // A range recovered from the active disk is written in place until copied.
            let buffer = active_ok
                && views[s].writable
                && views[flash].writable
                && !st.address.in_resync(pair, home, home + len)
                && (sole || !self.second_up(&st, pair, views) || !st.index[pair].is_empty());
            let slot = if buffer {
                let extents = &mut st.extents;
                extents
                    .allocate(len)
                    .filter(|(off, _)| views[flash].holds(*off, len))
            } else {
                None
            };
            match slot {
                Some((flash_off, new_extent)) => {
                    if new_extent {
                        let info = st.extents.info.clone();
                        st.outbox.push(volume_info_record(&info));
                    }
                    st.planned.insert(flash_off, (pair, home, len, sole));
                    if !sole {
                        plan.writes.push(io(a, home));
                    }
                    plan.writes.push(io(flash, flash_off));
                }
                None => plan.writes.extend(
                    [a, s]
                        .into_iter()
                        .filter(|&m| views[m].writable)
                        .map(|m| io(m, home)),
                ),
            }
        }
        Ok(plan)
    }

    /// Forget the flash slots `plan` reserved (its writes will not complete).
    fn release(st: &mut State, plan: &Plan) {
        let flash = 2 * st.index.len();
        for w in plan.writes.iter().filter(|w| w.member == flash) {
            st.planned.remove(&w.member_offset);
        }
    }

    /// Reads of a pair's newest bytes: buffered runs from flash (or the active disk), the
    /// rest from the readiest disk that holds them.
    #[allow(clippy::too_many_arguments)]
    fn read_piece(
        &self,
        st: &mut State,
        pair: usize,
        home: u64,
        len: u64,
        buf_offset: u64,
        views: &[MemberView],
        avoid: Option<usize>,
    ) -> Option<Vec<MemberIo>> {
        let (a, s, flash) = (2 * pair, 2 * pair + 1, self.flash());
        let mut ios = Vec::new();
        for (at, n, buffered) in st.index[pair].fragments(home, len) {
            let candidates: Vec<(usize, u64)> = match buffered {
                Some(flash_off) if st.index[pair].sole_at(at) => vec![(flash, flash_off)],
                Some(flash_off) => vec![(flash, flash_off), (a, at)],
                // A sleeping second disk (or one stale there after a lost address block)
                // is read only when the active one cannot serve.
                None if !self.second_up(st, pair, views)
                    || st.address.in_resync(pair, at, at + n) =>
                {
                    vec![(a, at), (s, at)]
                }
                None => {
                    let mut c = vec![(a, at), (s, at)];
                    c.sort_by(|x, y| views[x.0].ready_at.total_cmp(&views[y.0].ready_at));
                    c
                }
            };
            let (member, member_offset) = candidates
                .into_iter()
                .find(|&(m, off)| Some(m) != avoid && views[m].holds(off, n))?;
            if member == s {
                st.flush.heads[pair].moved_to(at, n);
            }
            ios.push(MemberIo {
                member,
                member_offset,
                len: n,
                buf: Buf::Caller(buf_offset + at - home),
            });
        }
        Some(ios)
    }

    fn apply(&self, st: &mut State, r: &LayoutRecord) -> Result<(), String> {
        let mut rd = Reader::new(&r.payload, "qmd");
        match r.kind {
            REC_BUFFERED | REC_SOLE => {
                let (pair, home, len) = (rd.u32()? as usize, rd.u64()?, rd.u64()?);
                let flash_off = rd.u64()?;
                if pair >= self.pairs
                    || len == 0
                    || home.checked_add(len).is_none_or(|e| e > self.member_bytes)
                    || flash_off
                        .checked_add(len)
                        .is_none_or(|e| e > self.member_bytes)
                {
                    return Err(format!(
                        "qmd buffered record of pair {pair} home {home}+{len} at flash \
                         {flash_off} is outside the volume"
                    ));
                }
                let sole = r.kind == REC_SOLE;
                let e = Entry {
                    len,
                    flash_off,
                    sole,
                };
                Self::set_range(st, pair, home, len, Some(e));
            }
            REC_CLEAN => {
                let (pair, home, len) = (rd.u32()? as usize, rd.u64()?, rd.u64()?);
                if pair >= self.pairs
                    || len == 0
                    || home.checked_add(len).is_none_or(|e| e > self.member_bytes)
                {
                    return Err(format!(
                        "qmd clean record of pair {pair} home {home}+{len} is outside the volume"
                    ));
                }
                Self::set_range(st, pair, home, len, None);
            }
            REC_VOLUME_INFO => {
                let n = rd.u32()? as usize;
                if n > st.extents.count() {
                    return Err(format!("qmd volume info lists {n} extents"));
                }
                let extents = (0..n).map(|_| rd.u32()).collect::<Result<Vec<_>, _>>()?;
                let next = rd.u64()?;
                st.extents.restore(VolumeInfo { extents, next })?;
            }
            REC_TEMPERATURE => {
                let t = Temperatures::from_payload(&r.payload, self.capacity())?;
                self.set_temperatures(st, t);
            }
            REC_ROOT => self.apply_root(st, &r.payload)?,
            other => return Err(format!("unknown qmd record kind {other}")),
        }
        Ok(())
    }
}

/// The flash space: `buffer_bytes` of the flash member (at most `member_bytes`) in extents of
/// `extent_bytes` (0: a sixteenth of the buffer, at most 1 GiB), whole stripe units.
fn flash_extents(
    member_bytes: u64,
    buffer_bytes: u64,
    extent_bytes: u64,
    su: u64,
) -> Result<Extents, String> {
    if buffer_bytes > member_bytes {
        return Err(format!(
            "a flash buffer of {buffer_bytes} bytes does not fit the flash member's \
             {member_bytes} bytes"
        ));
    }
    let extent = if extent_bytes == 0 {
        (buffer_bytes / MIN_EXTENTS).min(MAX_EXTENT) / su * su
    } else {
        extent_bytes
    };
    if extent < su || !extent.is_multiple_of(su) || buffer_bytes / extent == 0 {
        return Err(format!(
            "a flash buffer of {buffer_bytes} bytes is too small for extents of whole stripe \
             units ({extent} bytes)"
        ));
    }
    Ok(Extents::new(buffer_bytes, extent))
}

fn check_params(p: &FlushParams) -> Result<(), String> {
    if p.k == 0 || p.k > 1_000_000 || !(p.fill_threshold > 0.0 && p.fill_threshold <= 1.0) {
        return Err(format!(
            "flush K must be 1..=1000000 and the fill threshold in (0, 1], got {} and {}",
            p.k, p.fill_threshold
        ));
    }
    Ok(())
}

fn volume_info_record(info: &VolumeInfo) -> LayoutRecord {
    LayoutRecord {
        kind: REC_VOLUME_INFO,
        payload: extents::volume_info_payload(info),
    }
}

/// A per-entry record of the journal's earlier format (still replayed; tests forge them).
#[cfg(test)]
fn buffered_record(pair: usize, home: u64, e: &Entry) -> LayoutRecord {
    let mut payload = Vec::with_capacity(28);
    payload.extend((pair as u32).to_le_bytes());
    payload.extend(home.to_le_bytes());
    payload.extend(e.len.to_le_bytes());
    payload.extend(e.flash_off.to_le_bytes());
    LayoutRecord {
        kind: if e.sole { REC_SOLE } else { REC_BUFFERED },
        payload,
    }
}

fn temperature_record(t: &Temperatures) -> LayoutRecord {
    LayoutRecord {
        kind: REC_TEMPERATURE,
        payload: t.payload(),
    }
}

#[cfg(test)]
fn clean_record(pair: usize, home: u64, len: u64) -> LayoutRecord {
    let mut payload = Vec::with_capacity(20);
    payload.extend((pair as u32).to_le_bytes());
    payload.extend(home.to_le_bytes());
    payload.extend(len.to_le_bytes());
    LayoutRecord {
        kind: REC_CLEAN,
        payload,
    }
}

impl Personality for Qmd {
    fn kind(&self) -> LayoutKind {
        LayoutKind::QMD
    }

    fn member_count(&self) -> usize {
        2 * self.pairs + 1
    }

    fn member_data_bytes(&self) -> u64 {
        self.member_bytes
    }

    fn stripe_unit(&self) -> u64 {
        self.stripe_unit
    }

    fn capacity(&self) -> u64 {
        self.member_bytes * self.pairs as u64
    }

    fn role(&self, member: usize) -> Role {
        if member == self.flash() {
            Role::Flash
        } else {
            Role::Data
        }
    }

    fn reserved(&self) -> Vec<Reserved> {
        vec![Reserved {
            member: self.flash(),
            start: 0,
            len: self.member_bytes,
        }]
    }

    fn plan(
        &self,
        kind: IoKind,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.check_range(offset, len)?;
        lock(&self.state).flush.request();
        let pieces = self.map(offset, len);
        if kind == IoKind::Write {
            return self.plan_write(pieces, offset, views);
        }
        let mut st = lock(&self.state);
        let mut plan = Plan::default();
        for (buf_offset, pair, home, n) in pieces {
            let ios = self
                .read_piece(&mut st, pair, home, n, buf_offset, views, None)
                .ok_or(LayoutError::NoLiveCopy {
                    offset: offset + buf_offset,
                    end: offset + buf_offset + n,
                })?;
            plan.reads.extend(ios);
        }
        Ok(plan)
    }

    /// Flash writes enter the index; any other write on a pair's disks leaves the second
    /// disk current there (in place on both, a flush, or the active disk alone when the
    /// second is gone, whose stale buffered copy must not be flushed later).
    fn complete(&self, plan: &Plan) {
        let mut st = lock(&self.state);
        let mut buffered = HashSet::new();
        for w in &plan.writes {
            if w.member != self.flash() {
                continue;
            }
            if let Some((pair, home, len, sole)) = st.planned.remove(&w.member_offset) {
                let e = Entry {
                    len,
                    flash_off: w.member_offset,
                    sole,
                };
                // Its entry reaches the journal's root through an address block at the
                // flush that acknowledges it.
                Self::set_range(&mut st, pair, home, len, Some(e));
                buffered.insert((pair, home));
            }
        }
        for w in &plan.writes {
            if w.member >= self.flash() {
                continue;
            }
            let pair = w.member / 2;
            if buffered.contains(&(pair, w.member_offset)) {
                continue;
            }
            let len = w.len.min(self.member_bytes.saturating_sub(w.member_offset));
            if w.member % 2 == 1 {
                st.address
                    .second_written(pair, w.member_offset, w.member_offset + len);
            }
            let dirty = st.index[pair]
                .fragments(w.member_offset, len)
                .iter()
                .any(|f| f.2.is_some());
            if dirty {
                Self::set_range(&mut st, pair, w.member_offset, len, None);
            }
        }
        Self::after_change(&mut st);
    }

    fn abandon(&self, plan: &Plan) {
        Self::release(&mut lock(&self.state), plan);
    }

    /// An extent with nothing live is reused only once the records that emptied it are
    /// durable: until then a crash brings back entries that point into it.
    fn committed(&self) {
        let mut st = lock(&self.state);
        if !st.outbox.is_empty() {
            return;
        }
        Self::retire_committed(&mut st);
        // Entries removed from the index may still be in the committed blocks until their
        // spans' next blocks are: reclaim only when the index is all in committed blocks.
        if !st.address.quiet() {
            return;
        }
        let State {
            extents, planned, ..
        } = &mut *st;
        let pending: HashSet<usize> = planned.keys().map(|&off| extents.extent_of(off)).collect();
        if extents.reclaim(|e| pending.contains(&e)) {
            let info = extents.info.clone();
            st.outbox.push(volume_info_record(&info));
        }
        Self::after_change(&mut st);
    }

    fn journal_records(&self, _plan: &Plan) -> Vec<LayoutRecord> {
        std::mem::take(&mut lock(&self.state).outbox)
    }

    fn replay(&self, image: Option<&[u8]>, records: &[LayoutRecord]) -> Result<(), String> {
        let mut st = lock(&self.state);
        st.index = vec![MirrorIndex::default(); self.pairs];
        st.extents.clear_live();
        st.extents.restore(VolumeInfo::default())?;
        st.planned.clear();
        st.outbox.clear();
        st.address.reset();
        self.set_temperatures(&mut st, Temperatures::default());
        if let Some(bytes) = image {
            for r in decode_image(bytes, "qmd")? {
                self.apply(&mut st, &r)?;
            }
        }
        for r in records {
            self.apply(&mut st, r)?;
        }
        // Every live entry's extent is in use (the blocks' are checked once read).
        self.finish_replay(&mut st)
    }

    /// The address blocks the replayed root points at: the index is rebuilt from them.
    fn replay_blocks(
        &self,
        read: &mut dyn FnMut(usize, u64, u64) -> Option<Vec<u8>>,
    ) -> Result<(), String> {
        self.load_blocks(read)
    }

    /// The buffer's use and the address root, for the volume status.
    fn layout_state(&self) -> Option<serde_json::Value> {
        let st = lock(&self.state);
        let buffered: u64 = st
            .index
            .iter()
            .flat_map(|i| i.iter().map(|(_, e)| e.len))
            .sum();
        let recovering: u64 = st
            .address
            .resync
            .iter()
            .flat_map(|r| r.iter().map(|(s, e)| e - s))
            .sum();
        Some(serde_json::json!({
            "buffered_bytes": buffered,
            "fill": st.extents.fill(),
            "address_blocks": st.address.root.len(),
            "recovering_bytes": recovering,
        }))
    }

    fn metadata_blocks(&self, views: &[MemberView]) -> Vec<MetadataBlock> {
        self.take_blocks(views)
    }

    fn metadata_blocks_written(&self, durable: bool) -> Vec<LayoutRecord> {
        self.blocks_written(durable)
    }

    fn member_replaced(&self, member: usize) {
        if member == self.flash() {
            self.flash_replaced();
        }
    }

    fn checkpoint_image(&self) -> Option<Vec<u8>> {
        let st = lock(&self.state);
        let mut records = vec![
            volume_info_record(&st.extents.info),
            temperature_record(&st.temperatures),
        ];
        // The root, not the entries: they are in its blocks.
        records.extend(Self::root_records(&st));
        Some(encode_image(records))
    }

    /// `k`, `fill_threshold`, `buffer_bytes` (flash used, at most the member) and
    /// `extent_bytes`; the buffer's shape only while nothing is buffered.
    fn option_places_data(&self, key: &str) -> bool {
        !matches!(key, "k" | "fill_threshold")
    }

    fn set_option(&self, key: &str, value: &str) -> Result<(), String> {
        let mut st = lock(&self.state);
        let bad = || format!("qmd option {key}: {value:?} is not a valid value");
        match key {
            "k" => {
                let mut p = st.flush.params;
                p.k = value.parse().map_err(|_| bad())?;
                check_params(&p)?;
                st.flush.params = p;
            }
            "fill_threshold" => {
                let mut p = st.flush.params;
                p.fill_threshold = value.parse().map_err(|_| bad())?;
                check_params(&p)?;
                st.flush.params = p;
            }
            "buffer_bytes" | "extent_bytes" => {
                let n: u64 = value.parse().map_err(|_| bad())?;
                if !st.extents.info.extents.is_empty() || st.index.iter().any(|i| !i.is_empty()) {
                    return Err(format!("qmd option {key}: the buffer is in use"));
                }
                let (buffer, extent) = if key == "buffer_bytes" {
                    (n, 0)
                } else {
                    (st.extents.count() as u64 * st.extents.extent_bytes(), n)
                };
                st.extents = flash_extents(self.member_bytes, buffer, extent, self.stripe_unit)?;
            }
            other => {
                return Err(format!(
                    "layout qmd has no option {other:?}; use k, fill_threshold, buffer_bytes or \
                     extent_bytes"
                ))
            }
        }
        Ok(())
    }

    /// Mark volume extents (checked by the engine to lie within the volume) hot, cold or
    /// normal; the new table is journaled whole. Returns the ranges the table holds.
    fn set_temperature(&self, extents: &[(u64, u64)], temperature: &str) -> Result<usize, String> {
        let t = Temperature::parse(temperature)?;
        if let Some(&(offset, len)) = extents
            .iter()
            .find(|&&(o, l)| o.checked_add(l).is_none_or(|e| e > self.capacity()))
        {
            return Err(format!(
                "extent {offset}+{len} is beyond the volume's {} bytes",
                self.capacity()
            ));
        }
        let mut st = lock(&self.state);
        let next = st.temperatures.with(extents, t)?;
        let n = next.len();
        st.outbox.push(temperature_record(&next));
        self.set_temperatures(&mut st, next);
        Ok(n)
    }

    fn temperatures(&self) -> Vec<(u64, u64, &'static str)> {
        let st = lock(&self.state);
        st.temperatures
            .iter()
            .map(|(s, e, t)| (s, e - s, if t == Temperature::Hot { "hot" } else { "cold" }))
            .collect()
    }

    /// Per pair the range touches: the flash alone while the pair is cold and asleep whole
    /// (the writes land only in flash), the active disk and the flash while its second disk
    /// sleeps or it has buffered runs, both disks else (as `plan_write` decides).
    fn write_members(&self, offset: u64, len: u64, views: &[MemberView]) -> Option<Vec<usize>> {
        let st = lock(&self.state);
        let flash = self.flash();
        let flash_ok = views[flash].writable;
        let end = offset.checked_add(len)?;
        let mut members = Vec::new();
        for pair in self.pairs_of(offset, end) {
            let (a, s) = (2 * pair, 2 * pair + 1);
            if flash_ok && self.pair_asleep(&st, pair, views) {
                members.push(flash);
            } else if flash_ok && (!self.second_up(&st, pair, views) || !st.index[pair].is_empty())
            {
                members.extend([a, flash]);
            } else {
                members.extend([a, s]);
            }
        }
        members.sort_unstable();
        members.dedup();
        Some(members)
    }

    fn cold_groups(&self) -> Vec<usize> {
        let st = lock(&self.state);
        self.cold_pairs(&st.temperatures)
            .into_iter()
            .map(|p| 2 * p)
            .collect()
    }

    fn recover(
        &self,
        member: usize,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        let mut st = lock(&self.state);
        let unrecoverable = |problem: &str| LayoutError::Unrecoverable {
            member,
            offset,
            len,
            problem: problem.into(),
        };
        let end = offset + len;
        let mut plan = Plan::default();
        if member < self.flash() {
            if member.is_multiple_of(2) {
                let ios = self
                    .read_piece(&mut st, member / 2, offset, len, 0, views, Some(member))
                    .ok_or_else(|| unrecoverable("neither the flash nor the mirror holds them"))?;
                plan.reads.extend(ios);
            } else {
                let mut active = mirror::recover(member, offset, len, &[member - 1], views)?;
                plan.reads.append(&mut active.reads);
            }
            return Ok(plan);
        }
        // The flash: each live entry's newest copy is its active disk's home bytes.
        for (pair, index) in st.index.iter().enumerate() {
            for (home, e) in index.iter() {
                let from = e.flash_off.max(offset);
                let to = (e.flash_off + e.len).min(end);
                if from >= to {
                    continue;
                }
                if e.sole {
                    return Err(unrecoverable(
                        "the flash holds the only copy of a buffered run",
                    ));
                }
                let at = home + (from - e.flash_off);
                if !views[2 * pair].holds(at, to - from) {
                    return Err(unrecoverable("the active disk of a buffered run is lost"));
                }
                plan.reads.push(MemberIo {
                    member: 2 * pair,
                    member_offset: at,
                    len: to - from,
                    buf: Buf::Caller(from - offset),
                });
            }
        }
        Ok(plan)
    }

    fn sync_groups(&self) -> Vec<Vec<usize>> {
        let mut groups: Vec<Vec<usize>> = (0..self.pairs).map(|p| vec![2 * p, 2 * p + 1]).collect();
        groups.push(vec![self.flash()]);
        groups
    }

    fn lock_spans(&self, offset: u64, len: u64) -> Vec<(usize, u64, u64)> {
        self.map(offset, len)
            .into_iter()
            .map(|(_, pair, home, n)| (2 * pair, home, home + n))
            .collect()
    }

    /// Buffered runs are taken as equal (the second disk is stale there by design; its
    /// newest copy is in flash); the flash member is never compared.
    fn reconcile(&self, offset: u64, group: &[SyncCopy], len: u64) -> Result<Reconcile, String> {
        let Some(pair) = group
            .first()
            .map(|c| c.member / 2)
            .filter(|&p| p < self.pairs)
        else {
            return Ok(Reconcile::default());
        };
        if group.iter().any(|c| c.member >= self.flash()) {
            return Ok(Reconcile::default());
        }
        // Each buffered fragment with its flag: the flash holds the only copy.
        let fragments: Vec<(u64, u64, Option<u64>, bool)> = {
            let st = lock(&self.state);
            st.index[pair]
                .fragments(offset, len)
                .into_iter()
                .map(|(at, k, b)| (at, k, b, b.is_some() && st.index[pair].sole_at(at)))
                .collect()
        };
        let active = group
            .iter()
            .find(|c| c.member == 2 * pair)
            .and_then(|c| c.bytes.clone());
        let copies: Vec<SyncCopy> = group
            .iter()
            .map(|c| {
                let mut bytes = c.bytes.clone();
                if let (Some(b), Some(a), true) = (&mut bytes, &active, c.member % 2 == 1) {
                    for &(at, k, buffered, _) in &fragments {
                        if buffered.is_some() {
                            let r = (at - offset) as usize..(at - offset + k) as usize;
                            b[r.clone()].copy_from_slice(&a[r]);
                        }
                    }
                }
                SyncCopy {
                    member: c.member,
                    bytes,
                    readable: c
                        .readable
                        .iter()
                        .take(len.div_ceil(SYNC_BLOCK) as usize)
                        .copied()
                        .collect(),
                }
            })
            .collect();
        let mut verdict = mirror::reconcile(offset, &copies, len)?;
        // After a crash a buffered run's flash copy may be older than its active disk (the
        // data landed, its record did not): the active disk wins, the second disk takes its
        // bytes and the run leaves the index, so the copies converge. Not so for a
        // flash-only run: its record says the flash is newest (a later write whose record
        // is not durable was never acknowledged), so it stays and the write-back puts the
        // flash copy on both disks.
        let dual: Vec<(u64, u64)> = fragments
            .iter()
            .filter(|f| f.2.is_some() && !f.3)
            .map(|f| (f.0, f.1))
            .collect();
        let buffered = !dual.is_empty();
        let second = 2 * pair + 1;
        let second_live = group
            .iter()
            .any(|c| c.member == second && c.bytes.is_some());
        if buffered && second_live {
            let reference = verdict
                .rewrites
                .iter()
                .find(|(m, _)| *m == 2 * pair)
                .map(|(_, b)| b.clone())
                .or(active);
            let Some(mut reference) = reference else {
                return Ok(verdict);
            };
            reference.truncate(len as usize);
            verdict.rewrites.retain(|(m, _)| *m != second);
            verdict.rewrites.push((second, reference));
            let mut st = lock(&self.state);
            for (at, k) in dual {
                Self::set_range(&mut st, pair, at, k, None);
            }
            Self::after_change(&mut st);
        }
        Ok(verdict)
    }

    fn survives(&self, valid: &[bool]) -> bool {
        let ok = |m: usize| valid.get(m).copied().unwrap_or(false);
        let st = lock(&self.state);
        (0..self.pairs).all(|p| {
            let second_current = st.address.resync[p].is_empty();
            (ok(2 * p)
                || (ok(2 * p + 1)
                    && second_current
                    && (st.index[p].is_empty() || ok(self.flash()))))
                && (ok(self.flash()) || !st.index[p].has_sole())
        })
    }

    fn next_wakeup(&self, now: Seconds) -> Option<Seconds> {
        let mut st = lock(&self.state);
        if st.address.resync.iter().any(|r| !r.is_empty()) {
            return Some(now);
        }
        let any = st.index.iter().any(|i| !i.is_empty());
        (any && st.flush.budget_left(now)).then_some(now)
    }

    fn background_work(&self, views: &[MemberView]) -> Option<(u64, u64)> {
        let mut st = lock(&self.state);
        // Ranges recovered from the active disk first: the second disk is stale there.
        if let Some(work) = self.resync_work(&st, views) {
            return Some(work);
        }
        let flash = self.flash();
        let eligible: Vec<usize> = (0..self.pairs)
            .filter(|&p| !st.index[p].is_empty() && views[2 * p + 1].writable)
            .filter(|&p| st.flush.draining || st.flush.forced[p] || self.second_up(&st, p, views))
            .collect();
        for p in eligible {
            let State { index, flush, .. } = &mut *st;
            let mut head = flush.heads[p];
            let mut tries = index[p].len();
            while tries > 0 {
                tries -= 1;
                let Some((home, e)) = head.next(&index[p]) else {
                    break;
                };
                // A run the flash cannot serve is copied from the active disk instead.
                let readable = views[flash].holds(e.flash_off, e.len)
                    || (!e.sole && views[2 * p].holds(home, e.len));
                if readable {
                    if !flush.take() {
                        return None;
                    }
                    flush.heads[p] = head;
                    return Some((self.volume_offset(p, home), e.len));
                }
            }
        }
        None
    }

    fn background_all(&self) {
        let mut st = lock(&self.state);
        st.flush.draining = st.index.iter().any(|i| !i.is_empty());
    }

    fn background_plan(
        &self,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.check_range(offset, len)?;
        let mut st = lock(&self.state);
        let mut plan = Plan::default();
        for (buf_offset, pair, home, n) in self.map(offset, len) {
            let s = 2 * pair + 1;
            let no_copy = LayoutError::NoLiveCopy {
                offset: offset + buf_offset,
                end: offset + buf_offset + n,
            };
            if !views[s].writable {
                return Err(no_copy);
            }
            let ios = self
                .read_piece(&mut st, pair, home, n, buf_offset, views, Some(s))
                .ok_or(no_copy)?;
            plan.reads.extend(ios);
            plan.writes.push(MemberIo {
                member: s,
                member_offset: home,
                len: n,
                buf: Buf::Caller(buf_offset),
            });
            // Flash-only runs go back to the active disk too (stale there as well).
            for (at, k, buffered) in st.index[pair].fragments(home, n) {
                if buffered.is_some() && st.index[pair].sole_at(at) {
                    plan.writes.push(MemberIo {
                        member: 2 * pair,
                        member_offset: at,
                        len: k,
                        buf: Buf::Caller(buf_offset + at - home),
                    });
                }
            }
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests;
