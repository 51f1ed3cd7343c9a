//! The QMD paper's utilization-epoch policy (its Table 1): every epoch (1 s) it measures each
//! member's utilization (the share of the epoch spent serving requests). A mirrored pair
//! whose disks stay below `sleep_below` (0.10) for `sleep_epochs` (30) epochs goes to low
//! utilization: its second disk (the higher member of the pair) sleeps. A pair whose active
//! disk stays above `wake_above` (0.25) for `wake_epochs` (2) epochs goes back to high
//! utilization: the second disk is woken (and the QMD layout flushes its buffered writes to
//! it). The other spin-up of the paper, the write buffer above its fill threshold, is the
//! layout's: its forced flush writes to the sleeping disk, which wakes it.
//!
//! A pair the layout reports cold (QMD's partial on-line mirrors: it holds only marked data,
//! some cold, and its hot stripe units are copied onto a pair that stays up) sleeps whole: once its second disk sleeps, its active disk follows after
//! `sleep_epochs` more quiet epochs (reads of its data wake it; a busy one wakes the second).
//!
//! Groups that are not pairs (the flash member, parity stripes) are never put to sleep.
//!
//! Two break-even aware options, both off by default (Table 1's policy is fixed), in the
//! spirit of Douglis et al.'s adaptive spin-down:
//! * `adaptive_sleep=on`: a sleep that ended sooner than the drive's break-even time cost
//!   more energy than it saved, so the member's quiet epochs double (up to
//!   `sleep_epochs_max`); a sleep of at least `RELAX_AFTER` break-even times halves them again
//!   (never below `sleep_epochs`).
//! * `adaptive_wake=on`: a wake pays only if the load that caused it outlasts the spin-up.
//!   One epoch after the woken disk is ready the policy looks at the foreground load (twice
//!   the active disk's utilization: the pair shares the reads, and the second disk is busy
//!   with the write-back): if it is no longer above `wake_above`, the wake came too late for
//!   the burst and cost a power cycle, so the busy epochs a wake needs double (up to
//!   `wake_epochs_max`); a wake whose load is still there halves them (never below
//!   `wake_epochs`). Short bursts then stop waking the second disk; a sustained load still
//!   does. A safety valve keeps a learnt count from starving an overloaded disk: an active
//!   disk busy (`SATURATED`) for as many epochs as the spin-up takes wakes the second
//!   whatever the count (its queue outlasts the spin-up, so the wake pays for the tail).

use std::fmt;

use crate::clock::Seconds;
use crate::power_manager::{ArrayView, PowerAction, PowerManager, SleepGrant, WakeCause};
use crate::power_state::PowerState;

/// The policy's parameters, as written after `utilization:` in the configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UtilizationParams {
    pub epoch_s: f64,
    pub sleep_below: f64,
    pub sleep_epochs: u32,
    pub wake_above: f64,
    pub wake_epochs: u32,
    /// Break-even aware quiet epochs (see the module's comment).
    pub adaptive_sleep: bool,
    /// Most quiet epochs the adaptive count may ask for.
    pub sleep_epochs_max: u32,
    /// Busy epochs learnt from whether wakes outlasted their burst.
    pub adaptive_wake: bool,
    /// Most busy epochs the adaptive wake may ask for.
    pub wake_epochs_max: u32,
}

impl Default for UtilizationParams {
    fn default() -> Self {
        Self {
            epoch_s: 1.0,
            sleep_below: 0.10,
            sleep_epochs: 30,
            wake_above: 0.25,
            wake_epochs: 2,
            adaptive_sleep: false,
            sleep_epochs_max: 3_600,
            adaptive_wake: false,
            wake_epochs_max: 64,
        }
    }
}

/// Most epochs a threshold may ask for (a day of one-second epochs).
const MAX_EPOCHS: u32 = 86_400;

/// Utilization of an active disk whose queue is building (adaptive wake's safety valve).
pub const SATURATED: f64 = 0.9;

/// A sleep of at least this many break-even times was worth it: the adaptive count halves.
pub const RELAX_AFTER: f64 = 4.0;

impl UtilizationParams {
    /// `key=value` pairs separated by commas; unknown keys, bad numbers and inconsistent
    /// thresholds are refused.
    pub fn parse(arg: Option<&str>) -> Result<Self, String> {
        let mut p = Self::default();
        let Some(arg) = arg else {
            return Ok(p);
        };
        if arg.len() > 256 {
            return Err("utilization policy parameters are longer than 256 bytes".into());
        }
        for item in arg.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?} is not KEY=VALUE"))?;
            let number = |what: &str| -> Result<f64, String> {
                value
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite())
                    .ok_or_else(|| format!("{what} {value:?} is not a number"))
            };
            let epochs = |what: &str| -> Result<u32, String> {
                value
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|&n| (1..=MAX_EPOCHS).contains(&n))
                    .ok_or_else(|| format!("{what} {value:?} is not a count of 1..={MAX_EPOCHS}"))
            };
            let on_off = |what: &str| -> Result<bool, String> {
                match value.trim() {
                    "on" | "true" | "1" => Ok(true),
                    "off" | "false" | "0" => Ok(false),
                    v => Err(format!("{what} {v:?} is not on or off")),
                }
            };
            match key.trim() {
                "epoch_s" => p.epoch_s = number("epoch_s")?,
                "sleep_below" => p.sleep_below = number("sleep_below")?,
                "sleep_epochs" => p.sleep_epochs = epochs("sleep_epochs")?,
                "wake_above" => p.wake_above = number("wake_above")?,
                "wake_epochs" => p.wake_epochs = epochs("wake_epochs")?,
                "sleep_epochs_max" => p.sleep_epochs_max = epochs("sleep_epochs_max")?,
                "adaptive_sleep" => p.adaptive_sleep = on_off("adaptive_sleep")?,
                "wake_epochs_max" => p.wake_epochs_max = epochs("wake_epochs_max")?,
                "adaptive_wake" => p.adaptive_wake = on_off("adaptive_wake")?,
                other => {
                    return Err(format!(
                        "unknown utilization policy parameter {other:?}; use epoch_s, \
                         sleep_below, sleep_epochs, wake_above, wake_epochs, adaptive_sleep, \
                         sleep_epochs_max, adaptive_wake or wake_epochs_max"
                    ))
                }
            }
        }
        p.validate()?;
        Ok(p)
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(0.01..=3600.0).contains(&self.epoch_s) {
            return Err(format!(
                "epoch_s {} must be between 0.01 and 3600 seconds",
                self.epoch_s
            ));
        }
        let share = |v: f64| (0.0..=1.0).contains(&v);
        if !share(self.sleep_below) || !share(self.wake_above) {
            return Err("sleep_below and wake_above are utilizations between 0 and 1".into());
        }
        if self.sleep_below >= self.wake_above {
            return Err(format!(
                "sleep_below {} must be below wake_above {} (or pairs would flap)",
                self.sleep_below, self.wake_above
            ));
        }
        if self.adaptive_sleep && self.sleep_epochs_max < self.sleep_epochs {
            return Err(format!(
                "sleep_epochs_max {} must be at least sleep_epochs {}",
                self.sleep_epochs_max, self.sleep_epochs
            ));
        }
        if self.adaptive_wake && self.wake_epochs_max < self.wake_epochs {
            return Err(format!(
                "wake_epochs_max {} must be at least wake_epochs {}",
                self.wake_epochs_max, self.wake_epochs
            ));
        }
        Ok(())
    }
}

impl fmt::Display for UtilizationParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "epoch_s={},sleep_below={},sleep_epochs={},wake_above={},wake_epochs={}",
            self.epoch_s, self.sleep_below, self.sleep_epochs, self.wake_above, self.wake_epochs
        )?;
        // Table 1's fixed policy prints as before; the adaptive one says so.
        let on = |b: bool| if b { "on" } else { "off" };
        let d = Self::default();
        if self.adaptive_sleep || self.sleep_epochs_max != d.sleep_epochs_max {
            write!(
                f,
                ",adaptive_sleep={},sleep_epochs_max={}",
                on(self.adaptive_sleep),
                self.sleep_epochs_max
            )?;
        }
        if self.adaptive_wake || self.wake_epochs_max != d.wake_epochs_max {
            write!(
                f,
                ",adaptive_wake={},wake_epochs_max={}",
                on(self.adaptive_wake),
                self.wake_epochs_max
            )?;
        }
        Ok(())
    }
}

/// What the policy remembers of a member.
#[derive(Debug, Clone, Default)]
struct Seen {
    active_s: f64,
    /// Consecutive epochs below `sleep_below` (pair awake) or above `wake_above` (asleep).
    low: u32,
    high: u32,
    /// Consecutive epochs the active disk of its pair was saturated (it asleep).
    saturated: u32,
    /// Sleep granted at this time and not yet carried out.
    granted: Option<Seconds>,
    /// When it last began to spin down, until the spin-up that ends that sleep.
    down_at: Option<Seconds>,
    /// Quiet epochs it needs before it sleeps (adaptive; 0: `sleep_epochs`).
    quiet_needed: u32,
    /// Its drive's break-even time and spin-up time, seen on the last epoch.
    break_even_s: f64,
    spin_up_s: f64,
    /// Busy epochs it needs before the policy wakes it (adaptive; 0: `wake_epochs`).
    busy_needed: u32,
    /// The policy woke it: judge the wake on the first epoch ending after this time.
    judge_at: Option<Seconds>,
}

#[derive(Debug)]
pub struct Utilization {
    pub params: UtilizationParams,
    last_epoch: Option<Seconds>,
    members: Vec<Seen>,
}

impl Utilization {
    pub fn new(params: UtilizationParams) -> Self {
        Self {
            params,
            last_epoch: None,
            members: Vec::new(),
        }
    }

    fn seen(&mut self, member: usize) -> &mut Seen {
        if self.members.len() <= member {
            self.members.resize(member + 1, Seen::default());
        }
        &mut self.members[member]
    }

    /// The quiet epochs member `member` needs before it sleeps now.
    pub fn quiet_needed(&self, member: usize) -> u32 {
        let p = &self.params;
        match self.members.get(member) {
            Some(m) if p.adaptive_sleep => m
                .quiet_needed
                .max(p.sleep_epochs)
                .min(p.sleep_epochs_max.max(p.sleep_epochs)),
            _ => p.sleep_epochs,
        }
    }

    /// The busy epochs member `member` needs before the policy wakes it now.
    pub fn busy_needed(&self, member: usize) -> u32 {
        let p = &self.params;
        match self.members.get(member) {
            Some(m) if p.adaptive_wake => m
                .busy_needed
                .max(p.wake_epochs)
                .min(p.wake_epochs_max.max(p.wake_epochs)),
            _ => p.wake_epochs,
        }
    }

    /// A wake of member `member` is judged: was the load still there once it was up?
    fn judge_wake(&mut self, member: usize, load_stayed: bool) {
        let needed = self.busy_needed(member);
        let p = self.params;
        self.seen(member).busy_needed = if load_stayed {
            (needed / 2).max(p.wake_epochs)
        } else {
            needed.saturating_mul(2).min(p.wake_epochs_max)
        };
    }

    /// A sleep of member `member` lasted `slept_s`: the adaptive count learns from it.
    fn learn(&mut self, member: usize, slept_s: f64) {
        let needed = self.quiet_needed(member);
        let p = self.params;
        let m = self.seen(member);
        if !p.adaptive_sleep || m.break_even_s <= 0.0 {
            return;
        }
        m.quiet_needed = if slept_s < m.break_even_s {
            needed.saturating_mul(2).min(p.sleep_epochs_max)
        } else if slept_s >= RELAX_AFTER * m.break_even_s {
            (needed / 2).max(p.sleep_epochs)
        } else {
            needed
        };
    }
}

fn asleep(state: PowerState) -> bool {
    matches!(state, PowerState::Standby | PowerState::SpinningDown)
}

impl PowerManager for Utilization {
    fn describe(&self) -> String {
        format!("utilization:{}", self.params)
    }

    /// Only the epochs put members to sleep; a granted sleep happens once the disk is idle.
    fn spin_down_at(&self, member: usize, idle_since: Seconds) -> Option<Seconds> {
        self.members
            .get(member)
            .and_then(|m| m.granted)
            .map(|at| at.max(idle_since))
    }

    fn decide_sleep(&self, _: &ArrayView, _: Option<f64>) -> Result<Vec<SleepGrant>, String> {
        Err(format!(
            "the volume's power policy is utilization:{} (sleep requests need cooperative)",
            self.params
        ))
    }

    /// A client's wake spins up every live member but those of cold pairs (reads of their
    /// data wake them on demand), unless a hinted read needs them.
    fn decide_wake(&self, view: &ArrayView) -> (Vec<usize>, WakeCause) {
        let cold: Vec<usize> = view
            .groups
            .iter()
            .filter(|g| g.iter().min().is_some_and(|m| view.cold_groups.contains(m)))
            .flatten()
            .copied()
            .collect();
        let needed = |m: usize| view.hinted.as_ref().is_some_and(|h| h.contains(&m));
        let members = view
            .live()
            .map(|m| m.index)
            .filter(|&m| !cold.contains(&m) || needed(m))
            .collect();
        (members, WakeCause::Request)
    }

    fn grant_sleep(&mut self, member: usize, now: Seconds) {
        self.seen(member).granted = Some(now);
    }

    /// Called on every wake from idle too; only the first after a spin-down ends a sleep.
    fn note_wake(&mut self, member: usize, now: Seconds) {
        let Some(m) = self.members.get_mut(member) else {
            return;
        };
        m.granted = None;
        if let Some(down) = m.down_at.take() {
            self.learn(member, now - down);
        }
    }

    fn note_spin_down(&mut self, member: usize, at: Seconds) {
        let m = self.seen(member);
        m.granted = None;
        m.down_at = Some(at);
    }

    fn tick_every(&self) -> Option<f64> {
        Some(self.params.epoch_s)
    }

    fn on_tick(&mut self, view: &ArrayView) -> Vec<PowerAction> {
        let now = view.now;
        let Some(last) = self.last_epoch.replace(now) else {
            for m in &view.members {
                self.seen(m.index).active_s = m.active_s;
            }
            return Vec::new();
        };
        let dt = now - last;
        if dt <= 0.0 {
            return Vec::new();
        }
        let mut util = vec![0.0; view.members.len()];
        for m in &view.members {
            let seen = self.seen(m.index);
            seen.break_even_s = m.profile.break_even_s(m.standby_mode);
            seen.spin_up_s = m.profile.mode(m.standby_mode).spin_up_s;
            if let Some(u) = util.get_mut(m.index) {
                *u = ((m.active_s - seen.active_s) / dt).clamp(0.0, 1.0);
            }
            seen.active_s = m.active_s;
        }
        let p = self.params;
        let mut actions = Vec::new();
        for group in view.groups.iter().filter(|g| g.len() == 2) {
            let (a, s) = (group[0].min(group[1]), group[0].max(group[1]));
            let (Some(active), Some(second)) = (view.members.get(a), view.members.get(s)) else {
                continue;
            };
            if !active.live || !second.live || active.rebuilding || second.rebuilding {
                continue;
            }
            let (ua, us) = (util[a], util[s]);
            let cold = view.cold_groups.contains(&a);
            let active_awake = !asleep(active.state);
            let (quiet_a, quiet_s) = (self.quiet_needed(a), self.quiet_needed(s));
            let busy_s = self.busy_needed(s);
            let seen = self.seen(s);
            if asleep(second.state) {
                seen.low = 0;
                seen.judge_at = None;
                seen.high = if ua > p.wake_above { seen.high + 1 } else { 0 };
                seen.saturated = if ua >= SATURATED {
                    seen.saturated + 1
                } else {
                    0
                };
                let valve = (seen.spin_up_s / p.epoch_s).ceil().max(1.0) as u32;
                let overloaded = p.adaptive_wake && seen.saturated >= valve.max(p.wake_epochs);
                if seen.high >= busy_s || overloaded {
                    seen.high = 0;
                    seen.saturated = 0;
                    if p.adaptive_wake {
                        seen.judge_at = Some(now + seen.spin_up_s);
                    }
                    actions.push(PowerAction::Wake { member: s });
                } else if cold && active_awake {
                    // A pair holding only cold data sleeps whole: its active disk follows
                    // the second after as many quiet epochs.
                    let seen = self.seen(a);
                    seen.low = if ua < p.sleep_below { seen.low + 1 } else { 0 };
                    if seen.low >= quiet_a && seen.granted.is_none() {
                        seen.low = 0;
                        actions.push(PowerAction::Sleep(SleepGrant {
                            member: a,
                            mode: None,
                        }));
                    }
                }
            } else {
                seen.high = 0;
                seen.saturated = 0;
                // The first epoch wholly after the woken disk was ready judges the wake by
                // the foreground load: the active disk carries about half of it once both
                // are up, the second disk's own utilization is mostly the write-back.
                if seen.judge_at.is_some_and(|ready| last >= ready) {
                    seen.judge_at = None;
                    self.judge_wake(s, 2.0 * ua > p.wake_above);
                }
                let seen = self.seen(s);
                seen.low = if ua.max(us) < p.sleep_below {
                    seen.low + 1
                } else {
                    0
                };
                if seen.low >= quiet_s && seen.granted.is_none() {
                    seen.low = 0;
                    actions.push(PowerAction::Sleep(SleepGrant {
                        member: s,
                        mode: None,
                    }));
                }
            }
        }
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Role;
    use crate::policy::PolicySpec;
    use crate::power_manager::MemberPowerView;
    use crate::profile::DriveProfile;
    use std::sync::Arc;

    fn view(now: Seconds, states: &[PowerState], active_s: &[f64]) -> ArrayView {
        let profile = Arc::new(DriveProfile::load("ultrastar-15k600").unwrap());
        ArrayView {
            now,
            members: states
                .iter()
                .zip(active_s)
                .enumerate()
                .map(|(index, (&state, &active_s))| MemberPowerView {
                    index,
                    role: Role::Data,
                    live: true,
                    rebuilding: false,
                    state,
                    idle_since: None,
                    profile: profile.clone(),
                    standby_mode: 0,
                    active_s,
                })
                .collect(),
            redundant: true,
            groups: vec![vec![0, 1], vec![2]],
            hinted: None,
            cold_groups: Vec::new(),
        }
    }

    #[test]
    fn thirty_quiet_epochs_sleep_the_second_disk_and_two_busy_ones_wake_it() {
        let mut u = Utilization::new(UtilizationParams::default());
        let idle = [PowerState::Idle; 3];
        let mut busy = [0.0; 3];
        assert!(u.on_tick(&view(0.0, &idle, &busy)).is_empty());
        let mut slept_at = None;
        for epoch in 1..=40 {
            busy[0] += 0.05; // 5 % utilization
            let actions = u.on_tick(&view(epoch as f64, &idle, &busy));
            if !actions.is_empty() {
                assert_eq!(
                    actions,
                    vec![PowerAction::Sleep(SleepGrant {
                        member: 1,
                        mode: None
                    })]
                );
                slept_at.get_or_insert(epoch);
                u.grant_sleep(1, epoch as f64);
            }
        }
        assert_eq!(slept_at, Some(30));
        assert_eq!(u.spin_down_at(1, 29.0), Some(30.0));
        assert_eq!(u.spin_down_at(0, 29.0), None, "only epochs sleep members");
        u.note_spin_down(1, 30.0);
        let asleep = [PowerState::Idle, PowerState::Standby, PowerState::Idle];
        // One busy epoch is not enough; two in a row wake it.
        busy[0] += 0.5;
        assert!(u.on_tick(&view(41.0, &asleep, &busy)).is_empty());
        busy[0] += 0.1;
        assert!(u.on_tick(&view(42.0, &asleep, &busy)).is_empty());
        busy[0] += 0.3;
        assert!(u.on_tick(&view(43.0, &asleep, &busy)).is_empty());
        busy[0] += 0.3;
        assert_eq!(
            u.on_tick(&view(44.0, &asleep, &busy)),
            vec![PowerAction::Wake { member: 1 }]
        );
    }

    #[test]
    fn a_cold_pair_sleeps_whole_and_a_normal_one_keeps_its_active_disk() {
        let mut u = Utilization::new(UtilizationParams {
            sleep_epochs: 3,
            ..UtilizationParams::default()
        });
        let busy = [0.0; 3];
        let asleep = [PowerState::Idle, PowerState::Standby, PowerState::Idle];
        u.on_tick(&view(0.0, &asleep, &busy));
        for epoch in 1..=5 {
            assert!(
                u.on_tick(&view(epoch as f64, &asleep, &busy)).is_empty(),
                "a pair not marked cold keeps its active disk"
            );
        }
        let mut cold = view(6.0, &asleep, &busy);
        cold.cold_groups = vec![0];
        let mut slept = None;
        for epoch in 6..=10 {
            cold.now = epoch as f64;
            if !u.on_tick(&cold).is_empty() {
                slept.get_or_insert(epoch);
            }
        }
        assert_eq!(
            slept,
            Some(8),
            "three quiet epochs, then the active disk sleeps"
        );
    }

    #[test]
    fn a_client_wake_leaves_cold_pairs_asleep_unless_a_hinted_read_needs_them() {
        let u = Utilization::new(UtilizationParams::default());
        let states = [PowerState::Standby; 5];
        let mut v = view(0.0, &states, &[0.0; 5]);
        v.groups = vec![vec![0, 1], vec![2, 3], vec![4]];
        assert_eq!(u.decide_wake(&v).0, vec![0, 1, 2, 3, 4]);
        v.cold_groups = vec![2];
        assert_eq!(
            u.decide_wake(&v),
            (vec![0, 1, 4], WakeCause::Request),
            "the cold pair stays asleep"
        );
        v.hinted = Some(vec![2]);
        assert_eq!(
            u.decide_wake(&v).0,
            vec![0, 1, 2, 4],
            "a hinted read needs member 2"
        );
    }

    #[test]
    fn a_busy_epoch_restarts_the_count_and_the_flash_never_sleeps() {
        let mut u = Utilization::new(UtilizationParams {
            sleep_epochs: 3,
            ..UtilizationParams::default()
        });
        let idle = [PowerState::Idle; 3];
        let mut busy = [0.0; 3];
        u.on_tick(&view(0.0, &idle, &busy));
        for epoch in 1..=2 {
            assert!(u.on_tick(&view(epoch as f64, &idle, &busy)).is_empty());
        }
        busy[1] += 0.2; // the second disk served reads
        assert!(u.on_tick(&view(3.0, &idle, &busy)).is_empty());
        for epoch in 4..=5 {
            assert!(u.on_tick(&view(epoch as f64, &idle, &busy)).is_empty());
        }
        let actions = u.on_tick(&view(6.0, &idle, &busy));
        assert_eq!(actions.len(), 1, "member 2 (a group of one) is never slept");
    }

    /// Quiet epochs from `*t` until the policy puts member 1 to sleep (at most `limit`);
    /// then it spins down and is woken `slept_s` later, as the drive would report it.
    fn quiet_epochs_then_sleep(u: &mut Utilization, t: &mut f64, slept_s: f64) -> u32 {
        let idle = [PowerState::Idle; 3];
        let busy = [0.0; 3];
        u.on_tick(&view(*t, &idle, &busy));
        for n in 1..=10_000 {
            *t += 1.0;
            if !u.on_tick(&view(*t, &idle, &busy)).is_empty() {
                u.grant_sleep(1, *t);
                u.note_spin_down(1, *t);
                *t += slept_s;
                u.note_wake(1, *t);
                // Ordinary wakes from idle (I/O) end no sleep.
                u.note_wake(1, *t + 0.5);
                u.note_wake(1, *t + 1.0);
                *t += 1.0;
                u.last_epoch = None;
                return n;
            }
        }
        panic!("member 1 never slept");
    }

    fn break_even() -> f64 {
        DriveProfile::load("ultrastar-15k600")
            .unwrap()
            .break_even_s(0)
    }

    #[test]
    fn adaptive_doubles_the_quiet_epochs_after_short_sleeps_and_halves_after_long_ones() {
        let be = break_even();
        assert!(be > 5.0, "break-even {be}");
        let mut u = Utilization::new(UtilizationParams {
            adaptive_sleep: true,
            ..UtilizationParams::default()
        });
        let mut t = 0.0;
        let short = be / 2.0;
        let long = RELAX_AFTER * be + 1.0;
        let got: Vec<u32> = [short, short, short, long, long, long]
            .iter()
            .map(|&slept| quiet_epochs_then_sleep(&mut u, &mut t, slept))
            .collect();
        assert_eq!(
            got,
            vec![30, 60, 120, 240, 120, 60],
            "each sleep shorter than break-even doubles the next count, each long one halves it"
        );
        assert_eq!(quiet_epochs_then_sleep(&mut u, &mut t, long), 30);
        assert_eq!(
            quiet_epochs_then_sleep(&mut u, &mut t, long),
            30,
            "never below sleep_epochs"
        );
    }

    #[test]
    fn adaptive_is_capped_and_a_sleep_between_break_even_and_relax_changes_nothing() {
        let be = break_even();
        let mut u = Utilization::new(UtilizationParams {
            adaptive_sleep: true,
            sleep_epochs_max: 100,
            ..UtilizationParams::default()
        });
        let mut t = 0.0;
        let got: Vec<u32> = [1.0, 1.0, 1.0, 2.0 * be, 2.0 * be]
            .iter()
            .map(|&slept| quiet_epochs_then_sleep(&mut u, &mut t, slept))
            .collect();
        assert_eq!(got, vec![30, 60, 100, 100, 100]);
        assert_eq!(u.quiet_needed(1), 100);
        assert_eq!(u.quiet_needed(0), 30, "member 0 never slept");
    }

    #[test]
    fn table_1_policy_keeps_its_thirty_epochs_after_short_sleeps() {
        let mut u = Utilization::new(UtilizationParams::default());
        let mut t = 0.0;
        for _ in 0..4 {
            assert_eq!(quiet_epochs_then_sleep(&mut u, &mut t, 1.0), 30);
        }
    }

    /// Epochs of `load` (utilization of members 0 and 1) from `*t` on, member 1 asleep or
    /// not; the epochs at which the policy woke member 1.
    fn epochs(
        u: &mut Utilization,
        t: &mut f64,
        busy: &mut [f64; 3],
        second_asleep: bool,
        load: &[(f64, f64)],
    ) -> Vec<f64> {
        let second = if second_asleep {
            PowerState::Standby
        } else {
            PowerState::Idle
        };
        let states = [PowerState::Idle, second, PowerState::Idle];
        let mut woke = Vec::new();
        for &(a, s) in load {
            *t += 1.0;
            busy[0] += a;
            busy[1] += s;
            for action in u.on_tick(&view(*t, &states, busy)) {
                if action == (PowerAction::Wake { member: 1 }) {
                    woke.push(*t);
                }
            }
        }
        woke
    }

    #[test]
    fn adaptive_wake_needs_more_busy_epochs_after_a_wake_that_outlived_its_burst() {
        let mut u = Utilization::new(UtilizationParams {
            adaptive_wake: true,
            ..UtilizationParams::default()
        });
        let (mut t, mut busy) = (0.0, [0.0; 3]);
        epochs(&mut u, &mut t, &mut busy, true, &[(0.0, 0.0)]);
        // A two-epoch burst wakes it (Table 1), and is over before the spin-up (10.9 s).
        let woke = epochs(&mut u, &mut t, &mut busy, true, &[(0.5, 0.0); 2]);
        assert_eq!(woke, vec![3.0], "epoch 1 only started the count");
        epochs(&mut u, &mut t, &mut busy, false, &[(0.01, 0.0); 11]);
        assert_eq!(
            u.busy_needed(1),
            2,
            "not judged before an epoch after the spin-up"
        );
        epochs(&mut u, &mut t, &mut busy, false, &[(0.01, 0.0)]);
        assert_eq!(u.busy_needed(1), 4, "a late wake doubles the busy epochs");
        // Asleep again: three busy epochs no longer wake it, four do.
        let woke = epochs(&mut u, &mut t, &mut busy, true, &[(0.5, 0.0); 3]);
        assert!(woke.is_empty());
        let woke = epochs(
            &mut u,
            &mut t,
            &mut busy,
            true,
            &[(0.0, 0.0), (0.5, 0.0), (0.5, 0.0), (0.5, 0.0), (0.5, 0.0)],
        );
        assert_eq!(woke.len(), 1);
        // Only the write-back keeps the second disk busy: still a late wake.
        epochs(&mut u, &mut t, &mut busy, false, &[(0.05, 0.9); 13]);
        assert_eq!(
            u.busy_needed(1),
            8,
            "the write-back is not the burst's load"
        );
        let woke = epochs(&mut u, &mut t, &mut busy, true, &[(0.5, 0.0); 8]);
        assert_eq!(woke.len(), 1);
        // This time the load outlasts the spin-up (the pair shares it): halved again.
        epochs(&mut u, &mut t, &mut busy, false, &[(0.15, 0.15); 13]);
        assert_eq!(u.busy_needed(1), 4, "a wake whose load stayed halves them");
    }

    #[test]
    fn adaptive_wake_still_wakes_for_an_active_disk_saturated_longer_than_the_spin_up() {
        let mut u = Utilization::new(UtilizationParams {
            adaptive_wake: true,
            ..UtilizationParams::default()
        });
        let (mut t, mut busy) = (0.0, [0.0; 3]);
        epochs(&mut u, &mut t, &mut busy, true, &[(0.0, 0.0)]);
        for _ in 0..3 {
            let needed = u.busy_needed(1) as usize;
            let woke = epochs(&mut u, &mut t, &mut busy, true, &vec![(0.5, 0.0); needed]);
            assert_eq!(woke.len(), 1);
            epochs(&mut u, &mut t, &mut busy, false, &[(0.0, 0.0); 13]);
        }
        assert_eq!(u.busy_needed(1), 16, "three late wakes");
        // Busy but not saturated: 15 epochs do not wake it.
        let woke = epochs(&mut u, &mut t, &mut busy, true, &[(0.5, 0.0); 15]);
        assert!(woke.is_empty());
        epochs(&mut u, &mut t, &mut busy, true, &[(0.0, 0.0)]);
        // Saturated: the spin-up (10.9 s) is 11 epochs; the 11th wakes it.
        let woke = epochs(&mut u, &mut t, &mut busy, true, &[(0.95, 0.0); 10]);
        assert!(woke.is_empty());
        let woke = epochs(&mut u, &mut t, &mut busy, true, &[(0.95, 0.0)]);
        assert_eq!(woke.len(), 1, "the safety valve");
    }

    #[test]
    fn adaptive_wake_is_capped_and_table_1_never_learns() {
        for (adaptive_wake, expect) in [(true, 6), (false, 2)] {
            let mut u = Utilization::new(UtilizationParams {
                adaptive_wake,
                wake_epochs_max: 6,
                ..UtilizationParams::default()
            });
            let (mut t, mut busy) = (0.0, [0.0; 3]);
            epochs(&mut u, &mut t, &mut busy, true, &[(0.0, 0.0)]);
            for _ in 0..4 {
                let needed = u.busy_needed(1);
                let busy_epochs = (1..=10)
                    .find(|_| !epochs(&mut u, &mut t, &mut busy, true, &[(0.5, 0.0)]).is_empty());
                assert_eq!(busy_epochs, Some(needed));
                epochs(&mut u, &mut t, &mut busy, false, &[(0.0, 0.0); 13]);
            }
            assert_eq!(u.busy_needed(1), expect, "adaptive_wake={adaptive_wake}");
        }
    }

    #[test]
    fn adaptive_parameters_parse_and_round_trip() {
        let spec: PolicySpec = "utilization:adaptive_sleep=on,sleep_epochs_max=600,adaptive_wake=1"
            .parse()
            .unwrap();
        assert_eq!(
            spec.to_string(),
            "utilization:epoch_s=1,sleep_below=0.1,sleep_epochs=30,wake_above=0.25,\
             wake_epochs=2,adaptive_sleep=on,sleep_epochs_max=600,adaptive_wake=on,\
             wake_epochs_max=64"
        );
        assert_eq!(spec.to_string().parse::<PolicySpec>().unwrap(), spec);
        let fixed: PolicySpec = "utilization:sleep_epochs=5000".parse().unwrap();
        assert!(!fixed.manager(48).describe().contains("adaptive"));
        for bad in [
            "utilization:adaptive_sleep=maybe",
            "utilization:adaptive=on",
            "utilization:adaptive_sleep=on,sleep_epochs_max=10",
            "utilization:adaptive_wake=on,wake_epochs=8,wake_epochs_max=4",
            "utilization:sleep_epochs_max=0",
        ] {
            assert!(bad.parse::<PolicySpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn parameters_are_parsed_validated_and_round_trip() {
        let spec: PolicySpec = "utilization".parse().unwrap();
        assert_eq!(
            spec.to_string(),
            "utilization:epoch_s=1,sleep_below=0.1,sleep_epochs=30,wake_above=0.25,wake_epochs=2"
        );
        assert_eq!(spec.to_string().parse::<PolicySpec>().unwrap(), spec);
        let qmd: PolicySpec = "qmd:wake_above=0.6, sleep_epochs=10".parse().unwrap();
        assert_eq!(
            qmd,
            PolicySpec::Utilization(UtilizationParams {
                wake_above: 0.6,
                sleep_epochs: 10,
                ..UtilizationParams::default()
            })
        );
        assert_eq!(qmd.manager(48).tick_every(), Some(1.0));
        for bad in [
            "utilization:epoch_s=0",
            "utilization:epoch_s=nan",
            "utilization:sleep_below=0.3",
            "utilization:wake_above=2",
            "utilization:sleep_epochs=0",
            "utilization:wake_epochs=-1",
            "utilization:colour=blue",
            "utilization:epoch_s",
        ] {
            assert!(bad.parse::<PolicySpec>().is_err(), "{bad}");
        }
        let long = format!("utilization:{}", "epoch_s=1,".repeat(40));
        assert!(long.parse::<PolicySpec>().is_err());
    }
}
