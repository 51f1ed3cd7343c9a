//! Track-aligned RAID10: members form mirrored pairs (0,1), (2,3), …, and the two mirrors of
//! a pair have tracks of their own sizes (units of one model differ). Each mirror keeps its
//! own offset table: row `k` of a pair is track `k` of both mirrors, as long as the shorter
//! of the two (the rest of the longer track is padding, never used), so a row starts at
//! each mirror's own track boundary and no member I/O leaves a track on either mirror. A
//! read takes the readiest mirror: both hold the whole piece inside one of their tracks.
//! Volume chunks rotate over the pairs row by row, like RAID10's stripe units (chunk `c` is
//! row `c / pairs` of pair `c % pairs`), so chunks differ in size per pair.
//!
//! The alternative, cutting a pair's chunks at the first boundary of either mirror (equal
//! offsets), halves the chunks on average (raid5-tracks' equal-offset stripes measured
//! ~237-sector chunks against ~1,114-sector tracks); the padding here costs a few per cent.
//! Resync and scrub compare a pair's rows side by side (`Personality::sync_pieces`).

use super::mirror::{self, Copies};
use super::raid0_tracks::{model_tracks, DEFAULT_MODEL};
use super::{
    Buf, LayoutError, LayoutKind, MemberIo, MemberView, Personality, Plan, Reconcile, Shape,
    ShapeProblem, SyncCopy,
};
use crate::service_model::IoKind;
use crate::tracks::map::{TrackMap, TrackStripes};

/// The name in the registry.
pub const NAME: &str = "raid10-tracks";

#[derive(Debug)]
pub struct Raid10Tracks {
    kind: LayoutKind,
    members: Vec<TrackMap>,
    /// Per member, where each row starts (its track `k`), then where its last row ends.
    starts: Vec<Vec<u64>>,
    /// Per pair, where each row starts in the pair's sync space (rows back to back), then
    /// its size.
    sync_starts: Vec<Vec<u64>>,
    /// Volume striping over the pairs' rows (each pair's rows as the tracks of one map).
    stripes: TrackStripes,
}

fn shape_error(problem: String) -> LayoutError {
    LayoutError::Shape {
        layout: LayoutKind::RAID10_TRACKS,
        problem,
    }
}

impl Raid10Tracks {
    pub fn check(members: usize, chunk: u64) -> Result<(), ShapeProblem> {
        if members < 2 || !members.is_multiple_of(2) {
            return Err(ShapeProblem {
                key: "member",
                problem: format!(
                    "layout {NAME} needs an even number of members (at least 2), got {members}"
                ),
            });
        }
        super::registry::check_chunk(chunk)
    }

    /// The registry's constructor: the default model's tracks, unit = member index.
    pub fn new(shape: &Shape) -> Result<Self, LayoutError> {
        Self::check(shape.members, shape.chunk).map_err(|p| shape_error(p.problem))?;
        let maps = (0..shape.members)
            .map(|i| model_tracks(DEFAULT_MODEL, Some(i as u64), shape.member_bytes))
            .collect::<Result<Vec<_>, _>>()?;
        Self::with_tracks(maps, shape.member_bytes)
    }

    /// Over members with these tracks (in bytes), the whole tracks within `member_bytes`.
    pub fn with_tracks(maps: Vec<TrackMap>, member_bytes: u64) -> Result<Self, LayoutError> {
        Self::check(maps.len(), 65536).map_err(|p| shape_error(p.problem))?;
        let whole = |m: &TrackMap| {
            (0..m.tracks())
                .take_while(|&i| m.start(i + 1) <= member_bytes)
                .count()
        };
        let rows = maps.iter().map(whole).min().unwrap_or(0);
        if rows == 0 {
            return Err(shape_error(format!(
                "no whole track fits the members' {member_bytes} data bytes"
            )));
        }
        let starts: Vec<Vec<u64>> = maps
            .iter()
            .map(|m| (0..=rows).map(|k| m.start(k)).collect())
            .collect();
        let mut sync_starts = Vec::new();
        let mut pair_maps = Vec::new();
        for pair in maps.chunks(2) {
            let mut s = vec![0u64];
            for k in 0..rows {
                let unit = pair
                    .iter()
                    .map(|m| m.start(k + 1) - m.start(k))
                    .min()
                    .unwrap_or(0);
                s.push(s[k] + unit);
            }
            let map =
                TrackMap::new(&s[1..rows], s[rows]).map_err(|e| shape_error(format!("{e:#}")))?;
            pair_maps.push(map);
            sync_starts.push(s);
        }
        let stripes = TrackStripes::new(pair_maps, 1).map_err(|e| shape_error(format!("{e:#}")))?;
        Ok(Self {
            kind: LayoutKind::RAID10_TRACKS,
            members: maps,
            starts,
            sync_starts,
            stripes,
        })
    }

    /// The member tracks in use (bytes).
    pub fn member_tracks(&self) -> &[TrackMap] {
        &self.members
    }

    /// Member `m`'s row starts, then where its last row ends.
    pub fn member_rows(&self, m: usize) -> &[u64] {
        &self.starts[m]
    }

    /// Pair `p`'s row lengths.
    pub fn row_lens(&self, p: usize) -> Vec<u64> {
        self.sync_starts[p]
            .windows(2)
            .map(|w| w[1] - w[0])
            .collect()
    }

    fn rows(&self) -> usize {
        self.starts[0].len() - 1
    }

    /// The row of pair `p` holding sync offset `at`.
    fn row_of_sync(&self, p: usize, at: u64) -> usize {
        let s = &self.sync_starts[p];
        (s.partition_point(|&x| x <= at).max(1) - 1).min(self.rows() - 1)
    }

    /// Member `m`'s offset of its pair's sync offset `at`.
    fn real(&self, m: usize, at: u64) -> u64 {
        let p = m / 2;
        let k = self.row_of_sync(p, at);
        self.starts[m][k] + (at - self.sync_starts[p][k])
    }

    /// `offset..offset+len` as pieces, each inside one row, with both mirrors' places.
    fn pieces(&self, offset: u64, len: u64) -> Vec<Copies> {
        let mut buf = 0;
        self.stripes
            .map(offset, len)
            .into_iter()
            .map(|(pair, at, n)| {
                let piece = Copies {
                    buf_offset: buf,
                    len: n,
                    placements: vec![
                        (2 * pair, self.real(2 * pair, at)),
                        (2 * pair + 1, self.real(2 * pair + 1, at)),
                    ],
                };
                buf += n;
                piece
            })
            .collect()
    }

    /// The row whose track holds member `m`'s offset `at` (`rows()` past the last).
    fn row_of_member(&self, m: usize, at: u64) -> usize {
        let s = &self.starts[m];
        if at >= s[s.len() - 1] {
            return self.rows();
        }
        s.partition_point(|&x| x <= at).max(1) - 1
    }
}

impl Personality for Raid10Tracks {
    fn kind(&self) -> LayoutKind {
        self.kind
    }

    fn member_count(&self) -> usize {
        self.members.len()
    }

    /// The furthest member's end of its last row.
    fn member_data_bytes(&self) -> u64 {
        self.starts
            .iter()
            .map(|s| s[s.len() - 1])
            .max()
            .unwrap_or(0)
    }

    /// The longest row.
    fn stripe_unit(&self) -> u64 {
        (0..self.sync_starts.len())
            .flat_map(|p| self.row_lens(p))
            .max()
            .unwrap_or(0)
    }

    fn capacity(&self) -> u64 {
        self.stripes.sectors()
    }

    fn plan(
        &self,
        kind: IoKind,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.check_range(offset, len)?;
        mirror::plan(kind, offset, self.pieces(offset, len), views)
    }

    /// From the other mirror, row by row at its own offsets; padding is not asked of it.
    fn recover(
        &self,
        member: usize,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        let source = member ^ 1;
        let p = member / 2;
        let mut plan = Plan::default();
        let end = offset.saturating_add(len).min(self.member_data_bytes());
        let mut at = offset;
        while at < end {
            let k = self.row_of_member(member, at);
            if k >= self.rows() {
                break;
            }
            let unit = self.sync_starts[p][k + 1] - self.sync_starts[p][k];
            let unit_end = self.starts[member][k] + unit;
            if at >= unit_end {
                at = self.starts[member][k + 1].min(end);
                continue;
            }
            let n = unit_end.min(end) - at;
            let from = self.starts[source][k] + (at - self.starts[member][k]);
            if !views[source].holds(from, n) {
                return Err(LayoutError::Unrecoverable {
                    member,
                    offset: at,
                    len: n,
                    problem: "its mirror does not hold them".into(),
                });
            }
            plan.reads.push(MemberIo {
                member: source,
                member_offset: from,
                len: n,
                buf: Buf::Caller(at - offset),
            });
            at += n;
        }
        Ok(plan)
    }

    fn sync_groups(&self) -> Vec<Vec<usize>> {
        (0..self.members.len() / 2)
            .map(|p| vec![2 * p, 2 * p + 1])
            .collect()
    }

    /// Both mirrors' bytes of every piece (at their own offsets, in the pair's locks).
    fn lock_spans(&self, offset: u64, len: u64) -> Vec<(usize, u64, u64)> {
        self.pieces(offset, len)
            .into_iter()
            .flat_map(|piece| {
                piece
                    .placements
                    .into_iter()
                    .map(move |(m, at)| (m, at, at + piece.len))
            })
            .collect()
    }

    fn reconcile(&self, offset: u64, group: &[SyncCopy], len: u64) -> Result<Reconcile, String> {
        mirror::reconcile(offset, group, len)
    }

    fn member_metadata(&self, member: usize) -> Vec<(u64, Vec<u8>)> {
        self.members
            .get(member)
            .map(crate::tracks::stored::metadata_of)
            .unwrap_or_default()
    }

    fn survives(&self, valid: &[bool]) -> bool {
        mirror::survives(&self.sync_groups(), valid)
    }

    fn sync_pieces(&self, member: usize, offset: u64, len: u64) -> Vec<(u64, u64)> {
        let p = member / 2;
        let size = self.sync_starts[p][self.rows()];
        let end = offset.saturating_add(len).min(size);
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut at = offset;
        while at < end {
            let k = self.row_of_sync(p, at);
            let n = self.sync_starts[p][k + 1].min(end) - at;
            let real = self.starts[member][k] + (at - self.sync_starts[p][k]);
            match out.last_mut() {
                Some(last) if last.0 + last.1 == real => last.1 += n,
                _ => out.push((real, n)),
            }
            at += n;
        }
        out
    }

    /// The largest pair's rows.
    fn sync_bytes(&self) -> u64 {
        self.sync_starts
            .iter()
            .map(|s| s[s.len() - 1])
            .max()
            .unwrap_or(0)
    }

    fn sync_range(&self, start: u64, end: u64) -> (u64, u64) {
        if end <= start {
            return (start, start);
        }
        let mut range: Option<(u64, u64)> = None;
        for m in 0..self.members.len() {
            let p = m / 2;
            let first = self.row_of_member(m, start);
            if first >= self.rows() {
                continue;
            }
            let last = self.row_of_member(m, end - 1).min(self.rows() - 1);
            let (a, b) = (self.sync_starts[p][first], self.sync_starts[p][last + 1]);
            range = Some(range.map_or((a, b), |(x, y)| (x.min(a), y.max(b))));
        }
        range.unwrap_or((self.sync_bytes(), self.sync_bytes()))
    }
}

#[cfg(test)]
#[path = "raid10_tracks_tests.rs"]
mod tests;
