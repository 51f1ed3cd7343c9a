//! Logged mirrors: GRAID and RoLo-P (Wang et al., "RoLo: rotated logging"). Data is striped
//! over mirrored pairs as in RAID10 (member 2p is pair p's primary, 2p+1 its mirror); a write
//! goes to the primary and, instead of the sleeping mirror, to a log. The log index (home
//! bytes of a pair → log member, log offset, generation) says which mirror bytes are stale
//! and where their second copy is; it is journaled, so it survives an agent crash.
//!
//! * GRAID: one dedicated log member (the last); when it is 80 % full every pair with logged
//!   data destages (its mirror wakes and copies the primary's bytes home).
//! * RoLo-P: the upper quarter of every mirror is a log region; one mirror is on duty. At 80 %
//!   its duty rotates to the next mirror, whose own pair then destages (decentralized: only
//!   that pair's mirror works, and it is awake anyway), which frees log space everywhere.
//!   Writes of the on-duty pair go in place to both copies.
//!
//! Reads go to the primary; with the primary lost, logged bytes come from the log and the
//! rest from the mirror, so a read always returns the newest copy.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::mirror;
use super::registry::check_chunk;
use super::{
    Buf, LayoutError, LayoutKind, LayoutRecord, MemberIo, MemberView, Personality, Plan, Reconcile,
    Reserved, Role, Shape, ShapeProblem, SyncCopy, SYNC_BLOCK,
};
use crate::clock::Seconds;
use crate::service_model::IoKind;
use crate::sync::lock;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    Graid,
    RoloP,
}

/// RoLo keeps this share (1/4) of each mirror for its log region.
const LOG_SHARE_DIV: u64 = 4;
/// Fill of the on-duty log at which RoLo rotates and GRAID destages (the paper's 80 %).
const THRESHOLD_PERCENT: u64 = 80;

const REC_LOGGED: u16 = 1;
const REC_UNLOGGED: u16 = 2;
const REC_DUTY: u16 = 3;

/// Where a run of a pair's home bytes has its newest second copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    len: u64,
    logger: usize,
    log_off: u64,
    gen: u64,
}

#[derive(Debug, Default)]
struct State {
    /// Per pair: home start → entry.
    index: Vec<BTreeMap<u64, Entry>>,
    /// Per logger (position in `Rolo::loggers`): next free log offset, live bytes.
    heads: Vec<u64>,
    live: Vec<u64>,
    on_duty: usize,
    /// Pairs whose logged bytes are being copied home.
    destaging: Vec<bool>,
    gen: u64,
    /// Log writes planned and not yet completed: (logger member, log offset) → (pair, home,
    /// len, generation).
    planned: HashMap<(usize, u64), (usize, u64, u64, u64)>,
    /// Records of completed changes, handed to the journal by `journal_records`.
    outbox: Vec<LayoutRecord>,
}

#[derive(Debug)]
pub struct Rolo {
    flavour: Flavour,
    pairs: usize,
    stripe_unit: u64,
    member_bytes: u64,
    /// Home bytes per member (below the log region on RoLo mirrors).
    data_bytes: u64,
    /// The log members, in rotation order.
    loggers: Vec<usize>,
    /// Member offset and length of the log region on each log member.
    log_start: u64,
    log_len: u64,
    state: Mutex<State>,
}

/// A piece of a request: (caller buffer offset, pair, home offset, length).
type Piece = (u64, usize, u64, u64);
/// A run of home bytes and, if logged, (logger, log offset) of its newest second copy.
type Fragment = (u64, u64, Option<(usize, u64)>);

impl Rolo {
    fn kind_of(flavour: Flavour) -> LayoutKind {
        match flavour {
            Flavour::Graid => LayoutKind::GRAID,
            Flavour::RoloP => LayoutKind::ROLO_P,
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
                    "layout rolo-p needs at least two mirrored pairs (an even number of \
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
            Flavour::RoloP => Self::check_rolo(shape.members, shape.chunk),
        }
        .map_err(|p| kind.shape_error(p))?;
        let su = shape.chunk;
        let member_bytes = shape.member_bytes / su * su;
        let pairs = shape.members / 2;
        let (data_bytes, loggers, log_start, log_len) = match flavour {
            Flavour::Graid => (member_bytes, vec![2 * pairs], 0, member_bytes),
            Flavour::RoloP => {
                let data = (member_bytes - member_bytes / LOG_SHARE_DIV) / su * su;
                let loggers = (0..pairs).map(|p| 2 * p + 1).collect();
                (data, loggers, data, member_bytes - data)
            }
        };
        if data_bytes == 0 || log_len < su {
            return Err(kind.shape_error(ShapeProblem {
                key: "member",
                problem: "members are too small for a data and a log region of one stripe unit"
                    .into(),
            }));
        }
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
            data_bytes,
            loggers,
            log_start,
            log_len,
            state: Mutex::new(state),
        })
    }

    fn logger_slot(&self, member: usize) -> Option<usize> {
        self.loggers.iter().position(|&m| m == member)
    }

    /// The volume range of a pair's home bytes (within one stripe unit).
    fn volume_offset(&self, pair: usize, home: u64) -> u64 {
        let row = home / self.stripe_unit;
        (row * self.pairs as u64 + pair as u64) * self.stripe_unit + home % self.stripe_unit
    }

    fn map(&self, offset: u64, len: u64) -> Vec<Piece> {
        let mut pieces = Vec::new();
        let mut done = 0;
        while done < len {
            let pos = offset + done;
            let chunk = pos / self.stripe_unit;
            let within = pos % self.stripe_unit;
            let piece = (self.stripe_unit - within).min(len - done);
            let pair = (chunk % self.pairs as u64) as usize;
            let home = (chunk / self.pairs as u64) * self.stripe_unit + within;
            pieces.push((done, pair, home, piece));
            done += piece;
        }
        pieces
    }

    /// The logger that takes `len` more bytes for a write whose primary is `primary`: the
    /// on-duty one; right after a rotation, while the new one still spins up (its pair's
    /// destage wakes it), the previous one as long as it has room.
    fn room(
        &self,
        st: &State,
        len: u64,
        primary: usize,
        views: &[MemberView],
    ) -> Option<(usize, u64)> {
        let n = self.loggers.len();
        let ready =
            |slot: usize| views[self.loggers[slot]].ready_at <= views[primary].ready_at + 1.0;
        let previous = (st.on_duty + n - 1) % n;
        let candidates = if ready(st.on_duty) || previous == st.on_duty {
            vec![st.on_duty]
        } else {
            vec![previous, st.on_duty]
        };
        candidates.into_iter().find_map(|slot| {
            let head = st.heads[slot];
            (head + len <= self.log_len).then_some((slot, self.log_start + head))
        })
    }

    fn threshold(&self) -> u64 {
        self.log_len / 100 * THRESHOLD_PERCENT
    }

    /// After a change: rotate (RoLo) or start destaging (GRAID) when the on-duty log is
    /// full enough. (Log regions are reclaimed in `committed`.)
    fn after_change(&self, st: &mut State) {
        for p in 0..self.pairs {
            if st.destaging[p] && st.index[p].is_empty() {
                st.destaging[p] = false;
            }
        }
        if st.heads[st.on_duty] < self.threshold() {
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
            Flavour::RoloP => {
                let next = (st.on_duty + 1) % self.loggers.len();
                if st.heads[next] >= st.heads[st.on_duty] {
                    return; // no better place yet: the destages under way free it
                }
                st.on_duty = next;
                let pair = self.loggers[next] / 2;
                st.destaging[pair] = !st.index[pair].is_empty();
            }
        }
        let record = duty_record(st);
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

    /// Reads of a pair's newest bytes without its primary: logged runs from the log, the
    /// rest from the mirror.
    fn read_without_primary(
        &self,
        st: &State,
        pair: usize,
        home: u64,
        len: u64,
        buf_offset: u64,
        views: &[MemberView],
    ) -> Option<Vec<MemberIo>> {
        self.fragments(st, pair, home, len)
            .into_iter()
            .map(|(at, n, logged)| {
                let (member, member_offset) = logged.unwrap_or((2 * pair + 1, at));
                views[member].holds(member_offset, n).then_some(MemberIo {
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
        for (buf_offset, pair, home, len) in pieces {
            let (p, m) = (2 * pair, 2 * pair + 1);
            let primary_valid = views[p].writable && views[p].holds(home, len);
            let mirror_valid = views[m].writable && views[m].holds(home, len);
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
            let logged = self.room(&st, len, p, views).filter(|&(slot, log_off)| {
                let logger = self.loggers[slot];
                primary_valid
                    && logger != m
                    && views[logger].writable
                    && views[logger].holds(log_off, len)
            });
            match logged {
                Some((slot, log_off)) => {
                    st.heads[slot] += len;
                    st.gen += 1;
                    let gen = st.gen;
                    let logger = self.loggers[slot];
                    st.planned.insert((logger, log_off), (pair, home, len, gen));
                    plan.writes.push(io(p, home));
                    plan.writes.push(io(logger, log_off));
                }
                None => plan.writes.extend(
                    [p, m]
                        .into_iter()
                        .filter(|&x| views[x].writable)
                        .map(|x| io(x, home)),
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
        let mut rd = Reader(&r.payload);
        match r.kind {
            REC_LOGGED => {
                let (pair, home, len) = (rd.u32()? as usize, rd.u64()?, rd.u64()?);
                let (logger, log_off, gen) = (rd.u32()? as usize, rd.u64()?, rd.u64()?);
                if pair >= self.pairs || self.logger_slot(logger).is_none() {
                    return Err(format!("log record of pair {pair} on member {logger}"));
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
                if let Some(slot) = self.logger_slot(e.logger) {
                    let end = e.log_off + e.len - self.log_start;
                    st.heads[slot] = st.heads[slot].max(end);
                }
            }
        }
    }

    /// Logged bytes of `pair` (for tests and status).
    pub fn logged_bytes(&self) -> u64 {
        lock(&self.state).live.iter().sum()
    }
}

fn duty_record(st: &State) -> LayoutRecord {
    let mut payload = (st.on_duty as u32).to_le_bytes().to_vec();
    payload.extend(st.destaging.iter().map(|&d| u8::from(d)));
    LayoutRecord {
        kind: REC_DUTY,
        payload,
    }
}

fn logged_record(pair: usize, home: u64, e: &Entry) -> LayoutRecord {
    let mut payload = Vec::with_capacity(40);
    payload.extend((pair as u32).to_le_bytes());
    payload.extend(home.to_le_bytes());
    payload.extend(e.len.to_le_bytes());
    payload.extend((e.logger as u32).to_le_bytes());
    payload.extend(e.log_off.to_le_bytes());
    payload.extend(e.gen.to_le_bytes());
    LayoutRecord {
        kind: REC_LOGGED,
        payload,
    }
}

fn unlogged_record(pair: usize, home: u64, len: u64) -> LayoutRecord {
    let mut payload = Vec::with_capacity(20);
    payload.extend((pair as u32).to_le_bytes());
    payload.extend(home.to_le_bytes());
    payload.extend(len.to_le_bytes());
    LayoutRecord {
        kind: REC_UNLOGGED,
        payload,
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let (head, rest) = self
            .0
            .split_at_checked(N)
            .ok_or_else(|| "truncated rolo record".to_string())?;
        self.0 = rest;
        head.try_into().map_err(|_| "truncated rolo record".into())
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take()?))
    }
}

impl Personality for Rolo {
    fn kind(&self) -> LayoutKind {
        Self::kind_of(self.flavour)
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
        self.data_bytes * self.pairs as u64
    }

    fn role(&self, member: usize) -> Role {
        match self.flavour {
            Flavour::Graid if member == 2 * self.pairs => Role::Log,
            _ => Role::Data,
        }
    }

    fn reserved(&self) -> Vec<Reserved> {
        self.loggers
            .iter()
            .map(|&member| Reserved {
                member,
                start: self.log_start,
                len: self.log_len,
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
            if views[2 * pair].holds(home, n) {
                plan.reads.push(MemberIo {
                    member: 2 * pair,
                    member_offset: home,
                    len: n,
                    buf: Buf::Caller(buf_offset),
                });
                continue;
            }
            let ios = self
                .read_without_primary(&st, pair, home, n, buf_offset, views)
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
        for w in &plan.writes {
            if let Some((pair, home, len, gen)) = st.planned.remove(&(w.member, w.member_offset)) {
                let e = Entry {
                    len,
                    logger: w.member,
                    log_off: w.member_offset,
                    gen,
                };
                self.set_range(&mut st, pair, home, len, Some(e));
                st.outbox.push(logged_record(pair, home, &e));
            } else if w.member % 2 == 1
                && w.member < 2 * self.pairs
                && w.member_offset < self.data_bytes
            {
                let pair = w.member / 2;
                let len = w.len.min(self.data_bytes - w.member_offset);
                if !self
                    .fragments(&st, pair, w.member_offset, len)
                    .iter()
                    .all(|f| f.2.is_none())
                {
                    self.set_range(&mut st, pair, w.member_offset, len, None);
                    st.outbox.push(unlogged_record(pair, w.member_offset, len));
                }
            }
        }
        self.after_change(&mut st);
    }

    /// A log region with nothing live is reused from its start only once the records that
    /// emptied it are durable: until then a crash brings back entries that point into it.
    fn committed(&self) {
        let mut st = lock(&self.state);
        for slot in 0..self.loggers.len() {
            let pending = st.planned.keys().any(|(m, _)| *m == self.loggers[slot]);
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
        if let Some(mut bytes) = image {
            // The image is the records that rebuild the state: the duty, then every entry.
            while !bytes.is_empty() {
                let mut rd = Reader(bytes);
                let kind = u16::from_le_bytes(rd.take()?);
                let n = rd.u32()? as usize;
                let payload =
                    rd.0.get(..n)
                        .ok_or_else(|| "truncated rolo checkpoint image".to_string())?
                        .to_vec();
                bytes = &rd.0[n..];
                self.apply(&mut st, &LayoutRecord { kind, payload })?;
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
        let mut records = vec![duty_record(&st)];
        for (pair, index) in st.index.iter().enumerate() {
            records.extend(index.iter().map(|(home, e)| logged_record(pair, *home, e)));
        }
        let mut out = Vec::new();
        for r in records {
            out.extend(r.kind.to_le_bytes());
            out.extend((r.payload.len() as u32).to_le_bytes());
            out.extend(r.payload);
        }
        Some(out)
    }

    fn recover(
        &self,
        member: usize,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        let st = lock(&self.state);
        let unrecoverable = |problem: &str| LayoutError::Unrecoverable {
            member,
            offset,
            len,
            problem: problem.into(),
        };
        let mut plan = Plan::default();
        let end = offset + len;
        // Home bytes.
        if member < 2 * self.pairs && offset < self.data_bytes {
            let pair = member / 2;
            let n = end.min(self.data_bytes) - offset;
            if member.is_multiple_of(2) {
                let ios = self
                    .read_without_primary(&st, pair, offset, n, 0, views)
                    .ok_or_else(|| unrecoverable("neither the log nor the mirror holds them"))?;
                plan.reads.extend(ios);
            } else {
                let mut primary = mirror::recover(member, offset, n, &[member - 1], views)?;
                plan.reads.append(&mut primary.reads);
            }
        }
        // Log bytes: each live entry's newest copy is its primary's home bytes.
        if self.logger_slot(member).is_some() && end > self.log_start {
            for (pair, index) in st.index.iter().enumerate() {
                for (home, e) in index.iter().filter(|(_, e)| e.logger == member) {
                    let from = e.log_off.max(offset);
                    let to = (e.log_off + e.len).min(end);
                    if from >= to {
                        continue;
                    }
                    let at = home + (from - e.log_off);
                    if !views[2 * pair].holds(at, to - from) {
                        return Err(unrecoverable("the primary of a logged run is lost"));
                    }
                    plan.reads.push(MemberIo {
                        member: 2 * pair,
                        member_offset: at,
                        len: to - from,
                        buf: Buf::Caller(from - offset),
                    });
                }
            }
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
            .map(|(_, pair, home, n)| (2 * pair, home, home + n))
            .collect()
    }

    /// Home bytes are compared with the logged runs taken as equal (the mirror is stale
    /// there by design; its newest copy is in the log); log regions are never compared.
    fn reconcile(&self, offset: u64, group: &[SyncCopy], len: u64) -> Result<Reconcile, String> {
        let Some(pair) = group
            .first()
            .map(|c| c.member / 2)
            .filter(|&p| p < self.pairs)
        else {
            return Ok(Reconcile::default());
        };
        if group.iter().any(|c| c.member >= 2 * self.pairs) || offset >= self.data_bytes {
            return Ok(Reconcile::default());
        }
        let n = len.min(self.data_bytes - offset);
        let fragments = self.fragments(&lock(&self.state), pair, offset, n);
        let primary = group
            .iter()
            .find(|c| c.member == 2 * pair)
            .and_then(|c| c.bytes.clone());
        let copies: Vec<SyncCopy> = group
            .iter()
            .map(|c| {
                let mut bytes = c.bytes.clone().map(|mut b| {
                    b.truncate(n as usize);
                    b
                });
                if let (Some(b), Some(p), true) = (&mut bytes, &primary, c.member % 2 == 1) {
                    for &(at, k, logged) in &fragments {
                        if logged.is_some() {
                            let r = (at - offset) as usize..(at - offset + k) as usize;
                            b[r.clone()].copy_from_slice(&p[r]);
                        }
                    }
                }
                SyncCopy {
                    member: c.member,
                    bytes,
                    readable: c
                        .readable
                        .iter()
                        .take(n.div_ceil(SYNC_BLOCK) as usize)
                        .copied()
                        .collect(),
                }
            })
            .collect();
        mirror::reconcile(offset, &copies, n)
    }

    fn survives(&self, valid: &[bool]) -> bool {
        let ok = |m: usize| valid.get(m).copied().unwrap_or(false);
        let st = lock(&self.state);
        (0..self.pairs)
            .all(|p| ok(2 * p) || (ok(2 * p + 1) && st.index[p].values().all(|e| ok(e.logger))))
    }

    fn next_wakeup(&self, now: Seconds) -> Option<Seconds> {
        lock(&self.state)
            .destaging
            .iter()
            .any(|&d| d)
            .then_some(now)
    }

    fn background_work(&self, views: &[MemberView]) -> Option<(u64, u64)> {
        let st = lock(&self.state);
        (0..self.pairs)
            .filter(|&p| st.destaging[p])
            .filter(|&p| views[2 * p + 1].writable)
            .find_map(|p| {
                let (&home, e) = st.index[p]
                    .iter()
                    .find(|(h, e)| views[2 * p].holds(**h, e.len))?;
                let n = e.len.min(self.stripe_unit - home % self.stripe_unit);
                Some((self.volume_offset(p, home), n))
            })
    }

    fn background_all(&self) {
        let mut st = lock(&self.state);
        for p in 0..self.pairs {
            st.destaging[p] = !st.index[p].is_empty();
        }
        let record = duty_record(&st);
        st.outbox.push(record);
    }

    fn background_plan(
        &self,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.check_range(offset, len)?;
        let mut plan = Plan::default();
        for (buf_offset, pair, home, n) in self.map(offset, len) {
            let (p, m) = (2 * pair, 2 * pair + 1);
            if !views[p].holds(home, n) || !views[m].writable {
                return Err(LayoutError::NoLiveCopy {
                    offset: offset + buf_offset,
                    end: offset + buf_offset + n,
                });
            }
            let io = |member| MemberIo {
                member,
                member_offset: home,
                len: n,
                buf: Buf::Caller(buf_offset),
            };
            plan.reads.push(io(p));
            plan.writes.push(io(m));
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SU: u64 = 65536;

    fn layout(flavour: Flavour, members: usize) -> Rolo {
        Rolo::new(
            flavour,
            &Shape {
                members,
                member_bytes: 64 * SU,
                chunk: SU,
            },
        )
        .unwrap()
    }

    fn targets(ios: &[MemberIo]) -> Vec<(usize, u64)> {
        ios.iter().map(|io| (io.member, io.member_offset)).collect()
    }

    #[test]
    fn rolo_p_logs_off_duty_pairs_and_writes_the_on_duty_pair_in_place() {
        let l = layout(Flavour::RoloP, 4);
        let healthy = [MemberView::healthy(0.0); 4];
        assert_eq!(
            (l.data_bytes, l.log_start, l.log_len),
            (48 * SU, 48 * SU, 16 * SU)
        );
        assert_eq!(l.capacity(), 96 * SU);
        // Logger 1 (pair 0's mirror) is on duty: pair 1's write goes to primary 2 and the log.
        let w = l.plan(IoKind::Write, SU, 4096, &healthy).unwrap();
        assert_eq!(targets(&w.writes), vec![(2, 0), (1, 48 * SU)]);
        l.complete(&w);
        // Pair 0's own write lands in place on both copies.
        let w0 = l.plan(IoKind::Write, 0, 4096, &healthy).unwrap();
        assert_eq!(targets(&w0.writes), vec![(0, 0), (1, 0)]);
        // Reads go to the primary; without it, logged bytes come from the log.
        let r = l.plan(IoKind::Read, SU, 8192, &healthy).unwrap();
        assert_eq!(targets(&r.reads), vec![(2, 0)]);
        let mut lost = healthy;
        lost[2] = MemberView::failed(0.0);
        let r = l.plan(IoKind::Read, SU, 8192, &lost).unwrap();
        assert_eq!(targets(&r.reads), vec![(1, 48 * SU), (3, 4096)]);
        // Losing the primary and the logger of its logged bytes loses them.
        assert!(l.survives(&[true, true, false, true]));
        assert!(!l.survives(&[true, false, false, true]));
        assert!(l.redundant());
    }

    #[test]
    fn graid_logs_to_its_log_member_and_destages_every_pair_at_80_percent() {
        let l = layout(Flavour::Graid, 5);
        let healthy = [MemberView::healthy(0.0); 5];
        assert_eq!(l.role(4), Role::Log);
        let mut home = 0;
        while !lock(&l.state).destaging.iter().any(|&d| d) {
            let w = l.plan(IoKind::Write, home, SU, &healthy).unwrap();
            assert_eq!(
                w.writes[1].member, 4,
                "the log member takes the second copy"
            );
            l.complete(&w);
            home += SU;
        }
        assert_eq!(
            home,
            52 * SU,
            "80 % of 64 stripe units, rounded up to a whole write"
        );
        let mut steps = 0;
        while let Some((offset, len)) = l.background_work(&healthy) {
            let plan = l.background_plan(offset, len, &healthy).unwrap();
            assert_eq!(
                plan.reads[0].member + 1,
                plan.writes[0].member,
                "primary to mirror"
            );
            l.complete(&plan);
            steps += 1;
        }
        assert_eq!((steps, l.logged_bytes()), (52, 0));
        l.committed();
        assert_ne!(
            lock(&l.state).heads[0],
            0,
            "not before its records went to the journal"
        );
        assert!(!l.journal_records(&Plan::default()).is_empty());
        l.committed();
        assert_eq!(
            lock(&l.state).heads[0],
            0,
            "the empty log is reused from its start"
        );
    }

    #[test]
    fn the_index_comes_back_from_its_records_and_from_a_checkpoint_image() {
        let l = layout(Flavour::RoloP, 6);
        let healthy = [MemberView::healthy(0.0); 6];
        let mut records = Vec::new();
        for i in 0..200u64 {
            let w = l
                .plan(IoKind::Write, (i * 37 % 150) * 8192, 12288, &healthy)
                .unwrap();
            l.complete(&w);
            records.extend(l.journal_records(&w));
            if i % 9 == 0 {
                if let Some((o, n)) = l.background_work(&healthy) {
                    let p = l.background_plan(o, n, &healthy).unwrap();
                    l.complete(&p);
                    records.extend(l.journal_records(&p));
                }
            }
        }
        let image = l.checkpoint_image().unwrap();
        let from_records = layout(Flavour::RoloP, 6);
        from_records.replay(None, &records).unwrap();
        assert_eq!(from_records.checkpoint_image().unwrap(), image);
        // A checkpoint that already reflects the records, then the records again.
        let twice = layout(Flavour::RoloP, 6);
        twice.replay(Some(&image), &records).unwrap();
        assert_eq!(twice.checkpoint_image().unwrap(), image);
        assert!(layout(Flavour::RoloP, 6)
            .replay(
                None,
                &[LayoutRecord {
                    kind: REC_LOGGED,
                    payload: vec![1, 2]
                }]
            )
            .is_err());
    }

    #[test]
    fn shapes_are_checked() {
        assert!(Rolo::check_graid(4, SU).is_err());
        assert!(Rolo::check_rolo(3, SU).is_err());
        assert_eq!(Rolo::check_rolo(4, 1000).unwrap_err().key, "stripe_unit");
    }
}
