//! Track-aligned vs fixed-chunk striping through the volume engine (the `raid0-tracks`
//! personality, the event core in virtual time, the members' drive models): what the
//! striping figure of `bench` measures on bare drive models, here end to end. Each member
//! is its own unit of the model (track sizes differ). The conventional layout is the same
//! personality over equal chunks of the members' mean track size, so only the chunk
//! boundaries differ.
//!
//! Readers go in rounds: each of `n` readers issues one full-stripe read (a random stripe),
//! all at the same time, and the next round starts when the round's last read finished
//! (the event core is open loop; rounds are the closest closed-loop form it takes).

use std::sync::Arc;

use anyhow::{anyhow, Result};
use serde::Serialize;

use crate::clock::VirtualClock;
use crate::drive::bench::{fresh_drive, lcg};
use crate::layout::{Personality, Raid0Tracks};
use crate::profile::DriveProfile;
use crate::service_model::IoKind;
use crate::volume::{Health, MemberSlot, Request, Runner, Volume};

use super::map::TrackMap;

const SECTOR: u64 = 512;
const BLOCK_SECTORS: u64 = 8;

#[derive(Debug, Serialize)]
pub struct VolumeStriping {
    pub members: usize,
    pub member_region_mb: u64,
    pub conventional_chunk_sectors: u64,
    pub stripes_per_case: usize,
    pub rounds: Vec<VolumeReaders>,
}

#[derive(Debug, Serialize)]
pub struct VolumeReaders {
    pub readers: usize,
    pub conventional_mb_s: f64,
    pub track_aligned_mb_s: f64,
    pub gain: f64,
}

pub(super) fn volume(units: &[DriveProfile], layout: Box<dyn Personality>) -> Result<Volume> {
    let slots = units
        .iter()
        .map(|p| {
            Ok(MemberSlot::new(
                None,
                fresh_drive(&Arc::new(p.clone()))?,
                Health::InSync,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Volume::new(
        "tracks-bench",
        layout,
        slots,
        Arc::new(VirtualClock::new()),
        None,
        None,
    ))
}

/// The members' mean track (sectors).
pub(super) fn mean_track(maps: &[TrackMap]) -> u64 {
    let tracks: usize = maps.iter().map(TrackMap::tracks).sum();
    let sectors: u64 = maps.iter().map(TrackMap::sectors).sum();
    sectors / tracks.max(1) as u64
}

/// The region every member has (bytes), the members' tracks in bytes, and the conventional
/// members: equal chunks of `chunk` sectors over the region, crossing the real tracks.
pub(super) fn aligned_and_fixed(
    maps: &[TrackMap],
    chunk: u64,
) -> Result<(u64, Vec<TrackMap>, Vec<TrackMap>)> {
    let region = maps.iter().map(TrackMap::sectors).min().unwrap_or(0);
    let aligned = maps
        .iter()
        .map(|m| m.scaled(SECTOR))
        .collect::<Result<Vec<_>>>()?;
    let fixed: Vec<u64> = (1..region / chunk).map(|k| k * chunk * SECTOR).collect();
    let fixed_map = TrackMap::new(&fixed, (region / chunk) * chunk * SECTOR)?;
    Ok((region * SECTOR, aligned, vec![fixed_map; maps.len()]))
}

/// Full-stripe reads through the volume, `readers` at a time; MB/s.
pub(super) fn rounds(
    v: &Volume,
    stripes: &[(u64, u64)],
    readers: usize,
    samples: usize,
    seed: u64,
) -> Result<f64> {
    let mut next = lcg(seed);
    let mut runner = Runner::new(v);
    let (mut bytes, mut t, mut issued) = (0u64, 0.0_f64, 0);
    let start = t;
    while issued < samples {
        let round: Vec<(f64, Request)> = (0..readers.min(samples - issued))
            .map(|_| {
                let (offset, len) = stripes[(next() % stripes.len() as u64) as usize];
                bytes += len;
                (
                    t,
                    Request {
                        kind: IoKind::Read,
                        offset,
                        len,
                        data: None,
                    },
                )
            })
            .collect();
        issued += round.len();
        t = runner
            .run::<crate::volume::VolumeError>(round.into_iter().map(Ok), |_| {})
            .map_err(|e| anyhow!("{e}"))?;
    }
    Ok(bytes as f64 / (t - start).max(1e-9) / 1e6)
}

/// Stripe k of a layout: the bytes of chunk k on every member (volume offset, length).
fn stripes_of(l: &Raid0Tracks) -> Vec<(u64, u64)> {
    let t = l.member_tracks();
    let n = t.iter().map(TrackMap::tracks).min().unwrap_or(0);
    let mut at = 0;
    (0..n)
        .map(|k| {
            let len: u64 = t.iter().map(|m| m.start(k + 1) - m.start(k)).sum();
            let s = (at, len);
            at += len;
            s
        })
        .collect()
}

/// `maps`: each member's tracks (sectors) over the striped region; `units`: its model.
pub fn run(
    units: &[DriveProfile],
    maps: &[TrackMap],
    samples: usize,
    seed: u64,
) -> Result<VolumeStriping> {
    let chunk = (mean_track(maps) / BLOCK_SECTORS * BLOCK_SECTORS).max(BLOCK_SECTORS);
    let (region_bytes, aligned_maps, conventional_maps) = aligned_and_fixed(maps, chunk)?;
    let layout = |m: &[TrackMap]| Raid0Tracks::with_tracks(m.to_vec(), region_bytes);
    let aligned_stripes = stripes_of(&layout(&aligned_maps)?);
    let conventional_stripes = stripes_of(&layout(&conventional_maps)?);
    let mut out = Vec::new();
    for readers in [1, 2, 4, 8, 16] {
        // Fresh volumes (drives, caches, clock) per case.
        let c = rounds(
            &volume(units, Box::new(layout(&conventional_maps)?))?,
            &conventional_stripes,
            readers,
            samples,
            seed,
        )?;
        let a = rounds(
            &volume(units, Box::new(layout(&aligned_maps)?))?,
            &aligned_stripes,
            readers,
            samples,
            seed,
        )?;
        out.push(VolumeReaders {
            readers,
            conventional_mb_s: c,
            track_aligned_mb_s: a,
            gain: a / c.max(1e-9),
        });
    }
    Ok(VolumeStriping {
        members: maps.len(),
        member_region_mb: region_bytes >> 20,
        conventional_chunk_sectors: chunk,
        stripes_per_case: samples,
        rounds: out,
    })
}
