//! A drive's power-state machine and energy ledger: spin-down and spin-up (or NVMe power
//! state entry and exit), standby modes and NVMe autonomous transitions. When an idle drive
//! spins down and whether it may sleep is decided by the array's power manager
//! (`crate::power_manager`), which the machine asks through its `MemberPower` link. It only knows the times it is given, so it runs unchanged under the real
//! and the virtual clock.
//!
//! Transitions are recorded at the instant they happen in the model (an idle timeout that
//! expires at t=100.0 is booked at 100.0), however late the caller notices them.

use std::sync::Arc;

use crate::clock::Seconds;
use crate::ledger::Ledger;
use crate::power_manager::{MemberPower, MemberPowerView, WakeCause};
use crate::power_state::PowerState;
use crate::profile::DriveProfile;

/// A transition the owner of the drive may have to act on (e.g. `hdparm -y` for a real disk).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PowerEvent {
    SpinDownStarted { at: Seconds },
    SpinUpStarted { at: Seconds },
}

#[derive(Debug)]
pub struct PowerMachine {
    profile: Arc<DriveProfile>,
    configured_mode: usize,
    /// A mode a client's sleep request chose for the next spin-down.
    granted_mode: Option<usize>,
    /// The mode of the current (or last) standby, used for the matching spin-up.
    current_mode: usize,
    power: MemberPower,
    state: PowerState,
    since: Seconds,
    /// End of the current Active, SpinningUp or SpinningDown period.
    until: Seconds,
    /// The device sleeps by itself in this mode after this much idle time (NVMe APST).
    autonomous: Option<(usize, f64)>,
    /// Set when a spin-up ends: the mechanism's head position is unknown again.
    head_lost: bool,
    ledger: Ledger,
    events: Vec<PowerEvent>,
}

impl PowerMachine {
    /// A drive that is spun up and idle at time `now`, continuing the totals in `ledger`.
    pub fn new(
        profile: Arc<DriveProfile>,
        standby_mode: usize,
        power: MemberPower,
        now: Seconds,
        ledger: Ledger,
    ) -> Self {
        let autonomous = profile.autonomous_mode();
        Self {
            profile,
            configured_mode: standby_mode,
            granted_mode: None,
            current_mode: standby_mode,
            power,
            state: PowerState::Idle,
            since: now,
            until: now,
            autonomous,
            head_lost: false,
            ledger,
            events: Vec::new(),
        }
    }

    pub fn profile(&self) -> &DriveProfile {
        &self.profile
    }

    pub fn standby_mode(&self) -> usize {
        self.current_mode
    }

    pub fn policy_description(&self) -> String {
        self.power.describe()
    }

    pub fn power_link(&self) -> &MemberPower {
        &self.power
    }

    /// Join an array's manager as member `power.member()` (the drive keeps its state).
    pub fn rebind(&mut self, power: MemberPower) {
        self.power = power;
    }

    /// What the array's manager sees of this drive (at the last time it was advanced to).
    pub fn view(&self, role: crate::layout::Role, live: bool, rebuilding: bool) -> MemberPowerView {
        MemberPowerView {
            index: self.power.member(),
            role,
            live,
            rebuilding,
            state: self.state,
            idle_since: (self.state == PowerState::Idle).then_some(self.since),
            profile: self.profile.clone(),
            standby_mode: self.configured_mode,
            active_s: self.ledger.state_seconds.active
                + if self.state == PowerState::Active {
                    (self.until - self.since).max(0.0)
                } else {
                    0.0
                },
        }
    }

    pub fn state(&self) -> PowerState {
        self.state
    }

    pub fn take_events(&mut self) -> Vec<PowerEvent> {
        std::mem::take(&mut self.events)
    }

    /// Book the closed period [from, to) in `state`.
    fn close(&mut self, state: PowerState, from: Seconds, to: Seconds) {
        let seconds = (to - from).max(0.0);
        let mode = self.profile.mode(self.current_mode);
        let active_w = self.profile.active_w;
        let joules = match state {
            PowerState::Active => active_w * seconds,
            PowerState::Idle => self.profile.idle_w * seconds,
            PowerState::Standby => mode.power_w * seconds,
            // Whole transitions cost exactly the profile's figure.
            PowerState::SpinningUp => mode.spin_up_joules(active_w),
            PowerState::SpinningDown => mode.spin_down_joules(active_w),
        };
        self.ledger.record(state, seconds, joules);
        if state == PowerState::Standby {
            let name = mode.name.clone();
            self.ledger.record_standby_mode(&name, seconds);
        }
    }

    fn enter(&mut self, state: PowerState, at: Seconds, until: Seconds) {
        self.state = state;
        self.since = at;
        self.until = until;
    }

    fn start_spin_down(&mut self, at: Seconds) {
        self.current_mode = self.granted_mode.take().unwrap_or(self.configured_mode);
        let duration = self.profile.mode(self.current_mode).spin_down_s;
        self.enter(PowerState::SpinningDown, at, at + duration);
        self.ledger.spin_downs += 1;
        self.power.note_spin_down(at);
        self.events.push(PowerEvent::SpinDownStarted { at });
    }

    fn start_spin_up(&mut self, at: Seconds, cause: WakeCause) {
        let duration = self.profile.mode(self.current_mode).spin_up_s;
        self.enter(PowerState::SpinningUp, at, at + duration);
        self.ledger.spin_ups += 1;
        self.power.note_spin_up(at, cause);
        self.events.push(PowerEvent::SpinUpStarted { at });
    }

    /// Play every transition due up to `t`.
    pub fn advance_to(&mut self, t: Seconds) {
        loop {
            match self.state {
                PowerState::Active if self.until <= t => {
                    self.close(PowerState::Active, self.since, self.until);
                    self.enter(PowerState::Idle, self.until, self.until);
                }
                PowerState::SpinningUp if self.until <= t => {
                    self.close(PowerState::SpinningUp, self.since, self.until);
                    self.enter(PowerState::Idle, self.until, self.until);
                    self.head_lost = true;
                }
                PowerState::SpinningDown if self.until <= t => {
                    self.close(PowerState::SpinningDown, self.since, self.until);
                    self.enter(PowerState::Standby, self.until, self.until);
                }
                PowerState::Idle => match self.idle_ends_at() {
                    Some((at, autonomous)) if at <= t => {
                        self.close(PowerState::Idle, self.since, at);
                        if let Some(mode) = autonomous {
                            self.granted_mode = Some(mode);
                        }
                        self.start_spin_down(at);
                    }
                    _ => break,
                },
                _ => break,
            }
        }
    }

    /// Make sure the drive is spinning or about to; returns when it can serve I/O.
    fn spin_up_if_needed(&mut self, now: Seconds, cause: WakeCause) -> Seconds {
        match self.state {
            PowerState::Standby => {
                self.close(PowerState::Standby, self.since, now);
                self.start_spin_up(now, cause);
                self.until
            }
            PowerState::SpinningDown => {
                // A drive finishes spinning down before it can spin up again.
                let end = self.until;
                self.close(PowerState::SpinningDown, self.since, end);
                self.enter(PowerState::Standby, end, end);
                self.start_spin_up(end, cause);
                self.until
            }
            PowerState::SpinningUp => self.until.max(now),
            // Spinning: the command queue, not the power state, decides when it starts.
            PowerState::Active => self.since.max(now),
            PowerState::Idle => now,
        }
    }

    /// When an idle period started at `since` ends by itself, and whether the device's
    /// autonomous transition (rather than the host's policy) ends it, with that mode.
    fn idle_ends_at(&self) -> Option<(Seconds, Option<usize>)> {
        let policy = self
            .power
            .spin_down_at(self.since)
            .map(|at| at.max(self.since));
        let autonomous = self
            .autonomous
            .map(|(mode, delay)| (self.since + delay, mode));
        match (policy, autonomous) {
            (Some(p), Some((a, mode))) if a < p => Some((a, Some(mode))),
            (None, Some((a, mode))) => Some((a, Some(mode))),
            (Some(p), _) => Some((p, None)),
            (None, None) => None,
        }
    }

    /// A command is to be served from `now`: spin up if needed and become Active; returns
    /// when the mechanism can start.
    pub fn begin_service(&mut self, now: Seconds) -> Seconds {
        self.advance_to(now);
        let ready = self.spin_up_if_needed(now, WakeCause::Io);
        match self.state {
            PowerState::SpinningUp => {
                self.close(PowerState::SpinningUp, self.since, self.until);
                self.enter(PowerState::Active, self.until, self.until);
                self.head_lost = true;
            }
            PowerState::Idle => {
                self.close(PowerState::Idle, self.since, now);
                self.enter(PowerState::Active, now, now);
                self.power.note_wake(now);
            }
            _ => {}
        }
        ready.max(now)
    }

    /// The mechanism is busy until `done`.
    pub fn busy_until(&mut self, done: Seconds) {
        self.until = self.until.max(done);
    }

    /// Whether a spin-up since the last call left the head position unknown.
    pub fn take_head_lost(&mut self) -> bool {
        std::mem::take(&mut self.head_lost)
    }

    pub fn ledger_mut(&mut self) -> &mut Ledger {
        &mut self.ledger
    }

    /// Start spinning up now (the manager chose this drive, for `cause`); returns when the
    /// drive will be ready.
    pub fn wake(&mut self, now: Seconds, cause: WakeCause) -> Seconds {
        self.advance_to(now);
        self.power.note_wake(now);
        self.spin_up_if_needed(now, cause)
    }

    /// The manager granted sleep (in `mode`, None: the configured one): spin down as soon as
    /// the drive is idle.
    pub fn grant_sleep(&mut self, now: Seconds, mode: Option<usize>) {
        self.advance_to(now);
        if matches!(self.state, PowerState::Standby | PowerState::SpinningDown) {
            return;
        }
        self.power.grant_sleep(now);
        self.granted_mode = mode;
        self.advance_to(now);
    }

    /// When the drive could start serving a request arriving at `now` (for read balancing).
    pub fn ready_estimate(&self, now: Seconds) -> Seconds {
        let spin_up = self.profile.mode(self.current_mode).spin_up_s;
        match self.state {
            PowerState::Idle => now,
            PowerState::Active | PowerState::SpinningUp => self.until.max(now),
            PowerState::SpinningDown => self.until.max(now) + spin_up,
            PowerState::Standby => now + spin_up,
        }
    }

    /// Totals up to `now`, including the part of the current period already spent.
    pub fn ledger_at(&mut self, now: Seconds) -> Ledger {
        self.advance_to(now);
        let mut ledger = self.ledger.clone();
        let elapsed = (now - self.since).max(0.0);
        let mode = self.profile.mode(self.current_mode);
        let active_w = self.profile.active_w;
        let fraction = |total_s: f64| {
            if total_s > 0.0 {
                (elapsed / total_s).min(1.0)
            } else {
                1.0
            }
        };
        let joules = match self.state {
            PowerState::Active => active_w * elapsed,
            PowerState::Idle => self.profile.idle_w * elapsed,
            PowerState::Standby => mode.power_w * elapsed,
            PowerState::SpinningUp => mode.spin_up_joules(active_w) * fraction(mode.spin_up_s),
            PowerState::SpinningDown => {
                mode.spin_down_joules(active_w) * fraction(mode.spin_down_s)
            }
        };
        ledger.record(self.state, elapsed, joules);
        if self.state == PowerState::Standby {
            ledger.record_standby_mode(&mode.name, elapsed);
        }
        ledger
    }
}
