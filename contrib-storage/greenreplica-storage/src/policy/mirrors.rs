//! The logged-mirror policy (RoLo, GRAID): the members that serve every request stay up, the
//! members a logging layout leaves without I/O sleep. The layout pins the members it needs
//! spinning in their current role (`Personality::pinned`: the primaries and GRAID's log
//! member, RoLo's on-duty logger, RoLo-E's on-duty pair); every other member spins down
//! after `timeout_s` idle, so an off-duty mirror stays asleep until its duty, a pre-wake or a
//! destage wakes it. Until the layout has said, even members (primaries) stay up and odd
//! ones (mirrors) sleep.

use crate::clock::Seconds;
use crate::power_manager::{ArrayView, PowerManager, SleepGrant, WakeCause};

#[derive(Debug)]
pub struct Mirrors {
    pub timeout_s: f64,
    /// The layout's pinned members, once it has named them.
    pinned: Option<Vec<usize>>,
}

impl Mirrors {
    pub fn new(timeout_s: f64) -> Self {
        Self {
            timeout_s,
            pinned: None,
        }
    }

    /// Whether the member is one the policy lets sleep.
    pub fn sleeps(&self, member: usize) -> bool {
        match &self.pinned {
            Some(pinned) => !pinned.contains(&member),
            None => !member.is_multiple_of(2),
        }
    }
}

impl PowerManager for Mirrors {
    fn describe(&self) -> String {
        format!("mirrors:{}", self.timeout_s)
    }

    fn spin_down_at(&self, member: usize, idle_since: Seconds) -> Option<Seconds> {
        self.sleeps(member).then_some(idle_since + self.timeout_s)
    }

    fn pin(&mut self, members: &[usize]) {
        if self.pinned.as_deref() != Some(members) {
            self.pinned = Some(members.to_vec());
        }
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

    #[test]
    fn the_layouts_pinned_members_stay_up_and_the_others_sleep() {
        let mut m = "mirrors:20".parse::<PolicySpec>().unwrap().manager(48);
        // RoLo-P with pair 1's mirror on duty; then RoLo-E with pair 2 on duty.
        m.pin(&[0, 2, 3, 4]);
        assert_eq!(m.spin_down_at(3, 5.0), None, "the on-duty logger");
        assert_eq!(m.spin_down_at(1, 5.0), Some(25.0), "an off-duty mirror");
        m.pin(&[4, 5]);
        assert_eq!(m.spin_down_at(0, 5.0), Some(25.0), "an off-duty primary");
        assert_eq!(m.spin_down_at(5, 5.0), None);
    }
}
