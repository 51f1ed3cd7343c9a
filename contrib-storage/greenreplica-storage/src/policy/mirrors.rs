//! The logged-mirror policy (RoLo, GRAID): the members that serve every request stay up, the
//! mirrors that a logging layout leaves without I/O sleep. Even members (primaries, and
//! GRAID's log member, the last) never spin down on their own; odd members (the mirrors,
//! RoLo's loggers among them) spin down after `timeout_s` idle. The layout does the rest: it
//! sends an off-duty mirror no I/O, so it stays asleep until its duty or a destage wakes it.

use crate::clock::Seconds;
use crate::power_manager::{ArrayView, PowerManager, SleepGrant, WakeCause};

#[derive(Debug)]
pub struct Mirrors {
    pub timeout_s: f64,
}

impl Mirrors {
    /// Whether the member is one the policy lets sleep.
    pub fn sleeps(member: usize) -> bool {
        !member.is_multiple_of(2)
    }
}

impl PowerManager for Mirrors {
    fn describe(&self) -> String {
        format!("mirrors:{}", self.timeout_s)
    }

    fn spin_down_at(&self, member: usize, idle_since: Seconds) -> Option<Seconds> {
        Self::sleeps(member).then_some(idle_since + self.timeout_s)
    }

    /// A hinted wake (a client's hint, a layout's pre-wake of its next logger) spins up only
    /// the members named; a plain wake, every live one.
    fn decide_wake(&self, view: &ArrayView) -> (Vec<usize>, WakeCause) {
        match &view.hinted {
            Some(members) => (
                view.live()
                    .map(|m| m.index)
                    .filter(|i| members.contains(i))
                    .collect(),
                WakeCause::Hint,
            ),
            None => (view.live().map(|m| m.index).collect(), WakeCause::Request),
        }
    }

    fn decide_sleep(&self, _: &ArrayView, _: Option<f64>) -> Result<Vec<SleepGrant>, String> {
        Err(format!(
            "the volume's power policy is mirrors:{} (sleep requests need cooperative)",
            self.timeout_s
        ))
    }
}

#[cfg(test)]
mod tests {
    use crate::policy::PolicySpec;

    #[test]
    fn only_odd_members_spin_down_and_the_spec_round_trips() {
        let spec: PolicySpec = "mirrors:20".parse().unwrap();
        assert_eq!(spec.to_string(), "mirrors:20");
        let m = spec.manager(48);
        assert_eq!(m.spin_down_at(0, 5.0), None);
        assert_eq!(m.spin_down_at(4, 5.0), None);
        assert_eq!(m.spin_down_at(1, 5.0), Some(25.0));
        assert!("mirrors:x".parse::<PolicySpec>().is_err());
    }
}
