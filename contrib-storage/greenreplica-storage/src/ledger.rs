//! The energy ledger: seconds and joules per power state, transitions and I/O counts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::power_state::PowerState;

/// One figure per power state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PerState {
    pub active: f64,
    pub idle: f64,
    pub standby: f64,
    pub spinning_up: f64,
    pub spinning_down: f64,
}

impl PerState {
    pub fn get_mut(&mut self, state: PowerState) -> &mut f64 {
        match state {
            PowerState::Active => &mut self.active,
            PowerState::Idle => &mut self.idle,
            PowerState::Standby => &mut self.standby,
            PowerState::SpinningUp => &mut self.spinning_up,
            PowerState::SpinningDown => &mut self.spinning_down,
        }
    }

    pub fn get(&self, state: PowerState) -> f64 {
        match state {
            PowerState::Active => self.active,
            PowerState::Idle => self.idle,
            PowerState::Standby => self.standby,
            PowerState::SpinningUp => self.spinning_up,
            PowerState::SpinningDown => self.spinning_down,
        }
    }

    pub fn total(&self) -> f64 {
        PowerState::ALL.iter().map(|&s| self.get(s)).sum()
    }

    fn add(&mut self, other: &PerState) {
        for s in PowerState::ALL {
            *self.get_mut(s) += other.get(s);
        }
    }
}

/// Totals for one member, or summed over a volume.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Ledger {
    pub energy_joules: f64,
    pub state_seconds: PerState,
    pub state_joules: PerState,
    /// Joules spent in spin-up and spin-down transitions (also inside `state_joules`).
    pub transition_joules: f64,
    pub spin_ups: u64,
    pub spin_downs: u64,
    pub reads: u64,
    pub writes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Standby seconds per standby mode (drives such as the Deskstar have several).
    pub standby_seconds_by_mode: BTreeMap<String, f64>,
}

impl Ledger {
    pub fn record_standby_mode(&mut self, mode: &str, seconds: f64) {
        *self
            .standby_seconds_by_mode
            .entry(mode.to_string())
            .or_default() += seconds;
    }

    pub fn record(&mut self, state: PowerState, seconds: f64, joules: f64) {
        *self.state_seconds.get_mut(state) += seconds;
        *self.state_joules.get_mut(state) += joules;
        self.energy_joules += joules;
        if matches!(state, PowerState::SpinningUp | PowerState::SpinningDown) {
            self.transition_joules += joules;
        }
    }

    /// Start/stop cycles as drive vendors rate them (a load/unload or spin cycle).
    pub fn start_stops(&self) -> u64 {
        self.spin_downs
    }

    pub fn add(&mut self, other: &Ledger) {
        self.energy_joules += other.energy_joules;
        self.state_seconds.add(&other.state_seconds);
        self.state_joules.add(&other.state_joules);
        self.transition_joules += other.transition_joules;
        self.spin_ups += other.spin_ups;
        self.spin_downs += other.spin_downs;
        self.reads += other.reads;
        self.writes += other.writes;
        self.bytes_read += other.bytes_read;
        self.bytes_written += other.bytes_written;
        for (mode, seconds) in &other.standby_seconds_by_mode {
            self.record_standby_mode(mode, *seconds);
        }
    }

    pub fn sum<'a>(ledgers: impl IntoIterator<Item = &'a Ledger>) -> Ledger {
        let mut total = Ledger::default();
        for l in ledgers {
            total.add(l);
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_accumulates_per_state_and_total() {
        let mut l = Ledger::default();
        l.record(PowerState::Idle, 10.0, 50.0);
        l.record(PowerState::SpinningDown, 1.0, 3.0);
        l.record(PowerState::Idle, 5.0, 25.0);
        assert_eq!(l.state_seconds.idle, 15.0);
        assert_eq!(l.state_joules.idle, 75.0);
        assert_eq!(l.transition_joules, 3.0);
        assert_eq!(l.energy_joules, 78.0);
        assert_eq!(l.state_seconds.total(), 16.0);
    }

    #[test]
    fn sum_adds_members() {
        let mut a = Ledger::default();
        a.record(PowerState::Active, 1.0, 2.0);
        a.spin_ups = 1;
        let mut b = Ledger::default();
        b.record(PowerState::Standby, 3.0, 4.0);
        b.spin_downs = 2;
        let s = Ledger::sum([&a, &b]);
        assert_eq!(s.energy_joules, 6.0);
        assert_eq!((s.spin_ups, s.spin_downs), (1, 2));
    }

    #[test]
    fn persisted_form_round_trips() {
        let mut a = Ledger::default();
        a.record(PowerState::Idle, 2.5, 12.5);
        a.reads = 7;
        let text = serde_json::to_string(&a).unwrap();
        let b: Ledger = serde_json::from_str(&text).unwrap();
        assert_eq!(a, b);
    }
}
