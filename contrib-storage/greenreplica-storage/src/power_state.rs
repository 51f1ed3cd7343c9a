//! The power states a member drive moves through.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum PowerState {
    Active,
    Idle,
    Standby,
    SpinningUp,
    SpinningDown,
}

impl PowerState {
    pub const ALL: [PowerState; 5] = [
        PowerState::Active,
        PowerState::Idle,
        PowerState::Standby,
        PowerState::SpinningUp,
        PowerState::SpinningDown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PowerState::Active => "active",
            PowerState::Idle => "idle",
            PowerState::Standby => "standby",
            PowerState::SpinningUp => "spinning_up",
            PowerState::SpinningDown => "spinning_down",
        }
    }

    /// The state a volume reports for its members: the most "awake" transition wins,
    /// because that is what a client waiting on the volume cares about.
    pub fn aggregate(states: impl IntoIterator<Item = PowerState>) -> PowerState {
        let states: Vec<_> = states.into_iter().collect();
        let order = [
            PowerState::SpinningUp,
            PowerState::Active,
            PowerState::Idle,
            PowerState::SpinningDown,
            PowerState::Standby,
        ];
        order
            .into_iter()
            .find(|s| states.contains(s))
            .unwrap_or(PowerState::Standby)
    }
}

impl std::fmt::Display for PowerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregate_prefers_spinning_up_then_active() {
        use PowerState::*;
        assert_eq!(
            PowerState::aggregate([Standby, SpinningUp, Active]),
            SpinningUp
        );
        assert_eq!(PowerState::aggregate([Standby, Idle, Active]), Active);
        assert_eq!(PowerState::aggregate([Standby, SpinningDown]), SpinningDown);
        assert_eq!(PowerState::aggregate([Standby, Standby]), Standby);
    }

    #[test]
    fn serializes_in_snake_case() {
        let s = serde_json::to_string(&PowerState::SpinningUp).unwrap();
        assert_eq!(s, "\"spinning_up\"");
    }
}
