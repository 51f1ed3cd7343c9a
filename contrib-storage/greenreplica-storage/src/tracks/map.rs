//! A member's track boundaries put to use: which track a sector is on, splitting a request
//! at boundaries, widening a run to whole tracks, a compact form for storing the list
//! (runs of equal track sizes), and track-aligned striping over members whose tracks
//! differ in size (chunk boundaries on each member's own boundaries).

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackMap {
    /// First sector of every track, starting with 0.
    starts: Vec<u64>,
    /// Sectors on the device (the end of the last track).
    sectors: u64,
}

/// `count` consecutive tracks of `size` sectors: the stored form of a boundary list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackRunLength {
    pub size: u64,
    pub count: u64,
}

impl TrackMap {
    /// From an extraction's boundary list (ascending, each inside the device).
    pub fn new(boundaries: &[u64], sectors: u64) -> Result<Self> {
        let mut starts = Vec::with_capacity(boundaries.len() + 1);
        starts.push(0);
        for &b in boundaries {
            if b <= *starts.last().unwrap_or(&0) || b >= sectors {
                bail!("track boundary {b} is out of order or outside the {sectors} sectors");
            }
            starts.push(b);
        }
        Ok(Self { starts, sectors })
    }

    pub fn tracks(&self) -> usize {
        self.starts.len()
    }

    pub fn sectors(&self) -> u64 {
        self.sectors
    }

    /// First sector of track `i` (i == tracks(): the end of the device).
    pub fn start(&self, i: usize) -> u64 {
        self.starts.get(i).copied().unwrap_or(self.sectors)
    }

    /// The track holding `sector`: (index, first sector, end).
    pub fn track(&self, sector: u64) -> (usize, u64, u64) {
        let i = self.starts.partition_point(|&s| s <= sector).max(1) - 1;
        (i, self.start(i), self.start(i + 1))
    }

    /// `[first, first + count)` cut at every track boundary it crosses.
    pub fn split(&self, first: u64, count: u64) -> Vec<(u64, u64)> {
        let end = first.saturating_add(count).min(self.sectors);
        let mut pieces = Vec::new();
        let mut at = first;
        while at < end {
            let (_, _, track_end) = self.track(at);
            let stop = track_end.min(end);
            pieces.push((at, stop - at));
            at = stop;
        }
        pieces
    }

    /// A run made boundary-friendly: when it crosses a boundary by at most `slack` sectors
    /// at its end, it is widened to the end of that track (one more revolution's worth is
    /// cheaper than a second positioning for a few sectors); then cut at boundaries.
    pub fn fit_run(&self, first: u64, count: u64, slack: u64) -> Vec<(u64, u64)> {
        let end = first.saturating_add(count).min(self.sectors);
        if end <= first {
            return Vec::new();
        }
        let (_, last_start, last_end) = self.track(end - 1);
        let widened = if last_start > first && end - last_start <= slack {
            last_end
        } else {
            end
        };
        self.split(first, widened - first)
    }

    /// The same tracks in other units (`scale` units per sector: bytes per sector).
    pub fn scaled(&self, scale: u64) -> Result<Self> {
        let mul = |v: u64| {
            v.checked_mul(scale)
                .ok_or_else(|| anyhow::anyhow!("track map overflows when scaled by {scale}"))
        };
        Ok(Self {
            starts: self.starts.iter().map(|&s| mul(s)).collect::<Result<_>>()?,
            sectors: mul(self.sectors)?,
        })
    }

    /// The whole tracks that lie below `limit` (None: not even the first).
    pub fn truncated(&self, limit: u64) -> Option<Self> {
        let whole = (0..self.tracks())
            .take_while(|&i| self.start(i + 1) <= limit)
            .count();
        if whole == 0 {
            return None;
        }
        Some(Self {
            starts: self.starts[..whole].to_vec(),
            sectors: self.start(whole),
        })
    }

    /// The tracks of a drive model (a profile with its unit) up to `limit` sectors: what
    /// extraction would find on that emulated drive (its tests check exactly that).
    pub fn from_model(profile: &crate::profile::DriveProfile, limit: u64) -> Result<Self> {
        if profile.rpm == 0 {
            bail!("profile {} is flash: it has no tracks", profile.name);
        }
        let g = crate::drive::geometry::Geometry::from_profile(profile);
        let end = g.total_sectors().min(limit);
        let mut boundaries = Vec::new();
        let mut lba = 0;
        while lba < end {
            lba += g.track_run(lba, u64::MAX).lbas;
            if lba < end {
                boundaries.push(lba);
            }
        }
        Self::new(&boundaries, end)
    }

    /// The stored form: runs of equal track sizes.
    pub fn run_lengths(&self) -> Vec<TrackRunLength> {
        let mut runs: Vec<TrackRunLength> = Vec::new();
        for i in 0..self.tracks() {
            let size = self.start(i + 1) - self.start(i);
            match runs.last_mut() {
                Some(r) if r.size == size => r.count += 1,
                _ => runs.push(TrackRunLength { size, count: 1 }),
            }
        }
        runs
    }

    /// Back from the stored form (checked: no empty run, no overflow).
    pub fn from_run_lengths(runs: &[TrackRunLength]) -> Result<Self> {
        let mut starts = Vec::new();
        let mut at: u64 = 0;
        for r in runs {
            if r.size == 0 || r.count == 0 {
                bail!(
                    "a stored track run has size {} and count {}",
                    r.size,
                    r.count
                );
            }
            for _ in 0..r.count {
                starts.push(at);
                at = at
                    .checked_add(r.size)
                    .ok_or_else(|| anyhow::anyhow!("stored track runs overflow"))?;
            }
        }
        if starts.is_empty() {
            bail!("no stored tracks");
        }
        Ok(Self {
            starts,
            sectors: at,
        })
    }
}

/// Track-aligned striping (RAID0 shape): stripe `k` is chunk `k` of every member, and
/// chunk `k` of a member is its tracks `[k t, (k+1) t)` — so chunks differ in size between
/// members whose tracks do, and no chunk crosses a track boundary.
#[derive(Debug, Clone)]
pub struct TrackStripes {
    members: Vec<TrackMap>,
    tracks_per_chunk: usize,
    /// Volume sector where each stripe starts, and the end.
    stripe_starts: Vec<u64>,
}

impl TrackStripes {
    pub fn new(members: Vec<TrackMap>, tracks_per_chunk: usize) -> Result<Self> {
        if members.is_empty() || tracks_per_chunk == 0 {
            bail!("track-aligned striping needs members and at least one track per chunk");
        }
        let stripes = members.iter().map(TrackMap::tracks).min().unwrap_or(0) / tracks_per_chunk;
        let mut stripe_starts = vec![0];
        for k in 0..stripes {
            let size: u64 = members
                .iter()
                .map(|m| m.start((k + 1) * tracks_per_chunk) - m.start(k * tracks_per_chunk))
                .sum();
            stripe_starts.push(stripe_starts[k] + size);
        }
        Ok(Self {
            members,
            tracks_per_chunk,
            stripe_starts,
        })
    }

    /// Volume sectors.
    pub fn sectors(&self) -> u64 {
        self.stripe_starts.last().copied().unwrap_or(0)
    }

    fn chunk(&self, member: usize, stripe: usize) -> (u64, u64) {
        let m = &self.members[member];
        let t = self.tracks_per_chunk;
        (m.start(stripe * t), m.start((stripe + 1) * t))
    }

    /// Where volume sector `v` lies: (member, member sector).
    pub fn locate(&self, v: u64) -> Option<(usize, u64)> {
        if v >= self.sectors() {
            return None;
        }
        let k = self.stripe_starts.partition_point(|&s| s <= v) - 1;
        let mut rel = v - self.stripe_starts[k];
        for member in 0..self.members.len() {
            let (start, end) = self.chunk(member, k);
            if rel < end - start {
                return Some((member, start + rel));
            }
            rel -= end - start;
        }
        None
    }

    /// The volume sector at (member, member sector); None past the striped area.
    pub fn volume_sector(&self, member: usize, sector: u64) -> Option<u64> {
        let m = self.members.get(member)?;
        let (track, _, _) = m.track(sector);
        let k = track / self.tracks_per_chunk;
        if k + 1 >= self.stripe_starts.len() {
            return None;
        }
        let before: u64 = (0..member)
            .map(|i| {
                let (s, e) = self.chunk(i, k);
                e - s
            })
            .sum();
        Some(self.stripe_starts[k] + before + sector - self.chunk(member, k).0)
    }

    /// `[v, v + count)` as member pieces (member, member sector, count), each within one
    /// chunk and so within whole tracks of its member.
    pub fn map(&self, v: u64, count: u64) -> Vec<(usize, u64, u64)> {
        let end = v.saturating_add(count).min(self.sectors());
        let mut pieces = Vec::new();
        let mut at = v;
        while at < end {
            let Some((member, sector)) = self.locate(at) else {
                break;
            };
            let k = self.stripe_starts.partition_point(|&s| s <= at) - 1;
            let chunk_end = self.chunk(member, k).1;
            let n = (chunk_end - sector).min(end - at);
            pieces.push((member, sector, n));
            at += n;
        }
        pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::DriveProfile;
    use crate::tracks::emulated::EmulatedTimer;
    use crate::tracks::{extract, AccessTimer};

    /// The extracted map of the first `limit` sectors of an Atlas unit.
    fn unit_map(unit: u64, limit: u64) -> TrackMap {
        unit_map_with(unit, limit, 2000.0)
    }

    fn unit_map_with(unit: u64, limit: u64, defects_per_gb: f64) -> TrackMap {
        let mut p = DriveProfile::load("maxtor-atlas-10k-v").unwrap();
        p.unit = Some(unit);
        p.geometry.as_mut().unwrap().defects_per_gb = defects_per_gb;
        let mut timer = EmulatedTimer::new(&p).unwrap();
        let e = extract(&mut timer, Some(limit), None).unwrap();
        let end = e.boundaries.last().copied().unwrap();
        let mut b = e.boundaries;
        b.pop();
        assert!(timer.sectors() >= end);
        TrackMap::new(&b, end).unwrap()
    }

    #[test]
    fn hostile_boundary_lists_and_stored_runs_are_refused() {
        assert!(TrackMap::new(&[10, 10], 100).is_err());
        assert!(TrackMap::new(&[10, 5], 100).is_err());
        assert!(TrackMap::new(&[100], 100).is_err());
        assert!(TrackMap::new(&[0], 100).is_err());
        let zero = TrackRunLength { size: 0, count: 3 };
        assert!(TrackMap::from_run_lengths(&[zero]).is_err());
        assert!(TrackMap::from_run_lengths(&[]).is_err());
        let huge = TrackRunLength {
            size: u64::MAX / 2,
            count: 3,
        };
        assert!(TrackMap::from_run_lengths(&[huge]).is_err());
        assert!(TrackStripes::new(Vec::new(), 1).is_err());
    }

    #[test]
    fn stored_runs_round_trip_and_stay_small() {
        // The profile's own defect density: runs are serpentine sweeps, cut by defects.
        let m = unit_map_with(2, 4_000_000, 20.0);
        let runs = m.run_lengths();
        assert_eq!(TrackMap::from_run_lengths(&runs).unwrap(), m);
        assert!(
            runs.len() * 4 < m.tracks(),
            "{} runs for {} tracks",
            runs.len(),
            m.tracks()
        );
    }

    #[test]
    fn split_and_fit_never_cross_a_boundary_and_cover_the_run() {
        let m = unit_map(1, 400_000);
        let mut next = crate::drive::bench::lcg(4);
        for _ in 0..5_000 {
            let first = next() % m.sectors();
            let count = 1 + next() % 4000;
            for (pieces, slack) in [
                (m.split(first, count), 0),
                (m.fit_run(first, count, 64), 64),
            ] {
                let mut at = first;
                for &(s, n) in &pieces {
                    assert_eq!(s, at);
                    let (_, start, end) = m.track(s);
                    assert!(s >= start && s + n <= end, "{s}+{n} crosses {end}");
                    at += n;
                }
                let end = (first + count).min(m.sectors());
                assert!(
                    at >= end && at <= m.track(end - 1).2,
                    "covers {first}+{count}"
                );
                if slack == 0 {
                    assert_eq!(at, end);
                } else if at > end {
                    // Widened only for a short spill into the last track.
                    assert!(end - m.track(end - 1).1 <= slack);
                }
            }
        }
    }

    #[test]
    fn track_aligned_stripes_map_every_sector_once_onto_members_of_different_track_sizes() {
        let members: Vec<TrackMap> = [0, 2, 3].iter().map(|&u| unit_map(u, 300_000)).collect();
        let sizes: Vec<u64> = members.iter().map(|m| m.start(1)).collect();
        assert!(sizes.windows(2).any(|w| w[0] != w[1]), "{sizes:?}");
        for t in [1, 2, 3] {
            let s = TrackStripes::new(members.clone(), t).unwrap();
            let mut next = crate::drive::bench::lcg(t as u64);
            for _ in 0..20_000 {
                let v = next() % s.sectors();
                let (member, sector) = s.locate(v).unwrap();
                assert_eq!(s.volume_sector(member, sector), Some(v));
            }
            assert_eq!(s.locate(s.sectors()), None);
            // Pieces tile the request, each inside one member track run (one chunk).
            for _ in 0..2_000 {
                let v = next() % s.sectors();
                let count = 1 + next() % 10_000;
                let pieces = s.map(v, count);
                let total: u64 = pieces.iter().map(|p| p.2).sum();
                assert_eq!(total, count.min(s.sectors() - v));
                for &(member, sector, n) in &pieces {
                    let m = &members[member];
                    let (track, _, _) = m.track(sector);
                    let chunk_end = m.start((track / t + 1) * t);
                    assert!(sector + n <= chunk_end);
                }
            }
        }
    }
}
