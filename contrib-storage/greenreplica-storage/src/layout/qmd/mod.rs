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
mod compact;
mod extents;
mod flush;
mod index;
mod online_mirror;
mod staging;
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
use online_mirror::{Geometry, OnlineMirrors};
use staging::Staging;
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
/// Stripe units `read_members` plans at most (`range_asleep` of a longer range answers
/// for its first this many).
const READ_MEMBERS_UNITS: u64 = 1 << 16;
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
    /// A new table handed to the journal, installed once its record is durable
    /// (`committed`); the flag: its record was handed out by `journal_records`.
    pending_temperatures: Option<(Temperatures, bool)>,
    /// Hot copies on the pairs that stay up (partial on-line mirrors).
    mirrors: OnlineMirrors,
    /// The copy job `background_work` named last (a stripe unit), and the one planned.
    copy_job: Option<u64>,
    copying: Option<u64>,
    /// Foreground writes planned into a copy slot and not completed: (host, slot) → count;
    /// a copy job waits for them (a late write must not land over a fresh copy).
    copy_writes: HashMap<(usize, u64), u32>,
    /// Per pair: cold (may sleep whole now): a sleeper whose hot copies are current.
    cold: Vec<bool>,
    /// The address root, the spans changed since their block, recovered ranges.
    address: blocks::AddressState,
    /// Small buffered writes' flash copies, appended at the next flush (`staging.rs`).
    staging: Staging,
    /// Moving address blocks and buffered runs out of nearly empty extents.
    compaction: compact::Compaction,
}

#[derive(Debug)]
pub struct Qmd {
    pairs: usize,
    stripe_unit: u64,
    /// The flash member's bytes, and each disk's bytes (the stripe map's and the copies').
    member_bytes: u64,
    /// Bytes of each disk the stripe map uses; the hot copies' region follows.
    data_bytes: u64,
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
        let mirror_bytes = shape
            .options
            .u64("mirror_bytes")
            .map_err(|p| problem(format!("mirror_bytes: {p}")))?
            .unwrap_or(0);
        if !mirror_bytes.is_multiple_of(su) || mirror_bytes >= member_bytes {
            return Err(problem(format!(
                "mirror_bytes: {mirror_bytes} must be whole stripe units ({su} bytes) and \
                 leave data on each {member_bytes}-byte member"
            )));
        }
        let pairs = shape.members / 2;
        Ok(Self {
            pairs,
            stripe_unit: su,
            member_bytes,
            data_bytes: member_bytes - mirror_bytes,
            state: Mutex::new(State {
                index: vec![MirrorIndex::default(); pairs],
                extents,
                flush: Flush::new(pairs, params),
                planned: HashMap::new(),
                outbox: Vec::new(),
                temperatures: Temperatures::default(),
                pending_temperatures: None,
                mirrors: OnlineMirrors::default(),
                copy_job: None,
                copying: None,
                copy_writes: HashMap::new(),
                cold: vec![false; pairs],
                address: blocks::AddressState::new(pairs, member_bytes, su),
                staging: Staging::new(staging::DEFAULT_STAGING_BYTES),
                compaction: compact::Compaction::default(),
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

    fn geometry(&self) -> Geometry {
        Geometry {
            pairs: self.pairs,
            su: self.stripe_unit,
            data_bytes: self.data_bytes,
            slots: (self.member_bytes - self.data_bytes) / self.stripe_unit,
        }
    }

    /// Pairs that may sleep whole now, after a change of the copies.
    fn refresh_cold(&self, st: &mut State) {
        st.cold = st.mirrors.cold_pairs(&self.geometry());
    }

    /// The current hot copy of pair `pair`'s bytes `at..at+n` (within one stripe unit): the
    /// host's active disk and the member offset there.
    fn copy_at(&self, st: &State, pair: usize, at: u64) -> Option<(usize, u64)> {
        let g = self.geometry();
        let c = st.mirrors.current(g.chunk(pair, at))?;
        Some((2 * c.host, g.slot_offset(c.slot) + at % self.stripe_unit))
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

    /// Install a (durable) table: decide the sleepers and place the hot copies.
    fn set_temperatures(&self, st: &mut State, t: Temperatures) {
        st.mirrors.recompute(&self.geometry(), &t);
        self.refresh_cold(st);
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
            // A hot unit's current copy on a staying pair is written too (it stays current);
            // a copy its host cannot take now goes stale.
            if let Some((h, at)) = self.copy_at(&st, pair, home) {
                let g = self.geometry();
                let chunk = g.chunk(pair, home);
                if views[h].writable && views[h].holds(at, len) {
                    plan.writes.push(io(h, at));
                    let slot = (at - g.data_bytes) / self.stripe_unit;
                    *st.copy_writes.entry((h / 2, slot)).or_default() += 1;
                } else if let Some(c) = st.mirrors.copies.get_mut(&chunk) {
                    c.current = false;
                    self.refresh_cold(&mut st);
                }
            }
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
                    // A flash-only write never stages: memory would hold its only copy.
                    if !sole && st.staging.reserve(flash_off, len) {
                        plan.stage.push(io(flash, flash_off));
                    } else {
                        plan.writes.push(io(flash, flash_off));
                    }
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
        for w in plan.stage.iter().filter(|w| w.member == flash) {
            st.planned.remove(&w.member_offset);
            st.staging.unreserve(w.member_offset);
        }
    }

    /// Reads of a pair's newest bytes: buffered runs from flash (or the active disk), the
    /// rest from the readiest disk that holds them (a hot unit's current copy on a staying
    /// pair when that is readier); a read served by the second disk moves the flush head.
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
        let ios = self.read_piece_ios(st, pair, home, len, buf_offset, views, avoid)?;
        let s = 2 * pair + 1;
        for io in ios.iter().filter(|io| io.member == s) {
            st.flush.heads[pair].moved_to(io.member_offset, io.len);
        }
        Some(ios)
    }

    /// `read_piece`'s plan without its side effect (`read_members` asks without reading).
    #[allow(clippy::too_many_arguments)]
    fn read_piece_ios(
        &self,
        st: &State,
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
            let mut candidates: Vec<(usize, u64)> = match buffered {
                Some(flash_off) if st.index[pair].sole_at(at) => vec![(flash, flash_off)],
                // Staged, not yet appended: the flash does not hold it, the active disk does.
                Some(flash_off) if st.staging.holds(flash_off, n) => vec![(a, at)],
                Some(flash_off) => vec![(flash, flash_off), (a, at)],
                // A sleeping second disk (or one stale there after a lost address block,
                // or one with a write-back backlog) is read only when the active one
                // cannot serve.
                None if !self.second_up(st, pair, views)
                    || st.address.in_resync(pair, at, at + n)
                    || flush::backlogged(&views[s]) =>
                {
                    vec![(a, at), (s, at)]
                }
                None => {
                    let mut c = vec![(a, at), (s, at)];
                    c.sort_by(|x, y| views[x.0].ready_at.total_cmp(&views[y.0].ready_at));
                    c
                }
            };
            if buffered.is_none() {
                if let Some(copy) = self.copy_at(st, pair, at) {
                    // The copy first when the home disk is further from ready (asleep).
                    let home_ready = views[candidates[0].0].ready_at;
                    if views[copy.0].ready_at + UP_SLACK_S < home_ready {
                        candidates.insert(0, copy);
                    } else {
                        candidates.push(copy);
                    }
                }
            }
            let (member, member_offset) = candidates
                .into_iter()
                .find(|&(m, off)| Some(m) != avoid && views[m].holds(off, n))?;
            ios.push(MemberIo {
                member,
                member_offset,
                len: n,
                buf: Buf::Caller(buf_offset + at - home),
            });
        }
        Some(ios)
    }

    /// The copy job of stripe unit `chunk`: read its newest bytes at home (flash or disks),
    /// write them into its slot on the host's active disk.
    fn copy_plan(
        &self,
        st: &mut State,
        chunk: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        let g = self.geometry();
        let (pair, home) = g.home(chunk);
        let no_copy = || LayoutError::NoLiveCopy {
            offset: chunk * g.su,
            end: (chunk + 1) * g.su,
        };
        let c = st.mirrors.copies.get(&chunk).copied().ok_or_else(no_copy)?;
        let reads = self
            .read_piece(st, pair, home, g.su, 0, views, None)
            .ok_or_else(no_copy)?;
        st.copying = Some(chunk);
        Ok(Plan {
            reads,
            writes: vec![MemberIo {
                member: 2 * c.host,
                member_offset: g.slot_offset(c.slot),
                len: g.su,
                buf: Buf::Caller(0),
            }],
            ..Plan::default()
        })
    }

    /// A write into a host's copy region landed: a foreground write's (the copy stays
    /// current) or the copy job's (the copy is current now).
    fn copy_written(&self, st: &mut State, w: &MemberIo) {
        let g = self.geometry();
        let (host, slot) = (w.member / 2, (w.member_offset - g.data_bytes) / g.su);
        if let Some(n) = st.copy_writes.get_mut(&(host, slot)) {
            *n -= 1;
            if *n == 0 {
                st.copy_writes.remove(&(host, slot));
            }
            return;
        }
        let Some(chunk) = st.copying else {
            return;
        };
        if let Some(c) = st.mirrors.copies.get_mut(&chunk) {
            if c.host == host && c.slot == slot && w.len == g.su && w.member == 2 * host {
                c.current = true;
                st.copying = None;
                self.refresh_cold(st);
            }
        }
    }

    /// The next hot copy to write (a stale one whose home and host can serve, with no
    /// foreground write into its slot in flight): its stripe unit.
    fn next_copy_job(&self, st: &State, views: &[MemberView]) -> Option<u64> {
        let g = self.geometry();
        st.mirrors
            .copies
            .iter()
            .filter(|(_, c)| !c.current && !st.copy_writes.contains_key(&(c.host, c.slot)))
            .find(|(&chunk, c)| {
                let (pair, home) = g.home(chunk);
                views[2 * c.host].writable
                    && views[2 * c.host].holds(g.slot_offset(c.slot), g.su)
                    && self
                        .read_piece_ios(st, pair, home, g.su, 0, views, None)
                        .is_some()
            })
            .map(|(&chunk, _)| chunk)
    }

    fn apply(&self, st: &mut State, r: &LayoutRecord) -> Result<(), String> {
        let mut rd = Reader::new(&r.payload, "qmd");
        match r.kind {
            REC_BUFFERED | REC_SOLE => {
                let (pair, home, len) = (rd.u32()? as usize, rd.u64()?, rd.u64()?);
                let flash_off = rd.u64()?;
                if pair >= self.pairs
                    || len == 0
                    || home.checked_add(len).is_none_or(|e| e > self.data_bytes)
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
        self.data_bytes * self.pairs as u64
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
        for w in plan.writes.iter().chain(&plan.stage) {
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
            if w.member_offset >= self.data_bytes {
                self.copy_written(&mut st, w);
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
        // A new temperature table takes effect once its record is durable.
        if st.pending_temperatures.as_ref().is_some_and(|p| p.1) {
            if let Some((t, _)) = st.pending_temperatures.take() {
                self.set_temperatures(&mut st, t);
            }
        }
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
            extents,
            planned,
            staging,
            ..
        } = &mut *st;
        // Nor an extent whose staged bytes are still to be appended.
        let pending: HashSet<usize> = planned
            .keys()
            .copied()
            .chain(staging.ranges().map(|(off, _)| off))
            .map(|off| extents.extent_of(off))
            .collect();
        if extents.reclaim(|e| pending.contains(&e)) {
            let info = extents.info.clone();
            st.outbox.push(volume_info_record(&info));
        }
        // Blocks pinning nearly empty extents are written afresh at the next flush.
        self.compact_blocks(&mut st);
        Self::after_change(&mut st);
    }

    fn journal_records(&self, _plan: &Plan) -> Vec<LayoutRecord> {
        let mut st = lock(&self.state);
        if let Some(p) = &mut st.pending_temperatures {
            p.1 = true;
        }
        std::mem::take(&mut st.outbox)
    }

    fn replay(&self, image: Option<&[u8]>, records: &[LayoutRecord]) -> Result<(), String> {
        let mut st = lock(&self.state);
        st.index = vec![MirrorIndex::default(); self.pairs];
        st.extents.clear_live();
        st.extents.restore(VolumeInfo::default())?;
        st.planned.clear();
        st.outbox.clear();
        // Staged bytes were never acknowledged (the flush that appends them does that).
        st.staging.clear();
        // Copies are stale after a restart: the copy jobs write them again.
        st.pending_temperatures = None;
        st.mirrors = OnlineMirrors::default();
        st.copy_job = None;
        st.copying = None;
        st.copy_writes.clear();
        st.address.reset();
        st.compaction.reset();
        self.set_temperatures(&mut st, Temperatures::default());
        if let Some(bytes) = image {
            for r in decode_image(bytes, "qmd")? {
                self.apply(&mut st, &r)?;
            }
        }
        for r in records {
            self.apply(&mut st, r)?;
        }
        // A shared flash pool: keep only the extents the pool agrees the volume holds.
        st.extents.settle()?;
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

    fn stage(&self, io: &MemberIo, bytes: &[u8]) {
        if io.member == self.flash() {
            lock(&self.state).staging.put(io.member_offset, bytes);
        }
    }

    /// The staged runs, adjacent flash slots merged: usually one append per flush.
    fn staged_appends(&self) -> Vec<MetadataBlock> {
        let member = self.flash();
        lock(&self.state)
            .staging
            .take()
            .into_iter()
            .map(|(offset, bytes)| MetadataBlock {
                member,
                offset,
                bytes,
            })
            .collect()
    }

    fn staged_appended(&self) {
        lock(&self.state).staging.appended();
    }

    fn staged_due(&self) -> bool {
        lock(&self.state).staging.due()
    }

    fn metadata_blocks(&self, views: &[MemberView]) -> Vec<MetadataBlock> {
        self.take_blocks(views)
    }

    fn metadata_blocks_written(&self, durable: bool) -> Vec<LayoutRecord> {
        self.blocks_written(durable)
    }

    fn checkpoint_image(&self) -> Option<Vec<u8>> {
        let st = lock(&self.state);
        // A table whose record is already in the journal is what a restart must find.
        let table = match &st.pending_temperatures {
            Some((t, true)) => t,
            _ => &st.temperatures,
        };
        let mut records = vec![
            volume_info_record(&st.extents.info),
            temperature_record(table),
        ];
        // The root, not the entries: they are in its blocks.
        records.extend(Self::root_records(&st));
        Some(encode_image(records))
    }

    /// `k`, `fill_threshold`, `buffer_bytes` (flash used, at most the member) and
    /// `extent_bytes`; the buffer's shape only while nothing is buffered.
    fn option_places_data(&self, key: &str) -> bool {
        !matches!(
            key,
            "k" | "fill_threshold" | "staging_bytes" | "compact_live"
        )
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
            "compact_live" => st.compaction.live_share = compact::parse_live_share(value)?,
            "buffer_bytes" | "extent_bytes" => {
                if let Some(pool) = st.extents.pool_name() {
                    return Err(format!(
                        "qmd option {key}: the extents are flash pool {pool}'s"
                    ));
                }
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
            // Memory, not placement: may change between runs (0: off).
            "staging_bytes" => {
                let n: u64 = value.parse().map_err(|_| bad())?;
                st.staging.set_capacity(n)?;
            }
            // Read by the constructor (it shapes the members); here only checked.
            "mirror_bytes" => {
                let n: u64 = value.parse().map_err(|_| bad())?;
                if n != self.member_bytes - self.data_bytes {
                    return Err(format!("qmd option {key}: set when the volume is built"));
                }
            }
            other => {
                return Err(format!(
                    "layout qmd has no option {other:?}; use k, fill_threshold, buffer_bytes, \
                     extent_bytes, mirror_bytes, staging_bytes or compact_live"
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
        // On top of a change not yet durable (it will be before this one).
        let base = match &st.pending_temperatures {
            Some((t, _)) => t,
            None => &st.temperatures,
        };
        let next = base.with(extents, t)?;
        let n = next.len();
        st.outbox.push(temperature_record(&next));
        // Installed by `committed`, once the record is durable: until then neither the
        // policy nor the writes act on a table a crash would take back.
        st.pending_temperatures = Some((next, false));
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
        // Hot units with a current copy: their writes reach the copy's host too.
        if len > 0 {
            let units = offset / self.stripe_unit..=(end - 1) / self.stripe_unit;
            members.extend(
                st.mirrors
                    .copies
                    .range(units)
                    .filter(|(_, c)| c.current)
                    .map(|(_, c)| 2 * c.host),
            );
        }
        members.sort_unstable();
        members.dedup();
        Some(members)
    }

    /// Pairs that sleep whole: only marked data, some cold, hot units copied (current).
    fn cold_groups(&self) -> Vec<usize> {
        let st = lock(&self.state);
        (0..self.pairs)
            .filter(|&p| st.cold[p])
            .map(|p| 2 * p)
            .collect()
    }

    /// The members a read needs now, planned without moving the flush's head or budget
    /// (`range_asleep` asks; it does not read).
    fn read_members(
        &self,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Vec<usize>, LayoutError> {
        self.check_range(offset, len)?;
        // Buffered runs and hot copies vary unit by unit: the first READ_MEMBERS_UNITS
        // stripe units are planned (a bound on a client's question, not on the volume).
        let st = lock(&self.state);
        let mut members = Vec::new();
        let planned = len.min(READ_MEMBERS_UNITS * self.stripe_unit);
        for (buf_offset, pair, home, n) in self.map(offset, planned) {
            let ios = self
                .read_piece_ios(&st, pair, home, n, buf_offset, views, None)
                .ok_or(LayoutError::NoLiveCopy {
                    offset: offset + buf_offset,
                    end: offset + buf_offset + n,
                })?;
            members.extend(ios.iter().map(|io| io.member));
        }
        members.sort_unstable();
        members.dedup();
        Ok(members)
    }

    /// A replaced flash lost the address blocks; a replaced active disk held copies: they
    /// are stale now.
    fn member_replaced(&self, member: usize) {
        if member == self.flash() {
            self.flash_replaced();
        }
        if member < self.flash() && member.is_multiple_of(2) {
            let mut st = lock(&self.state);
            st.mirrors.host_lost(member / 2);
            self.refresh_cold(&mut st);
        }
    }

    fn attach_flash_pool(
        &self,
        pool: std::sync::Arc<crate::flash_pool::FlashPool>,
        volume: &str,
    ) -> Result<(), String> {
        self.attach_pool(pool, volume)
    }

    fn layout_state(&self) -> Option<serde_json::Value> {
        let st = lock(&self.state);
        let current = st.mirrors.copies.values().filter(|c| c.current).count();
        Some(serde_json::json!({
            "hot_copies": st.mirrors.copies.len(),
            "hot_copies_current": current,
            "sleeper_pairs": (0..self.pairs)
                .filter(|&p| st.mirrors.sleepers.get(p).copied().unwrap_or(false))
                .collect::<Vec<_>>(),
            "cold_pairs": (0..self.pairs).filter(|&p| st.cold[p]).collect::<Vec<_>>(),
            "buffered_bytes": st.index.iter().flat_map(|i| i.iter().map(|(_, e)| e.len)).sum::<u64>(),
            "fill": st.extents.fill(),
            "flash_pool": st.extents.pool_name(),
            "flash_extents": st.extents.info.extents,
            "address_blocks": st.address.root.len(),
            "staged_bytes": st.staging.used(),
            "staging_bytes": st.staging.capacity(),
            "extents_held": st.extents.info.extents.len(),
            "compacted_blocks": st.compaction.blocks_moved,
            "compacted_runs": st.compaction.runs_moved,
            "recovering_bytes": st
                .address
                .resync
                .iter()
                .flat_map(|r| r.iter().map(|(s, e)| e - s))
                .sum::<u64>(),
        }))
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
        if member < self.flash() && offset >= self.data_bytes {
            // The copy region: nothing to recover, the copies there are stale now.
            if member.is_multiple_of(2) {
                st.mirrors.host_lost(member / 2);
                self.refresh_cold(&mut st);
            }
            return Ok(plan);
        }
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
        // The flash is never compared, nor the copy region (used on active disks only).
        if group.iter().any(|c| c.member >= self.flash()) || offset >= self.data_bytes {
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
        if active.is_none() && offset + len > self.data_bytes {
            // The active disk cannot vouch for its copy region: its copies are stale.
            let mut st = lock(&self.state);
            st.mirrors.host_lost(pair);
            self.refresh_cold(&mut st);
        }
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
                    // Nor is the copy region, where a block reaches into it (it is used on
                    // the active disk only): the active disk's bytes stand there.
                    let tail = (self.data_bytes.saturating_sub(offset) as usize).min(b.len());
                    let end = b.len().min(a.len());
                    if tail < end {
                        b[tail..end].copy_from_slice(&a[tail..end]);
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
        let stale = st.mirrors.next_stale().is_some();
        let any = st.index.iter().any(|i| !i.is_empty());
        let relocate = Self::relocation_due(&mut st, now);
        ((any && st.flush.budget_left(now)) || stale || relocate).then_some(now)
    }

    fn background_work(&self, views: &[MemberView]) -> Option<(u64, u64)> {
        let mut st = lock(&self.state);
        // Ranges recovered from the active disk first: the second disk is stale there.
        if let Some(work) = self.resync_work(&st, views) {
            st.copy_job = None;
            return Some(work);
        }
        // Then hot copies: a pair sleeps whole only once they are current.
        st.copy_job = self.next_copy_job(&st, views);
        if let Some(chunk) = st.copy_job {
            return Some((chunk * self.stripe_unit, self.stripe_unit));
        }
        let flash = self.flash();
        let eligible: Vec<usize> = (0..self.pairs)
            .filter(|&p| !st.index[p].is_empty() && views[2 * p + 1].writable)
            .filter(|&p| st.flush.draining || st.flush.forced[p] || self.second_up(&st, p, views))
            .collect();
        // Runs of pairs not being written back move out of nearly empty extents.
        if let Some(work) = self.relocate_work(&mut st, views, &eligible) {
            return Some(work);
        }
        for p in eligible {
            let State {
                index,
                flush,
                staging,
                ..
            } = &mut *st;
            if !flush.room(p, &views[2 * p + 1]) {
                continue;
            }
            let mut head = flush.heads[p];
            let mut tries = index[p].len();
            while tries > 0 {
                tries -= 1;
                let Some((home, e)) = head.next(&index[p]) else {
                    break;
                };
                // A run the flash cannot serve is copied from the active disk instead.
                let readable = (views[flash].holds(e.flash_off, e.len)
                    && !staging.holds(e.flash_off, e.len))
                    || (!e.sole && views[2 * p].holds(home, e.len));
                if readable {
                    if !flush.take(p) {
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
        if let Some(chunk) = st.copy_job.take() {
            if offset == chunk * self.stripe_unit && len == self.stripe_unit {
                return self.copy_plan(&mut st, chunk, views);
            }
        }
        if let Some(plan) = self.relocate_plan(&mut st, offset, len, views) {
            return plan;
        }
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
mod compact_tests;
#[cfg(test)]
mod mirror_tests;
#[cfg(test)]
mod staging_tests;
#[cfg(test)]
mod tests;
