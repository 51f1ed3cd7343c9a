//! `raid5-ido` and `raid6-ido`: MD's RAID5/6 (`Raid56`, unchanged) with IDO's zone table and
//! hot-first reconstruction (Wu et al., FAST'12). Reads feed the zone table in the normal
//! state; the standby's hint marks the zones a batch is about to read; when a member is
//! rebuilt, the hinted zones go first, then the hot ones, then the cold ones in address order.
//!
//! `raid5-ido-s` and `raid6-ido-s` add the paper's surrogate set: the last two members are a
//! RAID1 pair (role `surrogate`) outside the array's capacity. While the array is degraded
//! every user write goes to the surrogate (appended, indexed by the D Map), each hot zone is
//! migrated there as it is rebuilt, reads take the D Map first, then a migrated copy, then
//! the array; after the reconstruction the personality's background work reclaims the
//! redirected writes home and empties the D Map (`ido_surrogate.rs`).
//!
//! Layout names rather than options for the member arrangement: the name is what the member
//! headers record, so an assembled volume knows which members are the surrogate pair with
//! no extra header field, and plain `raid5`/`raid6` stay byte-for-byte MD's. The rebuild
//! policy (`rebuild = "ido" | "workout" | "pr"`) is an option (`set_option`): it changes
//! no placement, and the D Map is honoured whatever the policy.
//!
//! Inside a zone a rebuild goes in address order, so what it has copied of a zone is a
//! prefix: the plans of a request see a rebuilding member valid below
//! `max(watermark, zone's prefix)`, zone by zone (zones are whole stripes, so no stripe is cut).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use super::ido_surrogate::{
    Bounds, Handover, Mode, Pending, SurState, IMAGE_MAGIC, WORKOUT_POPULAR, WORKOUT_TRACKED,
};
use super::mirror::{self, Copies};
use super::zone_table::{self, Changes, ZoneTable, MIGRATED, RECONSTRUCTED};
use super::{
    Buf, Compute, LayoutError, LayoutKind, LayoutRecord, MemberIo, MemberView, Personality, Plan,
    Raid56, Reconcile, Reserved, Role, Shape, ShapeProblem, SyncCopy,
};
use crate::clock::Seconds;
use crate::parity::Level;
use crate::service_model::IoKind;
use crate::sync::lock;

/// Journal record kinds (issue 17): the whole zone table, and the zones read since.
pub const ZONE_TABLE_RECORD: u16 = 0x1701;
pub const ZONE_DELTA_RECORD: u16 = 0x1702;

/// Zone sizes the `zone_size` option accepts (the paper tried 3-24 MB).
pub const MIN_ZONE_OPTION: u64 = 3 << 20;
pub const MAX_ZONE_OPTION: u64 = 24 << 20;
/// Volume bytes one reclaim step copies home at most.
const RECLAIM_BYTES: u64 = 1 << 20;
/// Migrated zones may take this share (1/2) of the surrogate; the rest is for writes.
const MIGRATION_SHARE_DIV: u64 = 2;
/// Epoch lengths the `epoch_s` option accepts (a day at most).
const MAX_EPOCH_S: f64 = 86_400.0;

/// The `epoch_s` option: popularity halves every `period` seconds of the volume's clock
/// (seen at each volume tick, through `next_wakeup`), as in the paper.
#[derive(Debug, Clone, Copy)]
struct EpochClock {
    period: Seconds,
    /// When the current epoch began (the first tick after the option was set).
    started: Option<Seconds>,
}

#[derive(Debug)]
pub struct Ido {
    inner: Raid56,
    kind: LayoutKind,
    /// Members of the array; with a surrogate set, members `k` and `k + 1` are its pair.
    k: usize,
    surrogate: bool,
    /// Member bytes per zone (the zone's volume bytes over the data chunks of a stripe).
    zone_member_bytes: AtomicU64,
    zones: Mutex<ZoneTable>,
    /// Per rebuilding member: per zone, the end of the prefix its rebuild has copied.
    progress: Mutex<BTreeMap<usize, Vec<u64>>>,
    mode: Mutex<Mode>,
    /// Time-period epochs (`epoch_s`); none: epochs of `EPOCH_READS` reads.
    epoch: Mutex<Option<EpochClock>>,
    /// Lock order: `sur`, then `progress`, then `zones`.
    sur: Mutex<SurState>,
    /// Reads feed the zone table (`track = "off"`: they do not; the normal-state overhead
    /// benchmark compares the two).
    tracking: AtomicBool,
}

impl Ido {
    pub fn new(level: Level, shape: &Shape) -> Result<Self, LayoutError> {
        let inner = Raid56::new(level, shape)?;
        let stripe = inner.stripe_unit() * (shape.members - level.parity_count()) as u64;
        let zone = zone_table::zone_bytes_for(inner.capacity(), stripe);
        Self::with_zone_bytes(level, inner, zone)
    }

    /// `raid5-ido-s`/`raid6-ido-s`: the array of `members - 2`, then the surrogate pair.
    pub fn with_surrogates(level: Level, shape: &Shape) -> Result<Self, LayoutError> {
        let check = match level {
            Level::Raid5 => Self::check5s,
            Level::Raid6 => Self::check6s,
        };
        let name = match level {
            Level::Raid5 => "raid5-ido-s",
            Level::Raid6 => "raid6-ido-s",
        };
        check(shape.members, shape.chunk).map_err(|p| LayoutError::Shape {
            layout: name.parse().unwrap_or(LayoutKind::RAID5),
            problem: p.problem,
        })?;
        let array = Shape {
            members: shape.members - 2,
            ..shape.clone()
        };
        let mut ido = Self::new(level, &array)?;
        ido.kind = name.parse().map_err(|e: String| LayoutError::Shape {
            layout: ido.inner.kind(),
            problem: e,
        })?;
        ido.surrogate = true;
        Ok(ido)
    }

    fn check_surrogates(
        members: usize,
        chunk: u64,
        array: fn(usize, u64) -> Result<(), ShapeProblem>,
    ) -> Result<(), ShapeProblem> {
        let Some(k) = members.checked_sub(2) else {
            return Err(ShapeProblem {
                key: "member",
                problem: format!(
                    "the last two members are the surrogate pair; {members} leave no array"
                ),
            });
        };
        array(k, chunk).map_err(|p| ShapeProblem {
            problem: format!(
                "{} (the last two members are the surrogate pair)",
                p.problem
            ),
            ..p
        })
    }

    pub fn check5s(members: usize, chunk: u64) -> Result<(), ShapeProblem> {
        Self::check_surrogates(members, chunk, Raid56::check5)
    }

    pub fn check6s(members: usize, chunk: u64) -> Result<(), ShapeProblem> {
        Self::check_surrogates(members, chunk, Raid56::check6)
    }

    /// With zones of `zone_bytes` volume bytes (rounded down to whole stripes, at least one).
    pub fn with_zone_bytes(
        level: Level,
        inner: Raid56,
        zone_bytes: u64,
    ) -> Result<Self, LayoutError> {
        let name = match level {
            Level::Raid5 => "raid5-ido",
            Level::Raid6 => "raid6-ido",
        };
        let kind: LayoutKind = name.parse().map_err(|e: String| LayoutError::Shape {
            layout: inner.kind(),
            problem: e,
        })?;
        let k = inner.member_count();
        let data = inner.capacity() / inner.member_data_bytes().max(1);
        let stripe = inner.stripe_unit() * data;
        let zone_bytes = (zone_bytes / stripe).max(1) * stripe;
        Ok(Self {
            zone_member_bytes: AtomicU64::new(zone_bytes / data),
            zones: Mutex::new(ZoneTable::new(zone_bytes, inner.capacity())),
            inner,
            kind,
            k,
            surrogate: false,
            progress: Mutex::new(BTreeMap::new()),
            mode: Mutex::new(Mode::Ido),
            epoch: Mutex::new(None),
            sur: Mutex::new(SurState::default()),
            tracking: AtomicBool::new(true),
        })
    }

    /// A copy of the zone table (tests, status).
    pub fn zone_table(&self) -> ZoneTable {
        lock(&self.zones).clone()
    }

    pub fn mode(&self) -> Mode {
        *lock(&self.mode)
    }

    /// (D Map entries, migrated zones, user bytes written to / read from the surrogate).
    pub fn surrogate_stats(&self) -> (usize, usize, u64, u64) {
        let st = lock(&self.sur);
        (
            st.dmap.entries(),
            st.migrated.len(),
            st.redirected_writes,
            st.surrogate_reads,
        )
    }

    fn zm(&self) -> u64 {
        self.zone_member_bytes.load(Ordering::Relaxed).max(1)
    }

    fn zone_count(&self) -> usize {
        lock(&self.zones).len()
    }

    /// Member bytes of zone `z`.
    fn zone_span(&self, z: usize) -> (u64, u64) {
        let start = z as u64 * self.zm();
        let end = (start + self.zm()).min(self.inner.member_data_bytes());
        (start, end)
    }

    /// Volume bytes of zone `z`.
    fn zone_volume(&self, z: usize, zone_bytes: u64) -> (u64, u64) {
        let start = z as u64 * zone_bytes;
        (start, zone_bytes.min(self.capacity().saturating_sub(start)))
    }

    /// A fresh progress vector for a rebuild that has copied everything below `watermark`.
    fn initial_progress(&self, watermark: u64) -> Vec<u64> {
        (0..self.zone_count())
            .map(|z| {
                let (start, end) = self.zone_span(z);
                watermark.clamp(start, end)
            })
            .collect()
    }

    /// The array members' views (the surrogate pair is not the inner layout's business).
    fn array_views<'a>(&self, views: &'a [MemberView]) -> &'a [MemberView] {
        &views[..self.k.min(views.len())]
    }

    /// The views of a plan inside zone `z`: each rebuilding member is valid below what its
    /// rebuild copied there.
    fn zone_views(
        &self,
        views: &[MemberView],
        z: usize,
        progress: &BTreeMap<usize, Vec<u64>>,
    ) -> Vec<MemberView> {
        let mut views = self.array_views(views).to_vec();
        for (&m, done) in progress {
            if let (Some(v), Some(&end)) = (views.get_mut(m), done.get(z)) {
                if v.writable && v.valid_below < u64::MAX {
                    v.valid_below = v.valid_below.max(end);
                }
            }
        }
        views
    }

    fn rebuilding(views: &[MemberView], progress: &BTreeMap<usize, Vec<u64>>) -> bool {
        progress.keys().any(|&m| {
            views
                .get(m)
                .is_some_and(|v| v.writable && v.valid_below < u64::MAX)
        })
    }

    /// Some array member does not hold all its bytes (failed or rebuilding): the
    /// reconstruction window, in which the surrogate takes the writes.
    fn degraded(&self, views: &[MemberView]) -> bool {
        self.array_views(views)
            .iter()
            .any(|v| v.valid_below < u64::MAX)
    }

    /// The surrogate pair can take a write of its bytes `s..s+len` with both copies: the
    /// surrogate keeps redundancy (a write that one copy alone took would be lost with it).
    fn surrogate_writable(&self, views: &[MemberView], s: u64, len: u64) -> bool {
        [self.k, self.k + 1]
            .iter()
            .all(|&m| views.get(m).is_some_and(|v| v.writable && v.holds(s, len)))
    }

    fn surrogate_readable(&self, views: &[MemberView], s: u64, len: u64) -> bool {
        [self.k, self.k + 1]
            .iter()
            .any(|&m| views.get(m).is_some_and(|v| v.holds(s, len)))
    }

    /// A plan of the array alone, zone by zone with what the rebuild copied there.
    fn plan_home(
        &self,
        kind: IoKind,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        let progress = lock(&self.progress);
        if !Self::rebuilding(views, &progress) {
            return self.inner.plan(kind, offset, len, self.array_views(views));
        }
        let zone_bytes = lock(&self.zones).zone_bytes();
        let mut plan = Plan::default();
        let mut at = offset;
        while at < offset + len {
            let z = (at / zone_bytes) as usize;
            let end = ((z as u64 + 1) * zone_bytes).min(offset + len);
            let views = self.zone_views(views, z, &progress);
            let part = self.inner.plan(kind, at, end - at, &views)?;
            append(&mut plan, part, at - offset);
            at = end;
        }
        Ok(plan)
    }

    /// A plan of surrogate bytes `s..s+len` (both copies written, the readiest read), for
    /// the caller's bytes from 0.
    fn plan_surrogate(
        &self,
        kind: IoKind,
        s: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        let piece = Copies {
            buf_offset: 0,
            len,
            placements: vec![(self.k, s), (self.k + 1, s)],
        };
        mirror::plan(kind, s, vec![piece], views)
    }

    /// Note whether the array is degraded; a new failure starts WorkOut's counting afresh.
    fn observe(&self, st: &mut SurState, degraded: bool) {
        if degraded && !st.degraded {
            st.since_failure.clear();
            st.queue.clear();
            st.popular.clear();
            st.handover.clear();
        }
        if !degraded {
            // Migration is for the reconstruction window only.
            st.queue.clear();
            st.popular.clear();
            st.since_failure.clear();
            st.handover.clear();
        }
        st.degraded = degraded;
    }

    fn plan_read(
        &self,
        st: &mut SurState,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        let degraded = st.degraded;
        let zone_bytes = lock(&self.zones).zone_bytes();
        let mut plan = Plan::default();
        for (d, l, s) in st.dmap.lookup(offset, len) {
            if let Some(s) = s {
                append(
                    &mut plan,
                    self.plan_surrogate(IoKind::Read, s, l, views)?,
                    d - offset,
                );
                st.surrogate_reads += l;
                continue;
            }
            // Not redirected: a migrated copy while the array is degraded, else the array.
            let mut at = d;
            while at < d + l {
                let z = (at / zone_bytes) as usize;
                let end = ((z as u64 + 1) * zone_bytes).min(d + l);
                let copy = st
                    .migrated
                    .get(&z)
                    .map(|&s| s + (at - z as u64 * zone_bytes))
                    .filter(|&s| degraded && self.surrogate_readable(views, s, end - at));
                let part = match copy {
                    Some(s) => {
                        st.surrogate_reads += end - at;
                        self.plan_surrogate(IoKind::Read, s, end - at, views)?
                    }
                    None => self.plan_home(IoKind::Read, at, end - at, views)?,
                };
                append(&mut plan, part, at - offset);
                at = end;
            }
        }
        Ok(plan)
    }

    /// WorkOut counts reads only since the failure, per request; a request read often
    /// enough is copied to the surrogate (unless part of it already lives there).
    fn count_since_failure(&self, st: &mut SurState, offset: u64, len: u64) {
        if st.since_failure.len() >= WORKOUT_TRACKED
            && !st.since_failure.contains_key(&(offset, len))
        {
            return;
        }
        let n = st.since_failure.entry((offset, len)).or_insert(0);
        *n = n.saturating_add(1);
        let redirected = st.dmap.lookup(offset, len).iter().any(|f| f.2.is_some());
        if *n == WORKOUT_POPULAR && !redirected {
            st.popular.push_back((offset, len));
        }
    }
}

impl Ido {
    /// With `epoch_s`: end every epoch whose period has passed by `now` (a clock going
    /// back, as after a restart of a virtual clock, starts a new epoch).
    fn end_epochs_passed(&self, now: Seconds) {
        let mut epoch = lock(&self.epoch);
        let Some(clock) = epoch.as_mut() else {
            return;
        };
        let start = *clock.started.get_or_insert(now);
        if now < start {
            clock.started = Some(now);
            return;
        }
        let passed = ((now - start) / clock.period).floor();
        if passed >= 1.0 {
            clock.started = Some(start + passed * clock.period);
            lock(&self.zones).end_epochs(passed as u64);
        }
    }

    /// VDF keeps the failed disk's blocks: a read whose plan reconstructs lost bytes (it
    /// touched the failed member where the rebuild has not been) is queued for a copy to
    /// the surrogate at its first read; a read of the survivors alone is not kept.
    fn admit_victim_read(st: &mut SurState, offset: u64, len: u64, plan: &Plan) {
        let victim = plan
            .compute
            .iter()
            .any(|c| matches!(c, Compute::Reconstruct { .. }));
        if !victim || st.since_failure.len() >= WORKOUT_TRACKED {
            return;
        }
        let redirected = st.dmap.lookup(offset, len).iter().any(|f| f.2.is_some());
        if st.since_failure.insert((offset, len), 1).is_none() && !redirected {
            st.popular.push_back((offset, len));
        }
    }
}

impl Ido {
    /// Where a rebuild step of member bytes `offset..offset+len` hands its zone's stripes
    /// on the surrogate (the zone copy's offset), if it does: the step starts a hot zone
    /// not yet migrated (its surrogate space is reserved now) or goes on with one whose
    /// hand-over reached `offset`.
    fn handover_target(
        &self,
        st: &mut SurState,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Option<u64> {
        let z = (offset / self.zm()) as usize;
        let (zone_start, zone_end) = self.zone_span(z);
        if offset.checked_add(len).is_none_or(|end| end > zone_end) || st.migrated.contains_key(&z)
        {
            return None;
        }
        if let Some(h) = st.handover.get(&z).copied() {
            if offset <= h.copied_to {
                return Some(h.s);
            }
            // A gap (the rebuild jumped): give up; a whole-zone migration follows.
            st.handover.remove(&z);
            return None;
        }
        let zone_bytes = lock(&self.zones).zone_bytes();
        let (_, zone_len) = self.zone_volume(z, zone_bytes);
        let room = self.member_data_bytes() / MIGRATION_SHARE_DIV;
        let hot = lock(&self.zones).is_hot(z);
        if offset != zone_start
            || !hot
            || zone_len == 0
            || st.head.saturating_add(zone_len) > room
            || !self.surrogate_writable(views, st.head, zone_len)
        {
            return None;
        }
        let s = st.head;
        st.head += zone_len;
        st.handover.insert(
            z,
            Handover {
                s,
                copied_to: zone_start,
            },
        );
        Some(s)
    }

    /// Add to a recover plan of member bytes from `offset` the surrogate writes (both
    /// copies) of the stripes it reads: each row reconstructs its stripe's chunks (data
    /// chunks first, in data order) and copies the lost one to the caller at `row -
    /// offset`; the zone starting at member offset `zone_start` is copied to the surrogate
    /// at `s` in volume order. The pieces are gathered into runs of consecutive surrogate
    /// bytes, one write per run and copy (a few large sequential writes, not one per
    /// chunk). Returns the first write's surrogate offset; None (plan unchanged) when the
    /// plan is not of that shape.
    fn add_handover(&self, plan: &mut Plan, offset: u64, zone_start: u64, s: u64) -> Option<u64> {
        let chunk = self.stripe_unit().max(1);
        let data = self.capacity() / self.member_data_bytes().max(1);
        // (surrogate offset, len, buffer) of every data piece.
        let mut pieces = Vec::new();
        let mut chunks: Option<&Vec<Buf>> = None;
        for c in &plan.compute {
            match c {
                Compute::Reconstruct { chunks: bufs, .. } => chunks = Some(bufs),
                Compute::Copy {
                    to: Buf::Caller(o),
                    len,
                    ..
                } => {
                    let bufs = chunks.take()?;
                    if (bufs.len() as u64) < data {
                        return None;
                    }
                    let row = offset + o;
                    let rel = row.checked_sub(zone_start)?;
                    let stripe_base = rel / chunk * chunk * data;
                    for (i, &buf) in bufs.iter().take(data as usize).enumerate() {
                        pieces.push((s + stripe_base + i as u64 * chunk + row % chunk, *len, buf));
                    }
                }
                _ => return None,
            }
        }
        pieces.sort_by_key(|p| p.0);
        let mut runs: Vec<Vec<(u64, u64, Buf)>> = Vec::new();
        for p in pieces {
            match runs.last_mut() {
                Some(run) if run.last().is_some_and(|&(at, len, _)| at + len == p.0) => run.push(p),
                _ => runs.push(vec![p]),
            }
        }
        let first = runs.first()?.first()?.0;
        for run in runs {
            let at = run[0].0;
            let buf = if let [(_, _, only)] = run.as_slice() {
                *only
            } else {
                let total: u64 = run.iter().map(|p| p.1).sum();
                let index = plan.scratch.len();
                plan.scratch.push(total);
                for &(piece_at, len, from) in &run {
                    plan.compute.push(Compute::Copy {
                        from,
                        to: Buf::Scratch(index, piece_at - at),
                        len,
                    });
                }
                Buf::Scratch(index, 0)
            };
            let len = run.iter().map(|p| p.1).sum();
            for member in [self.k, self.k + 1] {
                plan.writes.push(MemberIo {
                    member,
                    member_offset: at,
                    len,
                    buf,
                });
            }
        }
        Some(first)
    }
}

/// Append `part` (planned for the caller's bytes from `caller`) to `plan`.
fn append(plan: &mut Plan, part: Plan, caller: u64) {
    let base = plan.scratch.len();
    let shift = |b: Buf| match b {
        Buf::Caller(o) => Buf::Caller(o + caller),
        Buf::Scratch(i, o) => Buf::Scratch(i + base, o),
    };
    let io = |io: MemberIo| MemberIo {
        buf: shift(io.buf),
        ..io
    };
    plan.scratch.extend(part.scratch);
    plan.reads.extend(part.reads.into_iter().map(io));
    plan.writes.extend(part.writes.into_iter().map(io));
    plan.compute
        .extend(part.compute.into_iter().map(|c| match c {
            Compute::Copy { from, to, len } => Compute::Copy {
                from: shift(from),
                to: shift(to),
                len,
            },
            Compute::Syndrome { data, p, q, len } => Compute::Syndrome {
                data: data.into_iter().map(shift).collect(),
                p: shift(p),
                q: q.map(shift),
                len,
            },
            Compute::Delta {
                index,
                old,
                new,
                p,
                q,
                len,
            } => Compute::Delta {
                index,
                old: shift(old),
                new: shift(new),
                p: p.map(shift),
                q: q.map(shift),
                len,
            },
            Compute::Reconstruct {
                level,
                chunks,
                lost,
                len,
            } => Compute::Reconstruct {
                level,
                chunks: chunks.into_iter().map(shift).collect(),
                lost,
                len,
            },
        }));
}

/// Split a checkpoint image into the zone table's and the surrogate state's.
fn split_image(image: &[u8]) -> Result<(&[u8], Option<&[u8]>), String> {
    let Some(rest) = image.strip_prefix(&[IMAGE_MAGIC]) else {
        return Ok((image, None));
    };
    let (len, rest) = rest
        .split_first_chunk::<8>()
        .ok_or("layout image is truncated")?;
    let len = usize::try_from(u64::from_le_bytes(*len)).map_err(|e| e.to_string())?;
    if rest.len() < len {
        return Err("layout image is truncated".into());
    }
    let (zones, sur) = rest.split_at(len);
    Ok((zones, Some(sur)))
}

impl Personality for Ido {
    fn kind(&self) -> LayoutKind {
        self.kind
    }

    fn member_count(&self) -> usize {
        self.k + if self.surrogate { 2 } else { 0 }
    }

    fn member_data_bytes(&self) -> u64 {
        self.inner.member_data_bytes()
    }

    fn stripe_unit(&self) -> u64 {
        self.inner.stripe_unit()
    }

    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }

    fn role(&self, member: usize) -> Role {
        if member >= self.k {
            return Role::Surrogate;
        }
        self.inner.role(member)
    }

    fn reserved(&self) -> Vec<Reserved> {
        self.inner.reserved()
    }

    fn plan(
        &self,
        kind: IoKind,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.check_range(offset, len)?;
        if kind == IoKind::Read && self.tracking.load(Ordering::Relaxed) {
            lock(&self.zones).read_hit(offset, len);
        }
        if !self.surrogate {
            return self.plan_home(kind, offset, len, views);
        }
        let mode = self.mode();
        let mut st = lock(&self.sur);
        let degraded = self.degraded(views);
        self.observe(&mut st, degraded);
        match kind {
            IoKind::Read => {
                if mode == Mode::WorkOut && degraded {
                    self.count_since_failure(&mut st, offset, len);
                }
                let plan = if st.in_use() {
                    self.plan_read(&mut st, offset, len, views)?
                } else {
                    self.plan_home(kind, offset, len, views)?
                };
                if mode == Mode::Vdf && degraded {
                    Self::admit_victim_read(&mut st, offset, len, &plan);
                }
                Ok(plan)
            }
            IoKind::Write => {
                let s = st.head;
                let redirect = mode != Mode::Pr
                    && degraded
                    && len > 0
                    && s + len <= self.member_data_bytes()
                    && self.surrogate_writable(views, s, len);
                if redirect {
                    let plan = self.plan_surrogate(kind, s, len, views)?;
                    st.head += len;
                    st.planned.insert(s, Pending::Write(offset, len));
                    st.redirected_writes += len;
                    return Ok(plan);
                }
                let plan = self.plan_home(kind, offset, len, views)?;
                if st.in_use() {
                    if let Some(w) = plan.writes.first() {
                        st.home.insert((w.member, w.member_offset), (offset, len));
                    }
                }
                Ok(plan)
            }
        }
    }

    fn read_members(
        &self,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Vec<usize>, LayoutError> {
        // A wake's planning is not a read hit.
        self.inner
            .read_members(offset, len, self.array_views(views))
    }

    fn complete(&self, plan: &Plan) {
        self.inner.complete(plan);
        if !self.surrogate {
            return;
        }
        let mut st = lock(&self.sur);
        let mut newly_migrated = Vec::new();
        for w in &plan.writes {
            if w.member >= self.k {
                match st.planned.remove(&w.member_offset) {
                    Some(Pending::Write(d, l)) => st.add(d, l, w.member_offset),
                    Some(Pending::Migration(z)) => {
                        st.migrate(z, w.member_offset);
                        newly_migrated.push(z);
                    }
                    Some(Pending::HandedOver(z, end)) => {
                        let zone_end = self.zone_span(z).1;
                        if let Some(h) = st.handover.get_mut(&z) {
                            h.copied_to = h.copied_to.max(end);
                            if h.copied_to >= zone_end {
                                let s = h.s;
                                st.handover.remove(&z);
                                st.migrate(z, s);
                                newly_migrated.push(z);
                            }
                        }
                    }
                    None => {}
                }
            } else if let Some((d, l)) = st.home.remove(&(w.member, w.member_offset)) {
                // Written home: the array is current there, older copies on the surrogate
                // are not.
                st.trim(d, l);
                let touched = lock(&self.zones).zones(d, l);
                for z in touched {
                    st.unmigrate(z);
                    // A hand-over's copy of these bytes is older now: it is given up (the
                    // rebuild queues a whole-zone migration once the zone is rebuilt).
                    st.handover.remove(&z);
                }
            }
        }
        if plan.writes.is_empty() && plan.reads.is_empty() && st.clearing {
            st.clearing = false;
            if st.dmap.is_empty() && !st.degraded {
                st.unmigrate_all();
            }
        }
        let migrated: Vec<usize> = st.migrated.keys().copied().collect();
        drop(st);
        if !newly_migrated.is_empty() || plan.writes.is_empty() {
            let mut zones = lock(&self.zones);
            zones.clear_flag(MIGRATED);
            for z in migrated {
                zones.set_flag(z, MIGRATED);
            }
        }
    }

    /// What the zone table learned since the last write (the paper keeps it in NVRAM; here
    /// it is as durable as the next acknowledged write), and the surrogate's changes.
    fn journal_records(&self, _plan: &Plan) -> Vec<LayoutRecord> {
        let mut out = match lock(&self.zones).take_changes() {
            Changes::None => Vec::new(),
            Changes::Full(payload) => vec![LayoutRecord {
                kind: ZONE_TABLE_RECORD,
                payload,
            }],
            Changes::Delta(payload) => vec![LayoutRecord {
                kind: ZONE_DELTA_RECORD,
                payload,
            }],
        };
        if self.surrogate {
            out.append(&mut lock(&self.sur).outbox);
        }
        out
    }

    /// The table is advice (which zones to rebuild first), not data: one that cannot be
    /// replayed is dropped with a warning and the volume starts with an empty one. The
    /// surrogate state is data (redirected writes live only there): it must replay.
    fn replay(&self, image: Option<&[u8]>, records: &[LayoutRecord]) -> Result<(), String> {
        let (zone_image, sur_image) = match image.map(split_image).transpose()? {
            Some((z, s)) => (Some(z), s),
            None => (None, None),
        };
        let owned = |r: &&LayoutRecord| SurState::owns(r.kind);
        if !self.surrogate && (sur_image.is_some() || records.iter().any(|r| owned(&r))) {
            return Err(format!(
                "layout {} has no surrogate set, yet its journal holds surrogate records",
                self.kind
            ));
        }
        {
            let zone_bytes = lock(&self.zones).zone_bytes();
            let bounds = Bounds {
                capacity: self.capacity(),
                surrogate: self.member_data_bytes(),
                zone_bytes,
            };
            let mut st = lock(&self.sur);
            let mut back = SurState::default();
            if let Some(image) = sur_image {
                back.load(image, &bounds)?;
            }
            for r in records.iter().filter(owned) {
                back.apply(r, &bounds)?;
            }
            back.set_head_after_replay(zone_bytes);
            *st = back;
        }
        let mut zones = lock(&self.zones);
        let replayed = zone_image
            .map_or(Ok(()), |image| zones.load(image))
            .and_then(|()| {
                records
                    .iter()
                    .filter(|r| !owned(r))
                    .try_for_each(|r| match r.kind {
                        ZONE_TABLE_RECORD => zones.load(&r.payload),
                        ZONE_DELTA_RECORD => zones.load_delta(&r.payload),
                        other => Err(format!("unknown layout record kind {other:#x}")),
                    })
            });
        if let Err(problem) = replayed {
            tracing::warn!(layout = %self.kind, %problem,
                "the journaled zone table cannot be replayed; starting with an empty one (the rebuild order forgets the past reads)");
            *zones = ZoneTable::new(zones.zone_bytes(), self.inner.capacity());
        }
        Ok(())
    }

    /// Records journaled after the image set the same values again: replay stays right.
    fn checkpoint_image(&self) -> Option<Vec<u8>> {
        if !self.surrogate {
            return Some(lock(&self.zones).image());
        }
        let sur = lock(&self.sur).image();
        let zones = lock(&self.zones).image();
        let mut out = vec![IMAGE_MAGIC];
        out.extend_from_slice(&(zones.len() as u64).to_le_bytes());
        out.extend(zones);
        out.extend(sur);
        Some(out)
    }

    fn committed(&self) {
        if self.surrogate {
            lock(&self.sur).reset_if_empty();
        }
    }

    fn recover(
        &self,
        member: usize,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        if member >= self.k {
            let other = if member == self.k { self.k + 1 } else { self.k };
            let source = views.get(other).is_some_and(|v| v.holds(offset, len));
            let st = lock(&self.sur);
            let dead = offset >= st.head || (!st.in_use() && st.planned.is_empty());
            if !source && dead {
                // Both copies lost bytes in which nothing lives (the log's free tail, or an
                // empty surrogate): nothing to recover.
                return Ok(Plan::default());
            }
            return mirror::recover(member, offset, len, &[self.k, self.k + 1], views);
        }
        let progress = lock(&self.progress);
        let z = (offset / self.zm()) as usize;
        let in_one_zone = offset + len <= self.zone_span(z).1;
        if in_one_zone && Self::rebuilding(views, &progress) {
            let views = self.zone_views(views, z, &progress);
            return self.inner.recover(member, offset, len, &views);
        }
        self.inner
            .recover(member, offset, len, self.array_views(views))
    }

    /// IDO with a surrogate set: a hot zone's rebuild hands the stripes it reads (and the
    /// chunks it reconstructs) to the surrogate as it goes, so the zone's migration costs
    /// the surrogate writes alone, not a second read of the zone from the array.
    fn rebuild_plan(
        &self,
        member: usize,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        let mut plan = self.recover(member, offset, len, views)?;
        if !self.surrogate || member >= self.k || self.mode() != Mode::Ido {
            return Ok(plan);
        }
        let mut st = lock(&self.sur);
        self.observe(&mut st, self.degraded(views));
        if let Some(s) = self.handover_target(&mut st, offset, len, views) {
            let z = (offset / self.zm()) as usize;
            let zone_start = self.zone_span(z).0;
            match self.add_handover(&mut plan, offset, zone_start, s) {
                Some(first) => {
                    st.planned
                        .insert(first, Pending::HandedOver(z, offset + len));
                }
                // Not the plan shape expected: no hand-over (a whole-zone migration later).
                None => {
                    st.handover.remove(&z);
                }
            }
        }
        Ok(plan)
    }

    fn sync_groups(&self) -> Vec<Vec<usize>> {
        let mut groups = self.inner.sync_groups();
        if self.surrogate {
            groups.push(vec![self.k, self.k + 1]);
        }
        groups
    }

    /// While writes are redirected, a request may append to the surrogate's log: it holds
    /// the log's free tail, so that a surrogate rebuild never copies under an append.
    fn lock_spans(&self, offset: u64, len: u64) -> Vec<(usize, u64, u64)> {
        let mut spans = self.inner.lock_spans(offset, len);
        if self.surrogate {
            let st = lock(&self.sur);
            if st.degraded && st.head < self.member_data_bytes() {
                spans.push((self.k, st.head, self.member_data_bytes()));
            }
        }
        spans
    }

    fn reconcile(&self, offset: u64, group: &[SyncCopy], len: u64) -> Result<Reconcile, String> {
        if self.surrogate && group.iter().all(|c| c.member >= self.k) {
            return mirror::reconcile(offset, group, len);
        }
        self.inner.reconcile(offset, group, len)
    }

    fn survives(&self, valid: &[bool]) -> bool {
        let array = self.inner.survives(&valid[..self.k.min(valid.len())]);
        if !self.surrogate {
            return array;
        }
        let pair = valid.get(self.k).copied().unwrap_or(false)
            || valid.get(self.k + 1).copied().unwrap_or(false);
        array && (pair || !lock(&self.sur).in_use())
    }

    fn next_wakeup(&self, now: Seconds) -> Option<Seconds> {
        self.end_epochs_passed(now);
        if !self.surrogate {
            return None;
        }
        let st = lock(&self.sur);
        (st.in_use() || !st.queue.is_empty() || !st.popular.is_empty()).then_some(now)
    }

    /// Degraded: migrate the next queued zone. In sync again: reclaim the first redirected
    /// run, and once the D Map is empty forget the migrated copies (an empty plan).
    fn background_work(&self, views: &[MemberView]) -> Option<(u64, u64)> {
        if !self.surrogate {
            return None;
        }
        let mut st = lock(&self.sur);
        let degraded = self.degraded(views);
        self.observe(&mut st, degraded);
        if degraded {
            if self.mode() == Mode::Pr {
                return None;
            }
            let room = self.member_data_bytes() / MIGRATION_SHARE_DIV;
            if let Some(&(d, l)) = st.popular.front() {
                if st.head + l > room || !self.surrogate_writable(views, st.head, l) {
                    st.popular.clear();
                    return None;
                }
                return Some((d, l));
            }
            let zone_bytes = lock(&self.zones).zone_bytes();
            while let Some(&z) = st.queue.front() {
                if st.migrated.contains_key(&z) {
                    st.queue.pop_front();
                    continue;
                }
                let (start, len) = self.zone_volume(z, zone_bytes);
                if len == 0 || st.head + len > room || !self.surrogate_writable(views, st.head, len)
                {
                    st.queue.clear();
                    return None;
                }
                return Some((start, len));
            }
            return None;
        }
        if let Some((d, l, s)) = st.dmap.first() {
            let l = l.min(RECLAIM_BYTES);
            return self.surrogate_readable(views, s, l).then_some((d, l));
        }
        (!st.migrated.is_empty()).then_some((0, self.capacity().min(4096)))
    }

    fn background_plan(
        &self,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.check_range(offset, len)?;
        if !self.surrogate {
            return Ok(Plan::default());
        }
        let mut st = lock(&self.sur);
        let degraded = self.degraded(views);
        self.observe(&mut st, degraded);
        if degraded && st.popular.front() == Some(&(offset, len)) {
            // WorkOut: copy a popular read request's bytes to the surrogate; from then on
            // the D Map sends its reads there.
            st.popular.pop_front();
            let s = st.head;
            let redirected = st.dmap.lookup(offset, len).iter().any(|f| f.2.is_some());
            if redirected || !self.surrogate_writable(views, s, len) {
                return Ok(Plan::default());
            }
            let mut plan = self.plan_home(IoKind::Read, offset, len, views)?;
            append(
                &mut plan,
                self.plan_surrogate(IoKind::Write, s, len, views)?,
                0,
            );
            st.head += len;
            st.planned.insert(s, Pending::Write(offset, len));
            return Ok(plan);
        }
        if degraded {
            // Migrate the zone at `offset`: read it from the array, write both copies.
            let zone_bytes = lock(&self.zones).zone_bytes();
            let z = (offset / zone_bytes) as usize;
            if st.queue.front() == Some(&z) {
                st.queue.pop_front();
            }
            let whole = self.zone_volume(z, zone_bytes) == (offset, len);
            let s = st.head;
            if !whole || st.migrated.contains_key(&z) || !self.surrogate_writable(views, s, len) {
                return Ok(Plan::default());
            }
            let mut plan = self.plan_home(IoKind::Read, offset, len, views)?;
            append(
                &mut plan,
                self.plan_surrogate(IoKind::Write, s, len, views)?,
                0,
            );
            st.head += len;
            st.planned.insert(s, Pending::Migration(z));
            return Ok(plan);
        }
        // Reclaim: the newest copy from the surrogate, written home.
        let mut plan = Plan::default();
        for (d, l, s) in st.dmap.lookup(offset, len) {
            let Some(s) = s else { continue };
            let read = self.plan_surrogate(IoKind::Read, s, l, views)?;
            let home = self.plan_home(IoKind::Write, d, l, views)?;
            if let Some(w) = home.writes.first() {
                st.home.insert((w.member, w.member_offset), (d, l));
            }
            append(&mut plan, read, d - offset);
            append(&mut plan, home, d - offset);
        }
        if plan.reads.is_empty() && plan.writes.is_empty() && st.dmap.is_empty() {
            st.clearing = !st.migrated.is_empty();
        }
        Ok(plan)
    }

    fn hint(&self, extents: &[(u64, u64)]) {
        lock(&self.zones).hint(extents);
    }

    fn metadata_bytes(&self) -> u64 {
        let sur = {
            let st = lock(&self.sur);
            st.dmap.memory_bytes() + (st.migrated.len() * 16) as u64
        };
        // Progress before zones, as everywhere (one guard at a time here).
        let progress: u64 = lock(&self.progress)
            .values()
            .map(|p| (p.capacity() * 8) as u64)
            .sum();
        sur + progress + lock(&self.zones).memory_bytes()
    }

    fn member_replaced(&self, member: usize) {
        if member >= self.k {
            return;
        }
        lock(&self.progress).remove(&member);
        lock(&self.zones).clear_flag(RECONSTRUCTED);
    }

    /// IDO: finish the zone in progress, then the next in the table's order (hinted, hot,
    /// cold). PR and WorkOut, and the surrogate pair: address order.
    fn rebuild_next(&self, member: usize, watermark: u64, chunk: u64) -> (u64, u64) {
        let end = self.member_data_bytes();
        let sequential = (watermark, chunk.max(1).min(end.saturating_sub(watermark)));
        if member >= self.k || self.mode() != Mode::Ido {
            return sequential;
        }
        let mut progress = lock(&self.progress);
        let done = progress
            .entry(member)
            .or_insert_with(|| self.initial_progress(watermark));
        let pending = |z: usize| done[z] < self.zone_span(z).1;
        let started = (0..done.len()).find(|&z| pending(z) && done[z] > self.zone_span(z).0);
        let next = started.or_else(|| {
            lock(&self.zones)
                .rebuild_order()
                .into_iter()
                .find(|&z| pending(z))
        });
        match next {
            Some(z) => (done[z], chunk.max(1).min(self.zone_span(z).1 - done[z])),
            None => sequential,
        }
    }

    fn rebuilt(&self, member: usize, offset: u64, len: u64, watermark: u64) -> u64 {
        if member >= self.k || self.mode() != Mode::Ido {
            return offset + len;
        }
        let mut finished_hot = None;
        let prefix = {
            let mut progress = lock(&self.progress);
            let done = progress
                .entry(member)
                .or_insert_with(|| self.initial_progress(watermark));
            let z = (offset / self.zm()) as usize;
            if let Some(end) = done.get_mut(z) {
                if offset <= *end {
                    *end = (*end).max(offset + len);
                }
                if *end >= self.zone_span(z).1 {
                    let mut zones = lock(&self.zones);
                    zones.set_flag(z, RECONSTRUCTED);
                    if zones.is_hot(z) {
                        finished_hot = Some(z);
                    }
                }
            }
            // The valid prefix runs on through every zone copied to its end.
            let mut prefix = watermark;
            while let Some(&end) = done.get((prefix / self.zm()) as usize) {
                if end <= prefix {
                    break;
                }
                prefix = end;
            }
            prefix.min(self.member_data_bytes())
        };
        // A hot zone just read for its reconstruction is migrated to the surrogate.
        if let (true, Some(z)) = (self.surrogate, finished_hot) {
            let mut st = lock(&self.sur);
            let handed = st.handover.contains_key(&z);
            if !st.migrated.contains_key(&z) && !handed && !st.queue.contains(&z) {
                st.queue.push_back(z);
            }
        }
        prefix
    }

    /// `epoch_s`: popularity halves every that many seconds of the volume's clock instead of
    /// every `EPOCH_READS` reads (no placement: it need not match the member headers).
    /// `rebuild` = "ido" (default), "workout", "vdf" or "pr"; `zone_size` in bytes (3-24 MiB,
    /// rounded down to whole stripes; only before any rebuild); `track` = "on" (default) or
    /// "off" (reads do not feed the zone table: hot-first then knows only the hint).
    fn option_places_data(&self, key: &str) -> bool {
        !matches!(key, "rebuild" | "epoch_s" | "track")
    }

    fn set_option(&self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "rebuild" => {
                let mode: Mode = value.parse()?;
                if matches!(mode, Mode::WorkOut | Mode::Vdf) && !self.surrogate {
                    return Err(format!(
                        "rebuild = \"{}\" redirects to a surrogate set; layout {} has \
                         none (use {}-s)",
                        mode.name(),
                        self.kind,
                        self.kind
                    ));
                }
                *lock(&self.mode) = mode;
                Ok(())
            }
            "zone_size" => {
                let bytes = crate::config::parse_size(value)
                    .map_err(|e| format!("zone_size {value:?} is not a size: {e}"))?;
                if !(MIN_ZONE_OPTION..=MAX_ZONE_OPTION).contains(&bytes) {
                    return Err(format!(
                        "zone_size {bytes} must be between {MIN_ZONE_OPTION} and \
                         {MAX_ZONE_OPTION} bytes (3-24 MiB)"
                    ));
                }
                if !lock(&self.progress).is_empty() || lock(&self.sur).in_use() {
                    return Err("zone_size cannot change during a reconstruction".into());
                }
                let data = self.capacity() / self.member_data_bytes().max(1);
                let stripe = self.stripe_unit() * data;
                let zone = (bytes / stripe).max(1) * stripe;
                self.zone_member_bytes.store(zone / data, Ordering::Relaxed);
                let by_reads = lock(&self.epoch).is_none();
                let mut table = ZoneTable::new(zone, self.capacity());
                table.set_epoch_by_reads(by_reads);
                *lock(&self.zones) = table;
                Ok(())
            }
            "epoch_s" => {
                let period: f64 = value
                    .trim()
                    .parse()
                    .map_err(|e| format!("epoch_s {value:?} is not a number of seconds: {e}"))?;
                if !(period > 0.0 && period <= MAX_EPOCH_S) {
                    return Err(format!(
                        "epoch_s {value:?} must be more than 0 and at most {MAX_EPOCH_S} seconds"
                    ));
                }
                *lock(&self.epoch) = Some(EpochClock {
                    period,
                    started: None,
                });
                lock(&self.zones).set_epoch_by_reads(false);
                Ok(())
            }
            "track" => {
                let on = match value.trim() {
                    "on" => true,
                    "off" => false,
                    other => {
                        return Err(format!(
                            "track {other:?} is neither \"on\" nor \"off\" (whether reads \
                             feed the zone table)"
                        ))
                    }
                };
                self.tracking.store(on, Ordering::Relaxed);
                Ok(())
            }
            other => Err(format!("layout {} has no option {other:?}", self.kind)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raid5(zone: u64) -> Ido {
        let shape = Shape {
            members: 3,
            member_bytes: 1 << 20,
            chunk: 16384,
            options: Default::default(),
        };
        Ido::with_zone_bytes(
            Level::Raid5,
            Raid56::new(Level::Raid5, &shape).unwrap(),
            zone,
        )
        .unwrap()
    }

    #[test]
    fn with_track_off_reads_leave_the_zone_table_alone() {
        let ido = raid5(256 << 10);
        let views = vec![MemberView::healthy(0.0); 3];
        assert!(ido
            .set_option("track", "sometimes")
            .unwrap_err()
            .contains("track"));
        assert!(!ido.option_places_data("track"));
        ido.set_option("track", "off").unwrap();
        ido.plan(IoKind::Read, 0, 4096, &views).unwrap();
        assert_eq!(ido.zone_table().popularity(0), 0);
        ido.set_option("track", "on").unwrap();
        ido.plan(IoKind::Read, 0, 4096, &views).unwrap();
        assert_eq!(ido.zone_table().popularity(0), 1);
    }

    #[test]
    fn reads_count_but_a_wake_does_not() {
        let ido = raid5(256 << 10);
        let views = vec![MemberView::healthy(0.0); 3];
        ido.plan(IoKind::Read, 300 << 10, 4096, &views).unwrap();
        ido.plan(IoKind::Write, 0, 4096, &views).unwrap();
        ido.read_members(0, 4096, &views).unwrap();
        let t = ido.zone_table();
        assert_eq!(t.popularity(1), 1);
        assert_eq!(t.popularity(0), 0);
        assert!(ido.metadata_bytes() >= 8 * 5);
    }

    #[test]
    fn the_rebuild_takes_hinted_then_hot_zones_then_cold_ones_in_order() {
        // 2 MiB in 8 zones of 256 KiB (128 KiB per member).
        let ido = raid5(256 << 10);
        let views = vec![MemberView::healthy(0.0); 3];
        for _ in 0..3 {
            ido.plan(IoKind::Read, 5 * (256 << 10), 4096, &views)
                .unwrap();
        }
        ido.hint(&[(6 * (256 << 10), 1)]);
        let zm = 128 << 10;
        let mut order = Vec::new();
        let mut watermark = 0;
        while watermark < ido.member_data_bytes() {
            let (offset, len) = ido.rebuild_next(1, watermark, 48 << 10);
            assert!(len > 0 && offset + len <= ido.member_data_bytes());
            let z = offset / zm;
            if order.last() != Some(&z) {
                order.push(z);
            }
            watermark = ido.rebuilt(1, offset, len, watermark);
        }
        assert_eq!(order, vec![6, 5, 0, 1, 2, 3, 4, 7]);
        assert!((0..8).all(|z| ido.zone_table().flags(z) & RECONSTRUCTED != 0));
        ido.member_replaced(1);
        assert_eq!(ido.zone_table().flags(0) & RECONSTRUCTED, 0);
    }

    #[test]
    fn with_epoch_s_popularity_halves_as_the_clock_passes_periods_not_as_reads_count() {
        let ido = raid5(256 << 10);
        let views = vec![MemberView::healthy(0.0); 3];
        for bad in ["0", "-1", "nan", "inf", "1e9", "soon"] {
            let e = ido.set_option("epoch_s", bad).unwrap_err();
            assert!(e.contains("epoch_s"), "{bad}: {e}");
        }
        assert!(!ido.option_places_data("epoch_s"));
        ido.set_option("epoch_s", "10").unwrap();
        ido.next_wakeup(100.0);
        for _ in 0..zone_table::EPOCH_READS + 8 {
            ido.plan(IoKind::Read, 0, 4096, &views).unwrap();
        }
        let reads = (zone_table::EPOCH_READS + 8) as u32;
        assert_eq!(ido.zone_table().popularity(0), reads, "reads end no epoch");
        ido.next_wakeup(109.9);
        assert_eq!(ido.zone_table().popularity(0), reads, "within the period");
        ido.next_wakeup(110.0);
        assert_eq!(ido.zone_table().popularity(0), reads / 2, "one period");
        ido.next_wakeup(135.0);
        assert_eq!(
            ido.zone_table().popularity(0),
            reads / 8,
            "two more periods"
        );
        // The epoch boundary stays on the period grid: 140 ends the epoch begun at 130.
        ido.next_wakeup(140.0);
        assert_eq!(ido.zone_table().popularity(0), reads / 16);
        // A zone_size change keeps the clock's epochs.
        ido.set_option("zone_size", "3MiB").unwrap();
        for _ in 0..zone_table::EPOCH_READS + 1 {
            ido.plan(IoKind::Read, 0, 4096, &views).unwrap();
        }
        assert_eq!(
            ido.zone_table().popularity(0),
            (zone_table::EPOCH_READS + 1) as u32
        );
    }

    #[test]
    fn a_zone_table_that_cannot_be_replayed_is_dropped_not_half_applied() {
        let ido = raid5(256 << 10);
        let views = vec![MemberView::healthy(0.0); 3];
        ido.plan(IoKind::Read, 0, 4096, &views).unwrap();
        let image = ido.checkpoint_image().unwrap();
        let good = LayoutRecord {
            kind: ZONE_DELTA_RECORD,
            payload: {
                ido.plan(IoKind::Read, 256 << 10, 4096, &views).unwrap();
                match lock(&ido.zones).take_changes() {
                    Changes::Delta(d) => d,
                    other => panic!("{other:?}"),
                }
            },
        };
        let back = raid5(256 << 10);
        back.replay(Some(&image), std::slice::from_ref(&good))
            .unwrap();
        assert_eq!(back.zone_table().popularity(0), 1);
        assert_eq!(back.zone_table().popularity(1), 1);
        let foreign = LayoutRecord {
            kind: 0x7777,
            payload: Vec::new(),
        };
        let back = raid5(256 << 10);
        back.replay(Some(&image), &[good, foreign]).unwrap();
        assert_eq!(back.zone_table(), raid5(256 << 10).zone_table());
    }

    #[test]
    fn a_plan_across_zones_is_the_zones_plans_joined() {
        let ido = raid5(64 << 10);
        let plain = Raid56::new(
            Level::Raid5,
            &Shape {
                members: 3,
                member_bytes: 1 << 20,
                chunk: 16384,
                options: Default::default(),
            },
        )
        .unwrap();
        let mut views = vec![MemberView::healthy(0.0); 3];
        views[2] = MemberView {
            valid_below: 0,
            writable: true,
            ready_at: 0.0,
            ..MemberView::healthy(0.0)
        };
        // Member 2 rebuilt zone 1 (member bytes 32..64 KiB) only.
        let (o, l) = (32 << 10, 32 << 10);
        ido.member_replaced(2);
        lock(&ido.progress).insert(2, ido.initial_progress(0));
        assert_eq!(ido.rebuilt(2, o, l, 0), 0);
        // A write over zones 0..3: in zone 1 member 2 is valid, elsewhere it is not.
        let plan = ido
            .plan(IoKind::Write, 16 << 10, 160 << 10, &views)
            .unwrap();
        let mut valid = views.clone();
        valid[2].valid_below = u64::MAX;
        let mut expect = plain
            .plan(IoKind::Write, 16 << 10, 48 << 10, &views)
            .unwrap();
        append(
            &mut expect,
            plain
                .plan(IoKind::Write, 64 << 10, 64 << 10, &valid)
                .unwrap(),
            48 << 10,
        );
        append(
            &mut expect,
            plain
                .plan(IoKind::Write, 128 << 10, 48 << 10, &views)
                .unwrap(),
            112 << 10,
        );
        assert_eq!(plan, expect);
    }

    /// A `raid5-ido-s` of 3 + 2 members of 1 MiB, 16 KiB chunks.
    fn raid5s() -> Ido {
        let shape = Shape {
            members: 5,
            member_bytes: 1 << 20,
            chunk: 16384,
            options: Default::default(),
        };
        Ido::with_surrogates(Level::Raid5, &shape).unwrap()
    }

    #[test]
    fn a_forged_surrogate_record_fails_the_replay_with_a_clear_error_not_a_panic() {
        let word = |w: &[u64]| -> Vec<u8> { w.iter().flat_map(|v| v.to_le_bytes()).collect() };
        let cases: [(u16, Vec<u64>); 5] = [
            (0x1703, vec![u64::MAX - 10, 100, 0]),
            (0x1703, vec![0, 4096, u64::MAX - 100]),
            (0x1705, vec![1 << 40, 0]),
            (0x1705, vec![1, u64::MAX - 5]),
            (0x1706, vec![1 << 40]),
        ];
        for (kind, values) in cases {
            let forged = LayoutRecord {
                kind,
                payload: word(&values),
            };
            let caught = std::panic::catch_unwind(|| raid5s().replay(None, &[forged]));
            let result = caught.unwrap_or_else(|_| panic!("{kind:#x} {values:?}: replay panicked"));
            let e = result.expect_err(&format!("{kind:#x} {values:?} accepted"));
            assert!(
                e.contains("outside") || e.contains("zones"),
                "{kind:#x}: {e}"
            );
        }
        // A checkpoint image whose D Map count would overflow the word arithmetic.
        let ido = raid5s();
        let mut image = ido.checkpoint_image().unwrap();
        let zones = u64::from_le_bytes(image[1..9].try_into().unwrap()) as usize;
        image.truncate(9 + zones);
        image.extend(word(&[u64::MAX / 3 + 1, 0]));
        let caught = std::panic::catch_unwind(|| raid5s().replay(Some(&image), &[]));
        let result = caught.unwrap_or_else(|_| panic!("image: replay panicked"));
        assert!(result.unwrap_err().contains("items"));
    }
}
