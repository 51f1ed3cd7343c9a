use super::emulated::EmulatedTimer;
use super::*;
use crate::profile::{DriveProfile, ZoneSpec};

fn maxtor(unit: u64, defects_per_gb: f64, zero_latency: bool) -> DriveProfile {
    let mut p = DriveProfile::load("maxtor-atlas-10k-v").unwrap();
    p.unit = Some(unit);
    let g = p.geometry.as_mut().unwrap();
    g.defects_per_gb = defects_per_gb;
    g.zero_latency = zero_latency;
    p
}

/// A small three-surface drive with four zones, serpentine bands of 5 cylinders, per-unit
/// track sizes and many defects: every case of the search within a whole drive.
fn small_drive(unit: u64) -> DriveProfile {
    let mut p = maxtor(unit, 3000.0, unit.is_multiple_of(2));
    let g = p.geometry.as_mut().unwrap();
    g.surfaces = 3;
    g.serpentine_cylinders = 5;
    g.zones = [(12, 400), (9, 353), (13, 300), (7, 251)]
        .iter()
        .map(|&(cylinders, spt)| ZoneSpec {
            cylinders,
            sectors_per_track: spt,
            track_skew: None,
            cylinder_skew: None,
            variants: vec![
                vec![spt, spt - 20, spt + 20],
                vec![spt + 31, spt, spt - 31],
                vec![spt - 7, spt + 3, spt + 4],
            ],
        })
        .collect();
    p.capacity_bytes = 10_000_000;
    p
}

fn truth(timer: &EmulatedTimer, limit: u64) -> Vec<u64> {
    let mut b = timer.geometry().track_boundaries();
    b.retain(|&x| x < limit);
    b
}

#[test]
fn extraction_recovers_every_boundary_of_small_drives_with_serpentine_variants_and_defects() {
    for unit in 0..6 {
        let profile = small_drive(unit);
        let mut timer = EmulatedTimer::new(&profile).unwrap();
        let expected = truth(&timer, timer.sectors());
        assert!(timer.geometry().defect_count() > 5, "unit {unit}");
        let got = extract(&mut timer, None, None).unwrap();
        assert_eq!(got.boundaries, expected, "unit {unit}");
        assert!(got.device_seconds > 0.0 && got.probes as usize >= expected.len());
    }
}

#[test]
fn extraction_recovers_the_start_of_maxtor_units_exactly() {
    // 300,000 sectors: ~270 tracks, eight serpentine turns, the surfaces' two sizes.
    for (unit, zero_latency) in [(0, true), (1, false), (2, true), (5, false)] {
        let profile = maxtor(unit, 400.0, zero_latency);
        let mut timer = EmulatedTimer::new(&profile).unwrap();
        let limit = 300_000;
        let expected = truth(&timer, limit);
        let sizes: std::collections::BTreeSet<u64> =
            expected.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(sizes.len() >= 3, "unit {unit}: {sizes:?}");
        let got = extract(&mut timer, Some(limit), None).unwrap();
        assert_eq!(got.boundaries, expected, "unit {unit}");
    }
}

struct Constant(f64, u64);

impl AccessTimer for Constant {
    fn sectors(&self) -> u64 {
        self.1
    }
    fn read(&mut self, _first: u64, _count: u64) -> Result<f64> {
        Ok(self.0)
    }
}

#[test]
fn a_device_without_timing_signal_shows_no_boundaries_and_bad_times_are_errors() {
    let got = extract(&mut Constant(1e-3, 10_000), None, None).unwrap();
    assert!(got.boundaries.is_empty());
    let err = extract(&mut Constant(f64::NAN, 10_000), None, None).unwrap_err();
    assert!(err.to_string().contains("unusable time"), "{err}");
    let err = extract(&mut Constant(1e-3, 100), None, None).unwrap_err();
    assert!(err.to_string().contains("too small"), "{err}");
    let err = extract(&mut Constant(1e-3, 10_000), None, Some(-1.0)).unwrap_err();
    assert!(err.to_string().contains("margin"), "{err}");
}

#[test]
fn the_device_timer_refuses_what_is_not_a_disk_or_file() {
    let dir = std::env::temp_dir();
    let err = device::DeviceTimer::open(&dir).err().unwrap();
    assert!(err.to_string().contains("neither a block device"), "{err}");
    let err = device::DeviceTimer::open(std::path::Path::new("/dev/null"))
        .err()
        .unwrap();
    assert!(err.to_string().contains("neither a block device"), "{err}");
    let err =
        device::DeviceTimer::open(&dir.join(format!("grs-tracks-missing-{}", std::process::id())))
            .err()
            .unwrap();
    assert!(err.to_string().contains("cannot stat"), "{err}");
}

#[test]
fn flash_profiles_have_no_tracks() {
    let name = DriveProfile::builtin_names()
        .into_iter()
        .find(|n| DriveProfile::load(n).unwrap().rpm == 0)
        .unwrap();
    let profile = DriveProfile::load(name).unwrap();
    assert!(EmulatedTimer::new(&profile).is_err());
}

#[test]
fn member_arguments_are_checked() {
    use super::report::Target;
    assert!(matches!(
        Target::parse("maxtor-atlas-10k-v@3", None).unwrap(),
        Target::Emulated { seed: Some(3), .. }
    ));
    assert!(matches!(
        Target::parse("maxtor-atlas-10k-v", Some(4)).unwrap(),
        Target::Emulated { seed: Some(4), .. }
    ));
    assert!(matches!(
        Target::parse("/dev/sdz", None).unwrap(),
        Target::Device(_)
    ));
    for bad in ["", "x@y", "a\0b", "maxtor-atlas-10k-v@-1"] {
        assert!(Target::parse(bad, None).is_err(), "{bad:?}");
    }
    assert!(
        Target::parse("maxtor-atlas-10k-v@3", Some(3)).is_err(),
        "seed twice"
    );
    assert!(
        Target::parse("/dev/sdz", Some(1)).is_err(),
        "seed on a device"
    );
    let report = super::report::run(
        &Target::parse("maxtor-atlas-10k-v@1", None).unwrap(),
        Some(100_000),
        None,
        1,
        true,
    )
    .unwrap();
    assert_eq!(report["matches_model"], true);
    assert!(report["boundaries"].as_array().unwrap().len() > 50);
    assert!(super::report::run(
        &Target::parse("no-such-profile", None).unwrap(),
        None,
        None,
        1,
        false
    )
    .is_err());
}

/// An emulated drive whose reads sometimes take longer (interrupts, other I/O), as on a
/// real machine: noise only ever adds time.
struct Noisy {
    inner: EmulatedTimer,
    next: Box<dyn FnMut() -> u64>,
}

impl AccessTimer for Noisy {
    fn sectors(&self) -> u64 {
        self.inner.sectors()
    }
    fn read(&mut self, first: u64, count: u64) -> Result<f64> {
        let t = self.inner.read(first, count)?;
        let draw = (self.next)();
        // One read in 20 is late by up to 2 ms.
        let late = if draw.is_multiple_of(20) {
            (draw % 2000) as f64 * 1e-6
        } else {
            0.0
        };
        Ok(t + late)
    }
}

#[test]
fn repeated_probes_keep_the_fastest_and_survive_noisy_timings() {
    let noisy = || Noisy {
        inner: EmulatedTimer::new(&maxtor(4, 400.0, true)).unwrap(),
        next: Box::new(crate::drive::bench::lcg(77)),
    };
    let limit = 200_000;
    let expected = truth(&noisy().inner, limit);
    let once = ExtractOptions {
        limit: Some(limit),
        ..ExtractOptions::default()
    };
    let single = extract_with(&mut noisy(), &once);
    assert!(
        single.map_or(true, |e| e.boundaries != expected),
        "one probe each should be fooled by this noise"
    );
    let repeated = ExtractOptions { repeat: 5, ..once };
    let got = extract_with(&mut noisy(), &repeated).unwrap();
    assert_eq!(got.boundaries, expected);
    let too_many = ExtractOptions { repeat: 65, ..once };
    assert!(extract_with(&mut noisy(), &too_many).is_err());
}
