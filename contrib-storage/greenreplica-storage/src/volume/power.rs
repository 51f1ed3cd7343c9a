//! Power: the volume's side of the power manager (`crate::power_manager`). It shows the
//! manager the array (members, roles, health, power states, redundancy, hinted extents),
//! carries out what the manager decides (wake these members, let those sleep), hands
//! spin-downs to members that act on them, and keeps the extents the client hints at.

use std::sync::atomic::Ordering;

use super::{Health, MemberSlot, SleepOutcome, Volume, VolumeError};
use crate::drive::PowerEvent;
use crate::power_manager::{ArrayView, MemberPowerView};
use crate::power_manager::{Awake, PowerAction, SharedPower, SleepGrant, WakeCause};
use crate::power_state::PowerState;
use crate::sync::lock;

/// Most extents one hint or wake may carry (the extension sends at most 8192).
pub const MAX_HINT_EXTENTS: usize = 16_384;

/// The array's manager: the first member's (members are built from one policy), every
/// drive rebound to it as its member index.
pub(super) fn adopt(slots: &[MemberSlot]) -> SharedPower {
    let shared = match slots.first() {
        Some(first) => lock(&first.drive).power_link().shared().clone(),
        None => crate::policy::PolicySpec::AlwaysOn
            .build(0)
            .shared()
            .clone(),
    };
    for (i, slot) in slots.iter().enumerate() {
        lock(&slot.drive).rebind_power(shared.member(i));
    }
    shared
}

/// One member's power as the status shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MemberPowerStatus {
    /// Why it is spinning (None: asleep or spinning down).
    pub awake: Option<Awake>,
}

impl Volume {
    /// Apply due power transitions and hand spin-downs to the members that act on them; then
    /// let a manager that decides by epochs act.
    pub fn tick(&self) {
        self.integrity_tick();
        self.layout_background_tick();
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
        if self.power.with(|c| c.tick_due(now)) {
            let view = self.power_view(now, None);
            let actions = self.power.with(|c| c.manager_mut().on_tick(&view));
            for action in actions {
                match action {
                    PowerAction::Wake { member } => {
                        if let Some(slot) = self.slots.get(member) {
                            lock(&slot.drive).wake_for(now, WakeCause::Policy);
                        }
                    }
                    PowerAction::Sleep(grant) => self.carry_out_sleep(now, grant),
                }
            }
        }
    }

    fn live_slots(&self) -> impl Iterator<Item = &MemberSlot> {
        self.slots
            .iter()
            .filter(|s| !matches!(s.health(), Health::Failed { .. }))
    }

    /// What the manager sees: every member at `now`, and (for a hinted wake) the members a
    /// read of the hinted extents needs.
    fn power_view(&self, now: f64, hinted: Option<Vec<usize>>) -> ArrayView {
        let members: Vec<MemberPowerView> = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, slot)| {
                let health = slot.health();
                lock(&slot.drive).power_view(
                    now,
                    self.layout.role(i),
                    !matches!(health, Health::Failed { .. }),
                    matches!(health, Health::Rebuilding { .. }),
                )
            })
            .collect();
        ArrayView {
            now,
            members,
            redundant: self.layout.redundant(),
            groups: self.layout.sync_groups(),
            hinted,
            cold_groups: self.layout.cold_groups(),
        }
    }

    pub fn power_state(&self) -> PowerState {
        let now = self.clock.now();
        PowerState::aggregate(self.live_slots().map(|s| {
            let mut d = lock(&s.drive);
            d.advance_to(now);
            d.state()
        }))
    }

    /// Spin up the members the manager chooses (every live one for a plain wake); returns the
    /// aggregate state and seconds until they are ready.
    pub fn wake(&self) -> (PowerState, f64) {
        self.wake_members(None)
    }

    /// A wake for reading `extents` next: a manager that allows it (cooperative) spins up
    /// only the members a read of them needs; writes and reads that the layout sends to a
    /// sleeping member still wake it. Hostile extents get an error and wake nothing.
    pub fn wake_for(&self, extents: &[(u64, u64)]) -> Result<(PowerState, f64), VolumeError> {
        self.check_extents(extents)?;
        let now = self.clock.now();
        let views = self.views(now);
        let mut hinted = Vec::new();
        for &(offset, len) in extents {
            match self.layout.read_members(offset, len, &views) {
                Ok(members) => hinted.extend(members),
                Err(e) => {
                    // No plan without sleeping members: let the manager wake all.
                    tracing::debug!(volume = %self.name, error = %e, "hinted wake of every member");
                    return Ok(self.wake_members(None));
                }
            }
            if hinted.len() >= self.slots.len() {
                hinted.sort_unstable();
                hinted.dedup();
                if hinted.len() == self.slots.len() {
                    break;
                }
            }
        }
        hinted.sort_unstable();
        hinted.dedup();
        Ok(self.wake_members(Some(hinted)))
    }

    /// A wake for a window that only writes `extents` (a batch's write-back): the members
    /// the layout's writes of them would touch now (QMD: only the flash for a cold pair
    /// asleep whole) are the hinted ones; a layout that cannot tell gets a hinted wake as
    /// for reading them. Hostile extents get an error and wake nothing.
    pub fn wake_for_writes(
        &self,
        extents: &[(u64, u64)],
    ) -> Result<(PowerState, f64), VolumeError> {
        self.check_extents(extents)?;
        let views = self.views(self.clock.now());
        let mut hinted = Vec::new();
        for &(offset, len) in extents {
            match self.layout.write_members(offset, len, &views) {
                Some(members) => hinted.extend(members),
                None => return self.wake_for(extents),
            }
        }
        hinted.sort_unstable();
        hinted.dedup();
        Ok(self.wake_members(Some(hinted)))
    }

    /// Wake the members the personality wants spinning ahead of its I/O (RoLo's next
    /// logger) that are asleep, through the manager's wake path: it sees them as the hinted
    /// members and decides; only those asked for are woken.
    pub(super) fn layout_prewake(&self) {
        let wanted = self.layout.prewake();
        if wanted.is_empty() {
            return;
        }
        let now = self.clock.now();
        let view = self.power_view(now, None);
        let asleep: Vec<usize> = wanted
            .into_iter()
            .filter(|&m| {
                view.members.get(m).is_some_and(|v| {
                    v.live && matches!(v.state, PowerState::Standby | PowerState::SpinningDown)
                })
            })
            .collect();
        if asleep.is_empty() {
            return;
        }
        let view = self.power_view(now, Some(asleep.clone()));
        let (members, cause) = self.power.with(|c| c.manager().decide_wake(&view));
        tracing::debug!(volume = %self.name, ?asleep, ?members, ?cause, "layout pre-wake");
        for m in members.into_iter().filter(|m| asleep.contains(m)) {
            if let Some(slot) = self.slots.get(m) {
                lock(&slot.drive).wake_for(now, cause);
            }
        }
    }

    fn wake_members(&self, hinted: Option<Vec<usize>>) -> (PowerState, f64) {
        let now = self.clock.now();
        let view = self.power_view(now, hinted);
        let (members, cause) = self.power.with(|c| c.manager().decide_wake(&view));
        tracing::debug!(volume = %self.name, ?members, ?cause, "wake");
        let ready = members
            .iter()
            .filter_map(|&m| self.slots.get(m))
            .map(|s| lock(&s.drive).wake_for(now, cause))
            .fold(now, f64::max);
        (self.power_state(), ready - now)
    }

    /// A client asks the volume to sleep: the manager grants it to the members it chooses
    /// (every live one today) or declines with its reason.
    pub fn sleep(&self, expected_idle_s: Option<f64>) -> SleepOutcome {
        let now = self.clock.now();
        let view = self.power_view(now, None);
        let decision = self
            .power
            .with(|c| c.manager().decide_sleep(&view, expected_idle_s));
        match decision {
            Ok(grants) => {
                for grant in grants {
                    self.carry_out_sleep(now, grant);
                }
                SleepOutcome::Accepted(self.power_state())
            }
            Err(reason) => SleepOutcome::Declined(reason),
        }
    }

    fn carry_out_sleep(&self, now: f64, grant: SleepGrant) {
        if let Some(slot) = self.slots.get(grant.member) {
            lock(&slot.drive).grant_sleep(now, grant.mode);
        }
    }

    /// Bounds and count of client extents (each within the volume, no overflow).
    pub(super) fn check_extents(&self, extents: &[(u64, u64)]) -> Result<(), VolumeError> {
        if extents.len() > MAX_HINT_EXTENTS {
            return Err(VolumeError::Io {
                volume: self.name.clone(),
                problem: format!(
                    "{} extents given; at most {MAX_HINT_EXTENTS} are accepted",
                    extents.len()
                ),
            });
        }
        for &(offset, len) in extents {
            self.check_range(offset, len)?;
        }
        Ok(())
    }

    /// Record the extents the client will touch next (a hinted wake acts on its own copy).
    pub fn hint(&self, extents: &[(u64, u64)]) -> Result<usize, VolumeError> {
        self.check_extents(extents)?;
        let mut hints = lock(&self.hints);
        *hints = extents.to_vec();
        self.layout.hint(extents);
        Ok(hints.len())
    }

    pub fn hints(&self) -> Vec<(u64, u64)> {
        lock(&self.hints).clone()
    }

    /// The array's power manager.
    pub fn power_manager(&self) -> &SharedPower {
        &self.power
    }

    /// Each member's wake reason (for the status).
    pub fn member_power(&self) -> Vec<MemberPowerStatus> {
        self.power.with(|c| {
            (0..self.slots.len())
                .map(|i| MemberPowerStatus { awake: c.awake(i) })
                .collect()
        })
    }
}
