//! Compaction of QMD's flash extents. An extent is freed only when nothing live is left in
//! it, so a few long-lived things can pin an old extent for good: the address block of a
//! span that has not changed since (its block stays where it was last written) and buffered
//! runs of a pair whose second disk sleeps (never written back). Compaction moves them to
//! the extent being filled so that the old extent can be reclaimed:
//!
//! * **address blocks** — the span is marked dirty again; the next volume flush writes its
//!   block afresh (blocks durable, then the root record committed), and only once that root
//!   is committed does the old block retire and its extent become free: a crash before
//!   leaves the old root naming the old, intact block;
//! * **buffered runs** — a background step reads the run from its old flash place and
//!   appends it like a new write (`complete` moves the index entry); the span is dirty, so
//!   the same flush-then-commit order applies, and the old copy stays valid until the root
//!   that names the new place is committed.
//!
//! A **victim** is a held extent other than the one being filled, with no write still
//! landing in it and no staged bytes still to be appended to it, whose live bytes are at
//! most `compact_live` of the extent (a layout option, default a quarter; 0 turns
//! compaction off): moving at most that much frees a whole extent. Work is bounded: at most `SPANS_PER_ROUND` blocks are re-dirtied per
//! commit, and at most `RUN_BYTES_PER_TICK` of runs move per volume tick.

use std::collections::HashSet;

use super::address::Place;
use super::{Qmd, State};
use crate::layout::{Buf, LayoutError, MemberIo, MemberView, Plan};

/// Default `compact_live`: compact an extent at most this share live.
pub const DEFAULT_LIVE_SHARE: f64 = 0.25;
/// Address blocks re-dirtied per commit at most.
const SPANS_PER_ROUND: usize = 64;
/// Buffered-run bytes moved per volume tick at most (the flash keeps serving reads: at
/// 0.5 in the benchmark, moving without this bound took p99.9 from 52 to 808 ms).
const RUN_BYTES_PER_TICK: u64 = 1 << 20;
/// Steps asking within this long of each other belong to one tick (as the flush's budget).
const TICK_S: f64 = 0.05;

#[derive(Debug, Clone)]
pub struct Compaction {
    /// An extent at most this share live is compacted (0: never).
    pub live_share: f64,
    /// The run `background_work` named last: (pair, home, len, flash offset).
    job: Option<(usize, u64, u64, u64)>,
    /// The tick the run bytes moved are counted for, and those bytes.
    tick: Option<f64>,
    moved_in_tick: u64,
    /// Counters (for `layout_state` and the benchmark).
    pub blocks_moved: u64,
    pub runs_moved: u64,
    pub bytes_moved: u64,
}

impl Default for Compaction {
    fn default() -> Self {
        Self {
            live_share: DEFAULT_LIVE_SHARE,
            job: None,
            tick: None,
            moved_in_tick: 0,
            blocks_moved: 0,
            runs_moved: 0,
            bytes_moved: 0,
        }
    }
}

impl Compaction {
    /// A restart: no job in flight (the option is kept).
    pub fn reset(&mut self) {
        self.job = None;
    }

    /// A volume tick at `now` (a new one when the last was `TICK_S` ago or more); whether
    /// runs may still move in it.
    pub fn tick_budget_left(&mut self, now: f64) -> bool {
        if self.tick.is_none_or(|t| now - t >= TICK_S || now < t) {
            self.tick = Some(now);
            self.moved_in_tick = 0;
        }
        self.moved_in_tick < RUN_BYTES_PER_TICK
    }
}

/// Parse and check a `compact_live` value.
pub fn parse_live_share(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(v) if (0.0..1.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "qmd option compact_live: {value:?} must be a share in 0..1 (0 turns compaction off)"
        )),
    }
}

impl Qmd {
    /// The extents to compact now (oldest first).
    fn victims(st: &State) -> Vec<usize> {
        let share = st.compaction.live_share;
        if share <= 0.0 {
            return Vec::new();
        }
        let extents = &st.extents;
        let limit = (extents.extent_bytes() as f64 * share) as u64;
        // Writes still landing, and staged bytes not yet appended (their flash copy is not
        // there to move).
        let landing: HashSet<usize> = st
            .planned
            .keys()
            .copied()
            .chain(st.staging.ranges().map(|(off, _)| off))
            .map(|o| extents.extent_of(o))
            .collect();
        let held = &extents.info.extents;
        // The last extent while it has room: appends (and moved things) go there.
        let filling = held
            .last()
            .copied()
            .filter(|_| extents.info.next < extents.extent_bytes());
        held.iter()
            .filter(|&&e| Some(e) != filling)
            .map(|&e| e as usize)
            .filter(|e| !landing.contains(e))
            .filter(|&e| {
                let live = extents.live_of(e);
                live > 0 && live <= limit
            })
            .collect()
    }

    /// After a commit that left the index all in committed blocks: re-dirty the spans
    /// whose blocks lie in victim extents, so the next flush writes them afresh.
    pub(super) fn compact_blocks(&self, st: &mut State) {
        let victims: HashSet<usize> = Self::victims(st).into_iter().collect();
        if victims.is_empty() {
            return;
        }
        let span = st.address.span;
        let keys: Vec<_> = st
            .address
            .root
            .iter()
            .filter(|(_, e)| match e.place {
                Place::Flash { off, .. } => victims.contains(&st.extents.extent_of(off)),
                Place::Inline(_) => false,
            })
            .map(|(k, _)| *k)
            .filter(|k| !st.address.dirty.contains(k))
            .filter(|&(pair, s)| {
                let (start, end) = self.span_home(span, (pair, s));
                !st.address.in_resync(pair, start, end)
            })
            .take(SPANS_PER_ROUND)
            .collect();
        st.compaction.blocks_moved += keys.len() as u64;
        st.address.dirty.extend(keys);
    }

    /// A buffered run in a victim extent that can move now (the flash readable and
    /// writable): the volume range to name as background work.
    /// Pairs in `writing_back` are skipped: their write-back frees the runs anyway.
    pub(super) fn relocate_work(
        &self,
        st: &mut State,
        views: &[MemberView],
        writing_back: &[usize],
    ) -> Option<(u64, u64)> {
        st.compaction.job = None;
        let flash = self.flash();
        if !views[flash].writable || st.compaction.moved_in_tick >= RUN_BYTES_PER_TICK {
            return None;
        }
        let victims: HashSet<usize> = Self::victims(st).into_iter().collect();
        if victims.is_empty() {
            return None;
        }
        let job = (0..self.pairs)
            .filter(|p| !writing_back.contains(p))
            .find_map(|p| {
                st.index[p]
                    .iter()
                    .find(|(_, e)| {
                        victims.contains(&st.extents.extent_of(e.flash_off))
                            && views[flash].holds(e.flash_off, e.len)
                            && st.extents.fits(e.len)
                    })
                    .map(|(home, e)| (p, home, e.len, e.flash_off))
            })?;
        st.compaction.job = Some(job);
        Some((self.volume_offset(job.0, job.1), job.2))
    }

    /// Whether `relocate_work` may find something in the tick at `now`: budget left and a
    /// victim holds a buffered run.
    pub(super) fn relocation_due(st: &mut State, now: f64) -> bool {
        if !st.compaction.tick_budget_left(now) {
            return false;
        }
        let victims: HashSet<usize> = Self::victims(st).into_iter().collect();
        !victims.is_empty()
            && st.index.iter().any(|i| {
                i.iter()
                    .any(|(_, e)| victims.contains(&st.extents.extent_of(e.flash_off)))
            })
    }

    /// The plan of the relocation `relocate_work` named, if `offset..+len` is it: read the
    /// run from flash, append it to the extent being filled. None: not a relocation.
    pub(super) fn relocate_plan(
        &self,
        st: &mut State,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Option<Result<Plan, LayoutError>> {
        let (pair, home, n, old) = st.compaction.job.take()?;
        if offset != self.volume_offset(pair, home) || len != n {
            return None;
        }
        let mut plan = Plan::default();
        // The run changed since it was named (the range lock is held now): nothing to do.
        let Some(e) = st.index[pair]
            .iter()
            .find(|(h, e)| *h == home && e.len == n && e.flash_off == old)
            .map(|(_, e)| e)
        else {
            return Some(Ok(plan));
        };
        let flash = self.flash();
        let Some((new, new_extent)) = st
            .extents
            .allocate(n)
            .filter(|(off, _)| views[flash].holds(*off, n))
        else {
            return Some(Ok(plan));
        };
        if new_extent {
            let info = st.extents.info.clone();
            st.outbox.push(super::volume_info_record(&info));
        }
        st.planned.insert(new, (pair, home, n, e.sole));
        st.compaction.runs_moved += 1;
        st.compaction.moved_in_tick += n;
        st.compaction.bytes_moved += n;
        let io = |member_offset| MemberIo {
            member: flash,
            member_offset,
            len: n,
            buf: Buf::Caller(0),
        };
        plan.reads.push(io(old));
        plan.writes.push(io(new));
        Some(Ok(plan))
    }
}
