//! Status: the volume as the control protocol and the metrics show it, a serializable view
//! taken at one moment, and the ledgers and latencies it is made of.

use serde::Serialize;

use super::{Health, Volume};
use crate::clock::Seconds;
use crate::latency::Histogram;
use crate::layout::LayoutKind;
use crate::ledger::Ledger;
use crate::power_manager::Awake;
use crate::power_state::PowerState;
use crate::sync::{lock, read};

/// The volume object of the control protocol.
#[derive(Debug, Clone, Serialize)]
pub struct VolumeStatus {
    pub name: String,
    pub layout: LayoutKind,
    pub stripe_unit: u64,
    pub capacity_bytes: u64,
    pub state: PowerState,
    pub degraded: bool,
    /// The first member's drive profile (members of a volume share one).
    pub profile: serde_json::Value,
    pub energy_joules: f64,
    pub ledger: Ledger,
    /// Spin-ups of the spinning members only: a flash member's wakes from its low-power
    /// state are in `ledger.spin_ups` but are no start/stop cycle of a disk (what the
    /// standby's daily start/stop budget spends).
    pub disk_spin_ups: u64,
    pub hints: usize,
    /// Hot and cold ranges (QMD's partial on-line mirrors), summed.
    pub temperatures: TemperatureSummary,
    /// Memory of the layout's own metadata (IDO's zone table), in bytes.
    pub layout_metadata_bytes: u64,
    /// What the layout is doing (RoLo: on-duty logger, rotations, pairs destaging).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout_state: Option<serde_json::Value>,
    pub resync_pending_regions: usize,
    pub last_scrub: Option<serde_json::Value>,
    pub bitmap_dirty_regions: Option<usize>,
    pub members: Vec<MemberStatus>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct TemperatureSummary {
    pub ranges: usize,
    pub hot_bytes: u64,
    pub cold_bytes: u64,
    /// Sync groups (by their lowest member) holding only cold data.
    pub cold_groups: Vec<usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MemberStatus {
    pub index: usize,
    pub kind: Option<String>,
    pub path: Option<String>,
    pub device_power_state: Option<String>,
    pub health: Health,
    pub read_errors: u64,
    pub state: PowerState,
    /// Why it spins (hint, io, request, policy, start), or null while it sleeps.
    pub awake: Option<Awake>,
    pub policy: String,
    pub profile: serde_json::Value,
    pub ledger: Ledger,
}

impl Volume {
    /// Ledgers of every member up to `now`.
    pub fn member_ledgers(&self, now: Seconds) -> Vec<Ledger> {
        self.slots
            .iter()
            .map(|s| lock(&s.drive).ledger_at(now))
            .collect()
    }

    pub fn latency(&self) -> &Histogram {
        &self.latency
    }

    pub fn member_latency(&self, member: usize) -> Option<&Histogram> {
        self.slots.get(member).map(|s| &s.latency)
    }

    /// The volume as it is now.
    pub fn status_view(&self) -> VolumeStatus {
        let now = self.clock.now();
        let ledgers = self.member_ledgers(now);
        let total = Ledger::sum(&ledgers);
        let disk_spin_ups = self
            .slots
            .iter()
            .zip(&ledgers)
            .filter(|(slot, _)| lock(&slot.drive).profile().rpm > 0)
            .map(|(_, ledger)| ledger.spin_ups)
            .sum();
        let power = self.member_power();
        let members = self
            .slots
            .iter()
            .zip(ledgers.into_iter().zip(power))
            .enumerate()
            .map(|(index, (slot, (ledger, power)))| {
                let (state, profile, policy) = {
                    let d = lock(&slot.drive);
                    (
                        d.state(),
                        d.profile().summary(d.standby_mode()),
                        d.policy_description(),
                    )
                };
                let store = read(&slot.store).clone();
                MemberStatus {
                    index,
                    kind: store.as_ref().map(|s| s.kind().to_string()),
                    path: store.as_ref().map(|s| s.describe()),
                    device_power_state: store.as_ref().and_then(|s| s.reported_power_state()),
                    health: slot.health(),
                    read_errors: slot.read_errors(),
                    state,
                    awake: power.awake,
                    policy,
                    profile,
                    ledger,
                }
            })
            .collect();
        let profile = self
            .slots
            .first()
            .map(|s| {
                let d = lock(&s.drive);
                d.profile().summary(d.standby_mode())
            })
            .unwrap_or(serde_json::Value::Null);
        VolumeStatus {
            name: self.name.clone(),
            layout: self.layout.kind(),
            stripe_unit: self.layout.stripe_unit(),
            capacity_bytes: self.capacity(),
            state: self.power_state(),
            degraded: self.slots.iter().any(|s| s.health() != Health::InSync),
            profile,
            energy_joules: total.energy_joules,
            ledger: total,
            disk_spin_ups,
            hints: self.hints().len(),
            temperatures: self.temperature_summary(),
            layout_metadata_bytes: self.layout.metadata_bytes(),
            layout_state: self.layout.layout_state(),
            resync_pending_regions: self.resync_pending(),
            last_scrub: self.last_scrub(),
            bitmap_dirty_regions: self.intent.as_ref().map(|i| i.dirty_regions()),
            members,
        }
    }

    /// The volume object of the control protocol, as JSON.
    pub fn status(&self) -> serde_json::Value {
        serde_json::to_value(self.status_view()).unwrap_or_else(|e| {
            // Every field serializes (no maps with non-string keys): cannot happen.
            serde_json::json!({"name": self.name, "error": format!("status: {e}")})
        })
    }
}
