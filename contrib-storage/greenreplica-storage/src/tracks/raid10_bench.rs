//! Track-aligned vs conventional RAID10 through the volume engine: `raid10-tracks` over the
//! members' own tracks (each mirror's rows on its own track boundaries) against the same
//! personality over equal chunks of the members' mean track size (MD's RAID10 with a
//! track-sized chunk: chunks cross track boundaries). Two pairs, each member its own unit
//! of the model (the mirrors of a pair differ). A read is one whole chunk (a row of one
//! pair: about a track), served by the readiest mirror; readers go in rounds as in
//! `volume_bench`.

use anyhow::Result;
use serde::Serialize;

use super::map::TrackMap;
use super::volume_bench::{aligned_and_fixed, mean_track, rounds, volume};
use crate::layout::Raid10Tracks;
use crate::profile::DriveProfile;

const SECTOR: u64 = 512;

#[derive(Debug, Serialize)]
pub struct Raid10Striping {
    pub members: usize,
    pub member_region_mb: u64,
    pub conventional_chunk_sectors: u64,
    pub aligned_mean_chunk_sectors: f64,
    /// The share of the members' tracks the rows leave unused (the longer mirror's rest).
    pub unused_pct: f64,
    pub reads_per_case: usize,
    pub rounds: Vec<Raid10Readers>,
}

#[derive(Debug, Serialize)]
pub struct Raid10Readers {
    pub readers: usize,
    pub conventional_mb_s: f64,
    pub track_aligned_mb_s: f64,
    pub gain: f64,
}

/// Each chunk of the layout (volume offset, length): pair rows in volume order.
fn chunks(l: &Raid10Tracks) -> Vec<(u64, u64)> {
    let pairs = l.member_tracks().len() / 2;
    let lens: Vec<Vec<u64>> = (0..pairs).map(|p| l.row_lens(p)).collect();
    let rows = lens.iter().map(Vec::len).min().unwrap_or(0);
    let mut at = 0;
    let mut out = Vec::new();
    for k in 0..rows {
        for pair in &lens {
            out.push((at, pair[k]));
            at += pair[k];
        }
    }
    out
}

/// `maps`: each member's tracks (sectors) over the region; `units`: its model.
pub fn run(
    units: &[DriveProfile],
    maps: &[TrackMap],
    samples: usize,
    seed: u64,
) -> Result<Raid10Striping> {
    let chunk = mean_track(maps).max(8);
    let (bytes, aligned_maps, conventional_maps) = aligned_and_fixed(maps, chunk)?;
    let layout = |m: &[TrackMap]| Raid10Tracks::with_tracks(m.to_vec(), bytes);
    let al = layout(&aligned_maps)?;
    let aligned_chunks = chunks(&al);
    let conventional_chunks = chunks(&layout(&conventional_maps)?);
    let rows_bytes: u64 = aligned_chunks.iter().map(|c| c.1).sum();
    let used: u64 = (0..maps.len())
        .map(|m| al.member_rows(m)[al.member_rows(m).len() - 1])
        .sum();
    let mut out = Vec::new();
    for readers in [1, 2, 4, 8, 16] {
        // Fresh volumes (drives, caches, clock) per case.
        let c = rounds(
            &volume(units, Box::new(layout(&conventional_maps)?))?,
            &conventional_chunks,
            readers,
            samples,
            seed,
        )?;
        let a = rounds(
            &volume(units, Box::new(layout(&aligned_maps)?))?,
            &aligned_chunks,
            readers,
            samples,
            seed,
        )?;
        out.push(Raid10Readers {
            readers,
            conventional_mb_s: c,
            track_aligned_mb_s: a,
            gain: a / c.max(1e-9),
        });
    }
    Ok(Raid10Striping {
        members: maps.len(),
        member_region_mb: bytes >> 20,
        conventional_chunk_sectors: chunk,
        aligned_mean_chunk_sectors: rows_bytes as f64
            / SECTOR as f64
            / aligned_chunks.len().max(1) as f64,
        unused_pct: 100.0 * (1.0 - (2 * rows_bytes) as f64 / used.max(1) as f64),
        reads_per_case: samples,
        rounds: out,
    })
}
