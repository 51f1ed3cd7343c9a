//! Power policies: when an idle member spins down, whether a client's sleep request is worth
//! it, which members a wake spins up. Each is a `PowerManager` that sees the whole array;
//! later policies (QMD's utilization epochs, RoLo's logger rotation) implement the same trait.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::clock::Seconds;
use crate::power_manager::{
    ArrayView, MemberPower, MemberPowerView, PowerManager, SharedPower, SleepGrant, WakeCause,
};
use crate::power_state::PowerState;

mod mirrors;
mod utilization;

pub use mirrors::Mirrors;
pub use utilization::{Utilization, UtilizationParams};

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
    IdleTimeout {
        timeout_s: f64,
    },
    Cooperative {
        fallback_timeout_s: f64,
    },
    /// Logged mirrors (graid, rolo-*): the members the layout pins (primaries, the on-duty
    /// logger) stay up, the others sleep after SECONDS idle.
    Mirrors {
        timeout_s: f64,
    },
    /// QMD's utilization epochs (`utilization` or `qmd`, optional KEY=VALUE parameters).
    Utilization(UtilizationParams),
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
            "mirrors" => Ok(PolicySpec::Mirrors {
                timeout_s: seconds(arg)?,
            }),
            "utilization" | "qmd" => Ok(PolicySpec::Utilization(UtilizationParams::parse(arg)?)),
            _ => Err(format!(
                "unknown power policy {s:?}; use always-on, idle-timeout[:SECONDS], cooperative[:FALLBACK_SECONDS], mirrors[:SECONDS] or utilization[:KEY=VALUE,...]"
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
            PolicySpec::Mirrors { timeout_s } => write!(f, "mirrors:{timeout_s}"),
            PolicySpec::Utilization(p) => write!(f, "utilization:{p}"),
        }
    }
}

impl PolicySpec {
    /// The array-wide manager this policy asks for.
    pub fn manager(&self, start_stop_budget_per_day: u32) -> Box<dyn PowerManager> {
        match *self {
            PolicySpec::AlwaysOn => Box::new(AlwaysOn),
            PolicySpec::IdleTimeout { timeout_s } => Box::new(IdleTimeout { timeout_s }),
            PolicySpec::Cooperative { fallback_timeout_s } => Box::new(Cooperative::new(
                fallback_timeout_s,
                start_stop_budget_per_day,
            )),
            PolicySpec::Mirrors { timeout_s } => Box::new(Mirrors::new(timeout_s)),
            PolicySpec::Utilization(p) => Box::new(Utilization::new(p)),
        }
    }

    /// The link of a drive built on its own: a manager of its own, as member 0. A volume
    /// adopts its first member's manager for the whole array (`Volume::new`).
    pub fn build(&self, start_stop_budget_per_day: u32) -> MemberPower {
        SharedPower::new(self.manager(start_stop_budget_per_day)).member(0)
    }
}

/// The members that may sleep: every live one not already asleep or on its way.
fn sleep_candidates(view: &ArrayView) -> impl Iterator<Item = &MemberPowerView> {
    view.live()
        .filter(|m| !matches!(m.state, PowerState::Standby | PowerState::SpinningDown))
}

#[derive(Debug)]
pub struct AlwaysOn;

impl PowerManager for AlwaysOn {
    fn describe(&self) -> String {
        "always-on".into()
    }

    fn spin_down_at(&self, _member: usize, _idle_since: Seconds) -> Option<Seconds> {
        None
    }

    fn decide_sleep(&self, _: &ArrayView, _: Option<f64>) -> Result<Vec<SleepGrant>, String> {
        Err("the volume's power policy is always-on".into())
    }
}

/// What hd-idle does: spin down after a fixed idle time.
#[derive(Debug)]
pub struct IdleTimeout {
    pub timeout_s: f64,
}

impl PowerManager for IdleTimeout {
    fn describe(&self) -> String {
        format!("idle-timeout:{}", self.timeout_s)
    }

    fn spin_down_at(&self, _member: usize, idle_since: Seconds) -> Option<Seconds> {
        Some(idle_since + self.timeout_s)
    }

    fn decide_sleep(&self, _: &ArrayView, _: Option<f64>) -> Result<Vec<SleepGrant>, String> {
        Err(format!(
            "the volume's power policy is idle-timeout:{} (sleep requests need cooperative)",
            self.timeout_s
        ))
    }
}

/// One member's part of the cooperative policy.
#[derive(Debug, Default, Clone)]
struct MemberBudget {
    sleep_requested_at: Option<Seconds>,
    recent_spin_downs: VecDeque<Seconds>,
}

/// A client says when to sleep; without one it behaves like idle-timeout. Both paths share
/// one start/stop budget per member per rolling day. A wake with hinted extents spins up only
/// the members a read of them needs.
#[derive(Debug)]
pub struct Cooperative {
    fallback_timeout_s: f64,
    budget_per_day: u32,
    members: Vec<MemberBudget>,
}

impl Cooperative {
    pub fn new(fallback_timeout_s: f64, budget_per_day: u32) -> Self {
        Self {
            fallback_timeout_s,
            budget_per_day,
            members: Vec::new(),
        }
    }

    fn member(&self, member: usize) -> Option<&MemberBudget> {
        self.members.get(member)
    }

    fn member_mut(&mut self, member: usize) -> &mut MemberBudget {
        if self.members.len() <= member {
            self.members.resize(member + 1, MemberBudget::default());
        }
        &mut self.members[member]
    }

    /// The earliest time at or after `t` at which the budget allows member `member` another
    /// spin-down.
    fn budget_allows_at(&self, member: usize, t: Seconds) -> Option<Seconds> {
        if self.budget_per_day == 0 {
            return None;
        }
        let Some(m) = self.member(member) else {
            return Some(t);
        };
        let in_window: Vec<_> = m
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

    /// Whether member `member` may sleep now, expecting `expected_idle_s`, and in which mode.
    fn grant_for(
        &self,
        m: &MemberPowerView,
        now: Seconds,
        expected_idle_s: Option<f64>,
    ) -> Result<SleepGrant, String> {
        let mut chosen = None;
        if let Some(idle) = expected_idle_s {
            let break_even = m.profile.break_even_s(m.standby_mode);
            match m.profile.best_mode_for_gap(idle) {
                Some(best) => chosen = Some(best),
                None => {
                    return Err(format!(
                        "expected idle {idle} s is below the break-even time {break_even:.1} s"
                    ))
                }
            }
        }
        match self.budget_allows_at(m.index, now) {
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
        Ok(SleepGrant {
            member: m.index,
            mode: chosen,
        })
    }
}

impl PowerManager for Cooperative {
    fn describe(&self) -> String {
        format!(
            "cooperative (fallback idle-timeout:{}, budget {}/day)",
            self.fallback_timeout_s, self.budget_per_day
        )
    }

    fn spin_down_at(&self, member: usize, idle_since: Seconds) -> Option<Seconds> {
        let wanted = match self.member(member).and_then(|m| m.sleep_requested_at) {
            Some(at) => at.max(idle_since),
            None => idle_since + self.fallback_timeout_s,
        };
        self.budget_allows_at(member, wanted)
    }

    /// All members sleep or none: the first one that may not says why.
    fn decide_sleep(
        &self,
        view: &ArrayView,
        expected_idle_s: Option<f64>,
    ) -> Result<Vec<SleepGrant>, String> {
        sleep_candidates(view)
            .map(|m| self.grant_for(m, view.now, expected_idle_s))
            .collect()
    }

    fn grant_sleep(&mut self, member: usize, now: Seconds) {
        self.member_mut(member).sleep_requested_at = Some(now);
    }

    /// With a hint, only the members a read of the hinted extents needs.
    fn decide_wake(&self, view: &ArrayView) -> (Vec<usize>, WakeCause) {
        match &view.hinted {
            Some(hinted) => (
                view.live()
                    .map(|m| m.index)
                    .filter(|i| hinted.contains(i))
                    .collect(),
                WakeCause::Hint,
            ),
            None => (view.live().map(|m| m.index).collect(), WakeCause::Request),
        }
    }

    fn note_wake(&mut self, member: usize, _now: Seconds) {
        if let Some(m) = self.members.get_mut(member) {
            m.sleep_requested_at = None;
        }
    }

    fn note_spin_down(&mut self, member: usize, at: Seconds) {
        let m = self.member_mut(member);
        m.sleep_requested_at = None;
        m.recent_spin_downs.push_back(at);
        while m
            .recent_spin_downs
            .front()
            .is_some_and(|&s| s <= at - DAY_S)
        {
            m.recent_spin_downs.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Role;
    use crate::profile::DriveProfile;
    use std::sync::Arc;

    fn profile() -> Arc<DriveProfile> {
        Arc::new(DriveProfile::load("ultrastar-36z15").unwrap())
    }

    /// An array of `n` idle members at `now`.
    fn view(n: usize, now: Seconds) -> ArrayView {
        ArrayView {
            now,
            members: (0..n)
                .map(|index| MemberPowerView {
                    index,
                    role: Role::Data,
                    live: true,
                    rebuilding: false,
                    state: PowerState::Idle,
                    idle_since: Some(0.0),
                    profile: profile(),
                    standby_mode: 0,
                    active_s: 0.0,
                })
                .collect(),
            redundant: n > 1,
            groups: vec![(0..n).collect()],
            hinted: None,
            cold_groups: Vec::new(),
        }
    }

    fn grant_all(c: &mut Cooperative, view: &ArrayView, idle: Option<f64>) -> Result<(), String> {
        for g in c.decide_sleep(view, idle)? {
            c.grant_sleep(g.member, view.now);
        }
        Ok(())
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
        assert_eq!(p.spin_down_at(3, 5.0), Some(105.0));
        assert!(p.decide_sleep(&view(2, 0.0), Some(3600.0)).is_err());
    }

    #[test]
    fn cooperative_declines_below_break_even_with_the_reason() {
        let c = Cooperative::new(600.0, 10);
        let err = c.decide_sleep(&view(1, 0.0), Some(20.0)).unwrap_err();
        assert!(
            err.contains("expected idle 20 s is below the break-even time 43.9 s"),
            "{err}"
        );
        assert_eq!(
            c.spin_down_at(0, 0.0),
            Some(600.0),
            "declined sleep changes nothing"
        );
    }

    #[test]
    fn cooperative_accepted_sleep_spins_down_when_idle() {
        let mut c = Cooperative::new(600.0, 10);
        grant_all(&mut c, &view(2, 50.0), Some(3600.0)).unwrap();
        assert_eq!(c.spin_down_at(0, 10.0), Some(50.0));
        assert_eq!(c.spin_down_at(1, 10.0), Some(50.0));
        c.note_wake(0, 60.0);
        assert_eq!(c.spin_down_at(0, 60.0), Some(660.0), "back to the fallback");
        assert_eq!(
            c.spin_down_at(1, 10.0),
            Some(50.0),
            "the other member still sleeps"
        );
    }

    #[test]
    fn cooperative_budget_is_per_member_and_refuses_the_whole_array() {
        let mut c = Cooperative::new(600.0, 2);
        c.note_spin_down(1, 100.0);
        c.note_spin_down(1, 200.0);
        let err = c.decide_sleep(&view(2, 300.0), Some(3600.0)).unwrap_err();
        assert!(err.contains("budget of 2 per day is spent"), "{err}");
        // The fallback also waits until the oldest spin-down is a day old.
        assert_eq!(c.spin_down_at(1, 300.0), Some(100.0 + DAY_S));
        assert_eq!(
            c.spin_down_at(0, 300.0),
            Some(900.0),
            "member 0 has its budget"
        );
    }

    #[test]
    fn members_already_asleep_are_not_granted_again() {
        let c = Cooperative::new(600.0, 10);
        let mut v = view(3, 10.0);
        v.members[1].state = PowerState::Standby;
        v.members[2].live = false;
        let grants = c.decide_sleep(&v, None).unwrap();
        assert_eq!(
            grants,
            vec![SleepGrant {
                member: 0,
                mode: None
            }]
        );
    }

    #[test]
    fn only_cooperative_wakes_just_the_hinted_members() {
        let mut v = view(4, 0.0);
        v.members[2].live = false;
        v.hinted = Some(vec![0, 2]);
        let c = Cooperative::new(600.0, 10);
        assert_eq!(c.decide_wake(&v), (vec![0], WakeCause::Hint));
        let t = IdleTimeout { timeout_s: 10.0 };
        assert_eq!(t.decide_wake(&v), (vec![0, 1, 3], WakeCause::Request));
        v.hinted = None;
        assert_eq!(c.decide_wake(&v), (vec![0, 1, 3], WakeCause::Request));
    }
}
