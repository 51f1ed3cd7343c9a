//! One member drive's power-state machine, service model and energy ledger. It only knows
//! the times it is given, so it runs unchanged under the real and the virtual clock.
//!
//! Transitions are recorded at the instant they happen in the model (an idle timeout that
//! expires at t=100.0 is booked at 100.0), however late the caller notices them.

use std::sync::Arc;

use crate::clock::Seconds;
use crate::ledger::Ledger;
use crate::policy::PowerPolicy;
use crate::power_state::PowerState;
use crate::profile::DriveProfile;
use crate::service_model::{IoKind, ServiceModel};

/// A transition the owner of the drive may have to act on (e.g. `hdparm -y` for a real disk).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PowerEvent {
    SpinDownStarted { at: Seconds },
    SpinUpStarted { at: Seconds },
}

#[derive(Debug)]
pub struct Drive {
    profile: Arc<DriveProfile>,
    configured_mode: usize,
    /// A mode a client's sleep request chose for the next spin-down.
    granted_mode: Option<usize>,
    /// The mode of the current (or last) standby, used for the matching spin-up.
    current_mode: usize,
    model: ServiceModel,
    policy: Box<dyn PowerPolicy>,
    state: PowerState,
    since: Seconds,
    /// End of the current Active, SpinningUp or SpinningDown period.
    until: Seconds,
    ledger: Ledger,
    events: Vec<PowerEvent>,
}

impl Drive {
    /// A drive that is spun up and idle at time `now`, continuing the totals in `ledger`.
    pub fn new(
        profile: Arc<DriveProfile>,
        standby_mode: usize,
        policy: Box<dyn PowerPolicy>,
        now: Seconds,
        ledger: Ledger,
    ) -> Self {
        Self {
            model: ServiceModel::new(&profile),
            profile,
            configured_mode: standby_mode,
            granted_mode: None,
            current_mode: standby_mode,
            policy,
            state: PowerState::Idle,
            since: now,
            until: now,
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
        self.policy.describe()
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
        self.policy.note_spin_down(at);
        self.events.push(PowerEvent::SpinDownStarted { at });
    }

    fn start_spin_up(&mut self, at: Seconds) {
        let duration = self.profile.mode(self.current_mode).spin_up_s;
        self.enter(PowerState::SpinningUp, at, at + duration);
        self.ledger.spin_ups += 1;
        self.policy.note_wake(at);
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
                    self.model.forget_head();
                }
                PowerState::SpinningDown if self.until <= t => {
                    self.close(PowerState::SpinningDown, self.since, self.until);
                    self.enter(PowerState::Standby, self.until, self.until);
                }
                PowerState::Idle => match self.policy.spin_down_at(self.since) {
                    Some(at) if at.max(self.since) <= t => {
                        let at = at.max(self.since);
                        self.close(PowerState::Idle, self.since, at);
                        self.start_spin_down(at);
                    }
                    _ => break,
                },
                _ => break,
            }
        }
    }

    /// Make sure the drive is spinning or about to; returns when it can serve I/O.
    fn spin_up_if_needed(&mut self, now: Seconds) -> Seconds {
        match self.state {
            PowerState::Standby => {
                self.close(PowerState::Standby, self.since, now);
                self.start_spin_up(now);
                self.until
            }
            PowerState::SpinningDown => {
                // A drive finishes spinning down before it can spin up again.
                let end = self.until;
                self.close(PowerState::SpinningDown, self.since, end);
                self.enter(PowerState::Standby, end, end);
                self.start_spin_up(end);
                self.until
            }
            PowerState::SpinningUp | PowerState::Active => self.until.max(now),
            PowerState::Idle => now,
        }
    }

    /// Queue one request arriving at `now`; returns its completion time. Requests are
    /// served first come, first served, after any spin-up they have to wait for.
    pub fn submit(&mut self, now: Seconds, kind: IoKind, offset: u64, len: u64) -> Seconds {
        self.advance_to(now);
        let ready = self.spin_up_if_needed(now);
        match self.state {
            PowerState::SpinningUp => {
                self.close(PowerState::SpinningUp, self.since, self.until);
                self.enter(PowerState::Active, self.until, self.until);
                self.model.forget_head();
            }
            PowerState::Idle => {
                self.close(PowerState::Idle, self.since, now);
                self.enter(PowerState::Active, now, now);
                self.policy.note_wake(now);
            }
            _ => {}
        }
        let start = ready.max(now);
        let done = start + self.model.service(kind, offset, len, start);
        self.until = self.until.max(done);
        match kind {
            IoKind::Read => {
                self.ledger.reads += 1;
                self.ledger.bytes_read += len;
            }
            IoKind::Write => {
                self.ledger.writes += 1;
                self.ledger.bytes_written += len;
            }
        }
        done
    }

    /// Client wake: start spinning up now; returns when the drive will be ready.
    pub fn wake(&mut self, now: Seconds) -> Seconds {
        self.advance_to(now);
        self.policy.note_wake(now);
        self.spin_up_if_needed(now)
    }

    /// Client sleep: spin down as soon as the drive is idle, if the policy agrees.
    pub fn sleep(&mut self, now: Seconds, expected_idle_s: Option<f64>) -> Result<(), String> {
        self.advance_to(now);
        if matches!(self.state, PowerState::Standby | PowerState::SpinningDown) {
            return Ok(());
        }
        let grant =
            self.policy
                .request_sleep(now, expected_idle_s, &self.profile, self.configured_mode)?;
        self.granted_mode = grant.mode;
        self.advance_to(now);
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicySpec;

    fn drive(profile: &str, policy: &str) -> Drive {
        let profile = Arc::new(DriveProfile::load(profile).unwrap());
        let mode = profile.default_mode_index();
        let policy = policy.parse::<PolicySpec>().unwrap().build(48);
        Drive::new(profile, mode, policy, 0.0, Ledger::default())
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn idle_timeout_scenario_books_every_state_exactly() {
        // One request at t=0, one at t=1000, idle-timeout 100 s, Ultrastar 36Z15.
        let mut d = drive("ultrastar-36z15", "idle-timeout:100");
        let first_done = d.submit(0.0, IoKind::Read, 0, 4096);
        let second_done = d.submit(1000.0, IoKind::Read, 0, 4096);
        let l = d.ledger_at(second_done);
        let s = l.state_seconds;
        let service2 = second_done - 1026.0;
        assert!(first_done > 0.0 && first_done < 0.05);
        assert!(close(s.idle, 100.0), "idle {}", s.idle);
        assert!(close(s.spinning_down, 15.0));
        assert!(close(s.standby, 1000.0 - (first_done + 115.0)));
        assert!(close(s.spinning_up, 26.0));
        assert!(close(s.active, first_done + service2));
        assert_eq!((l.spin_downs, l.spin_ups), (1, 1));
        let expected = 39.0 * s.active + 22.3 * 100.0 + 62.25 + 4.15 * s.standby + 904.8;
        assert!(
            close(l.energy_joules, expected),
            "{} vs {expected}",
            l.energy_joules
        );
        assert!(close(l.transition_joules, 62.25 + 904.8));
    }

    #[test]
    fn always_on_stays_idle_between_requests() {
        let mut d = drive("ultrastar-36z15", "always-on");
        d.submit(0.0, IoKind::Read, 0, 4096);
        let end = d.submit(1000.0, IoKind::Read, 0, 4096);
        let l = d.ledger_at(end);
        assert_eq!((l.spin_downs, l.spin_ups), (0, 0));
        assert!(close(l.state_seconds.total(), end));
        let expected = 22.3 * l.state_seconds.idle + 39.0 * l.state_seconds.active;
        assert!(close(l.energy_joules, expected));
        assert!((l.energy_joules - 22_300.0).abs() < 22_300.0 * 0.001);
    }

    #[test]
    fn request_during_spin_down_waits_for_the_full_cycle() {
        let mut d = drive("test-fast", "idle-timeout:1");
        d.advance_to(1.1); // spin-down runs 1.0 .. 1.2
        assert_eq!(d.state(), PowerState::SpinningDown);
        let done = d.submit(1.1, IoKind::Read, 0, 4096);
        assert!(done >= 1.2 + 0.5, "spin-down end + spin-up, got {done}");
        let l = d.ledger_at(done);
        assert_eq!((l.spin_downs, l.spin_ups), (1, 1));
    }

    #[test]
    fn requests_queue_behind_each_other() {
        let mut d = drive("ultrastar-36z15", "always-on");
        let a = d.submit(0.0, IoKind::Read, 0, 1 << 20);
        let b = d.submit(0.0, IoKind::Read, 1 << 20, 1 << 20);
        assert!(
            close(b - a, (1 << 20) as f64 / 55e6),
            "sequential follow-on after a"
        );
    }

    #[test]
    fn client_wake_reports_ready_time_and_sleep_is_declined_below_break_even() {
        let mut d = drive("test-fast", "cooperative");
        assert!(d.sleep(0.0, Some(1.0)).unwrap_err().contains("break-even"));
        d.sleep(0.0, Some(60.0)).unwrap();
        assert_eq!(d.state(), PowerState::SpinningDown);
        d.advance_to(10.0);
        assert_eq!(d.state(), PowerState::Standby);
        let ready = d.wake(10.0);
        assert!(close(ready, 10.5));
        assert_eq!(d.state(), PowerState::SpinningUp);
        d.advance_to(11.0);
        assert_eq!(d.state(), PowerState::Idle, "no fallback spin-down yet");
    }

    #[test]
    fn a_long_expected_idle_picks_the_deskstar_mode_that_saves_most() {
        let mut d = drive("deskstar-t7k250", "cooperative");
        d.sleep(0.0, Some(3600.0)).unwrap();
        d.advance_to(100.0);
        let l = d.ledger_at(100.0);
        let standby = l.standby_seconds_by_mode.get("non-spinning").copied();
        assert!(close(standby.unwrap_or(0.0), 100.0 - 0.7), "{l:?}");
        assert!(close(l.state_joules.standby, 0.93 * (100.0 - 0.7)));
    }

    #[test]
    fn ledger_snapshot_includes_the_current_period() {
        let mut d = drive("test-fast", "always-on");
        let l = d.ledger_at(10.0);
        assert!(close(l.state_seconds.idle, 10.0));
        assert!(close(l.energy_joules, 50.0));
    }

    #[test]
    fn spin_down_event_is_reported_once() {
        let mut d = drive("test-fast", "idle-timeout:1");
        d.advance_to(5.0);
        assert_eq!(
            d.take_events(),
            vec![PowerEvent::SpinDownStarted { at: 1.0 }]
        );
        assert!(d.take_events().is_empty());
    }
}
