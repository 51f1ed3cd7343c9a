//! RAID10: members form mirrored pairs (0,1), (2,3), …; stripe units rotate over the pairs.

use super::mirror::{self, Copies};
use super::{
    LayoutError, LayoutKind, MemberView, Personality, Plan, Reconcile, Shape, ShapeProblem,
    SyncCopy,
};
use crate::service_model::IoKind;

#[derive(Debug)]
pub struct Raid10 {
    pairs: u64,
    stripe_unit: u64,
    member_bytes: u64,
}

impl Raid10 {
    pub fn check(members: usize, stripe_unit: u64) -> Result<(), ShapeProblem> {
        if members < 2 || !members.is_multiple_of(2) {
            return Err(ShapeProblem {
                key: "member",
                problem: format!(
                    "layout raid10 needs an even number of members (at least 2), got {members}"
                ),
            });
        }
        super::registry::check_chunk(stripe_unit)
    }

    pub fn new(shape: &Shape) -> Result<Self, LayoutError> {
        let kind = LayoutKind::RAID10;
        Self::check(shape.members, shape.chunk).map_err(|p| kind.shape_error(p))?;
        let member_bytes = shape.member_bytes / shape.chunk * shape.chunk;
        if member_bytes == 0 {
            return Err(kind.shape_error(ShapeProblem {
                key: "member",
                problem: "members are smaller than one stripe unit".into(),
            }));
        }
        Ok(Self {
            pairs: shape.members as u64 / 2,
            stripe_unit: shape.chunk,
            member_bytes,
        })
    }

    fn map(&self, offset: u64, len: u64) -> Vec<Copies> {
        let mut pieces = Vec::new();
        let mut done = 0;
        while done < len {
            let pos = offset + done;
            let chunk = pos / self.stripe_unit;
            let within = pos % self.stripe_unit;
            let piece = (self.stripe_unit - within).min(len - done);
            let pair = (chunk % self.pairs) as usize;
            let member_offset = (chunk / self.pairs) * self.stripe_unit + within;
            pieces.push(Copies {
                buf_offset: done,
                len: piece,
                placements: vec![(2 * pair, member_offset), (2 * pair + 1, member_offset)],
            });
            done += piece;
        }
        pieces
    }
}

impl Personality for Raid10 {
    fn kind(&self) -> LayoutKind {
        LayoutKind::RAID10
    }

    fn member_count(&self) -> usize {
        (self.pairs * 2) as usize
    }

    fn member_data_bytes(&self) -> u64 {
        self.member_bytes
    }

    fn stripe_unit(&self) -> u64 {
        self.stripe_unit
    }

    fn capacity(&self) -> u64 {
        self.member_bytes * self.pairs
    }

    fn plan(
        &self,
        kind: IoKind,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.check_range(offset, len)?;
        mirror::plan(kind, offset, self.map(offset, len), views)
    }

    fn recover(
        &self,
        member: usize,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        mirror::recover(member, offset, len, &[member ^ 1], views)
    }

    fn sync_groups(&self) -> Vec<Vec<usize>> {
        (0..self.pairs as usize)
            .map(|p| vec![2 * p, 2 * p + 1])
            .collect()
    }

    fn lock_spans(&self, offset: u64, len: u64) -> Vec<(usize, u64, u64)> {
        self.map(offset, len)
            .iter()
            .filter_map(|piece| {
                let &(member, start) = piece.placements.first()?;
                Some((member, start, start + piece.len))
            })
            .collect()
    }

    fn reconcile(&self, offset: u64, group: &[SyncCopy], len: u64) -> Result<Reconcile, String> {
        mirror::reconcile(offset, group, len)
    }

    fn survives(&self, valid: &[bool]) -> bool {
        mirror::survives(&self.sync_groups(), valid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Buf;

    const SU: u64 = 65536;

    fn raid10(members: usize, bytes: u64) -> Raid10 {
        Raid10::new(&Shape {
            members,
            member_bytes: bytes,
            chunk: SU,
            options: Default::default(),
        })
        .unwrap()
    }

    fn members(ios: &[crate::layout::MemberIo]) -> Vec<usize> {
        ios.iter().map(|io| io.member).collect()
    }

    #[test]
    fn stripes_rotate_over_pairs() {
        let l = raid10(4, 10 * SU);
        assert_eq!(l.capacity(), 20 * SU);
        let pieces = l.map(SU - 512, 1024 + SU);
        assert_eq!(pieces.len(), 3);
        assert_eq!(pieces[0].placements, vec![(0, SU - 512), (1, SU - 512)]);
        assert_eq!(pieces[1].placements, vec![(2, 0), (3, 0)]);
        assert_eq!(pieces[2].placements, vec![(0, SU), (1, SU)]);
        assert_eq!(pieces[2].buf_offset, 512 + SU);
        assert_eq!(pieces.iter().map(|p| p.len).sum::<u64>(), 1024 + SU);
        assert_eq!(
            l.lock_spans(SU - 512, 1024 + SU),
            vec![(0, SU - 512, SU), (2, 0, SU), (0, SU, SU + 512)]
        );
    }

    #[test]
    fn writes_go_to_both_copies_and_reads_to_the_readier_one() {
        let l = raid10(2, 10 * SU);
        let views = [MemberView::healthy(5.0), MemberView::healthy(1.0)];
        let w = l.plan(IoKind::Write, 0, 4096, &views).unwrap();
        assert_eq!(members(&w.writes), vec![0, 1]);
        assert!(w.reads.is_empty() && w.compute.is_empty());
        let r = l.plan(IoKind::Read, 0, 4096, &views).unwrap();
        assert_eq!(r.reads[0].member, 1);
        assert!(r.writes.is_empty());
    }

    #[test]
    fn degraded_pair_serves_from_the_survivor() {
        let l = raid10(2, 10 * SU);
        let failed = MemberView::failed(0.0);
        let views = [failed, MemberView::healthy(9.0)];
        assert_eq!(
            l.plan(IoKind::Read, 0, 4096, &views).unwrap().reads[0].member,
            1
        );
        let w = l.plan(IoKind::Write, 0, 4096, &views).unwrap();
        assert_eq!(w.writes.len(), 1);
        let views = [failed, failed];
        assert!(matches!(
            l.plan(IoKind::Read, 0, 4096, &views),
            Err(LayoutError::NoLiveCopy { .. })
        ));
        assert!(!l.survives(&[false, false]));
        assert!(l.survives(&[false, true]));
        assert!(l.redundant());
    }

    #[test]
    fn rebuilding_member_is_read_only_below_its_watermark() {
        let l = raid10(2, 10 * SU);
        let rebuilding = MemberView {
            valid_below: SU,
            writable: true,
            ready_at: 0.0,
            ..MemberView::healthy(0.0)
        };
        let views = [rebuilding, MemberView::healthy(9.0)];
        assert_eq!(
            l.plan(IoKind::Read, 0, 4096, &views).unwrap().reads[0].member,
            0
        );
        assert_eq!(
            l.plan(IoKind::Read, SU, 4096, &views).unwrap().reads[0].member,
            1
        );
        assert_eq!(
            l.plan(IoKind::Write, SU, 4096, &views)
                .unwrap()
                .writes
                .len(),
            2
        );
    }

    #[test]
    fn a_member_is_recovered_from_its_mirror() {
        let l = raid10(4, 10 * SU);
        let views = [MemberView::healthy(0.0); 4];
        let plan = l.recover(3, SU, 4096, &views).unwrap();
        assert_eq!(plan.reads.len(), 1);
        assert_eq!(
            (
                plan.reads[0].member,
                plan.reads[0].member_offset,
                plan.reads[0].buf
            ),
            (2, SU, Buf::Caller(0))
        );
        let views = [
            MemberView::healthy(0.0),
            MemberView::healthy(0.0),
            MemberView::failed(0.0),
            MemberView::healthy(0.0),
        ];
        assert!(l.recover(3, SU, 4096, &views).is_err());
    }

    #[test]
    fn rejects_odd_member_counts_and_bad_stripe_units() {
        assert!(Raid10::check(3, SU).is_err());
        assert_eq!(Raid10::check(2, 1000).unwrap_err().key, "stripe_unit");
    }
}
