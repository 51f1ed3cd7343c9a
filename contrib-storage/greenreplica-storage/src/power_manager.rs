//! The volume's power manager: one policy decides for the whole array which members may
//! sleep, which must wake and (for later layouts: RoLo's on-duty logger, QMD's epochs) which
//! rotate. Drives keep the mechanics (spin-up and spin-down timing, power states, ledger);
//! they ask the manager when an idle member should spin down and tell it what happened.
//!
//! Lock order: a drive's lock, then the manager's. The volume never holds the manager's lock
//! while it locks a drive: it takes an `ArrayView` (drive by drive), asks the manager, lets
//! go, then acts on the drives.

use std::fmt;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::clock::Seconds;
use crate::layout::Role;
use crate::power_state::PowerState;
use crate::profile::DriveProfile;
use crate::sync::lock;

/// Why a member is spinning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WakeCause {
    /// It has not slept since the volume started.
    Start,
    /// A client's wake of the whole volume.
    Request,
    /// A client's wake limited to the members that hold hinted extents.
    Hint,
    /// I/O the layout sent to it while it slept.
    Io,
    /// The power manager's own decision (an epoch, a rotation).
    Policy,
}

/// What the manager sees of one member.
#[derive(Debug, Clone)]
pub struct MemberPowerView {
    pub index: usize,
    pub role: Role,
    /// Not failed (failed members are never woken or put to sleep).
    pub live: bool,
    pub rebuilding: bool,
    pub state: PowerState,
    /// When it became idle, if it is idle now.
    pub idle_since: Option<Seconds>,
    pub profile: Arc<DriveProfile>,
    /// Its configured standby mode.
    pub standby_mode: usize,
    /// Seconds it has spent serving requests (Active) so far, its current busy period
    /// included: utilization policies (QMD's epochs) take differences.
    pub active_s: f64,
}

/// What the manager sees of the array at one moment.
#[derive(Debug, Clone)]
pub struct ArrayView {
    pub now: Seconds,
    pub members: Vec<MemberPowerView>,
    /// Any single member can be lost (the layout keeps redundancy).
    pub redundant: bool,
    /// Members whose bytes depend on each other (mirror pairs, parity stripes).
    pub groups: Vec<Vec<usize>>,
    /// The members a read of the hinted extents needs (None: no hint given).
    pub hinted: Option<Vec<usize>>,
    /// Groups (by their lowest member) holding only cold data (QMD's partial on-line
    /// mirrors): a policy may let all of their members sleep.
    pub cold_groups: Vec<usize>,
}

impl ArrayView {
    pub fn live(&self) -> impl Iterator<Item = &MemberPowerView> {
        self.members.iter().filter(|m| m.live)
    }
}

/// A member the manager lets sleep, in the standby mode it chose (None: the configured one).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SleepGrant {
    pub member: usize,
    pub mode: Option<usize>,
}

/// What the manager wants done on a tick.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PowerAction {
    Wake { member: usize },
    Sleep(SleepGrant),
}

/// The power-policy seam: one implementation per policy, seeing the whole array.
pub trait PowerManager: Send + fmt::Debug {
    fn describe(&self) -> String;

    /// When member `member`, idle since `idle_since`, should start spinning down (None:
    /// never). Asked by the drive whenever it plays its idle time, so it must be cheap; the
    /// drive books the spin-down at the time returned, so a decision taken at `now` must not
    /// return a time before `now`.
    fn spin_down_at(&self, member: usize, idle_since: Seconds) -> Option<Seconds>;

    /// A client asks the volume to sleep, expecting `expected_idle_s` of quiet: the members
    /// that may sleep, or the reason none may. Changes nothing: `grant_sleep` follows.
    fn decide_sleep(
        &self,
        view: &ArrayView,
        expected_idle_s: Option<f64>,
    ) -> Result<Vec<SleepGrant>, String>;

    /// Member `member` was granted sleep at `now` (its cache is already written back).
    fn grant_sleep(&mut self, _member: usize, _now: Seconds) {}

    /// A client asks the volume to wake: the members to spin up and why.
    fn decide_wake(&self, view: &ArrayView) -> (Vec<usize>, WakeCause) {
        (view.live().map(|m| m.index).collect(), WakeCause::Request)
    }

    /// The member served I/O or was woken: a pending sleep grant is void.
    fn note_wake(&mut self, _member: usize, _now: Seconds) {}

    /// The member began to spin down at `at`.
    fn note_spin_down(&mut self, _member: usize, _at: Seconds) {}

    /// The layout's members that must stay spinning in their current role (RoLo's
    /// on-duty logger); told on every volume tick. Managers that follow the layout honour it.
    fn pin(&mut self, _members: &[usize]) {}

    /// How often the manager wants `on_tick` (None: never; today's policies decide only on
    /// idle time and client requests). It runs on the first volume tick at least this long
    /// after the last run.
    fn tick_every(&self) -> Option<f64> {
        None
    }

    /// Periodic decisions (utilization epochs, logger rotation).
    fn on_tick(&mut self, _view: &ArrayView) -> Vec<PowerAction> {
        Vec::new()
    }
}

/// Why a member is awake, or that it sleeps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Awake {
    pub cause: WakeCause,
    pub since: Seconds,
}

/// The manager and what it decided about each member, shared by the volume and its drives.
#[derive(Debug)]
pub struct Coordinator {
    manager: Box<dyn PowerManager>,
    /// Per member: why it last spun up (None while it sleeps or spins down).
    awake: Vec<Option<Awake>>,
    /// When `on_tick` last ran.
    last_tick: Option<Seconds>,
}

impl Coordinator {
    fn awake_slot(&mut self, member: usize) -> &mut Option<Awake> {
        if self.awake.len() <= member {
            self.awake.resize(
                member + 1,
                Some(Awake {
                    cause: WakeCause::Start,
                    since: 0.0,
                }),
            );
        }
        &mut self.awake[member]
    }

    pub fn manager(&self) -> &dyn PowerManager {
        self.manager.as_ref()
    }

    pub fn manager_mut(&mut self) -> &mut dyn PowerManager {
        self.manager.as_mut()
    }

    /// Put another policy in charge (the members' wake reasons stay).
    pub fn replace_manager(&mut self, manager: Box<dyn PowerManager>) {
        self.manager = manager;
        self.last_tick = None;
    }

    /// Whether the manager's `on_tick` is due at `now` (then it counts as run).
    pub fn tick_due(&mut self, now: Seconds) -> bool {
        let Some(every) = self.manager.tick_every() else {
            return false;
        };
        if self.last_tick.is_some_and(|last| now - last < every) {
            return false;
        }
        self.last_tick = Some(now);
        true
    }

    pub fn awake(&self, member: usize) -> Option<Awake> {
        self.awake.get(member).copied().unwrap_or(Some(Awake {
            cause: WakeCause::Start,
            since: 0.0,
        }))
    }
}

/// The shared handle (cheap to clone).
#[derive(Debug, Clone)]
pub struct SharedPower(Arc<Mutex<Coordinator>>);

impl SharedPower {
    pub fn new(manager: Box<dyn PowerManager>) -> Self {
        Self(Arc::new(Mutex::new(Coordinator {
            manager,
            awake: Vec::new(),
            last_tick: None,
        })))
    }

    /// The link member `member`'s drive holds.
    pub fn member(&self, member: usize) -> MemberPower {
        MemberPower {
            shared: self.clone(),
            member,
        }
    }

    /// Run `f` under the manager's lock; `f` must not lock a drive (the lock order is drive,
    /// then manager).
    pub fn with<R>(&self, f: impl FnOnce(&mut Coordinator) -> R) -> R {
        f(&mut lock(&self.0))
    }

    pub fn same_as(&self, other: &SharedPower) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A drive's link to the manager of its array: a lone drive is an array of one.
#[derive(Debug, Clone)]
pub struct MemberPower {
    shared: SharedPower,
    member: usize,
}

impl MemberPower {
    pub fn shared(&self) -> &SharedPower {
        &self.shared
    }

    pub fn member(&self) -> usize {
        self.member
    }

    pub fn describe(&self) -> String {
        self.shared.with(|c| c.manager.describe())
    }

    pub fn spin_down_at(&self, idle_since: Seconds) -> Option<Seconds> {
        self.shared
            .with(|c| c.manager.spin_down_at(self.member, idle_since))
    }

    pub fn decide_sleep(
        &self,
        view: &ArrayView,
        expected_idle_s: Option<f64>,
    ) -> Result<Vec<SleepGrant>, String> {
        self.shared
            .with(|c| c.manager.decide_sleep(view, expected_idle_s))
    }

    pub fn grant_sleep(&self, now: Seconds) {
        self.shared
            .with(|c| c.manager.grant_sleep(self.member, now));
    }

    pub fn note_wake(&self, now: Seconds) {
        self.shared.with(|c| c.manager.note_wake(self.member, now));
    }

    pub fn note_spin_up(&self, at: Seconds, cause: WakeCause) {
        self.shared.with(|c| {
            c.manager.note_wake(self.member, at);
            *c.awake_slot(self.member) = Some(Awake { cause, since: at });
        });
    }

    pub fn note_spin_down(&self, at: Seconds) {
        self.shared.with(|c| {
            c.manager.note_spin_down(self.member, at);
            *c.awake_slot(self.member) = None;
        });
    }
}

#[cfg(test)]
mod tests;
