//! Drive profiles: the physical and power figures of a drive, kept as TOML data files in
//! `contrib-storage/profiles/` and embedded in the binary.

use std::path::Path;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Profiles shipped with the agent, embedded so a bare binary can replay and serve.
const BUILTIN: &[(&str, &str)] = &[
    (
        "ultrastar-36z15",
        include_str!("../../profiles/ultrastar-36z15.toml"),
    ),
    (
        "deskstar-t7k250",
        include_str!("../../profiles/deskstar-t7k250.toml"),
    ),
    (
        "ultrastar-15k600",
        include_str!("../../profiles/ultrastar-15k600.toml"),
    ),
    (
        "seagate-st1000nm0011",
        include_str!("../../profiles/seagate-st1000nm0011.toml"),
    ),
    ("wd1600aajs", include_str!("../../profiles/wd1600aajs.toml")),
    (
        "maxtor-atlas-10k-v",
        include_str!("../../profiles/maxtor-atlas-10k-v.toml"),
    ),
    ("ssd", include_str!("../../profiles/ssd.toml")),
    (
        "samsung-980-pro",
        include_str!("../../profiles/samsung-980-pro.toml"),
    ),
    ("test-fast", include_str!("../../profiles/test-fast.toml")),
];

#[derive(Debug, Error)]
pub enum ProfileError {
    #[error("unknown drive profile {name:?} (built in: {known}); give a path to a .toml file to load your own")]
    Unknown { name: String, known: String },
    #[error("cannot read drive profile {path}: {cause}")]
    Read { path: String, cause: std::io::Error },
    #[error("drive profile {origin}: {cause}")]
    Parse {
        origin: String,
        cause: Box<toml::de::Error>,
    },
    #[error("drive profile {origin}: key `{key}`: {problem}")]
    Invalid {
        origin: String,
        key: String,
        problem: String,
    },
}

/// One low-power state of a drive and the cost of entering and leaving it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StandbyMode {
    pub name: String,
    pub power_w: f64,
    pub spin_down_s: f64,
    /// Energy of the whole spin-down; defaults to active power times its duration.
    pub spin_down_j: Option<f64>,
    pub spin_up_s: f64,
    /// Energy of the whole spin-up; defaults to active power times its duration.
    pub spin_up_j: Option<f64>,
    /// NVMe autonomous power state transition (APST): the device enters this state by
    /// itself after this long idle, whatever the host's policy says.
    pub autonomous_idle_ms: Option<f64>,
}

/// One recording zone: a band of cylinders with the same number of sectors per track.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ZoneSpec {
    pub cylinders: u64,
    pub sectors_per_track: u64,
    /// Sectors the start of a track is shifted against the previous track of the same
    /// cylinder (covers a head switch); derived from `head_switch_ms` when absent.
    pub track_skew: Option<u64>,
    /// Shift across a cylinder boundary (covers a one-cylinder seek); derived when absent.
    pub cylinder_skew: Option<u64>,
    /// Track sizes of the model's units, one list of sectors per track per surface each
    /// (heads differ per unit); a drive's `unit` picks one, the zone's cylinders grow so
    /// the unit still holds the zone's sectors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<Vec<u64>>,
}

/// The mechanism of a rotating drive (DiskSim's layout and seek parameters).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GeometrySpec {
    #[serde(default = "default_sector_bytes")]
    pub sector_bytes: u64,
    /// Recording surfaces, one head each (tracks per cylinder).
    pub surfaces: u64,
    pub head_switch_ms: f64,
    /// Seek over the whole stroke (outermost to innermost cylinder), settle included.
    pub full_stroke_seek_ms: f64,
    /// Extra settle time of a write after a seek (writes need a tighter track lock).
    #[serde(default)]
    pub write_settle_ms: f64,
    /// Seek distance, as a fraction of the stroke, below which seek time grows with the
    /// square root of the distance (the arm accelerates and decelerates) and above which it
    /// grows linearly (the arm coasts at full speed).
    #[serde(default = "default_short_seek_fraction")]
    pub short_seek_fraction: f64,
    /// Outermost zone first.
    pub zones: Vec<ZoneSpec>,
    /// Serpentine LBA numbering in bands of this many cylinders: one surface outward
    /// through the band, the next inward, the next band starting on the last surface
    /// (the Maxtor Atlas 10K V's 32); 0 fills each cylinder surface by surface.
    #[serde(default)]
    pub serpentine_cylinders: u64,
    /// Zero-latency access: a transfer within a track starts with whichever of its
    /// sectors comes under the head first (out of LBA order).
    #[serde(default)]
    pub zero_latency: bool,
    /// Grown-defect density of a unit (sectors per GB, slipped: their track holds fewer
    /// LBAs); placed from the drive's `unit` seed, none without one.
    #[serde(default)]
    pub defects_per_gb: f64,
}

fn default_sector_bytes() -> u64 {
    512
}

fn default_short_seek_fraction() -> f64 {
    0.2
}

/// The drive's own buffer: read-ahead segments and the write-back cache.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CacheSpec {
    pub size_bytes: u64,
    pub segments: u64,
    /// How far the drive keeps reading past a read miss while it has nothing else to do.
    pub read_ahead_bytes: u64,
    /// Write-back caching as shipped (`hdparm -W1`); FUA writes and FLUSH CACHE bypass it.
    pub write_cache: bool,
    /// Idle time before the drive starts writing cached data back, so bursts coalesce.
    #[serde(default = "default_destage_idle_ms")]
    pub destage_idle_ms: f64,
}

fn default_destage_idle_ms() -> f64 {
    100.0
}

/// Command queueing: how many commands the drive accepts and how it orders them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QueueSpec {
    #[serde(default = "default_queue_depth")]
    pub depth: usize,
    #[serde(default)]
    pub scheduler: SchedulerKind,
}

impl Default for QueueSpec {
    fn default() -> Self {
        Self {
            depth: default_queue_depth(),
            scheduler: SchedulerKind::default(),
        }
    }
}

fn default_queue_depth() -> usize {
    1
}

/// The order in which a drive serves the commands in its queue.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SchedulerKind {
    /// First come, first served.
    #[default]
    Fcfs,
    /// Shortest seek (cylinder distance) first.
    Sstf,
    /// Ascending sweep, jumping back to the lowest cylinder at the end.
    CLook,
    /// Shortest positioning time (seek and rotation) first.
    Sptf,
}

impl std::str::FromStr for SchedulerKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fcfs" => Ok(Self::Fcfs),
            "sstf" => Ok(Self::Sstf),
            "c-look" => Ok(Self::CLook),
            "sptf" => Ok(Self::Sptf),
            other => Err(format!(
                "unknown scheduler {other:?} (fcfs, sstf, c-look, sptf)"
            )),
        }
    }
}

/// A flash device: fixed latencies, shared bandwidth, internal parallelism.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FlashSpec {
    /// Commands the device works on at once (dies and channels behind the controller).
    pub parallel_units: usize,
}

/// A drive's figures as read from its data file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DriveProfile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub capacity_bytes: u64,
    /// Spindle speed; 0 for flash (no rotational latency).
    pub rpm: u32,
    pub avg_seek_ms: f64,
    #[serde(default)]
    pub track_to_track_seek_ms: f64,
    #[serde(default)]
    pub read_overhead_ms: f64,
    #[serde(default)]
    pub write_overhead_ms: f64,
    pub transfer_mb_s: f64,
    /// Write transfer rate when it differs from the read rate (flash).
    pub write_transfer_mb_s: Option<f64>,
    pub active_w: f64,
    pub idle_w: f64,
    pub default_standby_mode: String,
    pub standby_modes: Vec<StandbyMode>,
    /// Rotating drives: zones, heads, skew and seek curve; derived from the figures above
    /// (one zone) when absent.
    pub geometry: Option<GeometrySpec>,
    pub cache: Option<CacheSpec>,
    #[serde(default)]
    pub queue: QueueSpec,
    /// Flash devices (`rpm = 0`).
    pub flash: Option<FlashSpec>,
    /// Which unit of the model this drive is (a member's `drive_seed`): picks the zones'
    /// track-size variants and the defect list; none is the nominal drive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<u64>,
}

impl StandbyMode {
    pub fn spin_down_joules(&self, active_w: f64) -> f64 {
        self.spin_down_j.unwrap_or(active_w * self.spin_down_s)
    }

    pub fn spin_up_joules(&self, active_w: f64) -> f64 {
        self.spin_up_j.unwrap_or(active_w * self.spin_up_s)
    }
}

impl DriveProfile {
    /// A built-in profile by name, or a profile file when `name_or_path` looks like a path.
    pub fn load(name_or_path: &str) -> Result<Self, ProfileError> {
        if name_or_path.contains('/') || name_or_path.ends_with(".toml") {
            return Self::from_file(Path::new(name_or_path));
        }
        match BUILTIN.iter().find(|(name, _)| *name == name_or_path) {
            Some((name, text)) => Self::parse(text, &format!("built-in {name}")),
            None => Err(ProfileError::Unknown {
                name: name_or_path.to_string(),
                known: Self::builtin_names().join(", "),
            }),
        }
    }

    pub fn builtin_names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(name, _)| *name).collect()
    }

    pub fn from_file(path: &Path) -> Result<Self, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|cause| ProfileError::Read {
            path: path.display().to_string(),
            cause,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, origin: &str) -> Result<Self, ProfileError> {
        let profile: DriveProfile = toml::from_str(text).map_err(|cause| ProfileError::Parse {
            origin: origin.to_string(),
            cause: Box::new(cause),
        })?;
        profile.validate(origin)?;
        Ok(profile)
    }

    fn validate(&self, origin: &str) -> Result<(), ProfileError> {
        let invalid = |key: &str, problem: String| ProfileError::Invalid {
            origin: origin.to_string(),
            key: key.to_string(),
            problem,
        };
        let non_negative = [
            ("avg_seek_ms", self.avg_seek_ms),
            ("track_to_track_seek_ms", self.track_to_track_seek_ms),
            ("read_overhead_ms", self.read_overhead_ms),
            ("write_overhead_ms", self.write_overhead_ms),
            ("active_w", self.active_w),
            ("idle_w", self.idle_w),
        ];
        for (key, value) in non_negative {
            if !value.is_finite() || value < 0.0 {
                return Err(invalid(key, format!("must be a number >= 0, got {value}")));
            }
        }
        if self.capacity_bytes == 0 {
            return Err(invalid("capacity_bytes", "must be > 0".into()));
        }
        if !(self.transfer_mb_s.is_finite() && self.transfer_mb_s > 0.0) {
            return Err(invalid("transfer_mb_s", "must be > 0".into()));
        }
        if let Some(rate) = self.write_transfer_mb_s {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(invalid("write_transfer_mb_s", "must be > 0".into()));
            }
        }
        if self.track_to_track_seek_ms > self.avg_seek_ms {
            return Err(invalid(
                "track_to_track_seek_ms",
                format!(
                    "{} ms is longer than avg_seek_ms {} ms",
                    self.track_to_track_seek_ms, self.avg_seek_ms
                ),
            ));
        }
        if self.standby_modes.is_empty() {
            return Err(invalid(
                "standby_modes",
                "at least one mode is needed".into(),
            ));
        }
        for (i, mode) in self.standby_modes.iter().enumerate() {
            let key = |field: &str| format!("standby_modes[{i}].{field}");
            let figures = [
                ("power_w", Some(mode.power_w)),
                ("spin_down_s", Some(mode.spin_down_s)),
                ("spin_up_s", Some(mode.spin_up_s)),
                ("spin_down_j", mode.spin_down_j),
                ("spin_up_j", mode.spin_up_j),
            ];
            for (field, value) in figures {
                if let Some(value) = value {
                    if !value.is_finite() || value < 0.0 {
                        return Err(invalid(
                            &key(field),
                            format!("must be a number >= 0, got {value}"),
                        ));
                    }
                }
            }
            if mode.power_w >= self.idle_w {
                return Err(invalid(
                    &key("power_w"),
                    format!(
                        "standby power {} W must be below idle power {} W",
                        mode.power_w, self.idle_w
                    ),
                ));
            }
        }
        self.validate_mechanism(origin)?;
        if self.mode_index(&self.default_standby_mode).is_none() {
            return Err(invalid(
                "default_standby_mode",
                format!(
                    "{:?} is not one of the standby_modes",
                    self.default_standby_mode
                ),
            ));
        }
        Ok(())
    }

    fn validate_mechanism(&self, origin: &str) -> Result<(), ProfileError> {
        let invalid = |key: &str, problem: String| ProfileError::Invalid {
            origin: origin.to_string(),
            key: key.to_string(),
            problem,
        };
        if let Some(g) = &self.geometry {
            if self.rpm == 0 {
                return Err(invalid(
                    "geometry",
                    "a flash profile (rpm = 0) has none".into(),
                ));
            }
            let times = [
                ("geometry.head_switch_ms", g.head_switch_ms),
                ("geometry.full_stroke_seek_ms", g.full_stroke_seek_ms),
                ("geometry.write_settle_ms", g.write_settle_ms),
            ];
            for (key, value) in times {
                if !value.is_finite() || value < 0.0 {
                    return Err(invalid(key, format!("must be a number >= 0, got {value}")));
                }
            }
            if g.sector_bytes == 0 || g.surfaces == 0 || g.zones.is_empty() {
                return Err(invalid(
                    "geometry",
                    "sector_bytes, surfaces and at least one zone are needed".into(),
                ));
            }
            if !(g.short_seek_fraction > 0.0 && g.short_seek_fraction < 1.0) {
                return Err(invalid(
                    "geometry.short_seek_fraction",
                    format!("must lie in (0, 1), got {}", g.short_seek_fraction),
                ));
            }
            if g.full_stroke_seek_ms < self.avg_seek_ms {
                return Err(invalid(
                    "geometry.full_stroke_seek_ms",
                    format!("shorter than avg_seek_ms {}", self.avg_seek_ms),
                ));
            }
            if g.surfaces > 64 {
                return Err(invalid(
                    "geometry.surfaces",
                    format!("at most 64 surfaces, got {}", g.surfaces),
                ));
            }
            let defects = g.defects_per_gb * self.capacity_bytes as f64 / 1e9;
            if defects > f64::from(1u32 << 24) {
                return Err(invalid(
                    "geometry.defects_per_gb",
                    format!("{defects:.0} defects on this drive; at most 16777216"),
                ));
            }
            if !g.defects_per_gb.is_finite() || !(0.0..=100_000.0).contains(&g.defects_per_gb) {
                return Err(invalid(
                    "geometry.defects_per_gb",
                    format!("must lie in [0, 100000], got {}", g.defects_per_gb),
                ));
            }
            let mut sectors: u64 = 0;
            for (i, z) in g.zones.iter().enumerate() {
                if z.cylinders == 0 || z.sectors_per_track == 0 {
                    return Err(invalid(
                        &format!("geometry.zones[{i}]"),
                        "cylinders and sectors_per_track must be > 0".into(),
                    ));
                }
                for (v, sizes) in z.variants.iter().enumerate() {
                    let per_surface = sizes.len() as u64 == g.surfaces;
                    if !per_surface || sizes.iter().any(|&n| n == 0 || n > 1 << 20) {
                        return Err(invalid(
                            &format!("geometry.zones[{i}].variants[{v}]"),
                            format!(
                                "needs one track size in 1..=1048576 per surface ({})",
                                g.surfaces
                            ),
                        ));
                    }
                }
                sectors = z
                    .cylinders
                    .checked_mul(z.sectors_per_track)
                    .and_then(|n| n.checked_mul(g.surfaces))
                    .and_then(|n| n.checked_add(sectors))
                    .ok_or_else(|| invalid("geometry.zones", "too many sectors".into()))?;
            }
            let bytes = sectors.saturating_mul(g.sector_bytes);
            if bytes < self.capacity_bytes {
                return Err(invalid(
                    "geometry.zones",
                    format!(
                        "hold {bytes} bytes, less than capacity_bytes {}",
                        self.capacity_bytes
                    ),
                ));
            }
        }
        if let Some(c) = &self.cache {
            if c.segments == 0 || c.size_bytes == 0 {
                return Err(invalid(
                    "cache",
                    "size_bytes and segments must be > 0".into(),
                ));
            }
            if !c.destage_idle_ms.is_finite() || c.destage_idle_ms < 0.0 {
                return Err(invalid(
                    "cache.destage_idle_ms",
                    format!("must be a number >= 0, got {}", c.destage_idle_ms),
                ));
            }
        }
        if self.queue.depth == 0 || self.queue.depth > 1024 {
            return Err(invalid(
                "queue.depth",
                format!("must lie in 1..=1024, got {}", self.queue.depth),
            ));
        }
        if let Some(f) = &self.flash {
            if self.rpm != 0 {
                return Err(invalid("flash", "only for rpm = 0".into()));
            }
            if f.parallel_units == 0 || f.parallel_units > 4096 {
                return Err(invalid(
                    "flash.parallel_units",
                    format!("must lie in 1..=4096, got {}", f.parallel_units),
                ));
            }
        }
        if self.rpm > 0 {
            crate::drive::mechanism_for(self).map_err(|problem| invalid("geometry", problem))?;
        }
        for (i, mode) in self.standby_modes.iter().enumerate() {
            if let Some(ms) = mode.autonomous_idle_ms {
                if !ms.is_finite() || ms < 0.0 {
                    return Err(invalid(
                        &format!("standby_modes[{i}].autonomous_idle_ms"),
                        format!("must be a number >= 0, got {ms}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The standby mode the device enters on its own, with its idle delay in seconds.
    pub fn autonomous_mode(&self) -> Option<(usize, f64)> {
        self.standby_modes
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.autonomous_idle_ms.map(|ms| (i, ms / 1e3)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    pub fn mode_index(&self, name: &str) -> Option<usize> {
        self.standby_modes.iter().position(|m| m.name == name)
    }

    pub fn default_mode_index(&self) -> usize {
        self.mode_index(&self.default_standby_mode).unwrap_or(0)
    }

    pub fn mode(&self, index: usize) -> &StandbyMode {
        &self.standby_modes[index.min(self.standby_modes.len() - 1)]
    }

    /// Energy spent over an idle gap of `gap_s` seconds if the drive sleeps in `mode`
    /// for all of it (spin-down at the start, spin-up ending at its end).
    pub fn sleep_energy(&self, mode: usize, gap_s: f64) -> f64 {
        let m = self.mode(mode);
        let transitions = m.spin_down_s + m.spin_up_s;
        m.spin_down_joules(self.active_w)
            + m.spin_up_joules(self.active_w)
            + m.power_w * (gap_s - transitions).max(0.0)
    }

    /// The idle time for which spinning down and up again costs as much energy as staying
    /// idle: idle_w·T = E_down + E_up + P_standby·(T − t_down − t_up). A gap shorter than the
    /// two transitions cannot be slept through at all, so that is the floor.
    pub fn break_even_s(&self, mode: usize) -> f64 {
        let m = self.mode(mode);
        let transitions = m.spin_down_s + m.spin_up_s;
        let energy = m.spin_down_joules(self.active_w) + m.spin_up_joules(self.active_w)
            - m.power_w * transitions;
        (energy / (self.idle_w - m.power_w)).max(transitions)
    }

    /// The mode that saves most over a gap of `gap_s`, if any mode saves at all.
    pub fn best_mode_for_gap(&self, gap_s: f64) -> Option<usize> {
        (0..self.standby_modes.len())
            .filter(|&i| self.break_even_s(i) <= gap_s)
            .min_by(|&a, &b| {
                self.sleep_energy(a, gap_s)
                    .total_cmp(&self.sleep_energy(b, gap_s))
            })
    }

    pub fn write_rate_bytes_s(&self) -> f64 {
        self.write_transfer_mb_s.unwrap_or(self.transfer_mb_s) * 1e6
    }

    pub fn read_rate_bytes_s(&self) -> f64 {
        self.transfer_mb_s * 1e6
    }

    /// The profile summary the control socket reports.
    pub fn summary(&self, mode: usize) -> serde_json::Value {
        let m = self.mode(mode);
        serde_json::json!({
            "name": self.name,
            "description": self.description,
            "standby_mode": m.name,
            "spin_up_s": m.spin_up_s,
            "spin_down_s": m.spin_down_s,
            "spin_up_j": m.spin_up_joules(self.active_w),
            "spin_down_j": m.spin_down_joules(self.active_w),
            "break_even_s": self.break_even_s(mode),
            "active_w": self.active_w,
            "idle_w": self.idle_w,
            "standby_w": m.power_w,
            "capacity_bytes": self.capacity_bytes,
            "unit": self.unit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn track_geometry_options_are_checked() {
        let base = include_str!("../../profiles/maxtor-atlas-10k-v.toml");
        let bad = |from: &str, to: &str| {
            let text = base.replacen(from, to, 1);
            assert_ne!(text, base, "{from}");
            DriveProfile::parse(&text, "test").unwrap_err().to_string()
        };
        let e = bad("surfaces = 2", "surfaces = 100000");
        assert!(e.contains("geometry.surfaces"), "{e}");
        let e = bad("defects_per_gb = 20.0", "defects_per_gb = -1.0");
        assert!(e.contains("defects_per_gb"), "{e}");
        let e = bad(
            "capacity_bytes = 73_500_000_000",
            "capacity_bytes = 73_500_000_000_000_000",
        );
        assert!(e.contains("defects_per_gb") && e.contains("at most"), "{e}");
        let e = bad("variants = [[1092, 1144],", "variants = [[1092],");
        assert!(e.contains("variants[0]"), "{e}");
        let e = bad("variants = [[1092, 1144],", "variants = [[0, 1144],");
        assert!(e.contains("variants[0]"), "{e}");
    }

    #[test]
    fn every_builtin_profile_loads_and_validates() {
        for name in DriveProfile::builtin_names() {
            let profile = DriveProfile::load(name).unwrap();
            assert_eq!(profile.name, name, "file name and `name` key agree");
        }
    }

    #[test]
    fn deskstar_has_three_standby_modes() {
        let p = DriveProfile::load("deskstar-t7k250").unwrap();
        let names: Vec<_> = p.standby_modes.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["unloaded", "low-rpm", "non-spinning"]);
    }

    #[test]
    fn break_even_of_ultrastar_36z15_is_derived_from_its_figures() {
        let p = DriveProfile::load("ultrastar-36z15").unwrap();
        // (62.25 + 904.8 - 4.15 * 41) / (22.3 - 4.15)
        let expected = (62.25 + 904.8 - 4.15 * 41.0) / (22.3 - 4.15);
        assert!((p.break_even_s(0) - expected).abs() < 1e-9);
        // Idling exactly that long costs the same either way.
        let t = p.break_even_s(0);
        assert!((p.sleep_energy(0, t) - p.idle_w * t).abs() < 1e-6);
    }

    #[test]
    fn break_even_is_at_least_the_transition_time() {
        let p = DriveProfile::load("deskstar-t7k250").unwrap();
        for i in 0..p.standby_modes.len() {
            let m = p.mode(i);
            assert!(p.break_even_s(i) >= m.spin_down_s + m.spin_up_s);
        }
    }

    #[test]
    fn test_fast_transitions_are_sub_second() {
        let p = DriveProfile::load("test-fast").unwrap();
        let m = p.mode(p.default_mode_index());
        assert!(m.spin_up_s < 1.0 && m.spin_down_s < 1.0);
    }

    #[test]
    fn best_mode_depends_on_the_gap() {
        let p = DriveProfile::load("deskstar-t7k250").unwrap();
        assert_eq!(p.best_mode_for_gap(0.5), None, "too short to sleep at all");
        let long = p.best_mode_for_gap(3600.0).unwrap();
        assert_eq!(p.mode(long).name, "non-spinning");
    }

    #[test]
    fn missing_transition_energy_defaults_to_active_power() {
        let p = DriveProfile::load("seagate-st1000nm0011").unwrap();
        let m = p.mode(0);
        assert!((m.spin_up_joules(p.active_w) - 6.82 * 9.6).abs() < 1e-9);
    }

    #[test]
    fn unknown_name_lists_the_builtins() {
        let err = DriveProfile::load("no-such-drive").unwrap_err().to_string();
        assert!(err.contains("test-fast"), "{err}");
    }

    #[test]
    fn invalid_figure_names_the_key() {
        let text =
            include_str!("../../profiles/test-fast.toml").replace("idle_w = 5.0", "idle_w = 0.5");
        let err = DriveProfile::parse(&text, "test").unwrap_err().to_string();
        assert!(err.contains("standby_modes[0].power_w"), "{err}");
    }

    #[test]
    fn profile_file_loads_by_path() {
        let dir = std::env::temp_dir().join(format!("grs-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mine.toml");
        let text = include_str!("../../profiles/test-fast.toml").replace("test-fast", "mine");
        std::fs::write(&path, text).unwrap();
        let p = DriveProfile::load(path.to_str().unwrap()).unwrap();
        assert_eq!(p.name, "mine");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
