//! Track-aligned RAID0 (the track-alignment paper's striping): chunk `k` of a member is its
//! track `k`, so chunk boundaries fall on each member's own track boundaries and chunks
//! differ in size between members whose tracks do. A request is cut at chunk (= track)
//! boundaries only: the part of it on one track is one member I/O, and no member I/O
//! crosses a track boundary.
//!
//! The boundary lists come from the members' metadata (`tracks::stored`, read by assembly);
//! a layout built without them (the registry's default, what tests and `replay` use) takes
//! them from the emulated Maxtor Atlas 10K V model, unit = member index — the drive the
//! paper measured, with its per-unit track sizes and defects.

use super::mirror::{self, Copies};
use super::{
    LayoutError, LayoutKind, MemberView, Personality, Plan, Reconcile, Shape, ShapeProblem,
    SyncCopy,
};
use crate::profile::DriveProfile;
use crate::service_model::IoKind;
use crate::tracks::map::{TrackMap, TrackStripes};

/// The name in the registry.
pub const NAME: &str = "raid0-tracks";
/// The model whose tracks a layout built without stored lists uses.
pub const DEFAULT_MODEL: &str = "maxtor-atlas-10k-v";

#[derive(Debug)]
pub struct Raid0Tracks {
    kind: LayoutKind,
    /// Member tracks in bytes.
    members: Vec<TrackMap>,
    stripes: TrackStripes,
}

fn shape_error(problem: String) -> LayoutError {
    LayoutError::Shape {
        layout: LayoutKind::RAID0_TRACKS,
        problem,
    }
}

impl Raid0Tracks {
    pub fn check(members: usize, chunk: u64) -> Result<(), ShapeProblem> {
        if members < 2 {
            return Err(ShapeProblem {
                key: "member",
                problem: format!("layout {NAME} needs at least 2 members, got {members}"),
            });
        }
        // Chunks are whole tracks; the configured stripe unit is not used but still checked
        // so that every striped layout accepts the same configurations.
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

    /// Over members with these tracks (in bytes), each truncated to `member_bytes`.
    pub fn with_tracks(maps: Vec<TrackMap>, member_bytes: u64) -> Result<Self, LayoutError> {
        if maps.len() < 2 {
            return Err(shape_error(format!(
                "needs at least 2 members, got {}",
                maps.len()
            )));
        }
        let members = maps
            .iter()
            .enumerate()
            .map(|(i, m)| {
                m.truncated(member_bytes).ok_or_else(|| {
                    shape_error(format!(
                        "member {i}'s first track ({} bytes) does not fit its {member_bytes} data bytes",
                        m.start(1)
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let stripes =
            TrackStripes::new(members.clone(), 1).map_err(|e| shape_error(format!("{e:#}")))?;
        let kind = LayoutKind::RAID0_TRACKS;
        Ok(Self {
            kind,
            members,
            stripes,
        })
    }

    /// The member tracks in use (bytes).
    pub fn member_tracks(&self) -> &[TrackMap] {
        &self.members
    }

    /// `offset..offset+len` as member pieces, one per track it touches.
    fn pieces(&self, offset: u64, len: u64) -> Vec<Copies> {
        let mut out: Vec<Copies> = Vec::new();
        let mut buf = 0;
        for (member, at, n) in self.stripes.map(offset, len) {
            out.push(Copies {
                buf_offset: buf,
                len: n,
                placements: vec![(member, at)],
            });
            buf += n;
        }
        out
    }
}

/// A model's tracks in bytes, the whole tracks within `bytes`.
pub fn model_tracks(profile: &str, unit: Option<u64>, bytes: u64) -> Result<TrackMap, LayoutError> {
    let mut p = DriveProfile::load(profile).map_err(|e| shape_error(e.to_string()))?;
    p.unit = unit.or(p.unit);
    let sector = p
        .geometry
        .as_ref()
        .map(|g| g.sector_bytes)
        .unwrap_or(512)
        .max(1);
    TrackMap::from_model(&p, bytes / sector + 1)
        .and_then(|m| m.scaled(sector))
        .map_err(|e| shape_error(format!("{e:#}")))
}

impl Personality for Raid0Tracks {
    fn kind(&self) -> LayoutKind {
        self.kind
    }

    fn member_count(&self) -> usize {
        self.members.len()
    }

    /// The largest member's striped bytes (smaller-track members use less of theirs).
    fn member_data_bytes(&self) -> u64 {
        let stripes = self.stripes_count();
        self.members
            .iter()
            .map(|m| m.start(stripes))
            .max()
            .unwrap_or(0)
    }

    /// The largest chunk (one track of the member with the largest first track).
    fn stripe_unit(&self) -> u64 {
        self.members.iter().map(|m| m.start(1)).max().unwrap_or(0)
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

    fn recover(
        &self,
        member: usize,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        mirror::recover(member, offset, len, &[], views)
    }

    fn sync_groups(&self) -> Vec<Vec<usize>> {
        (0..self.members.len()).map(|m| vec![m]).collect()
    }

    fn lock_spans(&self, offset: u64, len: u64) -> Vec<(usize, u64, u64)> {
        self.stripes
            .map(offset, len)
            .into_iter()
            .map(|(m, at, n)| (m, at, at + n))
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
        valid.len() == self.members.len() && valid.iter().all(|&v| v)
    }
}

impl Raid0Tracks {
    fn stripes_count(&self) -> usize {
        self.members.iter().map(TrackMap::tracks).min().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Buf;

    fn map(sizes: &[u64]) -> TrackMap {
        let mut b = Vec::new();
        let mut at = 0;
        for s in sizes {
            at += s;
            b.push(at);
        }
        let end = b.pop().unwrap();
        TrackMap::new(&b, end).unwrap()
    }

    #[test]
    fn chunks_follow_each_members_own_tracks_and_no_io_crosses_one() {
        // Member 0: 5 KiB tracks, member 1: 7 KiB tracks with a defect-shortened one.
        let l = Raid0Tracks::with_tracks(
            vec![
                map(&[5120, 5120, 5120, 5120]),
                map(&[7168, 6144, 7168, 7168]),
            ],
            1 << 20,
        )
        .unwrap();
        assert_eq!(l.capacity(), 5120 * 4 + 7168 * 3 + 6144);
        let views = [MemberView::healthy(0.0); 2];
        // Stripe 0 is member 0's track 0, then member 1's track 0.
        let plan = l.plan(IoKind::Read, 4096, 4096, &views).unwrap();
        let ios: Vec<_> = plan
            .reads
            .iter()
            .map(|io| (io.member, io.member_offset, io.len, io.buf))
            .collect();
        assert_eq!(
            ios,
            vec![
                (0, 4096, 1024, Buf::Caller(0)),
                (1, 0, 3072, Buf::Caller(1024))
            ]
        );
        // Every piece of every request lies inside one track of its member.
        for offset in (0..l.capacity()).step_by(512) {
            for len in [512, 4096, 9000, 30000] {
                let len = len.min(l.capacity() - offset);
                let plan = l.plan(IoKind::Write, offset, len, &views).unwrap();
                let total: u64 = plan.writes.iter().map(|io| io.len).sum();
                assert_eq!(total, len);
                for io in &plan.writes {
                    let (_, start, end) = l.member_tracks()[io.member].track(io.member_offset);
                    assert!(io.member_offset >= start && io.member_offset + io.len <= end);
                }
            }
        }
        assert!(!l.redundant());
        assert!(l.recover(0, 0, 512, &views).is_err());
    }

    #[test]
    fn the_default_model_gives_members_different_track_sizes() {
        let l = Raid0Tracks::new(&Shape {
            members: 4,
            member_bytes: 64 << 20,
            chunk: 65536,
            options: Default::default(),
        })
        .unwrap();
        let firsts: Vec<u64> = l.member_tracks().iter().map(|m| m.start(1)).collect();
        assert!(firsts.windows(2).any(|w| w[0] != w[1]), "{firsts:?}");
        assert!(l.capacity() > 3 * (64 << 20) && l.capacity() <= 4 * (64 << 20));
        assert!(l.member_data_bytes() <= 64 << 20);
    }

    #[test]
    fn a_member_smaller_than_its_first_track_is_refused() {
        let err = Raid0Tracks::with_tracks(vec![map(&[5120, 5120]), map(&[7168, 7168])], 6000)
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not fit"), "{err}");
        assert!(Raid0Tracks::check(1, 65536).is_err());
    }
}
