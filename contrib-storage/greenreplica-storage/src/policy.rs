//! Power policies decide when an idle drive spins down and whether a client's sleep
//! request is worth it. Later policies (QMD's utilization epochs, RoLo's logger rotation)
//! implement the same trait.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::clock::Seconds;
use crate::profile::DriveProfile;

const DAY_S: f64 = 86_400.0;

/// hd-idle's default, also the cooperative policy's fallback.
pub const DEFAULT_IDLE_TIMEOUT_S: f64 = 600.0;
/// About 50,000 rated start/stops over five years is ~27 a day; allow some headroom.
pub const DEFAULT_START_STOP_BUDGET: u32 = 48;

/// What the configuration or the command line asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum PolicySpec {
    AlwaysOn,
    IdleTimeout { timeout_s: f64 },
    Cooperative { fallback_timeout_s: f64 },
}

impl FromStr for PolicySpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s, None),
        };
        let seconds = |arg: Option<&str>| -> Result<f64, String> {
            match arg {
                None => Ok(DEFAULT_IDLE_TIMEOUT_S),
                Some(a) => match a.trim().parse::<f64>() {
                    Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
                    _ => Err(format!("{a:?} is not a number of seconds >= 0")),
                },
            }
        };
        match name {
            "always-on" if arg.is_none() => Ok(PolicySpec::AlwaysOn),
            "idle-timeout" => Ok(PolicySpec::IdleTimeout {
                timeout_s: seconds(arg)?,
            }),
            "cooperative" => Ok(PolicySpec::Cooperative {
                fallback_timeout_s: seconds(arg)?,
            }),
            _ => Err(format!(
                "unknown power policy {s:?}; use always-on, idle-timeout[:SECONDS] or cooperative[:FALLBACK_SECONDS]"
            )),
        }
    }
}

impl TryFrom<String> for PolicySpec {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<PolicySpec> for String {
    fn from(p: PolicySpec) -> String {
        p.to_string()
    }
}

impl fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicySpec::AlwaysOn => write!(f, "always-on"),
            PolicySpec::IdleTimeout { timeout_s } => write!(f, "idle-timeout:{timeout_s}"),
            PolicySpec::Cooperative { fallback_timeout_s } => {
                write!(f, "cooperative:{fallback_timeout_s}")
            }
        }
    }
}

impl PolicySpec {
    pub fn build(&self, start_stop_budget_per_day: u32) -> Box<dyn PowerPolicy> {
        match *self {
            PolicySpec::AlwaysOn => Box::new(AlwaysOn),
            PolicySpec::IdleTimeout { timeout_s } => Box::new(IdleTimeout { timeout_s }),
            PolicySpec::Cooperative { fallback_timeout_s } => Box::new(Cooperative::new(
                fallback_timeout_s,
                start_stop_budget_per_day,
            )),
        }
    }
}

/// A sleep request that the policy accepted, with the standby mode to use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SleepGrant {
    pub mode: Option<usize>,
}

pub trait PowerPolicy: Send + fmt::Debug {
    fn describe(&self) -> String;

    /// When a drive idle since `idle_since` should start spinning down (None: never).
    fn spin_down_at(&self, idle_since: Seconds) -> Option<Seconds>;

    /// A client asks the drive to sleep now, expecting `expected_idle_s` of quiet.
    fn request_sleep(
        &mut self,
        now: Seconds,
        expected_idle_s: Option<f64>,
        profile: &DriveProfile,
        mode: usize,
    ) -> Result<SleepGrant, String>;

    /// The drive was woken (by I/O or a client); a pending sleep request is void.
    fn note_wake(&mut self, _now: Seconds) {}

    /// The drive began to spin down at `at`.
    fn note_spin_down(&mut self, _at: Seconds) {}
}

#[derive(Debug)]
pub struct AlwaysOn;

impl PowerPolicy for AlwaysOn {
    fn describe(&self) -> String {
        "always-on".into()
    }

    fn spin_down_at(&self, _idle_since: Seconds) -> Option<Seconds> {
        None
    }

    fn request_sleep(
        &mut self,
        _: Seconds,
        _: Option<f64>,
        _: &DriveProfile,
        _: usize,
    ) -> Result<SleepGrant, String> {
        Err("the volume's power policy is always-on".into())
    }
}

/// What hd-idle does: spin down after a fixed idle time.
#[derive(Debug)]
pub struct IdleTimeout {
    pub timeout_s: f64,
}

impl PowerPolicy for IdleTimeout {
    fn describe(&self) -> String {
        format!("idle-timeout:{}", self.timeout_s)
    }

    fn spin_down_at(&self, idle_since: Seconds) -> Option<Seconds> {
        Some(idle_since + self.timeout_s)
    }

    fn request_sleep(
        &mut self,
        _: Seconds,
        _: Option<f64>,
        _: &DriveProfile,
        _: usize,
    ) -> Result<SleepGrant, String> {
        Err(format!(
            "the volume's power policy is idle-timeout:{} (sleep requests need cooperative)",
            self.timeout_s
        ))
    }
}

/// A client says when to sleep; without one it behaves like idle-timeout. Both paths share
/// one start/stop budget per rolling day.
#[derive(Debug)]
pub struct Cooperative {
    fallback_timeout_s: f64,
    budget_per_day: u32,
    sleep_requested_at: Option<Seconds>,
    recent_spin_downs: VecDeque<Seconds>,
}

impl Cooperative {
    pub fn new(fallback_timeout_s: f64, budget_per_day: u32) -> Self {
        Self {
            fallback_timeout_s,
            budget_per_day,
            sleep_requested_at: None,
            recent_spin_downs: VecDeque::new(),
        }
    }

    /// The earliest time at or after `t` at which the budget allows another spin-down.
    fn budget_allows_at(&self, t: Seconds) -> Option<Seconds> {
        if self.budget_per_day == 0 {
            return None;
        }
        let in_window: Vec<_> = self
            .recent_spin_downs
            .iter()
            .copied()
            .filter(|&s| s > t - DAY_S)
            .collect();
        let budget = self.budget_per_day as usize;
        if in_window.len() < budget {
            Some(t)
        } else {
            // The window frees a slot when its oldest relevant spin-down is a day old.
            Some(in_window[in_window.len() - budget] + DAY_S)
        }
    }
}

impl PowerPolicy for Cooperative {
    fn describe(&self) -> String {
        format!(
            "cooperative (fallback idle-timeout:{}, budget {}/day)",
            self.fallback_timeout_s, self.budget_per_day
        )
    }

    fn spin_down_at(&self, idle_since: Seconds) -> Option<Seconds> {
        let wanted = match self.sleep_requested_at {
            Some(at) => at.max(idle_since),
            None => idle_since + self.fallback_timeout_s,
        };
        self.budget_allows_at(wanted)
    }

    fn request_sleep(
        &mut self,
        now: Seconds,
        expected_idle_s: Option<f64>,
        profile: &DriveProfile,
        mode: usize,
    ) -> Result<SleepGrant, String> {
        let mut chosen = None;
        if let Some(idle) = expected_idle_s {
            let break_even = profile.break_even_s(mode);
            match profile.best_mode_for_gap(idle) {
                Some(best) => chosen = Some(best),
                None => {
                    return Err(format!(
                        "expected idle {idle} s is below the break-even time {break_even:.1} s"
                    ))
                }
            }
        }
        match self.budget_allows_at(now) {
            Some(t) if t <= now => {}
            Some(t) => {
                return Err(format!(
                "the start/stop budget of {} per day is spent (next spin-down allowed in {:.0} s)",
                self.budget_per_day,
                t - now
            ))
            }
            None => return Err("the start/stop budget is 0 per day".into()),
        }
        self.sleep_requested_at = Some(now);
        Ok(SleepGrant { mode: chosen })
    }

    fn note_wake(&mut self, _now: Seconds) {
        self.sleep_requested_at = None;
    }

    fn note_spin_down(&mut self, at: Seconds) {
        self.sleep_requested_at = None;
        self.recent_spin_downs.push_back(at);
        while self
            .recent_spin_downs
            .front()
            .is_some_and(|&s| s <= at - DAY_S)
        {
            self.recent_spin_downs.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> DriveProfile {
        DriveProfile::load("ultrastar-36z15").unwrap()
    }

    #[test]
    fn parses_policy_strings() {
        assert_eq!("always-on".parse::<PolicySpec>(), Ok(PolicySpec::AlwaysOn));
        assert_eq!(
            "idle-timeout:100".parse::<PolicySpec>(),
            Ok(PolicySpec::IdleTimeout { timeout_s: 100.0 })
        );
        assert_eq!(
            "idle-timeout".parse::<PolicySpec>(),
            Ok(PolicySpec::IdleTimeout { timeout_s: 600.0 })
        );
        assert!("idle-timeout:soon".parse::<PolicySpec>().is_err());
        assert!("sometimes".parse::<PolicySpec>().is_err());
    }

    #[test]
    fn idle_timeout_spins_down_after_the_timeout() {
        let p = IdleTimeout { timeout_s: 100.0 };
        assert_eq!(p.spin_down_at(5.0), Some(105.0));
    }

    #[test]
    fn cooperative_declines_below_break_even_with_the_reason() {
        let mut c = Cooperative::new(600.0, 10);
        let err = c.request_sleep(0.0, Some(20.0), &profile(), 0).unwrap_err();
        assert!(
            err.contains("expected idle 20 s is below the break-even time 43.9 s"),
            "{err}"
        );
        assert_eq!(
            c.spin_down_at(0.0),
            Some(600.0),
            "declined sleep changes nothing"
        );
    }

    #[test]
    fn cooperative_accepted_sleep_spins_down_when_idle() {
        let mut c = Cooperative::new(600.0, 10);
        c.request_sleep(50.0, Some(3600.0), &profile(), 0).unwrap();
        assert_eq!(c.spin_down_at(10.0), Some(50.0));
        c.note_wake(60.0);
        assert_eq!(c.spin_down_at(60.0), Some(660.0), "back to the fallback");
    }

    #[test]
    fn cooperative_budget_is_honoured() {
        let mut c = Cooperative::new(600.0, 2);
        c.note_spin_down(100.0);
        c.note_spin_down(200.0);
        let err = c
            .request_sleep(300.0, Some(3600.0), &profile(), 0)
            .unwrap_err();
        assert!(err.contains("budget of 2 per day is spent"), "{err}");
        // The fallback also waits until the oldest spin-down is a day old.
        assert_eq!(c.spin_down_at(300.0), Some(100.0 + DAY_S));
    }
}
