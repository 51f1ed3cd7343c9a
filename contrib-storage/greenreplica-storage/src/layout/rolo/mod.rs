//! Logged mirrors: GRAID and RoLo (Wang et al., "RoLo: rotated logging"). Data is striped
//! over mirrored pairs as in RAID10 (member 2p is pair p's primary, 2p+1 its mirror); a write
//! goes to the primary and, instead of the sleeping mirror, to a log. The log index (home
//! bytes of a pair → logger, log offset, generation) says which home bytes are stale and
//! where their newest second copy is; it is journaled, so it survives an agent crash.
//!
//! * GRAID: one dedicated log member (the last); when it is 80 % full every pair with logged
//!   data destages (its mirror wakes and copies the primary's bytes home).
//! * RoLo-P: the upper quarter of every pair member is a log region; one mirror is on duty.
//!   At 80 % its duty rotates to the next mirror, whose own pair then destages
//!   (decentralized: only that pair's mirror works, and it is awake anyway), which frees log
//!   space everywhere. Writes of the on-duty pair go in place to both copies.
//! * RoLo-R: as RoLo-P, but the on-duty logger is a pair and both its members take a copy
//!   of each logged write (three copies).
//! * RoLo-E: only the on-duty pair is active: off-duty writes go to both of its log copies
//!   and not to their primary; reads of logged bytes come from the log, other reads spin
//!   their pair up; a pair coming on duty destages from the logs to both its home copies.
//! * RoLo-S: RoLo-P over a zebra geometry (`geometry.rs`): data and log bands alternate, so
//!   log writes and the destage land near each other.
//!
//! The log share, rotation fill, pre-wake fill and zebra width are layout options
//! (`options.rs`). Reads always return the newest copy.

mod geometry;
mod options;
mod records;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::pair_striped::{decode_image, encode_image, PairStripe, Piece, Reader};
use super::registry::check_chunk;
use super::{
    mirror, Buf, LayoutError, LayoutKind, LayoutRecord, MemberIo, MemberView, Personality, Plan,
    Reconcile, Reserved, Role, Shape, ShapeProblem, SyncCopy,
};
use crate::clock::Seconds;
use crate::service_model::IoKind;
use crate::sync::lock;
pub use geometry::seek_distance;
use geometry::{Geometry, Region};
pub use options::RoloOptions;
use records::{duty_record, logged_record, unlogged_record, REC_DUTY, REC_LOGGED, REC_UNLOGGED};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    Graid,
    RoloP,
    RoloR,
    RoloE,
    RoloS,
}

/// Where a run of a pair's home bytes has its newest second copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    len: u64,
    /// The logger (its canonical member: the mirror of the logging pair, or GRAID's log
    /// member); RoLo-R and RoLo-E keep a twin copy on its primary at the same offset.
    logger: usize,
    /// Member offset of the log copy.
    log_off: u64,
    gen: u64,
}

/// A log write planned and not yet completed.
#[derive(Debug, Clone, Copy)]
struct Planned {
    pair: usize,
    home: u64,
    len: u64,
    gen: u64,
    logger: usize,
}

#[derive(Debug, Default)]
struct State {
    /// Per pair: home start → entry.
    index: Vec<BTreeMap<u64, Entry>>,
    /// Per logger (position in `Rolo::loggers`): next free log offset (log space), live bytes.
    heads: Vec<u64>,
    live: Vec<u64>,
    on_duty: usize,
    /// Duty rotations since the layout was built (the status shows them; not journaled).
    rotations: u64,
    /// Pairs whose logged bytes are being copied home.
    destaging: Vec<bool>,
    gen: u64,
    /// Log writes planned and not yet completed, by (first copy's member, log offset).
    planned: HashMap<(usize, u64), Planned>,
    /// Records of completed changes, handed to the journal by `journal_records`.
    outbox: Vec<LayoutRecord>,
    /// The next logger was woken for this logging period.
    prewoken: bool,
    /// Members to wake ahead of their duty, handed to the engine by `prewake`.
    wake: Vec<usize>,
}

#[derive(Debug)]
pub struct Rolo {
    flavour: Flavour,
    pairs: usize,
    stripe_unit: u64,
    member_bytes: u64,
    geo: Geometry,
    /// The loggers' canonical members, in rotation order.
    loggers: Vec<usize>,
    /// Log fill (bytes) at which the logger rotates (GRAID: destages).
    threshold: u64,
    /// Log fill (bytes) at which the next logger is woken.
    prewake_at: Option<u64>,
    state: Mutex<State>,
}

/// RoLo-S's default zebra width gives at least this many bands.
const MIN_BANDS: u64 = 16;

/// A run of home bytes and, if logged, (logger, log offset) of its newest second copy.
type Fragment = (u64, u64, Option<(usize, u64)>);

impl Rolo {
    fn kind_of(flavour: Flavour) -> LayoutKind {
        match flavour {
            Flavour::Graid => LayoutKind::GRAID,
            Flavour::RoloP => LayoutKind::ROLO_P,
            Flavour::RoloR => LayoutKind::ROLO_R,
            Flavour::RoloE => LayoutKind::ROLO_E,
            Flavour::RoloS => LayoutKind::ROLO_S,
        }
    }

    pub fn check_graid(members: usize, chunk: u64) -> Result<(), ShapeProblem> {
        if members < 3 || members.is_multiple_of(2) {
            return Err(ShapeProblem {
                key: "member",
                problem: format!(
                    "layout graid needs mirrored pairs plus one log member (an odd number, at \
                     least 3), got {members}"
                ),
            });
        }
        check_chunk(chunk)
    }

    pub fn check_rolo(members: usize, chunk: u64) -> Result<(), ShapeProblem> {
        if members < 4 || !members.is_multiple_of(2) {
            return Err(ShapeProblem {
                key: "member",
                problem: format!(
                    "the rolo layouts need at least two mirrored pairs (an even number of \
                     members, at least 4), got {members}"
                ),
            });
        }
        check_chunk(chunk)
    }

    pub fn new(flavour: Flavour, shape: &Shape) -> Result<Self, LayoutError> {
        let kind = Self::kind_of(flavour);
        match flavour {
            Flavour::Graid => Self::check_graid(shape.members, shape.chunk),
            _ => Self::check_rolo(shape.members, shape.chunk),
        }
        .map_err(|p| kind.shape_error(p))?;
        // An option's problem names its key (`layout_options.log_share: ...`).
        let keyed = |p: ShapeProblem| {
            kind.shape_error(ShapeProblem {
                problem: format!("{}: {}", p.key, p.problem),
                ..p
            })
        };
        let table = RoloOptions::from_table(&shape.options).map_err(keyed)?;
        let opts = table.resolve(kind).map_err(keyed)?;
        let su = shape.chunk;
        let member_bytes = shape.member_bytes / su * su;
        let pairs = shape.members / 2;
        // RoLo-S's default width, narrowed on members too small for 16 bands of it.
        let zebra = match (flavour, table.zebra_mb) {
            (Flavour::RoloS, None) => opts
                .zebra_bytes
                .map(|w| w.min(member_bytes / MIN_BANDS / su * su).max(2 * su)),
            _ => opts.zebra_bytes,
        };
        let geo = match (flavour, zebra) {
            (Flavour::Graid, _) if member_bytes >= su => Ok(Geometry::whole(member_bytes)),
            (Flavour::Graid, _) => Err("members are smaller than one stripe unit".to_string()),
            (_, Some(width)) => Geometry::zebra(member_bytes, su, opts.log_share, width),
            (_, None) => Geometry::plain(member_bytes, su, opts.log_share),
        }
        .map_err(|problem| {
            kind.shape_error(ShapeProblem {
                key: "member",
                problem,
            })
        })?;
        let loggers: Vec<usize> = match flavour {
            Flavour::Graid => vec![2 * pairs],
            _ => (0..pairs).map(|p| 2 * p + 1).collect(),
        };
        let fill = |f: f64| ((geo.log_len as f64 * f) as u64).max(1);
        let state = State {
            index: vec![BTreeMap::new(); pairs],
            heads: vec![0; loggers.len()],
            live: vec![0; loggers.len()],
            destaging: vec![false; pairs],
            ..State::default()
        };
        Ok(Self {
            flavour,
            pairs,
            stripe_unit: su,
            member_bytes,
            geo,
            loggers,
            threshold: fill(opts.rotate_at),
            prewake_at: opts.prewake_at.map(fill),
            state: Mutex::new(state),
        })
    }

    /// Both members of the logging pair take each logged write.
    fn twin(&self) -> bool {
        matches!(self.flavour, Flavour::RoloR | Flavour::RoloE)
    }

    /// Only the on-duty pair is active: logged writes skip their primary.
    fn energy(&self) -> bool {
        self.flavour == Flavour::RoloE
    }

    fn logger_slot(&self, member: usize) -> Option<usize> {
        self.loggers.iter().position(|&m| m == member)
    }

    /// The members holding a copy of what `logger` logged.
    fn copies(&self, logger: usize) -> Vec<usize> {
        if self.twin() {
            vec![logger - 1, logger]
        } else {
            vec![logger]
        }
    }

    fn keeps_log(&self, member: usize) -> bool {
        match self.flavour {
            Flavour::Graid => member == 2 * self.pairs,
            _ if self.twin() => member < 2 * self.pairs,
            _ => member % 2 == 1 && member < 2 * self.pairs,
        }
    }

    /// What member offset `off` of `member` holds, and how far that region runs.
    fn region(&self, member: usize, off: u64) -> (Region, u64) {
        if self.flavour == Flavour::Graid {
            let run = self.member_bytes.saturating_sub(off);
            return if member == 2 * self.pairs {
                (Region::Log(off), run)
            } else {
                (Region::Home(off), run)
            };
        }
        match self.geo.region(off) {
            (Region::Log(_), run) if !self.keeps_log(member) => (Region::Unused, run),
            other => other,
        }
    }

    /// The volume range of a pair's home bytes (within one stripe unit).
    fn volume_offset(&self, pair: usize, home: u64) -> u64 {
        self.stripe().volume_offset(pair, home)
    }

    fn stripe(&self) -> PairStripe {
        PairStripe::new(self.pairs, self.stripe_unit)
    }

    fn map(&self, offset: u64, len: u64) -> Vec<Piece> {
        self.stripe().map(offset, len)
    }

    /// The logger that takes `len` more bytes of `pair`, and where in its log; None: write
    /// in place. The on-duty logger; right after a rotation, while it still spins up (the
    /// pre-wake or its pair's destage woke it), the previous one bridges as long as it has
    /// room. A logger's own pair writes in place once that logger is up (the previous
    /// logger is up). `now` is when the writing side can serve (RoLo-E: the readiest
    /// member).
    fn room(
        &self,
        st: &State,
        pair: usize,
        len: u64,
        now: Seconds,
        views: &[MemberView],
    ) -> Option<(usize, u64)> {
        let n = self.loggers.len();
        let ready = |slot: usize| views[self.loggers[slot]].ready_at <= now + 1.0;
        let own = |slot: usize| self.flavour != Flavour::Graid && self.loggers[slot] / 2 == pair;
        let on = st.on_duty;
        let previous = (on + n - 1) % n;
        let order = if ready(on) || previous == on {
            vec![on]
        } else {
            vec![previous, on]
        };
        for slot in order {
            if own(slot) {
                if slot == on && !ready(on) {
                    continue;
                }
                return None;
            }
            if let Some(start) = self.geo.log_alloc(st.heads[slot], len) {
                return Some((slot, start));
            }
        }
        None
    }

    /// After a change: wake the next logger ahead of its duty, then rotate (RoLo) or start
    /// destaging (GRAID) when the on-duty log is full enough. (Log regions are reclaimed in
    /// `committed`.)
    fn after_change(&self, st: &mut State) {
        // The on-duty pair keeps destaging through its duty: its writes bridged to the
        // previous logger while its mirror spun up must leave that log before its next turn.
        let on_duty_pair = (self.flavour != Flavour::Graid).then(|| self.loggers[st.on_duty] / 2);
        for p in 0..self.pairs {
            if st.destaging[p] && st.index[p].is_empty() && Some(p) != on_duty_pair {
                st.destaging[p] = false;
            }
        }
        let next = (st.on_duty + 1) % self.loggers.len();
        if let Some(at) = self.prewake_at {
            if !st.prewoken && st.heads[st.on_duty] >= at && next != st.on_duty {
                st.prewoken = true;
                let members = self.copies(self.loggers[next]);
                st.wake.extend(members);
            }
        }
        if st.heads[st.on_duty] < self.threshold {
            return;
        }
        match self.flavour {
            Flavour::Graid => {
                if st.destaging.iter().any(|&d| d) {
                    return;
                }
                for p in 0..self.pairs {
                    st.destaging[p] = !st.index[p].is_empty();
                }
            }
            _ => {
                // Hysteresis: past the threshold itself, the next log must have half the
                // space above the threshold more room, or every logged write would move
                // the duty to whichever log is a byte less full (and start its destage).
                let margin = ((self.geo.log_len - self.threshold) / 2).max(1);
                if st.heads[next] >= self.threshold
                    && st.heads[next] + margin > st.heads[st.on_duty]
                {
                    return; // no better place yet: the destages under way free it
                }
                st.on_duty = next;
                st.rotations += 1;
                st.prewoken = false;
                let pair = self.loggers[next] / 2;
                st.destaging[pair] = true;
            }
        }
        let record = duty_record(st.on_duty, &st.destaging);
        st.outbox.push(record);
    }

    /// Split a pair's home run into the parts logged elsewhere and the parts that are not.
    fn fragments(&self, st: &State, pair: usize, home: u64, len: u64) -> Vec<Fragment> {
        let end = home + len;
        let mut out = Vec::new();
        let mut at = home;
        let first = st.index[pair]
            .range(..home)
            .next_back()
            .filter(|(s, e)| *s + e.len > home)
            .map(|(s, e)| (*s, *e));
        let overlapping = first
            .into_iter()
            .chain(st.index[pair].range(home..end).map(|(s, e)| (*s, *e)));
        for (start, e) in overlapping {
            let from = start.max(home);
            let to = (start + e.len).min(end);
            if from > at {
                out.push((at, from - at, None));
            }
            out.push((
                from,
                to - from,
                Some((e.logger, e.log_off + (from - start))),
            ));
            at = to;
        }
        if at < end {
            out.push((at, end - at, None));
        }
        out
    }

    /// The readiest of `members` holding member bytes `off..off+len`.
    fn readiest(
        &self,
        members: &[usize],
        off: u64,
        len: u64,
        views: &[MemberView],
    ) -> Option<usize> {
        members
            .iter()
            .copied()
            .filter(|&m| views[m].holds(off, len))
            .min_by(|a, b| views[*a].ready_at.total_cmp(&views[*b].ready_at))
    }

    /// Reads of a pair's newest bytes through the index: logged runs from a log copy, the
    /// rest from the readiest of `home_members`.
    #[allow(clippy::too_many_arguments)]
    fn read_via_index(
        &self,
        st: &State,
        pair: usize,
        home: u64,
        len: u64,
        buf_offset: u64,
        views: &[MemberView],
        home_members: &[usize],
    ) -> Option<Vec<MemberIo>> {
        self.fragments(st, pair, home, len)
            .into_iter()
            .map(|(at, n, logged)| {
                let (member, member_offset) = match logged {
                    Some((logger, log_off)) => (
                        self.readiest(&self.copies(logger), log_off, n, views)?,
                        log_off,
                    ),
                    None => {
                        let off = self.geo.home(at);
                        (self.readiest(home_members, off, n, views)?, off)
                    }
                };
                Some(MemberIo {
                    member,
                    member_offset,
                    len: n,
                    buf: Buf::Caller(buf_offset + at - home),
                })
            })
            .collect()
    }

    fn plan_write(
        &self,
        pieces: Vec<Piece>,
        offset: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        let mut st = lock(&self.state);
        let mut plan = Plan::default();
        let earliest = views
            .iter()
            .filter(|v| v.writable)
            .map(|v| v.ready_at)
            .fold(f64::INFINITY, f64::min);
        for (buf_offset, pair, home, len) in pieces {
            let (p, m) = (2 * pair, 2 * pair + 1);
            let at = self.geo.home(home);
            let primary_valid = views[p].writable && views[p].holds(at, len);
            let mirror_valid = views[m].writable && views[m].holds(at, len);
            if !(primary_valid || mirror_valid) {
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
            let now = if self.energy() {
                earliest
            } else {
                views[p].ready_at
            };
            let logged = self
                .room(&st, pair, len, now, views)
                .and_then(|(slot, start)| {
                    let logger = self.loggers[slot];
                    if !(primary_valid || self.energy()) {
                        return None;
                    }
                    let log_off = self.geo.log(start);
                    let copies: Vec<usize> = self
                        .copies(logger)
                        .into_iter()
                        .filter(|&c| views[c].writable && views[c].holds(log_off, len))
                        .collect();
                    (!copies.is_empty()).then_some((slot, start, logger, log_off, copies))
                });
            match logged {
                Some((slot, start, logger, log_off, copies)) => {
                    st.heads[slot] = start + len;
                    st.gen += 1;
                    let planned = Planned {
                        pair,
                        home,
                        len,
                        gen: st.gen,
                        logger,
                    };
                    st.planned.insert((copies[0], log_off), planned);
                    if !self.energy() {
                        plan.writes.push(io(p, at));
                    }
                    plan.writes
                        .extend(copies.into_iter().map(|c| io(c, log_off)));
                }
                None => plan.writes.extend(
                    [p, m]
                        .into_iter()
                        .filter(|&x| views[x].writable)
                        .map(|x| io(x, at)),
                ),
            }
        }
        Ok(plan)
    }

    /// Set a pair's home run to `entry` (None: its mirror is current there).
    fn set_range(&self, st: &mut State, pair: usize, home: u64, len: u64, entry: Option<Entry>) {
        let end = home + len;
        let overlapping: Vec<(u64, Entry)> = st.index[pair]
            .range(..end)
            .rev()
            .take_while(|(s, e)| *s + e.len > home)
            .map(|(s, e)| (*s, *e))
            .collect();
        for (start, e) in overlapping {
            let slot = self.logger_slot(e.logger).unwrap_or(0);
            st.index[pair].remove(&start);
            st.live[slot] = st.live[slot].saturating_sub(e.len);
            if start < home {
                let keep = Entry {
                    len: home - start,
                    ..e
                };
                st.live[slot] += keep.len;
                st.index[pair].insert(start, keep);
            }
            if start + e.len > end {
                let cut = end - start;
                let keep = Entry {
                    len: e.len - cut,
                    log_off: e.log_off + cut,
                    ..e
                };
                st.live[slot] += keep.len;
                st.index[pair].insert(end, keep);
            }
        }
        if let Some(e) = entry {
            let slot = self.logger_slot(e.logger).unwrap_or(0);
            st.live[slot] += e.len;
            st.index[pair].insert(home, e);
            st.gen = st.gen.max(e.gen);
        }
    }

    fn apply(&self, st: &mut State, r: &LayoutRecord) -> Result<(), String> {
        let mut rd = Reader::new(&r.payload, "rolo");
        match r.kind {
            REC_LOGGED => {
                let (pair, home, len) = (rd.u32()? as usize, rd.u64()?, rd.u64()?);
                let (logger, log_off, gen) = (rd.u32()? as usize, rd.u64()?, rd.u64()?);
                let in_log = self.logger_slot(logger).is_some()
                    && matches!(self.region(logger, log_off), (Region::Log(_), run) if run >= len);
                if pair >= self.pairs || !in_log || home + len > self.geo.data_bytes {
                    return Err(format!(
                        "log record of pair {pair} home {home}+{len} on member {logger} at {log_off}"
                    ));
                }
                let e = Entry {
                    len,
                    logger,
                    log_off,
                    gen,
                };
                self.set_range(st, pair, home, len, Some(e));
            }
            REC_UNLOGGED => {
                let (pair, home, len) = (rd.u32()? as usize, rd.u64()?, rd.u64()?);
                if pair >= self.pairs {
                    return Err(format!("unlog record of pair {pair}"));
                }
                self.set_range(st, pair, home, len, None);
            }
            REC_DUTY => {
                let on_duty = rd.u32()? as usize;
                if on_duty >= self.loggers.len() {
                    return Err(format!("duty record names logger {on_duty}"));
                }
                st.on_duty = on_duty;
                for p in 0..self.pairs {
                    st.destaging[p] = rd.u8()? != 0;
                }
            }
            other => return Err(format!("unknown record kind {other}")),
        }
        Ok(())
    }

    /// Log heads from the index (the space beyond the last live entry is free).
    fn recompute_heads(&self, st: &mut State) {
        st.heads = vec![0; self.loggers.len()];
        for pair in &st.index {
            for e in pair.values() {
                if let (Some(slot), (Region::Log(l), _)) =
                    (self.logger_slot(e.logger), self.region(e.logger, e.log_off))
                {
                    st.heads[slot] = st.heads[slot].max(l + e.len);
                }
            }
        }
    }

    /// Logged bytes of every pair (for tests and status).
    pub fn logged_bytes(&self) -> u64 {
        lock(&self.state).live.iter().sum()
    }

    /// The recovery of member bytes at `at..at+n`, all in one region, into the caller's
    /// buffer at `buf`.
    #[allow(clippy::too_many_arguments)]
    fn recover_region(
        &self,
        st: &State,
        member: usize,
        region: Region,
        at: u64,
        n: u64,
        buf: u64,
        views: &[MemberView],
        plan: &mut Plan,
    ) -> Result<(), &'static str> {
        match region {
            Region::Home(h) if member < 2 * self.pairs => {
                let pair = member / 2;
                let (p, m) = (2 * pair, 2 * pair + 1);
                if member == p && !self.energy() {
                    // The primary's newest bytes: logged runs from the log, the rest from
                    // the mirror.
                    let ios = self
                        .read_via_index(st, pair, h, n, buf, views, &[m])
                        .ok_or("neither the log nor the mirror holds them")?;
                    plan.reads.extend(ios);
                } else {
                    // The other home copy: equal to it (RoLo-E's home copies are stale
                    // together where logged; the index points past both).
                    let other = if member == p { m } else { p };
                    if !views[other].holds(at, n) {
                        return Err("the other copy of the pair is lost");
                    }
                    plan.reads.push(MemberIo {
                        member: other,
                        member_offset: at,
                        len: n,
                        buf: Buf::Caller(buf),
                    });
                }
            }
            Region::Log(_) => {
                // Each live entry's newest copy: its twin log copy, else its primary's home.
                for (pair, index) in st.index.iter().enumerate() {
                    for (home, e) in index.iter() {
                        let copies = self.copies(e.logger);
                        if !copies.contains(&member) {
                            continue;
                        }
                        let from = e.log_off.max(at);
                        let to = (e.log_off + e.len).min(at + n);
                        if from >= to {
                            continue;
                        }
                        let k = to - from;
                        let twin = copies
                            .iter()
                            .copied()
                            .find(|&c| c != member && views[c].holds(from, k));
                        let home_at = self.geo.home(home + (from - e.log_off));
                        let (source, off) = match twin {
                            Some(c) => (c, from),
                            None if !self.energy() && views[2 * pair].holds(home_at, k) => {
                                (2 * pair, home_at)
                            }
                            None => return Err("no other copy of a logged run is left"),
                        };
                        plan.reads.push(MemberIo {
                            member: source,
                            member_offset: off,
                            len: k,
                            buf: Buf::Caller(buf + (from - at)),
                        });
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl Personality for Rolo {
    fn kind(&self) -> LayoutKind {
        Self::kind_of(self.flavour)
    }

    fn option_places_data(&self, key: &str) -> bool {
        !matches!(key, "rotate_at" | "prewake_at")
    }

    fn layout_state(&self) -> Option<serde_json::Value> {
        let st = lock(&self.state);
        Some(serde_json::json!({
            "on_duty_logger": self.loggers[st.on_duty],
            "rotations": st.rotations,
            "destaging_pairs": (0..self.pairs).filter(|&p| st.destaging[p]).collect::<Vec<_>>(),
        }))
    }

    /// RoLo's keys shape the member layout, so the constructor read them from the volume's
    /// table (and checked them); here they are only recognised.
    fn set_option(&self, key: &str, _value: &str) -> Result<(), String> {
        if options::KEYS.contains(&key) {
            Ok(())
        } else {
            Err(format!(
                "layout {} has no option {key:?} (it takes {})",
                self.kind(),
                options::KEYS.join(", ")
            ))
        }
    }

    fn member_count(&self) -> usize {
        2 * self.pairs + usize::from(self.flavour == Flavour::Graid)
    }

    fn member_data_bytes(&self) -> u64 {
        self.member_bytes
    }

    fn stripe_unit(&self) -> u64 {
        self.stripe_unit
    }

    fn capacity(&self) -> u64 {
        self.geo.data_bytes * self.pairs as u64
    }

    fn role(&self, member: usize) -> Role {
        match self.flavour {
            Flavour::Graid if member == 2 * self.pairs => Role::Log,
            _ => Role::Data,
        }
    }

    fn reserved(&self) -> Vec<Reserved> {
        let members = (0..self.member_count()).filter(|&m| self.keeps_log(m));
        let regions: Vec<(u64, u64)> = match (self.flavour, self.geo.bands()) {
            (Flavour::Graid, _) => vec![(0, self.member_bytes)],
            (_, None) => vec![(self.geo.log(0), self.geo.log_len)],
            (_, Some((data, log))) => (0..self.geo.log_len / log)
                .map(|b| (b * (data + log) + data, log))
                .collect(),
        };
        members
            .flat_map(|member| {
                regions
                    .iter()
                    .map(move |&(start, len)| Reserved { member, start, len })
            })
            .collect()
    }

    fn plan(
        &self,
        kind: IoKind,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.check_range(offset, len)?;
        let pieces = self.map(offset, len);
        if kind == IoKind::Write {
            return self.plan_write(pieces, offset, views);
        }
        let st = lock(&self.state);
        let mut plan = Plan::default();
        for (buf_offset, pair, home, n) in pieces {
            let (p, m) = (2 * pair, 2 * pair + 1);
            let at = self.geo.home(home);
            if !self.energy() && views[p].holds(at, n) {
                plan.reads.push(MemberIo {
                    member: p,
                    member_offset: at,
                    len: n,
                    buf: Buf::Caller(buf_offset),
                });
                continue;
            }
            // RoLo-E always, the others without their primary: through the index.
            let home_members: &[usize] = if self.energy() { &[p, m] } else { &[m] };
            let ios = self
                .read_via_index(&st, pair, home, n, buf_offset, views, home_members)
                .ok_or(LayoutError::NoLiveCopy {
                    offset: offset + buf_offset,
                    end: offset + buf_offset + n,
                })?;
            plan.reads.extend(ios);
        }
        Ok(plan)
    }

    fn complete(&self, plan: &Plan) {
        let mut st = lock(&self.state);
        let (logged, home): (Vec<&MemberIo>, Vec<&MemberIo>) = plan
            .writes
            .iter()
            .partition(|w| st.planned.contains_key(&(w.member, w.member_offset)));
        // Home writes first: a home copy written in place is current, so an older log copy
        // of those bytes is retired (the other copy was written too, or is failed and
        // rebuilt from this one). The primary's half of a logged write is not in place.
        for w in home {
            if w.member >= 2 * self.pairs {
                continue;
            }
            let (Region::Home(h), run) = self.region(w.member, w.member_offset) else {
                continue;
            };
            let pair = w.member / 2;
            let len = w.len.min(run);
            let half_of_logged = logged.iter().any(|l| {
                let pl = st.planned[&(l.member, l.member_offset)];
                pl.pair == pair && pl.home < h + len && h < pl.home + pl.len
            });
            if half_of_logged {
                continue;
            }
            if self
                .fragments(&st, pair, h, len)
                .iter()
                .any(|f| f.2.is_some())
            {
                self.set_range(&mut st, pair, h, len, None);
                st.outbox.push(unlogged_record(pair, h, len));
            }
        }
        for w in logged {
            if let Some(pl) = st.planned.remove(&(w.member, w.member_offset)) {
                let e = Entry {
                    len: pl.len,
                    logger: pl.logger,
                    log_off: w.member_offset,
                    gen: pl.gen,
                };
                self.set_range(&mut st, pl.pair, pl.home, pl.len, Some(e));
                st.outbox.push(logged_record(pl.pair, pl.home, &e));
            }
        }
        self.after_change(&mut st);
    }

    /// A log region with nothing live is reused from its start only once the records that
    /// emptied it are durable: until then a crash brings back entries that point into it.
    fn committed(&self) {
        let mut st = lock(&self.state);
        for slot in 0..self.loggers.len() {
            let copies = self.copies(self.loggers[slot]);
            let pending = st.planned.values().any(|p| copies.contains(&p.logger));
            if st.live[slot] == 0 && !pending && st.outbox.is_empty() {
                st.heads[slot] = 0;
            }
        }
    }

    fn journal_records(&self, _plan: &Plan) -> Vec<LayoutRecord> {
        std::mem::take(&mut lock(&self.state).outbox)
    }

    fn replay(&self, image: Option<&[u8]>, records: &[LayoutRecord]) -> Result<(), String> {
        let mut st = lock(&self.state);
        st.index = vec![BTreeMap::new(); self.pairs];
        st.live = vec![0; self.loggers.len()];
        st.destaging = vec![false; self.pairs];
        st.on_duty = 0;
        st.planned.clear();
        st.outbox.clear();
        st.prewoken = false;
        st.wake.clear();
        if let Some(bytes) = image {
            // The image is the records that rebuild the state: the duty, then every entry.
            for r in decode_image(bytes, "rolo")? {
                self.apply(&mut st, &r)?;
            }
        }
        for r in records {
            self.apply(&mut st, r)?;
        }
        self.recompute_heads(&mut st);
        Ok(())
    }

    fn checkpoint_image(&self) -> Option<Vec<u8>> {
        let st = lock(&self.state);
        let mut records = vec![duty_record(st.on_duty, &st.destaging)];
        for (pair, index) in st.index.iter().enumerate() {
            records.extend(index.iter().map(|(home, e)| logged_record(pair, *home, e)));
        }
        Some(encode_image(records))
    }

    fn recover(
        &self,
        member: usize,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        let st = lock(&self.state);
        let mut plan = Plan::default();
        let end = offset.saturating_add(len);
        let mut at = offset;
        while at < end {
            let (region, run) = self.region(member, at);
            let n = run.min(end - at).max(1);
            self.recover_region(&st, member, region, at, n, at - offset, views, &mut plan)
                .map_err(|problem| LayoutError::Unrecoverable {
                    member,
                    offset,
                    len,
                    problem: problem.into(),
                })?;
            at += n;
        }
        Ok(plan)
    }

    fn sync_groups(&self) -> Vec<Vec<usize>> {
        let mut groups: Vec<Vec<usize>> = (0..self.pairs).map(|p| vec![2 * p, 2 * p + 1]).collect();
        if self.flavour == Flavour::Graid {
            groups.push(vec![2 * self.pairs]);
        }
        groups
    }

    fn lock_spans(&self, offset: u64, len: u64) -> Vec<(usize, u64, u64)> {
        self.map(offset, len)
            .into_iter()
            .map(|(_, pair, home, n)| {
                let at = self.geo.home(home);
                (2 * pair, at, at + n)
            })
            .collect()
    }

    /// Home bytes are compared with the logged runs taken as equal (a home copy is stale
    /// there by design; the newest copy is in the log); log and unused bytes are never
    /// compared.
    fn reconcile(&self, offset: u64, group: &[SyncCopy], len: u64) -> Result<Reconcile, String> {
        let Some(pair) = group
            .first()
            .map(|c| c.member / 2)
            .filter(|&p| p < self.pairs)
        else {
            return Ok(Reconcile::default());
        };
        if group.iter().any(|c| c.member >= 2 * self.pairs) {
            return Ok(Reconcile::default());
        }
        // Member byte ranges (relative to `offset`) that are not compared.
        let mut masked: Vec<(u64, u64)> = Vec::new();
        {
            let st = lock(&self.state);
            let mut at = offset;
            while at < offset + len {
                let (region, run) = self.geo.region(at);
                let n = run.min(offset + len - at);
                match region {
                    Region::Home(h) => {
                        for (f, k, logged) in self.fragments(&st, pair, h, n) {
                            if logged.is_some() {
                                masked.push((at - offset + (f - h), k));
                            }
                        }
                    }
                    _ => masked.push((at - offset, n)),
                }
                at += n;
            }
        }
        let reference = group
            .iter()
            .find(|c| c.member == 2 * pair && c.bytes.is_some())
            .or_else(|| group.iter().find(|c| c.bytes.is_some()))
            .and_then(|c| c.bytes.clone());
        let copies: Vec<SyncCopy> = group
            .iter()
            .map(|c| {
                let mut bytes = c.bytes.clone();
                if let (Some(b), Some(r)) = (&mut bytes, &reference) {
                    for &(from, k) in &masked {
                        let range = from as usize..(from + k).min(b.len() as u64) as usize;
                        if range.end <= r.len() && range.start < range.end {
                            b[range.clone()].copy_from_slice(&r[range]);
                        }
                    }
                }
                SyncCopy {
                    member: c.member,
                    bytes,
                    readable: c.readable.clone(),
                }
            })
            .collect();
        mirror::reconcile(offset, &copies, len)
    }

    fn survives(&self, valid: &[bool]) -> bool {
        let ok = |m: usize| valid.get(m).copied().unwrap_or(false);
        let st = lock(&self.state);
        (0..self.pairs).all(|p| {
            let logged_ok = st.index[p]
                .values()
                .all(|e| self.copies(e.logger).into_iter().any(ok));
            if self.energy() {
                (ok(2 * p) || ok(2 * p + 1)) && logged_ok
            } else {
                ok(2 * p) || (ok(2 * p + 1) && logged_ok)
            }
        })
    }

    fn next_wakeup(&self, now: Seconds) -> Option<Seconds> {
        let st = lock(&self.state);
        (st.destaging.iter().any(|&d| d) || !st.wake.is_empty()).then_some(now)
    }

    /// The primaries (and GRAID's log member) serve every request; the on-duty logger takes
    /// every logged write. RoLo-E: only the on-duty pair.
    fn pinned(&self) -> Option<Vec<usize>> {
        let on_duty = self.loggers[lock(&self.state).on_duty];
        let mut members: Vec<usize> = match self.flavour {
            Flavour::RoloE => self.copies(on_duty),
            _ => (0..self.member_count())
                .filter(|&m| m % 2 == 0 || m == on_duty)
                .chain(self.copies(on_duty))
                .collect(),
        };
        members.sort_unstable();
        members.dedup();
        Some(members)
    }

    fn prewake(&self) -> Vec<usize> {
        std::mem::take(&mut lock(&self.state).wake)
    }

    fn background_work(&self, views: &[MemberView]) -> Option<(u64, u64)> {
        let st = lock(&self.state);
        (0..self.pairs)
            .filter(|&p| st.destaging[p])
            .filter(|&p| views[2 * p + 1].writable || (self.energy() && views[2 * p].writable))
            .find_map(|p| {
                let (&home, e) = st.index[p].iter().find(|(h, e)| {
                    if self.energy() {
                        self.readiest(&self.copies(e.logger), e.log_off, e.len, views)
                            .is_some()
                    } else {
                        views[2 * p].holds(self.geo.home(**h), e.len)
                    }
                })?;
                let n = e.len.min(self.stripe_unit - home % self.stripe_unit);
                Some((self.volume_offset(p, home), n))
            })
    }

    fn background_all(&self) {
        let mut st = lock(&self.state);
        for p in 0..self.pairs {
            st.destaging[p] = !st.index[p].is_empty();
        }
        let record = duty_record(st.on_duty, &st.destaging);
        st.outbox.push(record);
    }

    fn background_plan(
        &self,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.check_range(offset, len)?;
        let st = lock(&self.state);
        let mut plan = Plan::default();
        for (buf_offset, pair, home, n) in self.map(offset, len) {
            let (p, m) = (2 * pair, 2 * pair + 1);
            let at = self.geo.home(home);
            let no_copy = || LayoutError::NoLiveCopy {
                offset: offset + buf_offset,
                end: offset + buf_offset + n,
            };
            let io = |member| MemberIo {
                member,
                member_offset: at,
                len: n,
                buf: Buf::Caller(buf_offset),
            };
            if self.energy() {
                // From the logs (and home for what is not logged) to both home copies.
                let reads = self
                    .read_via_index(&st, pair, home, n, buf_offset, views, &[p, m])
                    .ok_or_else(no_copy)?;
                let targets: Vec<usize> =
                    [p, m].into_iter().filter(|&x| views[x].writable).collect();
                if targets.is_empty() {
                    return Err(no_copy());
                }
                plan.reads.extend(reads);
                plan.writes.extend(targets.into_iter().map(io));
            } else {
                if !views[p].holds(at, n) || !views[m].writable {
                    return Err(no_copy());
                }
                plan.reads.push(io(p));
                plan.writes.push(io(m));
            }
        }
        Ok(plan)
    }
}
