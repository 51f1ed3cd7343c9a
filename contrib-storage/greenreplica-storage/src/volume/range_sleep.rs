//! "Is this range asleep?" (QMD's partial on-line mirrors: software asks before it reads a
//! cold range and schedules around a spin-up): the members a read of the range needs now —
//! which for QMD are none of a pair's disks where the bytes are buffered in flash — and
//! which of them are spun down or spinning down.

use serde::Serialize;

use super::{Volume, VolumeError};
use crate::power_state::PowerState;
use crate::sync::lock;

/// The answer about one volume range.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RangeSleep {
    /// Members a read of the range would use now.
    pub members: Vec<usize>,
    /// Those of them asleep or spinning down (a read would wait for their spin-up).
    pub asleep: Vec<usize>,
    /// Seconds until every one of them could serve (0 when all are up).
    pub ready_in_s: f64,
}

impl Volume {
    /// Whether reading volume bytes `offset..offset+len` needs a member that sleeps; a range
    /// outside the volume (or overflowing) gets an error.
    pub fn range_asleep(&self, offset: u64, len: u64) -> Result<RangeSleep, VolumeError> {
        self.check_range(offset, len)?;
        let now = self.clock.now();
        let views = self.views(now);
        let members = self.layout.read_members(offset, len, &views)?;
        let mut asleep = Vec::new();
        let mut ready_in_s: f64 = 0.0;
        for &m in &members {
            let state = lock(&self.slots[m].drive).state();
            if matches!(state, PowerState::Standby | PowerState::SpinningDown) {
                asleep.push(m);
            }
            ready_in_s = ready_in_s.max(views[m].ready_at - now);
        }
        Ok(RangeSleep {
            members,
            asleep,
            ready_in_s,
        })
    }
}
