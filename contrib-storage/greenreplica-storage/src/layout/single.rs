//! One member, volume offsets are member offsets.

use super::mirror::{self, Copies};
use super::{
    LayoutError, LayoutKind, MemberView, Personality, Plan, Reconcile, Shape, ShapeProblem,
    SyncCopy,
};
use crate::service_model::IoKind;

#[derive(Debug)]
pub struct Single {
    bytes: u64,
}

impl Single {
    pub fn check(members: usize, _chunk: u64) -> Result<(), ShapeProblem> {
        if members != 1 {
            return Err(ShapeProblem {
                key: "member",
                problem: format!("layout single needs exactly 1 member, got {members}"),
            });
        }
        Ok(())
    }

    pub fn new(shape: &Shape) -> Result<Self, LayoutError> {
        Self::check(shape.members, shape.chunk).map_err(|p| LayoutKind::SINGLE.shape_error(p))?;
        Ok(Self {
            bytes: shape.member_bytes,
        })
    }
}

impl Personality for Single {
    fn kind(&self) -> LayoutKind {
        LayoutKind::SINGLE
    }

    fn member_count(&self) -> usize {
        1
    }

    fn member_data_bytes(&self) -> u64 {
        self.bytes
    }

    fn stripe_unit(&self) -> u64 {
        0
    }

    fn capacity(&self) -> u64 {
        self.bytes
    }

    fn plan(
        &self,
        kind: IoKind,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.check_range(offset, len)?;
        let piece = Copies {
            buf_offset: 0,
            len,
            placements: vec![(0, offset)],
        };
        mirror::plan(kind, offset, vec![piece], views)
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
        vec![vec![0]]
    }

    fn lock_spans(&self, offset: u64, len: u64) -> Vec<(usize, u64, u64)> {
        vec![(0, offset, offset + len)]
    }

    fn reconcile(&self, offset: u64, group: &[SyncCopy], len: u64) -> Result<Reconcile, String> {
        mirror::reconcile(offset, group, len)
    }

    fn survives(&self, valid: &[bool]) -> bool {
        valid.first().copied().unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Buf;

    fn single(bytes: u64) -> Single {
        Single::new(&Shape {
            members: 1,
            member_bytes: bytes,
            chunk: 0,
            options: Default::default(),
        })
        .unwrap()
    }

    #[test]
    fn maps_identically() {
        let l = single(1 << 20);
        let plan = l
            .plan(IoKind::Write, 4096, 8192, &[MemberView::healthy(0.0)])
            .unwrap();
        assert_eq!(plan.writes.len(), 1);
        assert_eq!(
            (
                plan.writes[0].member,
                plan.writes[0].member_offset,
                plan.writes[0].len
            ),
            (0, 4096, 8192)
        );
        assert_eq!(plan.writes[0].buf, Buf::Caller(0));
        assert!(!l.redundant());
    }

    #[test]
    fn rejects_more_members_and_out_of_range() {
        assert!(Single::check(2, 0).is_err());
        let l = single(1 << 20);
        let err = l.plan(IoKind::Read, (1 << 20) - 1, 2, &[MemberView::healthy(0.0)]);
        assert!(matches!(err, Err(LayoutError::OutOfRange { .. })));
        assert!(l.recover(0, 0, 4096, &[MemberView::healthy(0.0)]).is_err());
    }
}
