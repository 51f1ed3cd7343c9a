//! The track-alignment benchmark (`greenreplica-storage tracks-bench`, run by
//! bench/tracks): one emulated unit of a drive model in virtual time, its boundaries taken
//! from the timing extraction, against the paper's figures: 64-sector accesses that cross
//! a boundary or not (Figure 3), two files read interleaved like `diff` with track-aligned
//! or unaligned requests, drive prefetch on or off (Figure 6), one sequential stream
//! (Figure 5), and the extraction time per unit.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use serde::Serialize;

use crate::drive::bench::{fresh_drive, lcg};
use crate::drive::{Class, Drive, IoKind, Op};
use crate::profile::DriveProfile;

use super::emulated::EmulatedTimer;
use super::map::{TrackMap, TrackStripes};
use super::{extract, WINDOW};

/// Members of the striping comparison, and the stretch of each that is striped.
const STRIPE_MEMBERS: u64 = 4;
const STRIPE_REGION_SECTORS: u64 = 4 << 20;

const SECTOR: u64 = 512;
/// File-system block: aligned extents hold only whole blocks of a track.
const BLOCK_SECTORS: u64 = 8;
/// Each `diff` input file, and where the second starts.
const FILE_BYTES: u64 = 64 << 20;
const SECOND_FILE_AT: u64 = 256 << 20;
/// The sequential stream's region.
const STREAM_BYTES: u64 = 128 << 20;
/// Ordinary (unaligned) request size of the `diff` and stream cases (Linux readahead).
const NORMAL_REQUEST: u64 = 128 << 10;

#[derive(Debug, Serialize)]
pub struct Crossing {
    pub samples: usize,
    pub crossing_ms: f64,
    pub within_ms: f64,
    /// (offset from the boundary in sectors, ms) of every access, for the figure.
    pub points: Vec<(i64, f64)>,
}

#[derive(Debug, Serialize)]
pub struct Interleaved {
    pub case: String,
    pub prefetch: bool,
    pub seconds: f64,
    pub mb_s: f64,
}

#[derive(Debug, Serialize)]
pub struct Stream {
    pub normal_mb_s: f64,
    pub aligned_mb_s: f64,
    /// Sectors an aligned stream skips (blocks that would cross a boundary).
    pub aligned_skipped_share: f64,
    pub change_pct: f64,
}

/// Full-stripe reads, one at a time, over members that are different units of the model.
#[derive(Debug, Serialize)]
pub struct Striping {
    pub members: usize,
    pub stripes_read: usize,
    /// Chunk of the conventional layout (the mean track size, whole 4 KiB blocks).
    pub conventional_chunk_sectors: u64,
    pub conventional_mb_s: f64,
    /// One track of each member per chunk.
    pub track_aligned_mb_s: f64,
    pub gain: f64,
    /// Closed loop: each reader issues its next full-stripe read when the last completes.
    pub readers: Vec<ReaderScaling>,
}

#[derive(Debug, Serialize)]
pub struct ReaderScaling {
    pub readers: usize,
    pub conventional_mb_s: f64,
    pub track_aligned_mb_s: f64,
}

#[derive(Debug, Serialize)]
pub struct ExtractionTime {
    pub unit: u64,
    pub tracks: usize,
    pub defects: usize,
    pub matches_model: bool,
    pub device_minutes: f64,
    pub wall_seconds: f64,
}

#[derive(Debug, Serialize)]
pub struct TracksBench {
    pub profile: String,
    pub unit: u64,
    pub crossing: Crossing,
    pub interleaved: Vec<Interleaved>,
    pub aligned_vs_normal_diff: f64,
    pub stream: Stream,
    pub striping: Striping,
    /// The same comparison through the volume engine (`raid0-tracks`).
    pub volume_striping: super::volume_bench::VolumeStriping,
    /// Track-aligned vs conventional RAID5 through the engine (`raid5-tracks`).
    pub raid5_striping: super::raid5_bench::Raid5Striping,
    /// Track-aligned vs conventional RAID10 through the engine (`raid10-tracks`).
    pub raid10_striping: super::raid10_bench::Raid10Striping,
    pub extraction: Vec<ExtractionTime>,
}

/// Units `0..n` of the profile and their tracks (sectors) over the striped region.
fn unit_maps(profile: &DriveProfile, n: u64) -> Result<(Vec<DriveProfile>, Vec<TrackMap>)> {
    let units: Vec<DriveProfile> = (0..n)
        .map(|u| {
            let mut p = profile.clone();
            p.unit = Some(u);
            p
        })
        .collect();
    let maps = units
        .iter()
        .map(|p| {
            TrackMap::from_model(p, STRIPE_REGION_SECTORS)?
                .truncated(STRIPE_REGION_SECTORS)
                .ok_or_else(|| anyhow::anyhow!("no whole track"))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((units, maps))
}

fn drive(profile: &DriveProfile, prefetch: bool) -> Result<Drive> {
    let mut p = profile.clone();
    if !prefetch {
        if let Some(c) = p.cache.as_mut() {
            c.read_ahead_bytes = 0;
        }
    }
    fresh_drive(&Arc::new(p))
}

fn crossing(profile: &DriveProfile, bounds: &[u64], samples: usize, seed: u64) -> Result<Crossing> {
    let mut d = drive(profile, true)?;
    let mut next = lcg(seed);
    let mut t = 0.0;
    let (mut cross, mut within, mut points) = (Vec::new(), Vec::new(), Vec::new());
    while cross.len() < samples || within.len() < samples {
        let i = 1 + (next() as usize) % (bounds.len() - 2);
        let (b, size) = (bounds[i], bounds[i + 1] - bounds[i]);
        let offset = (next() % (size - WINDOW + WINDOW)) as i64 - WINDOW as i64 + 1;
        let start = (b as i64 + offset) as u64;
        let done = d.submit(t, IoKind::Read, start * SECTOR, WINDOW * SECTOR);
        let ms = (done - t) * 1e3;
        t = done;
        points.push((offset, ms));
        if offset < 0 {
            cross.push(ms);
        } else {
            within.push(ms);
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    points.truncate(4000);
    Ok(Crossing {
        samples: cross.len() + within.len(),
        crossing_ms: mean(&cross),
        within_ms: mean(&within),
        points,
    })
}

/// Requests (sector, count) covering `[from, to)`: whole tracks, or fixed-size pieces.
fn aligned_requests(bounds: &[u64], from: u64, to: u64) -> Vec<(u64, u64)> {
    let first = bounds.partition_point(|&b| b < from);
    bounds[first..]
        .windows(2)
        .take_while(|w| w[1] <= to)
        .map(|w| {
            let start = w[0].div_ceil(BLOCK_SECTORS) * BLOCK_SECTORS;
            let end = w[1] / BLOCK_SECTORS * BLOCK_SECTORS;
            (start, end - start)
        })
        .collect()
}

fn fixed_requests(from: u64, to: u64, sectors: u64) -> Vec<(u64, u64)> {
    (from..to)
        .step_by(sectors as usize)
        .map(|s| (s, sectors.min(to - s)))
        .collect()
}

/// Read two request lists alternately, one request at a time; (seconds, bytes).
fn interleave(d: &mut Drive, a: &[(u64, u64)], b: &[(u64, u64)]) -> (f64, u64) {
    let (mut t, mut bytes) = (0.0, 0);
    for i in 0..a.len().max(b.len()) {
        for list in [a, b] {
            if let Some(&(s, n)) = list.get(i) {
                t = d.submit(t, IoKind::Read, s * SECTOR, n * SECTOR);
                bytes += n * SECTOR;
            }
        }
    }
    (t, bytes)
}

fn sequential(d: &mut Drive, requests: &[(u64, u64)]) -> (f64, u64) {
    interleave(d, requests, &[])
}

/// Read random full stripes one after the other; each is one request per member, all
/// issued at once; (seconds, bytes).
fn stripe_reads(drives: &mut [Drive], stripes: &[Vec<(usize, u64, u64)>]) -> (f64, u64) {
    let (mut t, mut bytes) = (0.0_f64, 0);
    for pieces in stripes {
        let mut done = t;
        for &(member, sector, n) in pieces {
            done = done.max(drives[member].submit(t, IoKind::Read, sector * SECTOR, n * SECTOR));
            bytes += n * SECTOR;
        }
        t = done;
    }
    (t, bytes)
}

/// Closed-loop readers' bookkeeping: which reader each member command belongs to.
struct Readers<'a> {
    stripes: &'a [Vec<(usize, u64, u64)>],
    pending: Vec<usize>,
    owner: std::collections::HashMap<(usize, u64), usize>,
    issued: usize,
    bytes: u64,
}

impl Readers<'_> {
    /// Reader `reader` issues the next stripe read (every member's piece at once).
    fn issue(&mut self, reader: usize, at: f64, drives: &mut [Drive]) {
        let Some(stripe) = self.stripes.get(self.issued) else {
            return;
        };
        for &(member, sector, n) in stripe {
            let id = drives[member].enqueue(
                at,
                Op::Read,
                sector * SECTOR,
                n * SECTOR,
                Class::Foreground,
                None,
            );
            self.owner.insert((member, id), reader);
            self.pending[reader] += 1;
            self.bytes += n * SECTOR;
        }
        self.issued += 1;
    }
}

/// `readers` closed-loop readers over `stripes` (taken in turn) until all are read; MB/s.
fn concurrent_stripe_reads(
    drives: &mut [Drive],
    stripes: &[Vec<(usize, u64, u64)>],
    readers: usize,
) -> f64 {
    let mut state = Readers {
        stripes,
        pending: vec![0; readers],
        owner: std::collections::HashMap::new(),
        issued: 0,
        bytes: 0,
    };
    for r in 0..readers {
        state.issue(r, 0.0, drives);
    }
    let mut now = 0.0_f64;
    loop {
        let next = drives
            .iter_mut()
            .filter_map(Drive::next_completion)
            .min_by(f64::total_cmp);
        let Some(t) = next else { break };
        now = now.max(t);
        for member in 0..drives.len() {
            for c in drives[member].poll(t) {
                let Some(r) = state.owner.remove(&(member, c.id)) else {
                    continue;
                };
                state.pending[r] -= 1;
                if state.pending[r] == 0 {
                    state.issue(r, t, drives);
                }
            }
        }
    }
    state.bytes as f64 / now.max(1e-9) / 1e6
}

fn striping(profile: &DriveProfile, samples: usize, seed: u64) -> Result<Striping> {
    let mut maps = Vec::new();
    let mut units = Vec::new();
    for u in 0..STRIPE_MEMBERS {
        let mut p = profile.clone();
        p.unit = Some(u);
        let mut timer = EmulatedTimer::new(&p)?;
        let mut b = extract(&mut timer, Some(STRIPE_REGION_SECTORS), None)?.boundaries;
        let Some(end) = b.pop() else {
            bail!("unit {u}: no tracks found");
        };
        maps.push(TrackMap::new(&b, end)?);
        units.push(p);
    }
    // Stripe k: track k of every member (track-aligned) or chunk k of a fixed size, the
    // members' mean track size (conventional): the same stretch of the members.
    let aligned = TrackStripes::new(maps.clone(), 1)?;
    let tracks: usize = maps.iter().map(TrackMap::tracks).sum();
    let sectors: u64 = maps.iter().map(TrackMap::sectors).sum();
    let chunk = sectors / tracks as u64 / BLOCK_SECTORS * BLOCK_SECTORS;
    let stripes = maps
        .iter()
        .map(TrackMap::tracks)
        .min()
        .unwrap_or(0)
        .saturating_sub(1);
    if stripes < 2 {
        bail!("too few tracks to stripe");
    }
    let mut next = lcg(seed ^ 0x5a);
    let (mut aligned_plan, mut conventional_plan) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        let k = (next() % stripes as u64) as usize;
        let first = aligned.volume_sector(0, maps[0].start(k)).unwrap_or(0);
        let size = maps.iter().map(|m| m.start(k + 1) - m.start(k)).sum();
        aligned_plan.push(aligned.map(first, size));
        conventional_plan.push(
            (0..maps.len())
                .map(|m| (m, k as u64 * chunk, chunk))
                .collect::<Vec<_>>(),
        );
    }
    let fresh = || -> Result<Vec<Drive>> { units.iter().map(|p| drive(p, true)).collect() };
    let (t_c, b_c) = stripe_reads(&mut fresh()?, &conventional_plan);
    let (t_a, b_a) = stripe_reads(&mut fresh()?, &aligned_plan);
    let (conventional_mb_s, track_aligned_mb_s) = (b_c as f64 / t_c / 1e6, b_a as f64 / t_a / 1e6);
    let mut readers = Vec::new();
    for n in [1, 2, 4, 8, 16] {
        readers.push(ReaderScaling {
            readers: n,
            conventional_mb_s: concurrent_stripe_reads(&mut fresh()?, &conventional_plan, n),
            track_aligned_mb_s: concurrent_stripe_reads(&mut fresh()?, &aligned_plan, n),
        });
    }
    Ok(Striping {
        members: STRIPE_MEMBERS as usize,
        stripes_read: samples,
        conventional_chunk_sectors: chunk,
        conventional_mb_s,
        track_aligned_mb_s,
        gain: track_aligned_mb_s / conventional_mb_s,
        readers,
    })
}

pub fn run(
    profile_name: &str,
    unit: u64,
    units: u64,
    samples: usize,
    seed: u64,
) -> Result<TracksBench> {
    let mut profile = DriveProfile::load(profile_name)?;
    if profile.rpm == 0 {
        bail!("profile {} is flash: it has no tracks", profile.name);
    }
    profile.unit = Some(unit);
    // The boundaries the agent would use: the unit's, extracted by timing.
    let mut timer = EmulatedTimer::new(&profile)?;
    let found = extract(&mut timer, None, None)?;
    let mut bounds = vec![0];
    bounds.extend(found.boundaries);
    // The paper timed boundaries of the first zone (random seeks within it).
    let zone0_end = timer
        .geometry()
        .zones()
        .get(1)
        .map_or(u64::MAX, |z| z.first_lba);
    let first_zone: Vec<u64> = bounds
        .iter()
        .copied()
        .take_while(|&b| b <= zone0_end)
        .collect();

    let crossing = crossing(&profile, &first_zone, samples, seed)?;

    let mean_track =
        bounds.windows(2).map(|w| w[1] - w[0]).sum::<u64>() / (bounds.len() as u64 - 1);
    let files = [
        (0, FILE_BYTES / SECTOR),
        (
            SECOND_FILE_AT / SECTOR,
            (SECOND_FILE_AT + FILE_BYTES) / SECTOR,
        ),
    ];
    let mut interleaved = Vec::new();
    for prefetch in [true, false] {
        type Plan = fn(&[u64], u64, u64, u64) -> Vec<(u64, u64)>;
        let cases: [(&str, Plan); 3] = [
            ("track-aligned", |b, from, to, _| {
                aligned_requests(b, from, to)
            }),
            ("track-sized, unaligned", |_, from, to, n| {
                fixed_requests(from + n / 2, to, n)
            }),
            ("128 KiB, unaligned", |_, from, to, _| {
                fixed_requests(from + 37, to, NORMAL_REQUEST / SECTOR)
            }),
        ];
        for (case, plan) in cases {
            let mut d = drive(&profile, prefetch)?;
            let a = plan(&bounds, files[0].0, files[0].1, mean_track);
            let b = plan(&bounds, files[1].0, files[1].1, mean_track);
            let (seconds, bytes) = interleave(&mut d, &a, &b);
            interleaved.push(Interleaved {
                case: case.to_string(),
                prefetch,
                seconds,
                mb_s: bytes as f64 / seconds / 1e6,
            });
        }
    }
    let rate = |case: &str, prefetch: bool| {
        interleaved
            .iter()
            .find(|r| r.case == case && r.prefetch == prefetch)
            .map_or(0.0, |r| r.mb_s)
    };
    let aligned_vs_normal_diff = rate("track-aligned", false) / rate("128 KiB, unaligned", true);

    let stream_end = STREAM_BYTES / SECTOR;
    let aligned = aligned_requests(&bounds, 0, stream_end);
    let covered = aligned.last().map_or(0, |&(s, n)| s + n);
    let (t_norm, b_norm) = sequential(
        &mut drive(&profile, true)?,
        &fixed_requests(0, covered, NORMAL_REQUEST / SECTOR),
    );
    let (t_al, b_al) = sequential(&mut drive(&profile, true)?, &aligned);
    let (normal_mb_s, aligned_mb_s) = (b_norm as f64 / t_norm / 1e6, b_al as f64 / t_al / 1e6);
    let stream = Stream {
        normal_mb_s,
        aligned_mb_s,
        aligned_skipped_share: 1.0 - b_al as f64 / b_norm as f64,
        change_pct: (aligned_mb_s / normal_mb_s - 1.0) * 100.0,
    };

    let striping = striping(&profile, samples, seed)?;
    let volume_striping = {
        let (units, maps) = unit_maps(&profile, STRIPE_MEMBERS)?;
        super::volume_bench::run(&units, &maps, samples, seed)?
    };
    // The paper's RAID5 had five disks.
    let raid5_striping = {
        let (units, maps) = unit_maps(&profile, 5)?;
        let mut r = super::raid5_bench::run(&units, &maps, samples, seed)?;
        // Five drives of one variant: the case where equal member offsets lose nothing.
        let same: Vec<DriveProfile> = vec![units[1].clone(); units.len()];
        let same_maps = vec![maps[1].clone(); maps.len()];
        r.same_unit = Some(Box::new(super::raid5_bench::run(
            &same, &same_maps, samples, seed,
        )?));
        r
    };
    // Two pairs, each member its own unit (the mirrors' tracks differ).
    let raid10_striping = {
        let (units, maps) = unit_maps(&profile, 4)?;
        super::raid10_bench::run(&units, &maps, samples, seed)?
    };

    let mut extraction = Vec::new();
    for u in 0..units {
        let mut p = profile.clone();
        p.unit = Some(u);
        let mut timer = EmulatedTimer::new(&p)?;
        let started = Instant::now();
        let e = extract(&mut timer, None, None)?;
        let wall_seconds = started.elapsed().as_secs_f64();
        extraction.push(ExtractionTime {
            unit: u,
            tracks: e.boundaries.len() + 1,
            defects: timer.geometry().defect_count(),
            matches_model: e.boundaries == timer.geometry().track_boundaries(),
            device_minutes: e.device_seconds / 60.0,
            wall_seconds,
        });
    }
    Ok(TracksBench {
        profile: profile.name,
        unit,
        crossing,
        interleaved,
        aligned_vs_normal_diff,
        stream,
        striping,
        volume_striping,
        raid5_striping,
        raid10_striping,
        extraction,
    })
}
