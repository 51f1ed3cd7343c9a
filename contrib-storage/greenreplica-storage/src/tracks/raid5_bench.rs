//! Track-aligned vs conventional RAID5 through the volume engine (the paper's Figure 8 read
//! bandwidth, +57 %, and its concurrency scaling, Figure 10): `raid5-tracks` over the
//! members' own tracks, with and without the filled-in parity read, against the same
//! personality over equal chunks of the members' mean track size (MD's RAID5 with a
//! track-sized chunk: chunks cross track boundaries). Each member is its own unit of the
//! model. A read is a prefetch window of about one track per data member, starting at a
//! stripe: one whole stripe of the conventional layout, the consecutive stripes of the
//! track-aligned one whose chunks add up to at most 110 % of that track size. Readers go in rounds as in
//! `volume_bench`. The paper's own scheme for members whose tracks differ (`stripe =
//! per_member`: row k on track k of every member, units as long as the row's shortest
//! track) is measured beside the equal-offset stripes.

use anyhow::Result;
use serde::Serialize;

use super::map::TrackMap;
use super::volume_bench::{aligned_and_fixed, mean_track, rounds, volume};
use crate::layout::raid5_tracks::{Stripe, FILL_PARITY_READ};
use crate::layout::{Personality, Raid5Tracks};
use crate::profile::DriveProfile;

const SECTOR: u64 = 512;

#[derive(Debug, Serialize)]
pub struct Raid5Striping {
    pub members: usize,
    pub member_region_mb: u64,
    pub conventional_chunk_sectors: u64,
    /// Mean chunk of the track-aligned layout (stripes end at any member's boundary).
    pub aligned_mean_chunk_sectors: f64,
    pub window_kib_conventional: f64,
    pub window_kib_aligned: f64,
    /// Mean unit of the per-member rows, their read window, and the share of the members'
    /// tracks they leave unused (the padding after a row's shortest track).
    pub per_member_mean_chunk_sectors: f64,
    pub window_kib_per_member: f64,
    pub per_member_unused_pct: f64,
    pub reads_per_case: usize,
    pub rounds: Vec<Raid5Readers>,
    /// The same with every member the same unit of the model (equal track sizes: stripes
    /// are whole tracks).
    pub same_unit: Option<Box<Raid5Striping>>,
}

#[derive(Debug, Serialize)]
pub struct Raid5Readers {
    pub readers: usize,
    pub conventional_mb_s: f64,
    pub track_aligned_mb_s: f64,
    pub track_aligned_no_fill_mb_s: f64,
    pub gain: f64,
    /// Per-member rows, with the filled-in parity read.
    pub per_member_mb_s: f64,
    pub per_member_gain: f64,
}

/// Read windows: from each stripe start, the consecutive stripes whose chunks stay within
/// 110 % of `target` member bytes (windows do not overlap; at least one stripe each).
fn windows(l: &Raid5Tracks, target: u64) -> Vec<(u64, u64)> {
    // Where each stripe's unit starts if the units were laid end to end.
    let mut starts = vec![0u64];
    for &u in l.unit_lens() {
        starts.push(starts[starts.len() - 1] + u);
    }
    let k = (l.member_count() - 1) as u64;
    let mut out = Vec::new();
    let (mut s, mut data) = (0usize, 0u64);
    while s + 1 < starts.len() {
        let mut e = s + 1;
        while e + 1 < starts.len() && starts[e + 1] - starts[s] <= target + target / 10 {
            e += 1;
        }
        let len = k * (starts[e] - starts[s]);
        out.push((data, len));
        data += len;
        s = e;
    }
    out
}

fn aligned(maps: &[TrackMap], bytes: u64, fill: bool) -> Result<Raid5Tracks> {
    placed(maps, bytes, fill, Stripe::EqualOffset)
}

fn placed(maps: &[TrackMap], bytes: u64, fill: bool, stripe: Stripe) -> Result<Raid5Tracks> {
    let l = Raid5Tracks::with_stripe(maps.to_vec(), bytes, stripe)?;
    l.set_option(FILL_PARITY_READ, if fill { "true" } else { "false" })
        .map_err(anyhow::Error::msg)?;
    Ok(l)
}

/// `maps`: each member's tracks (sectors) over the region; `units`: its model.
pub fn run(
    units: &[DriveProfile],
    maps: &[TrackMap],
    samples: usize,
    seed: u64,
) -> Result<Raid5Striping> {
    let chunk = mean_track(maps).max(8);
    let (bytes, aligned_maps, conventional_maps) = aligned_and_fixed(maps, chunk)?;
    let conventional = || aligned(&conventional_maps, bytes, false);
    let target = chunk * SECTOR;
    let conv_windows = windows(&conventional()?, target);
    let al = aligned(&aligned_maps, bytes, true)?;
    let al_windows = windows(&al, target);
    let stripes = al.unit_lens().len();
    let rows = placed(&aligned_maps, bytes, true, Stripe::PerMember)?;
    let row_windows = windows(&rows, target);
    let row_units: u64 = rows.unit_lens().iter().sum();
    let tracks_used: u64 = (0..maps.len())
        .map(|m| rows.member_stripe_starts(m)[rows.unit_lens().len()])
        .sum();
    let mean_kib = |w: &[(u64, u64)]| {
        w.iter().map(|x| x.1).sum::<u64>() as f64 / w.len().max(1) as f64 / 1024.0
    };
    let mut out = Vec::new();
    for readers in [1, 2, 4, 8, 16] {
        // Fresh volumes (drives, caches, clock) per case.
        let c = rounds(
            &volume(units, Box::new(conventional()?))?,
            &conv_windows,
            readers,
            samples,
            seed,
        )?;
        let a = rounds(
            &volume(units, Box::new(aligned(&aligned_maps, bytes, true)?))?,
            &al_windows,
            readers,
            samples,
            seed,
        )?;
        let n = rounds(
            &volume(units, Box::new(aligned(&aligned_maps, bytes, false)?))?,
            &al_windows,
            readers,
            samples,
            seed,
        )?;
        let p = rounds(
            &volume(
                units,
                Box::new(placed(&aligned_maps, bytes, true, Stripe::PerMember)?),
            )?,
            &row_windows,
            readers,
            samples,
            seed,
        )?;
        out.push(Raid5Readers {
            readers,
            conventional_mb_s: c,
            track_aligned_mb_s: a,
            track_aligned_no_fill_mb_s: n,
            gain: a / c.max(1e-9),
            per_member_mb_s: p,
            per_member_gain: p / c.max(1e-9),
        });
    }
    Ok(Raid5Striping {
        members: maps.len(),
        member_region_mb: bytes >> 20,
        conventional_chunk_sectors: chunk,
        aligned_mean_chunk_sectors: al.member_data_bytes() as f64
            / SECTOR as f64
            / stripes.max(1) as f64,
        window_kib_conventional: mean_kib(&conv_windows),
        window_kib_aligned: mean_kib(&al_windows),
        per_member_mean_chunk_sectors: row_units as f64
            / SECTOR as f64
            / rows.unit_lens().len().max(1) as f64,
        window_kib_per_member: mean_kib(&row_windows),
        per_member_unused_pct: 100.0
            * (1.0 - (row_units * maps.len() as u64) as f64 / tracks_used.max(1) as f64),
        reads_per_case: samples,
        rounds: out,
        same_unit: None,
    })
}
