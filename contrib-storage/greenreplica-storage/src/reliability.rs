//! Reliability of mirrored layouts (RAID10, GRAID, RoLo-P/R/E) by sequential Monte Carlo,
//! after the RoLo paper's section 4.3 and its reference, Elerath & Pecht (DSN 2007).
//!
//! Each array is simulated alone over the horizon; disks fail after a Weibull life (d_df),
//! are replaced and restored in a Weibull time (d_rs), and the new disk starts at age 0.
//! Data is lost in the paper's two ways: a disk fails while every other copy of some of its
//! data is on disks still being restored (a double failure), or while the surviving copies
//! carry a latent sector error not yet scrubbed away (an unrecoverable failure).
//!
//! Latent errors arrive as a Poisson process (d_uf, shape 1, located uniformly over the
//! disk) and are removed by the next completed scrub pass (d_sc, a renewal process). They
//! only matter at a disk failure, so they are not simulated hour by hour: at a failure, the
//! time since each needed disk's last scrub is drawn from the scrub process's stationary
//! backward-recurrence law, and the chance that an error landed in the needed region in that
//! window is 1 - exp(-window x region / eta_uf). That is exact for a stationary scrub process
//! and much faster than stepping every disk every hour (the paper samples hourly). Two
//! failures of one array within a scrub period see independent draws for a disk both need
//! (about 3 in 1,000 failures have another within 157 h, the mean scrub period).
//!
//! What each layout exposes is described by copy groups: sets of (disk, region) holding all
//! copies of some data at a time. See `groups` for each layout's assumptions.

use std::str::FromStr;

use serde::Serialize;

use crate::synth::Rng;

const HOURS_PER_YEAR: f64 = 8760.0;

/// Three-parameter Weibull: location (gamma), characteristic life (eta), shape (beta), hours.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Weibull {
    pub location: f64,
    pub scale: f64,
    pub shape: f64,
}

impl Weibull {
    pub(crate) fn sample(&self, rng: &mut Rng) -> f64 {
        self.location + self.scale * (-rng.unit().ln()).powf(1.0 / self.shape)
    }

    pub fn mean(&self) -> f64 {
        self.location + self.scale * gamma(1.0 + 1.0 / self.shape)
    }

    pub fn variance(&self) -> f64 {
        let g1 = gamma(1.0 + 1.0 / self.shape);
        self.scale * self.scale * (gamma(1.0 + 2.0 / self.shape) - g1 * g1)
    }

    /// A draw of the time since the last renewal, seen at a random instant of a stationary
    /// renewal process with this inter-renewal law: a length-biased interval (by rejection)
    /// times a uniform fraction.
    fn backward_recurrence(&self, rng: &mut Rng) -> f64 {
        // Beyond this bound the survival is below e^-40; such draws are accepted outright.
        let bound = self.location + self.scale * 40f64.powf(1.0 / self.shape);
        loop {
            let x = self.sample(rng);
            if rng.unit() * bound <= x {
                return x * rng.unit();
            }
        }
    }
}

/// Lanczos approximation (g = 7, 9 terms), accurate to ~1e-13 for positive arguments.
fn gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        return std::f64::consts::PI / ((std::f64::consts::PI * x).sin() * gamma(1.0 - x));
    }
    let x = x - 1.0;
    let t = x + 7.5;
    let sum = C[0]
        + C[1..]
            .iter()
            .enumerate()
            .map(|(i, c)| c / (x + i as f64 + 1.0))
            .sum::<f64>();
    (2.0 * std::f64::consts::PI).sqrt() * t.powf(x + 0.5) * (-t).exp() * sum
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// Striping without copies: the no-redundancy reference.
    Raid0,
    Raid10,
    Graid,
    RoloP,
    RoloR,
    RoloE,
}

impl Layout {
    pub const ALL: [Layout; 6] = [
        Layout::Raid0,
        Layout::Raid10,
        Layout::Graid,
        Layout::RoloP,
        Layout::RoloR,
        Layout::RoloE,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Layout::Raid0 => "raid0",
            Layout::Raid10 => "raid10",
            Layout::Graid => "graid",
            Layout::RoloP => "rolo-p",
            Layout::RoloR => "rolo-r",
            Layout::RoloE => "rolo-e",
        }
    }

    /// Disks of an array of `pairs` mirrored pairs (GRAID adds its log disk).
    pub fn disks(self, pairs: usize) -> usize {
        match self {
            Layout::Graid => 2 * pairs + 1,
            _ => 2 * pairs,
        }
    }
}

impl FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Layout::ALL
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Layout::ALL.iter().map(|l| l.name()).collect();
                format!("unknown layout {s:?} (one of {})", names.join(", "))
            })
    }
}

/// The model's parameters; the defaults are the paper's Table 3 and Table 5.
#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub pairs: usize,
    pub years: f64,
    /// d_df: disk life.
    pub disk_failure: Weibull,
    /// d_rs: time to replace and restore a failed disk.
    pub restore: Weibull,
    /// d_uf's characteristic life; the paper's shape is 1 (Poisson arrivals), location 0.
    pub latent_error_eta_hours: f64,
    /// d_sc: time between completed scrub passes.
    pub scrub: Weibull,
    /// Share of a disk holding home data (Table 5: 200 GB of 1 TB free on a 10-disk array).
    pub home_fraction: f64,
    /// Share of each primary's home data whose newest copy is in the log (see `groups`).
    pub dirty_fraction: f64,
    /// How fast a spun-down disk ages relative to a spinning one (1 = as fast).
    pub standby_failure_factor: f64,
    /// Share of time GRAID's mirrors spin for destaging (the paper's beta).
    pub graid_destage_duty: f64,
    /// How long a RoLo logger stays on duty before the next pair takes over.
    pub rotation_hours: f64,
    /// Elerath & Pecht's reading: a restore reads every surviving disk it uses whole, so a
    /// latent error anywhere on one of them is fatal (default: only in the data needed).
    pub whole_disk_reads: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            pairs: 5,
            years: 10.0,
            disk_failure: Weibull {
                location: 0.0,
                scale: 461_386.0,
                shape: 1.12,
            },
            restore: Weibull {
                location: 7.0,
                scale: 12.0,
                shape: 2.0,
            },
            latent_error_eta_hours: 1_776.0,
            scrub: Weibull {
                location: 7.0,
                scale: 168.0,
                shape: 3.0,
            },
            home_fraction: 0.8,
            dirty_fraction: 0.05,
            standby_failure_factor: 1.0,
            graid_destage_duty: 0.1,
            rotation_hours: 24.0,
            whole_disk_reads: false,
        }
    }
}

impl Params {
    pub fn validate(&self) -> Result<(), String> {
        for (name, w) in [
            ("disk failure", self.disk_failure),
            ("restore", self.restore),
            ("scrub", self.scrub),
        ] {
            let sane = w.location >= 0.0
                && w.scale > 0.0
                && w.shape > 0.0
                && (w.location + w.scale).is_finite();
            if !sane {
                return Err(format!(
                    "the {name} distribution needs location >= 0, eta > 0, beta > 0"
                ));
            }
        }
        if !(1..=64).contains(&self.pairs) {
            return Err("pairs must be between 1 and 64".into());
        }
        if !(self.years > 0.0 && self.years <= 100.0) {
            return Err("years must be in (0, 100]".into());
        }
        if self.latent_error_eta_hours.is_nan() || self.latent_error_eta_hours <= 0.0 {
            return Err("the latent error eta must be > 0 (use inf to disable)".into());
        }
        if !(self.rotation_hours > 0.0 && self.rotation_hours.is_finite()) {
            return Err("the rotation period must be > 0 hours".into());
        }
        for (name, v) in [
            ("home fraction", self.home_fraction),
            ("dirty fraction", self.dirty_fraction),
            ("standby failure factor", self.standby_failure_factor),
            ("GRAID destage duty", self.graid_destage_duty),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("the {name} must be between 0 and 1"));
            }
        }
        // One logger's free space holds every primary's dirty data (RoLo), as does the
        // GRAID log disk.
        if self.home_fraction * (1.0 + self.pairs as f64 * self.dirty_fraction) > 1.0 + 1e-9 {
            return Err(format!(
                "the log does not fit: {} pairs x dirty fraction {} of home {} exceed the free {:.3}",
                self.pairs,
                self.dirty_fraction,
                self.home_fraction,
                1.0 - self.home_fraction
            ));
        }
        Ok(())
    }
}

/// One copy of some data: a disk and the region of it (fractions of the disk) holding it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Copy {
    disk: usize,
    lo: f64,
    hi: f64,
}

/// Every copy group of `layout` at time `t` (hours). Disks: primary i is i, its mirror is
/// pairs + i, GRAID's log disk is 2 * pairs. Home data lies in [0, h) of each primary and
/// mirror, its first d = dirty_fraction * h being "dirty": written since the last destage,
/// its newest copy in the log and the mirror's home copy stale. A logger's slot for primary
/// i's dirty data is [h + i d, h + (i + 1) d) (GRAID's log disk: [i d, (i + 1) d)).
/// RoLo keeps all dirty data on the logger on duty (decentralized destage drains the
/// previous one in idle slots); the logger pair rotates every `rotation_hours`.
fn groups(layout: Layout, p: &Params, t: f64) -> Vec<Vec<Copy>> {
    let n = p.pairs;
    let h = p.home_fraction;
    let d = p.dirty_fraction * h;
    let at = |disk, lo, hi| Copy { disk, lo, hi };
    let slot = |disk, i: usize| at(disk, h + i as f64 * d, h + (i + 1) as f64 * d);
    let k = (t / p.rotation_hours) as usize % n;
    let mut g = Vec::with_capacity(2 * n);
    match layout {
        Layout::Raid0 => g.extend((0..2 * n).map(|j| vec![at(j, 0.0, h)])),
        Layout::Raid10 => g.extend((0..n).map(|i| vec![at(i, 0.0, h), at(n + i, 0.0, h)])),
        Layout::Graid | Layout::RoloP | Layout::RoloR | Layout::RoloE => {
            for i in 0..n {
                g.push(vec![at(i, d, h), at(n + i, d, h)]);
                let dirty = match layout {
                    // Primary and the dedicated log disk.
                    Layout::Graid => {
                        vec![at(i, 0.0, d), at(2 * n, i as f64 * d, (i + 1) as f64 * d)]
                    }
                    // Primary and the on-duty mirror's log.
                    Layout::RoloP => vec![at(i, 0.0, d), slot(n + k, i)],
                    // Primary and both disks of the on-duty pair (the on-duty primary's own
                    // log copy of its data is on the same disk and adds nothing).
                    Layout::RoloR if i == k => vec![at(i, 0.0, d), slot(n + k, i)],
                    Layout::RoloR => vec![at(i, 0.0, d), slot(k, i), slot(n + k, i)],
                    // Only the on-duty pair spins: its two logs hold the newest copies and
                    // the home copies (on sleeping pairs) are stale.
                    _ => vec![slot(k, i), slot(n + k, i)],
                };
                g.push(dirty);
            }
        }
    }
    g
}

/// Share of time a disk spins: it ages at full rate then, and at `standby_failure_factor`
/// while spun down (rotation periods are hours, lives years, so the average rate is used).
fn duty(layout: Layout, p: &Params, disk: usize) -> f64 {
    let mirror = disk >= p.pairs && disk < 2 * p.pairs;
    let on_duty_share = 1.0 / p.pairs as f64;
    match layout {
        Layout::Raid0 | Layout::Raid10 => 1.0,
        Layout::Graid if mirror => p.graid_destage_duty,
        Layout::Graid => 1.0,
        Layout::RoloP | Layout::RoloR if mirror => on_duty_share,
        Layout::RoloP | Layout::RoloR => 1.0,
        Layout::RoloE => on_duty_share,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Every other copy was on a disk being restored (or there was none).
    DoubleFailure,
    /// The surviving copies had a latent sector error in the data needed.
    Latent,
}

/// The state of one array during its simulation.
struct ArrayState {
    /// When each disk's restore ends (<= now: in service).
    restore_end: Vec<f64>,
    /// When each disk's current drive went into service.
    installed: Vec<f64>,
}

impl ArrayState {
    fn new(disks: usize) -> Self {
        ArrayState {
            restore_end: vec![f64::NEG_INFINITY; disks],
            installed: vec![0.0; disks],
        }
    }

    fn restoring(&self, disk: usize, t: f64) -> bool {
        self.restore_end[disk] > t
    }

    /// Whether `failed` failing at `t` loses data, and how.
    fn loss_on_failure(
        &self,
        layout: Layout,
        p: &Params,
        failed: usize,
        t: f64,
        rng: &mut Rng,
    ) -> Option<Loss> {
        // Time since each surviving disk's last scrub, drawn once per disk for this event,
        // and (whole-disk reads) whether it has a latent error anywhere.
        let mut since_scrub: Vec<Option<f64>> = vec![None; self.restore_end.len()];
        let mut any_latent: Vec<Option<bool>> = vec![None; self.restore_end.len()];
        let mut worst = None;
        for group in groups(layout, p, t) {
            if !group.iter().any(|c| c.disk == failed) {
                continue;
            }
            let survivors: Vec<&Copy> = group
                .iter()
                .filter(|c| c.disk != failed && !self.restoring(c.disk, t))
                .collect();
            if survivors.is_empty() {
                return Some(Loss::DoubleFailure);
            }
            if worst.is_some() {
                continue;
            }
            let all_latent = survivors.iter().all(|c| {
                let window = *since_scrub[c.disk].get_or_insert_with(|| {
                    p.scrub
                        .backward_recurrence(rng)
                        .min(t - self.installed[c.disk])
                });
                let hit = |len: f64, rng: &mut Rng| {
                    rng.unit() > (-window * len / p.latent_error_eta_hours).exp()
                };
                if p.whole_disk_reads {
                    *any_latent[c.disk].get_or_insert_with(|| hit(1.0, rng))
                } else {
                    hit(c.hi - c.lo, rng)
                }
            });
            if all_latent {
                worst = Some(Loss::Latent);
            }
        }
        worst
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub disk_failures: u64,
    pub data_loss_double_failure: u64,
    pub data_loss_latent: u64,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.disk_failures += o.disk_failures;
        self.data_loss_double_failure += o.data_loss_double_failure;
        self.data_loss_latent += o.data_loss_latent;
    }
}

/// The per-array stream: splitmix64 of the run seed and the array's index, so a result does
/// not depend on how arrays are spread over threads.
fn array_rng(seed: u64, index: u64) -> Rng {
    let mut z = seed
        .wrapping_add(index.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    Rng((z ^ (z >> 31)).max(1))
}

/// Simulate one array over the horizon.
fn simulate_array(layout: Layout, p: &Params, rng: &mut Rng) -> Counts {
    let disks = layout.disks(p.pairs);
    let horizon = p.years * HOURS_PER_YEAR;
    let rate: Vec<f64> = (0..disks)
        .map(|j| {
            let duty = duty(layout, p, j);
            duty + (1.0 - duty) * p.standby_failure_factor
        })
        .collect();
    let life = |j: usize, rng: &mut Rng| {
        if rate[j] > 0.0 {
            p.disk_failure.sample(rng) / rate[j]
        } else {
            f64::INFINITY
        }
    };
    let mut fail_at: Vec<f64> = (0..disks).map(|j| life(j, rng)).collect();
    let mut state = ArrayState::new(disks);
    let mut counts = Counts::default();
    loop {
        let (disk, t) = fail_at
            .iter()
            .copied()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((0, f64::INFINITY));
        if t > horizon {
            return counts;
        }
        counts.disk_failures += 1;
        match state.loss_on_failure(layout, p, disk, t, rng) {
            Some(Loss::DoubleFailure) => counts.data_loss_double_failure += 1,
            Some(Loss::Latent) => counts.data_loss_latent += 1,
            None => {}
        }
        let back = t + p.restore.sample(rng);
        state.restore_end[disk] = back;
        state.installed[disk] = back;
        fail_at[disk] = back + life(disk, rng);
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub layout: Layout,
    pub arrays: u64,
    pub seed: u64,
    pub disks_per_array: usize,
    pub params: Params,
    pub counts: Counts,
    pub per_1000_arrays: PerThousand,
}

#[derive(Debug, Clone, Serialize)]
pub struct PerThousand {
    pub disk_failures: f64,
    pub data_loss_double_failure: f64,
    pub data_loss_latent: f64,
    pub data_loss_total: f64,
}

/// Simulate `arrays` arrays on `threads` threads; the result depends only on the seed.
pub fn run(layout: Layout, p: &Params, arrays: u64, seed: u64, threads: usize) -> Report {
    let threads = threads.clamp(1, 256) as u64;
    let chunk = arrays.div_ceil(threads);
    let mut counts = Counts::default();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|w| {
                s.spawn(move || {
                    let mut c = Counts::default();
                    for i in (w * chunk)..((w + 1) * chunk).min(arrays) {
                        c.add(simulate_array(layout, p, &mut array_rng(seed, i)));
                    }
                    c
                })
            })
            .collect();
        for h in handles {
            // A worker only panics on a bug; re-raise it rather than report partial counts.
            match h.join() {
                Ok(c) => counts.add(c),
                Err(e) => std::panic::resume_unwind(e),
            }
        }
    });
    let per = |n: u64| n as f64 * 1000.0 / arrays.max(1) as f64;
    Report {
        layout,
        arrays,
        seed,
        disks_per_array: layout.disks(p.pairs),
        params: p.clone(),
        counts,
        per_1000_arrays: PerThousand {
            disk_failures: per(counts.disk_failures),
            data_loss_double_failure: per(counts.data_loss_double_failure),
            data_loss_latent: per(counts.data_loss_latent),
            data_loss_total: per(counts.data_loss_double_failure + counts.data_loss_latent),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_latent() -> Params {
        Params {
            latent_error_eta_hours: f64::INFINITY,
            ..Params::default()
        }
    }

    #[test]
    fn weibull_samples_have_the_analytic_moments() {
        let p = Params::default();
        let mut rng = Rng(12345);
        for w in [p.disk_failure, p.restore, p.scrub] {
            let n = 200_000;
            let xs: Vec<f64> = (0..n).map(|_| w.sample(&mut rng)).collect();
            let mean = xs.iter().sum::<f64>() / n as f64;
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
            assert!(xs.iter().all(|&x| x >= w.location));
            assert!((mean / w.mean() - 1.0).abs() < 0.01, "{w:?}: mean {mean}");
            assert!((var / w.variance() - 1.0).abs() < 0.03, "{w:?}: var {var}");
        }
        // Known values: Gamma(1.5) = sqrt(pi)/2, Gamma(5) = 24.
        assert!((gamma(1.5) - std::f64::consts::PI.sqrt() / 2.0).abs() < 1e-12);
        assert!((gamma(5.0) - 24.0).abs() < 1e-9);
    }

    #[test]
    fn backward_recurrence_has_the_stationary_mean() {
        // E[age] = E[X^2] / (2 E[X]) for a stationary renewal process.
        let w = Params::default().scrub;
        let m = w.mean();
        let expected = (w.variance() + m * m) / (2.0 * m);
        let mut rng = Rng(99);
        let n = 200_000;
        let mean = (0..n).map(|_| w.backward_recurrence(&mut rng)).sum::<f64>() / n as f64;
        assert!((mean / expected - 1.0).abs() < 0.02, "{mean} vs {expected}");
    }

    #[test]
    fn without_redundancy_every_disk_failure_loses_data() {
        let r = run(Layout::Raid0, &Params::default(), 2_000, 3, 2);
        assert!(r.counts.disk_failures > 1_000);
        assert_eq!(r.counts.data_loss_double_failure, r.counts.disk_failures);
        assert_eq!(r.counts.data_loss_latent, 0);
    }

    #[test]
    fn raid10_loses_data_only_when_the_partner_fails_within_the_restore_window() {
        let p = no_latent();
        let mut rng = Rng(5);
        let mut s = ArrayState::new(10);
        // Primary 0 failed at 100 h; its restore ends at 120 h.
        s.restore_end[0] = 120.0;
        s.installed[0] = 120.0;
        let partner = p.pairs;
        assert_eq!(
            s.loss_on_failure(Layout::Raid10, &p, partner, 110.0, &mut rng),
            Some(Loss::DoubleFailure)
        );
        assert_eq!(
            s.loss_on_failure(Layout::Raid10, &p, partner, 130.0, &mut rng),
            None
        );
        for other in (1..10).filter(|&d| d != partner) {
            assert_eq!(
                s.loss_on_failure(Layout::Raid10, &p, other, 110.0, &mut rng),
                None
            );
        }
        // Over whole runs without latent errors, losses are rare double failures.
        let r = run(Layout::Raid10, &p, 5_000, 1, 2);
        assert_eq!(r.counts.data_loss_latent, 0);
        assert!(r.counts.data_loss_double_failure * 100 < r.counts.disk_failures);
    }

    #[test]
    fn a_latent_error_in_the_needed_region_loses_data() {
        // Latent errors everywhere, all the time: a failure with its copies in service is a
        // latent loss.
        let p = Params {
            latent_error_eta_hours: 1e-9,
            ..Params::default()
        };
        let mut rng = Rng(8);
        let mut s = ArrayState::new(10);
        s.installed = vec![-1e6; 10];
        assert_eq!(
            s.loss_on_failure(Layout::Raid10, &p, 3, 1000.0, &mut rng),
            Some(Loss::Latent)
        );
        // The GRAID log disk (index 10) needs the primaries' dirty regions.
        let mut g = ArrayState::new(11);
        g.installed = vec![-1e6; 11];
        assert_eq!(
            g.loss_on_failure(Layout::Graid, &p, 10, 1000.0, &mut rng),
            Some(Loss::Latent)
        );
    }

    #[test]
    fn rolo_r_keeps_dirty_data_through_a_primary_and_a_logger_failure() {
        let p = no_latent();
        let mut rng = Rng(2);
        let mut s = ArrayState::new(10);
        // At t = 0 pair 0 is on duty. Primary 1 restoring; its dirty data also lives on
        // primary 0's and mirror 0's logs, its clean data on mirror 1.
        s.restore_end[1] = 50.0;
        assert_eq!(
            s.loss_on_failure(Layout::RoloR, &p, p.pairs, 10.0, &mut rng),
            None
        );
        // RoLo-P has only the on-duty mirror's log copy: the same failures lose data.
        assert_eq!(
            s.loss_on_failure(Layout::RoloP, &p, p.pairs, 10.0, &mut rng),
            Some(Loss::DoubleFailure)
        );
    }

    #[test]
    fn whole_disk_reads_make_the_graid_log_disk_a_liability() {
        // Its restore then reads all five primaries whole; with only the needed data read,
        // it reads their dirty regions.
        let whole = Params {
            whole_disk_reads: true,
            ..Params::default()
        };
        let loss = |l, p: &Params| {
            let c = run(l, p, 20_000, 4, 2).counts;
            (c.data_loss_double_failure + c.data_loss_latent) as f64
        };
        assert!(loss(Layout::Graid, &whole) > 1.5 * loss(Layout::Raid10, &whole));
        let needed = Params::default();
        assert!(loss(Layout::Graid, &needed) < 1.2 * loss(Layout::Raid10, &needed));
    }

    #[test]
    fn results_depend_on_the_seed_only() {
        let p = Params::default();
        let a = run(Layout::RoloP, &p, 3_000, 11, 1).counts;
        assert_eq!(a, run(Layout::RoloP, &p, 3_000, 11, 3).counts);
        assert_ne!(a, run(Layout::RoloP, &p, 3_000, 12, 1).counts);
    }

    #[test]
    fn bad_parameters_are_refused() {
        let bad = [
            Params {
                dirty_fraction: 0.2,
                ..Params::default()
            },
            Params {
                pairs: 0,
                ..Params::default()
            },
            Params {
                standby_failure_factor: -1.0,
                ..Params::default()
            },
            Params {
                latent_error_eta_hours: 0.0,
                ..Params::default()
            },
        ];
        for p in bad {
            assert!(p.validate().is_err(), "{p:?}");
        }
        assert!(Params::default().validate().is_ok());
        assert!("rolo-x".parse::<Layout>().is_err());
        assert_eq!("rolo-e".parse::<Layout>(), Ok(Layout::RoloE));
    }
}
