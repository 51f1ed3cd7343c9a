//! One member, volume offsets are member offsets.

use super::{Copies, Layout, LayoutError, LayoutKind};

#[derive(Debug)]
pub struct Single {
    bytes: u64,
}

impl Single {
    pub fn new(members: usize, member_bytes: u64) -> Result<Self, LayoutError> {
        if members != 1 {
            return Err(LayoutError::Shape {
                layout: LayoutKind::Single,
                problem: format!("needs exactly 1 member, got {members}"),
            });
        }
        Ok(Self {
            bytes: member_bytes,
        })
    }
}

impl Layout for Single {
    fn kind(&self) -> LayoutKind {
        LayoutKind::Single
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

    fn map(&self, offset: u64, len: u64) -> Vec<Copies> {
        vec![Copies {
            buf_offset: 0,
            len,
            placements: vec![(0, offset)],
        }]
    }

    fn mirror_of(&self, _member: usize) -> Option<usize> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::MemberView;
    use crate::service_model::IoKind;

    #[test]
    fn maps_identically() {
        let l = Single::new(1, 1 << 20).unwrap();
        let plan = l
            .plan(IoKind::Write, 4096, 8192, &[MemberView::healthy(0.0)])
            .unwrap();
        assert_eq!(plan.len(), 1);
        assert_eq!(
            (plan[0].member, plan[0].member_offset, plan[0].len),
            (0, 4096, 8192)
        );
    }

    #[test]
    fn rejects_more_members_and_out_of_range() {
        assert!(Single::new(2, 1 << 20).is_err());
        let l = Single::new(1, 1 << 20).unwrap();
        let err = l.plan(IoKind::Read, (1 << 20) - 1, 2, &[MemberView::healthy(0.0)]);
        assert!(matches!(err, Err(LayoutError::OutOfRange { .. })));
    }
}
