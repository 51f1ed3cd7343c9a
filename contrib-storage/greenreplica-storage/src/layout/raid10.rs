//! RAID10: members form mirrored pairs (0,1), (2,3), …; stripe units rotate over the pairs.

use super::{Copies, Layout, LayoutError, LayoutKind};

#[derive(Debug)]
pub struct Raid10 {
    pairs: u64,
    stripe_unit: u64,
    member_bytes: u64,
}

impl Raid10 {
    pub fn new(members: usize, member_bytes: u64, stripe_unit: u64) -> Result<Self, LayoutError> {
        let shape = |problem: String| LayoutError::Shape {
            layout: LayoutKind::Raid10,
            problem,
        };
        if members < 2 || !members.is_multiple_of(2) {
            return Err(shape(format!(
                "needs an even number of members (at least 2), got {members}"
            )));
        }
        if stripe_unit == 0 || !stripe_unit.is_multiple_of(512) {
            return Err(shape(format!(
                "stripe unit must be a positive multiple of 512 bytes, got {stripe_unit}"
            )));
        }
        let member_bytes = member_bytes / stripe_unit * stripe_unit;
        if member_bytes == 0 {
            return Err(shape("members are smaller than one stripe unit".into()));
        }
        Ok(Self {
            pairs: members as u64 / 2,
            stripe_unit,
            member_bytes,
        })
    }
}

impl Layout for Raid10 {
    fn kind(&self) -> LayoutKind {
        LayoutKind::Raid10
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

    fn mirror_of(&self, member: usize) -> Option<usize> {
        Some(member ^ 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, MemberView};
    use crate::service_model::IoKind;

    const SU: u64 = 65536;

    #[test]
    fn stripes_rotate_over_pairs() {
        let l = Raid10::new(4, 10 * SU, SU).unwrap();
        assert_eq!(l.capacity(), 20 * SU);
        let pieces = l.map(SU - 512, 1024 + SU);
        assert_eq!(pieces.len(), 3);
        assert_eq!(pieces[0].placements, vec![(0, SU - 512), (1, SU - 512)]);
        assert_eq!(pieces[1].placements, vec![(2, 0), (3, 0)]);
        assert_eq!(pieces[2].placements, vec![(0, SU), (1, SU)]);
        assert_eq!(pieces[2].buf_offset, 512 + SU);
        assert_eq!(pieces.iter().map(|p| p.len).sum::<u64>(), 1024 + SU);
    }

    #[test]
    fn writes_go_to_both_copies_and_reads_to_the_readier_one() {
        let l = Raid10::new(2, 10 * SU, SU).unwrap();
        let views = [MemberView::healthy(5.0), MemberView::healthy(1.0)];
        let w = l.plan(IoKind::Write, 0, 4096, &views).unwrap();
        assert_eq!(w.iter().map(|io| io.member).collect::<Vec<_>>(), vec![0, 1]);
        let r = l.plan(IoKind::Read, 0, 4096, &views).unwrap();
        assert_eq!(r[0].member, 1);
    }

    #[test]
    fn degraded_pair_serves_from_the_survivor() {
        let l = Raid10::new(2, 10 * SU, SU).unwrap();
        let failed = MemberView {
            valid_below: 0,
            writable: false,
            ready_at: 0.0,
        };
        let views = [failed, MemberView::healthy(9.0)];
        assert_eq!(l.plan(IoKind::Read, 0, 4096, &views).unwrap()[0].member, 1);
        let w = l.plan(IoKind::Write, 0, 4096, &views).unwrap();
        assert_eq!(w.len(), 1);
        let views = [failed, failed];
        assert!(matches!(
            l.plan(IoKind::Read, 0, 4096, &views),
            Err(LayoutError::NoLiveCopy { .. })
        ));
    }

    #[test]
    fn rebuilding_member_is_read_only_below_its_watermark() {
        let l = Raid10::new(2, 10 * SU, SU).unwrap();
        let rebuilding = MemberView {
            valid_below: SU,
            writable: true,
            ready_at: 0.0,
        };
        let views = [rebuilding, MemberView::healthy(9.0)];
        assert_eq!(l.plan(IoKind::Read, 0, 4096, &views).unwrap()[0].member, 0);
        assert_eq!(l.plan(IoKind::Read, SU, 4096, &views).unwrap()[0].member, 1);
        assert_eq!(l.plan(IoKind::Write, SU, 4096, &views).unwrap().len(), 2);
    }

    #[test]
    fn rejects_odd_member_counts_and_bad_stripe_units() {
        assert!(Raid10::new(3, 10 * SU, SU).is_err());
        assert!(Raid10::new(2, 10 * SU, 1000).is_err());
    }
}
