//! Power: the volume's power transitions (handed to members that act on them), its power
//! state, the client's wake and sleep requests, and the extents it hints at.

use std::sync::atomic::Ordering;

use super::{Health, MemberSlot, SleepOutcome, Volume, VolumeError};
use crate::drive::PowerEvent;
use crate::power_state::PowerState;
use crate::sync::lock;

impl Volume {
    /// Apply due power transitions and hand spin-downs to the members that act on them.
    pub fn tick(&self) {
        self.integrity_tick();
        let now = self.clock.now();
        for (i, slot) in self.slots.iter().enumerate() {
            let events = {
                let mut drive = lock(&slot.drive);
                drive.advance_to(now);
                drive.take_events()
            };
            for event in events {
                tracing::debug!(volume = %self.name, member = i, ?event, "power transition");
                if let PowerEvent::SpinDownStarted { .. } = event {
                    if let Some(store) = slot.live_store() {
                        // Flush while it still spins, so no later FLUSH CACHE wakes it.
                        if slot.unflushed.swap(false, Ordering::SeqCst) {
                            if let Err(e) = store.flush() {
                                self.fail_member(i, &format!("flush before spin-down: {e}"));
                                continue;
                            }
                        }
                        if let Err(e) = store.spin_down() {
                            tracing::warn!(volume = %self.name, member = i, error = %e, "spin-down command failed");
                        }
                    }
                }
            }
        }
    }

    fn live_slots(&self) -> impl Iterator<Item = &MemberSlot> {
        self.slots
            .iter()
            .filter(|s| !matches!(s.health(), Health::Failed { .. }))
    }

    pub fn power_state(&self) -> PowerState {
        let now = self.clock.now();
        PowerState::aggregate(self.live_slots().map(|s| {
            let mut d = lock(&s.drive);
            d.advance_to(now);
            d.state()
        }))
    }

    /// Spin up every live member; returns the aggregate state and seconds until all are ready.
    pub fn wake(&self) -> (PowerState, f64) {
        let now = self.clock.now();
        let ready = self
            .live_slots()
            .map(|s| lock(&s.drive).wake(now))
            .fold(now, f64::max);
        (self.power_state(), ready - now)
    }

    pub fn sleep(&self, expected_idle_s: Option<f64>) -> SleepOutcome {
        let now = self.clock.now();
        for slot in self.live_slots() {
            if let Err(reason) = lock(&slot.drive).sleep(now, expected_idle_s) {
                return SleepOutcome::Declined(reason);
            }
        }
        SleepOutcome::Accepted(self.power_state())
    }

    /// Record the extents the client will touch next (later layouts act on them).
    pub fn hint(&self, extents: &[(u64, u64)]) -> Result<usize, VolumeError> {
        for &(offset, len) in extents {
            self.check_range(offset, len)?;
        }
        let mut hints = lock(&self.hints);
        *hints = extents.to_vec();
        Ok(hints.len())
    }

    pub fn hints(&self) -> Vec<(u64, u64)> {
        lock(&self.hints).clone()
    }
}
