//! Track-aligned RAID5 (the track-alignment paper's modified RAID5). A stripe starts at the
//! same member offset on every member, and its chunk is the smallest track among the
//! members at that position: it ends at the first track boundary of any member. So parity
//! is XORed over chunks of one size at equal member offsets (the engine's sync groups,
//! resync and scrub work as for RAID5), and no chunk, hence no member I/O, crosses a track
//! boundary on any member. Members whose boundaries do not coincide get stripes shorter
//! than a track (cut where either member's track ends).
//!
//! The paper's second lesson: "whenever the parity holding disk in a stripe was the only one
//! not requested for that stripe, we filled in the read request for that disk" and
//! discarded the data, so the member's track read is not fragmented by skipping its parity
//! chunk. Option `fill_parity_read` (default true) does that.
//!
//! Option `stripe = per_member` is the paper's own scheme for members whose tracks differ:
//! row `k` is track `k` of every member (its units at different member offsets), and its
//! units are as long as the row's shortest track, since parity XORs units of one size (the
//! paper: "use the smallest track size as the chunk unit, leading to about 10% of unused
//! sectors for disks with larger track sizes"; here the smallest of each row, so a
//! defect-shortened track shortens its own row only). The rest of a longer track is
//! padding, never read or written, so no member I/O leaves a track and a row's read is one
//! track-start-aligned read per member. A request locks every member's tracks of its rows;
//! resync and scrub see a row's units side by side (`Personality::sync_pieces`).
//!
//! The parity arithmetic and its degraded paths are RAID5's own: each stripe is planned by
//! an inner `Raid56` whose stripe `s` sits at virtual member offset `s * VIRTUAL_CHUNK`
//! (its first `len(s)` bytes used), and the plan's member offsets are mapped back.

use std::sync::atomic::{AtomicBool, Ordering};

use super::raid0_tracks::{model_tracks, DEFAULT_MODEL};
use super::{
    Buf, Compute, LayoutError, LayoutKind, LayoutOptions, MemberIo, MemberView, Personality, Plan,
    Reconcile, Role, Shape, ShapeProblem, SyncCopy, SYNC_BLOCK,
};
use crate::layout::Raid56;
use crate::parity::{Geometry, Level};
use crate::service_model::IoKind;
use crate::tracks::map::TrackMap;

/// The name in the registry.
pub const NAME: &str = "raid5-tracks";
/// The option that fills in the parity member's read of a fully read stripe.
pub const FILL_PARITY_READ: &str = "fill_parity_read";
/// The option that places stripes: `equal_offset` (default) or `per_member`.
pub const STRIPE: &str = "stripe";

/// Where a stripe's units sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stripe {
    /// At one member offset, ending at the first boundary of any member.
    EqualOffset,
    /// Row `k` on track `k` of every member, as long as the row's shortest track.
    PerMember,
}

impl Stripe {
    pub fn parse(value: &str) -> Result<Self, String> {
        match value {
            "equal_offset" => Ok(Self::EqualOffset),
            "per_member" => Ok(Self::PerMember),
            other => Err(format!(
                "{STRIPE} = {other:?}: it is equal_offset or per_member"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::EqualOffset => "equal_offset",
            Self::PerMember => "per_member",
        }
    }
}

#[derive(Debug)]
pub struct Raid5Tracks {
    kind: LayoutKind,
    members: Vec<TrackMap>,
    stripe: Stripe,
    /// Per member, the member offset where each stripe's unit starts, then the end of the
    /// member's last stripe (the same on every member with equal offsets).
    starts: Vec<Vec<u64>>,
    /// Each stripe's unit length (the same on every member).
    lens: Vec<u64>,
    /// Where each stripe starts in the sync space (units side by side), then its size.
    sync_starts: Vec<u64>,
    /// Volume offset where each stripe's data starts, then the capacity.
    data_starts: Vec<u64>,
    /// Plans one stripe at a time in virtual member offsets.
    inner: Raid56,
    /// The inner layout's stripe geometry (which member holds parity of a stripe).
    geometry: Geometry,
    virtual_chunk: u64,
    fill_parity_read: AtomicBool,
}

fn shape_error(problem: String) -> LayoutError {
    LayoutError::Shape {
        layout: LayoutKind::RAID5_TRACKS,
        problem,
    }
}

impl Raid5Tracks {
    pub fn check(members: usize, chunk: u64) -> Result<(), ShapeProblem> {
        Raid56::check5(members, chunk)
    }

    /// The registry's constructor: the default model's tracks, unit = member index.
    pub fn new(shape: &Shape) -> Result<Self, LayoutError> {
        Self::check(shape.members, shape.chunk).map_err(|p| shape_error(p.problem))?;
        let maps = (0..shape.members)
            .map(|i| model_tracks(DEFAULT_MODEL, Some(i as u64), shape.member_bytes))
            .collect::<Result<Vec<_>, _>>()?;
        Self::with_options(maps, shape.member_bytes, &shape.options)
    }

    /// Over members with these tracks (in bytes), stripes placed as the layout options'
    /// `stripe` says (assembly and replay, whose tracks come from elsewhere).
    pub fn with_options(
        maps: Vec<TrackMap>,
        member_bytes: u64,
        options: &LayoutOptions,
    ) -> Result<Self, LayoutError> {
        let stripe = options
            .get(STRIPE)
            .map_or(Ok(Stripe::EqualOffset), Stripe::parse)
            .map_err(shape_error)?;
        Self::with_stripe(maps, member_bytes, stripe)
    }

    /// Over members with these tracks (in bytes), using at most `member_bytes` of each,
    /// stripes at equal member offsets.
    pub fn with_tracks(maps: Vec<TrackMap>, member_bytes: u64) -> Result<Self, LayoutError> {
        Self::with_stripe(maps, member_bytes, Stripe::EqualOffset)
    }

    /// Over members with these tracks (in bytes), stripes placed as `stripe` says.
    pub fn with_stripe(
        maps: Vec<TrackMap>,
        member_bytes: u64,
        stripe: Stripe,
    ) -> Result<Self, LayoutError> {
        Self::check(maps.len(), 65536).map_err(|p| shape_error(p.problem))?;
        let (starts, lens) = match stripe {
            Stripe::EqualOffset => equal_offset_stripes(&maps, member_bytes),
            Stripe::PerMember => per_member_rows(&maps, member_bytes),
        };
        if lens.is_empty() {
            return Err(shape_error(format!(
                "no whole stripe of tracks fits the members' {member_bytes} data bytes"
            )));
        }
        let k = (maps.len() - 1) as u64;
        let prefix = |step: u64| {
            let mut out = vec![0u64];
            for &l in &lens {
                let last = out.last().copied().unwrap_or(0);
                out.push(last + step * l);
            }
            out
        };
        let data_starts = prefix(k);
        let sync_starts = prefix(1);
        let longest = lens.iter().copied().max().unwrap_or(0);
        let virtual_chunk = longest.max(4096).next_power_of_two();
        let stripes = lens.len() as u64;
        let inner = Raid56::new(
            Level::Raid5,
            &Shape {
                members: maps.len(),
                member_bytes: stripes * virtual_chunk,
                chunk: virtual_chunk,
                options: Default::default(),
            },
        )?;
        let geometry = Geometry::new(
            Level::Raid5,
            maps.len(),
            virtual_chunk,
            stripes * virtual_chunk,
        )
        .map_err(|e| shape_error(e.to_string()))?;
        let kind = LayoutKind::RAID5_TRACKS;
        Ok(Self {
            kind,
            members: maps,
            stripe,
            starts,
            lens,
            sync_starts,
            data_starts,
            inner,
            geometry,
            virtual_chunk,
            fill_parity_read: AtomicBool::new(true),
        })
    }

    /// The member tracks in use (bytes).
    pub fn member_tracks(&self) -> &[TrackMap] {
        &self.members
    }

    /// Member 0's offsets where the stripes start, then where the last one ends.
    pub fn stripe_starts(&self) -> &[u64] {
        &self.starts[0]
    }

    /// Member `m`'s offsets where the stripes start, then where its last one ends.
    pub fn member_stripe_starts(&self, m: usize) -> &[u64] {
        &self.starts[m]
    }

    /// Each stripe's unit length.
    pub fn unit_lens(&self) -> &[u64] {
        &self.lens
    }

    pub fn stripe(&self) -> Stripe {
        self.stripe
    }

    fn k(&self) -> u64 {
        (self.members.len() - 1) as u64
    }

    fn stripe_len(&self, s: usize) -> u64 {
        self.lens[s]
    }

    fn stripes(&self) -> usize {
        self.lens.len()
    }

    /// Where member `m`'s unit of stripe `s` starts.
    fn at(&self, m: usize, s: usize) -> u64 {
        self.starts[m][s]
    }

    /// The stripe holding volume offset `v`.
    fn stripe_of_data(&self, v: u64) -> usize {
        self.data_starts.partition_point(|&d| d <= v).max(1) - 1
    }

    /// The stripe whose track holds member `m`'s offset `offset` (its unit, or the padding
    /// after it); `stripes()` past the last one.
    fn stripe_of_member(&self, m: usize, offset: u64) -> usize {
        let starts = &self.starts[m];
        if offset >= starts[starts.len() - 1] {
            return self.stripes();
        }
        starts.partition_point(|&s| s <= offset).max(1) - 1
    }

    /// The stripe holding sync offset `offset`.
    fn stripe_of_sync(&self, offset: u64) -> usize {
        (self.sync_starts.partition_point(|&s| s <= offset).max(1) - 1).min(self.stripes() - 1)
    }

    /// `offset..offset+len` as pieces inside one chunk each: (stripe, data index, offset in
    /// the chunk, length, offset in the caller's buffer).
    fn pieces(&self, offset: u64, len: u64) -> Vec<(usize, u64, u64, u64, u64)> {
        let mut out = Vec::new();
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let s = self.stripe_of_data(at);
            let l = self.stripe_len(s);
            let w = at - self.data_starts[s];
            let (index, within) = (w / l, w % l);
            let n = (l - within).min(end - at);
            out.push((s, index, within, n, at - offset));
            at += n;
        }
        out
    }

    /// Member `m`'s real offset as the inner layout's (padding: the next stripe's start),
    /// and back.
    fn to_virtual(&self, m: usize, member_offset: u64) -> u64 {
        let s = self.stripe_of_member(m, member_offset);
        if s >= self.stripes() {
            return s as u64 * self.virtual_chunk;
        }
        let within = member_offset - self.at(m, s);
        if within >= self.lens[s] {
            (s as u64 + 1) * self.virtual_chunk
        } else {
            s as u64 * self.virtual_chunk + within
        }
    }

    fn to_real(&self, m: usize, virtual_offset: u64) -> u64 {
        let s = (virtual_offset / self.virtual_chunk) as usize;
        self.at(m, s) + virtual_offset % self.virtual_chunk
    }

    /// The members' views in virtual offsets (a rebuild watermark maps monotonically).
    fn virtual_views(&self, views: &[MemberView]) -> Vec<MemberView> {
        views
            .iter()
            .enumerate()
            .map(|(m, v)| MemberView {
                valid_below: if v.valid_below >= self.starts[m][self.stripes()] {
                    u64::MAX
                } else {
                    self.to_virtual(m, v.valid_below)
                },
                ..*v
            })
            .collect()
    }

    /// Append the inner plan `part` to `plan`: member offsets back to real ones, caller
    /// offsets moved by `buf_shift`, scratch buffers renumbered.
    fn append(&self, plan: &mut Plan, part: Plan, buf_shift: u64) {
        let base = plan.scratch.len();
        let buf = |b: Buf| match b {
            Buf::Caller(o) => Buf::Caller(o + buf_shift),
            Buf::Scratch(i, o) => Buf::Scratch(i + base, o),
        };
        let io = |io: MemberIo| MemberIo {
            member: io.member,
            member_offset: self.to_real(io.member, io.member_offset),
            len: io.len,
            buf: buf(io.buf),
        };
        plan.scratch.extend(part.scratch);
        plan.reads.extend(part.reads.into_iter().map(io));
        plan.writes.extend(part.writes.into_iter().map(io));
        plan.compute
            .extend(part.compute.into_iter().map(|c| match c {
                Compute::Copy { from, to, len } => Compute::Copy {
                    from: buf(from),
                    to: buf(to),
                    len,
                },
                Compute::Syndrome { data, p, q, len } => Compute::Syndrome {
                    data: data.into_iter().map(buf).collect(),
                    p: buf(p),
                    q: q.map(buf),
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
                    old: buf(old),
                    new: buf(new),
                    p: p.map(buf),
                    q: q.map(buf),
                    len,
                },
                Compute::Reconstruct {
                    level,
                    chunks,
                    lost,
                    len,
                } => Compute::Reconstruct {
                    level,
                    chunks: chunks.into_iter().map(buf).collect(),
                    lost,
                    len,
                },
            }));
    }

    /// Stripe `s`'s members in syndrome order (data indices, then P).
    fn stripe_members(&self, s: usize) -> Vec<usize> {
        self.geometry.syndrome_members(s as u64)
    }

    /// A write of whole stripe `s` (its data at `buf`): data and fresh parity, nothing read.
    fn full_stripe_write(&self, plan: &mut Plan, s: usize, buf: u64) {
        let l = self.stripe_len(s);
        let members = self.stripe_members(s);
        let k = self.k() as usize;
        plan.scratch.push(l);
        let p = Buf::Scratch(plan.scratch.len() - 1, 0);
        plan.compute.push(Compute::Syndrome {
            data: (0..k as u64).map(|i| Buf::Caller(buf + i * l)).collect(),
            p,
            q: None,
            len: l,
        });
        for (i, &m) in members.iter().enumerate() {
            plan.writes.push(MemberIo {
                member: m,
                member_offset: self.at(m, s),
                len: l,
                buf: if i < k {
                    Buf::Caller(buf + i as u64 * l)
                } else {
                    p
                },
            });
        }
    }
}

impl Raid5Tracks {
    /// A write of `pieces` (all in one stripe). The stripe's member range is cut into rows
    /// where the set of pieces, and every member's validity, stays the same; each row
    /// updates parity once: read-modify-write, or from the other data chunks when a written
    /// member cannot give its old bytes.
    fn stripe_write(
        &self,
        plan: &mut Plan,
        offset: u64,
        pieces: &[(usize, u64, u64, u64, u64)],
        views: &[MemberView],
    ) -> Result<(), LayoutError> {
        let Some(&(s, ..)) = pieces.first() else {
            return Ok(());
        };
        let l = self.stripe_len(s);
        let members = self.stripe_members(s);
        let k = self.k() as usize;
        let parity = members[k];
        let mut cuts: Vec<u64> = pieces
            .iter()
            .flat_map(|p| [p.2, p.2 + p.3])
            .chain(views.iter().enumerate().filter_map(|(m, v)| {
                let base = self.at(m, s);
                (v.valid_below > base && v.valid_below < base + l).then(|| v.valid_below - base)
            }))
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        for w in cuts.windows(2) {
            let (x, y) = (w[0], w[1]);
            let len = y - x;
            // The pieces covering this row: (data index, caller offset of byte x).
            let written: Vec<(usize, u64)> = pieces
                .iter()
                .filter(|p| p.2 <= x && p.2 + p.3 >= y)
                .map(|p| (p.1 as usize, p.4 + (x - p.2)))
                .collect();
            if written.is_empty() {
                continue;
            }
            let at = |m: usize| self.at(m, s) + x;
            let holds = |m: usize| views[m].holds(at(m), len);
            let no_copy = || LayoutError::NoLiveCopy {
                offset: offset + written[0].1,
                end: offset + written[0].1 + len,
            };
            let write_data = |plan: &mut Plan| {
                for &(d, buf) in &written {
                    if holds(members[d]) {
                        plan.writes.push(MemberIo {
                            member: members[d],
                            member_offset: at(members[d]),
                            len,
                            buf: Buf::Caller(buf),
                        });
                    }
                }
            };
            if !holds(parity) {
                // No parity to keep (lost, or above a rebuild's watermark: rebuilt later).
                write_data(plan);
                continue;
            }
            let p = Buf::Scratch(plan.scratch.len(), 0);
            plan.scratch.push(len);
            if written.iter().all(|&(d, _)| holds(members[d])) {
                plan.reads.push(MemberIo {
                    member: parity,
                    member_offset: at(parity),
                    len,
                    buf: p,
                });
                for &(d, buf) in &written {
                    let old = Buf::Scratch(plan.scratch.len(), 0);
                    plan.scratch.push(len);
                    plan.reads.push(MemberIo {
                        member: members[d],
                        member_offset: at(members[d]),
                        len,
                        buf: old,
                    });
                    plan.compute.push(Compute::Delta {
                        index: d,
                        old,
                        new: Buf::Caller(buf),
                        p: Some(p),
                        q: None,
                        len,
                    });
                }
            } else {
                // A written member cannot give its old bytes: parity from all the data.
                let mut data = Vec::with_capacity(k);
                for (d, &m) in members.iter().enumerate().take(k) {
                    if let Some(&(_, buf)) = written.iter().find(|w| w.0 == d) {
                        data.push(Buf::Caller(buf));
                    } else if holds(m) {
                        let b = Buf::Scratch(plan.scratch.len(), 0);
                        plan.scratch.push(len);
                        plan.reads.push(MemberIo {
                            member: m,
                            member_offset: at(m),
                            len,
                            buf: b,
                        });
                        data.push(b);
                    } else {
                        return Err(no_copy());
                    }
                }
                plan.compute.push(Compute::Syndrome {
                    data,
                    p,
                    q: None,
                    len,
                });
            }
            write_data(plan);
            plan.writes.push(MemberIo {
                member: parity,
                member_offset: at(parity),
                len,
                buf: p,
            });
        }
        Ok(())
    }
}

impl Personality for Raid5Tracks {
    fn kind(&self) -> LayoutKind {
        self.kind
    }

    fn member_count(&self) -> usize {
        self.members.len()
    }

    /// The furthest member's end of its last stripe.
    fn member_data_bytes(&self) -> u64 {
        self.starts
            .iter()
            .map(|s| s[s.len() - 1])
            .max()
            .unwrap_or(0)
    }

    /// The longest chunk.
    fn stripe_unit(&self) -> u64 {
        self.lens.iter().copied().max().unwrap_or(0)
    }

    fn capacity(&self) -> u64 {
        self.data_starts[self.data_starts.len() - 1]
    }

    fn role(&self, _member: usize) -> Role {
        Role::DataAndParity
    }

    fn set_option(&self, key: &str, value: &str) -> Result<(), String> {
        match key {
            FILL_PARITY_READ => {
                let on = value
                    .parse::<bool>()
                    .map_err(|_| format!("{value:?} is not true or false"))?;
                self.fill_parity_read.store(on, Ordering::Relaxed);
                Ok(())
            }
            // Read by the constructor (it places the stripes): only the same value.
            STRIPE => {
                let asked = Stripe::parse(value)?;
                if asked == self.stripe {
                    Ok(())
                } else {
                    Err(format!(
                        "{STRIPE} = {value:?}, but the layout was built with {}",
                        self.stripe.name()
                    ))
                }
            }
            other => Err(format!(
                "layout {NAME} has no option {other:?} (it has {FILL_PARITY_READ}, {STRIPE})"
            )),
        }
    }

    /// Filling in a read moves no data.
    fn option_places_data(&self, key: &str) -> bool {
        key != FILL_PARITY_READ
    }

    fn plan(
        &self,
        kind: IoKind,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.check_range(offset, len)?;
        let vviews = self.virtual_views(views);
        let pieces = self.pieces(offset, len);
        let mut plan = Plan::default();
        let all_hold = |s: usize| {
            views
                .iter()
                .enumerate()
                .all(|(m, v)| v.holds(self.at(m, s), self.stripe_len(s)))
        };
        let mut i = 0;
        while i < pieces.len() {
            let (s, index, within, n, buf) = pieces[i];
            let l = self.stripe_len(s);
            let whole = index == 0 && within == 0 && i + self.k() as usize <= pieces.len() && {
                pieces[i..i + self.k() as usize]
                    .iter()
                    .all(|p| p.0 == s && p.2 == 0 && p.3 == l)
            };
            if whole && kind == IoKind::Write && all_hold(s) {
                self.full_stripe_write(&mut plan, s, buf);
                i += self.k() as usize;
                continue;
            }
            if whole && kind == IoKind::Read && all_hold(s) {
                let members = self.stripe_members(s);
                for (d, &m) in members.iter().enumerate().take(self.k() as usize) {
                    plan.reads.push(MemberIo {
                        member: m,
                        member_offset: self.at(m, s),
                        len: l,
                        buf: Buf::Caller(buf + d as u64 * l),
                    });
                }
                if self.fill_parity_read.load(Ordering::Relaxed) {
                    // The paper's filled-in read: the parity member reads its chunk too
                    // (discarded), so its track read is not cut around the parity.
                    plan.scratch.push(l);
                    let parity = members[self.k() as usize];
                    plan.reads.push(MemberIo {
                        member: parity,
                        member_offset: self.at(parity, s),
                        len: l,
                        buf: Buf::Scratch(plan.scratch.len() - 1, 0),
                    });
                }
                i += self.k() as usize;
                continue;
            }
            if kind == IoKind::Write {
                // Every piece of this stripe in one go: pieces of one stripe share parity
                // bytes, which separate plans would each update from the same old parity.
                let mut j = i;
                while j < pieces.len() && pieces[j].0 == s {
                    j += 1;
                }
                self.stripe_write(&mut plan, offset, &pieces[i..j], views)?;
                i = j;
                continue;
            }
            let v = s as u64 * self.k() * self.virtual_chunk + index * self.virtual_chunk + within;
            let part = self.inner.plan(kind, v, n, &vviews)?;
            self.append(&mut plan, part, buf);
            i += 1;
        }
        Ok(plan)
    }

    fn recover(
        &self,
        member: usize,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        let vviews = self.virtual_views(views);
        let mut plan = Plan::default();
        let end = offset.saturating_add(len).min(self.member_data_bytes());
        let mut at = offset;
        while at < end {
            let s = self.stripe_of_member(member, at);
            if s >= self.stripes() {
                break; // past this member's last stripe: nothing of the volume there
            }
            let unit_end = self.at(member, s) + self.lens[s];
            if at >= unit_end {
                at = self.starts[member][s + 1].min(end); // padding: never used
                continue;
            }
            let n = unit_end.min(end) - at;
            let part = self
                .inner
                .recover(member, self.to_virtual(member, at), n, &vviews)?;
            self.append(&mut plan, part, at - offset);
            at += n;
        }
        Ok(plan)
    }

    fn sync_groups(&self) -> Vec<Vec<usize>> {
        vec![(0..self.members.len()).collect()]
    }

    fn lock_spans(&self, offset: u64, len: u64) -> Vec<(usize, u64, u64)> {
        if len == 0 {
            return Vec::new();
        }
        let first = self.stripe_of_data(offset);
        let last = self.stripe_of_data(offset + len - 1);
        // Every member's tracks of those stripes (one span when the offsets are equal).
        let mut spans: Vec<(usize, u64, u64)> = (0..self.members.len())
            .map(|m| (m, self.at(m, first), self.starts[m][last + 1]))
            .collect();
        spans.dedup_by_key(|s| (s.1, s.2));
        spans
    }

    fn sync_pieces(&self, member: usize, offset: u64, len: u64) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        let end = offset.saturating_add(len).min(self.sync_bytes());
        let mut at = offset;
        while at < end {
            let s = self.stripe_of_sync(at);
            let n = self.sync_starts[s + 1].min(end) - at;
            let real = self.at(member, s) + (at - self.sync_starts[s]);
            match out.last_mut() {
                Some(last) if last.0 + last.1 == real => last.1 += n,
                _ => out.push((real, n)),
            }
            at += n;
        }
        out
    }

    fn sync_bytes(&self) -> u64 {
        self.sync_starts[self.stripes()]
    }

    fn sync_range(&self, start: u64, end: u64) -> (u64, u64) {
        if end <= start {
            return (start, start);
        }
        let n = self.members.len();
        let first = (0..n)
            .map(|m| self.stripe_of_member(m, start))
            .min()
            .unwrap_or(0);
        let last = (0..n)
            .map(|m| self.stripe_of_member(m, end - 1))
            .max()
            .unwrap_or(0);
        if first >= self.stripes() {
            return (self.sync_bytes(), self.sync_bytes());
        }
        let last = last.min(self.stripes() - 1);
        (self.sync_starts[first], self.sync_starts[last + 1])
    }

    /// Parity is recomputed from the data at each sync offset (a stripe's units side by
    /// side); a piece one member cannot vouch for is rebuilt from the others.
    fn reconcile(&self, offset: u64, group: &[SyncCopy], len: u64) -> Result<Reconcile, String> {
        let n = self.members.len();
        let unit = group
            .iter()
            .find_map(|c| c.bytes.as_ref().map(Vec::len))
            .unwrap_or(len as usize);
        let mut out: Vec<Option<Vec<u8>>> = vec![None; n];
        let copy_of = |m: usize| group.iter().find(|c| c.member == m);
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let s = self.stripe_of_sync(at);
            let stripe_end = self.sync_starts[s + 1].min(end);
            // Work in pieces that stay inside one stripe and one readability block.
            let block_end = (at - offset) / SYNC_BLOCK * SYNC_BLOCK + SYNC_BLOCK + offset;
            let to = stripe_end.min(block_end).max(at + 1).min(end);
            let range = (at - offset) as usize..(to - offset) as usize;
            let block = ((at - offset) / SYNC_BLOCK) as usize;
            let members = self.stripe_members(s);
            let parity = members[n - 1];
            let lost: Vec<usize> = (0..n)
                .filter(|&m| {
                    copy_of(m).is_none_or(|c| {
                        c.bytes.is_none() || !c.readable.get(block).copied().unwrap_or(false)
                    })
                })
                .collect();
            if lost.len() > 1 {
                return Err(format!(
                    "stripe {s}: {} of its chunks cannot be read, parity covers 1",
                    lost.len()
                ));
            }
            // The member to recompute: the lost one, else the parity.
            let target = lost.first().copied().unwrap_or(parity);
            let mut xor = vec![0u8; range.len()];
            for m in (0..n).filter(|&m| m != target) {
                if let Some(bytes) = copy_of(m).and_then(|c| c.bytes.as_ref()) {
                    for (x, b) in xor.iter_mut().zip(&bytes[range.clone()]) {
                        *x ^= b;
                    }
                }
            }
            let current = copy_of(target).and_then(|c| c.bytes.as_ref());
            let differs = !lost.is_empty() || current.is_none_or(|b| b[range.clone()] != xor[..]);
            if differs && copy_of(target).is_some() {
                let bytes = out[target]
                    .get_or_insert_with(|| current.cloned().unwrap_or_else(|| vec![0u8; unit]));
                bytes[range].copy_from_slice(&xor);
            }
            at = to;
        }
        Ok(Reconcile {
            rewrites: out
                .into_iter()
                .enumerate()
                .filter_map(|(m, b)| b.map(|b| (m, b)))
                .collect(),
        })
    }

    fn member_metadata(&self, member: usize) -> Vec<(u64, Vec<u8>)> {
        self.members
            .get(member)
            .map(crate::tracks::stored::metadata_of)
            .unwrap_or_default()
    }

    fn survives(&self, valid: &[bool]) -> bool {
        let missing = (0..self.members.len())
            .filter(|&m| !valid.get(m).copied().unwrap_or(false))
            .count();
        missing <= 1
    }
}

/// Stripes at one member offset, each ending at the nearest boundary of any member:
/// (per member the unit starts, then the end; unit lengths).
fn equal_offset_stripes(maps: &[TrackMap], member_bytes: u64) -> (Vec<Vec<u64>>, Vec<u64>) {
    let end = maps
        .iter()
        .map(TrackMap::sectors)
        .min()
        .unwrap_or(0)
        .min(member_bytes);
    let mut starts = vec![0u64];
    let mut at = 0;
    loop {
        let next = maps.iter().map(|m| m.track(at).2).min().unwrap_or(at);
        if next <= at || next > end {
            break;
        }
        starts.push(next);
        at = next;
    }
    let lens = starts.windows(2).map(|w| w[1] - w[0]).collect();
    (vec![starts; maps.len()], lens)
}

/// Row `k` on track `k` of every member (whole tracks within `member_bytes`), its units as
/// long as the row's shortest track.
fn per_member_rows(maps: &[TrackMap], member_bytes: u64) -> (Vec<Vec<u64>>, Vec<u64>) {
    let whole = |m: &TrackMap| {
        (0..m.tracks())
            .take_while(|&i| m.start(i + 1) <= member_bytes)
            .count()
    };
    let rows = maps.iter().map(whole).min().unwrap_or(0);
    let lens = (0..rows)
        .map(|k| {
            maps.iter()
                .map(|m| m.start(k + 1) - m.start(k))
                .min()
                .unwrap_or(0)
        })
        .collect();
    let starts = maps
        .iter()
        .map(|m| (0..=rows).map(|k| m.start(k)).collect())
        .collect();
    (starts, lens)
}

#[cfg(test)]
#[path = "raid5_tracks_tests.rs"]
mod tests;
