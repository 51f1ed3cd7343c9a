//! `greenreplica-storage tracks MEMBER`: extract one member's track boundaries and report
//! them with the time it took (device time and wall time).

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::profile::DriveProfile;

use super::device::DeviceTimer;
use super::emulated::EmulatedTimer;
use super::{extract_with, AccessTimer, ExtractOptions, Extraction};

/// What `tracks` was asked to look at.
pub enum Target {
    /// An emulated drive: a profile (name or file) and the unit's seed.
    Emulated { profile: String, seed: Option<u64> },
    /// A block device (or image file), read only.
    Device(String),
}

impl Target {
    /// `MEMBER`: a device path (`/dev/...` or an existing file that is not a profile), or
    /// a profile name or file with an optional `@SEED` (`maxtor-atlas-10k-v@3`).
    pub fn parse(member: &str, seed: Option<u64>) -> Result<Self> {
        if member.is_empty() || member.len() > 4096 || member.contains('\0') {
            bail!("tracks: a member is a device path or PROFILE[@SEED]");
        }
        let is_profile_file = member.ends_with(".toml");
        if member.starts_with("/dev/") || (!is_profile_file && Path::new(member).exists()) {
            if seed.is_some() {
                bail!("tracks: --seed applies to emulated drives, not to {member}");
            }
            return Ok(Self::Device(member.to_string()));
        }
        let (profile, suffix) = match member.rsplit_once('@') {
            Some((p, s)) => {
                let s: u64 = s
                    .parse()
                    .with_context(|| format!("tracks: {s:?} after @ is not a seed"))?;
                (p.to_string(), Some(s))
            }
            None => (member.to_string(), None),
        };
        if suffix.is_some() && seed.is_some() {
            bail!("tracks: give the seed once (@SEED or --seed)");
        }
        Ok(Self::Emulated {
            profile,
            seed: suffix.or(seed),
        })
    }
}

fn summary(e: &Extraction, wall_s: f64) -> Value {
    let mut sizes: Vec<u64> = std::iter::once(0)
        .chain(e.boundaries.iter().copied())
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| w[1] - w[0])
        .collect();
    sizes.sort_unstable();
    let distinct = {
        let mut d = sizes.clone();
        d.dedup();
        d.len()
    };
    json!({
        "sectors_searched": e.sectors,
        "tracks_found": e.boundaries.len(),
        "track_sectors_min": sizes.first(),
        "track_sectors_max": sizes.last(),
        "distinct_track_sizes": distinct,
        "probes": e.probes,
        "device_seconds": e.device_seconds,
        "wall_seconds": wall_s,
        "baseline_probe_ms": e.baseline_s * 1e3,
        "crossing_margin_ms": e.margin_s * 1e3,
    })
}

/// Run the extraction and build the report (`with_list`: include the boundary list).
pub fn run(
    target: &Target,
    limit: Option<u64>,
    margin_ms: Option<f64>,
    repeat: usize,
    with_list: bool,
) -> Result<Value> {
    let options = ExtractOptions {
        limit,
        margin_s: margin_ms.map(|m| m / 1e3),
        repeat,
    };
    let started = Instant::now();
    let (mut out, extraction) = match target {
        Target::Emulated { profile, seed } => {
            let mut p = DriveProfile::load(profile)?;
            p.unit = seed.or(p.unit);
            let mut timer = EmulatedTimer::new(&p)?;
            let e = extract_with(&mut timer, &options)?;
            let mut model = timer.geometry().track_boundaries();
            model.retain(|&b| b < e.sectors);
            (
                json!({
                    "member": profile,
                    "kind": "emulated",
                    "profile": p.name,
                    "unit": p.unit,
                    "clock": "virtual",
                    "defects": timer.geometry().defect_count(),
                    "matches_model": model == e.boundaries,
                }),
                e,
            )
        }
        Target::Device(path) => {
            let mut timer = DeviceTimer::open(Path::new(path))?;
            let sectors = timer.sectors();
            let e = extract_with(&mut timer as &mut dyn AccessTimer, &options)?;
            (
                json!({
                    "member": path,
                    "kind": "device",
                    "clock": "real",
                    "device_sectors": sectors,
                    "scsi_address_translation": "not done: SEND/RECEIVE DIAGNOSTIC is not implemented (no SCSI drive here to build it against)",
                }),
                e,
            )
        }
    };
    let wall = started.elapsed().as_secs_f64();
    if let Value::Object(map) = &mut out {
        map.insert("extraction".into(), summary(&extraction, wall));
        if extraction.boundaries.is_empty() {
            map.insert(
                "warning".into(),
                "no track boundary visible in the timings (flash, a cached device, or too few sectors)".into(),
            );
        }
        if with_list {
            map.insert("boundaries".into(), json!(extraction.boundaries));
        }
    }
    Ok(out)
}
