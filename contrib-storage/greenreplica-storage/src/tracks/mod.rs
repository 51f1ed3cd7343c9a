//! Track boundaries found by timing, per member (the track-alignment paper's extraction,
//! done with reads instead of SCSI address translation).
//!
//! Pure logic over one seam, [`AccessTimer`]: "read these sectors right after the last
//! access and say how long it took". The same search runs on an emulated drive in virtual
//! time ([`emulated::EmulatedTimer`]) and on a real device in real time
//! ([`device::DeviceTimer`]).
//!
//! A probe reads sector `x` (which leaves the head just past it), then `[x, x + n)`: the
//! second read waits the same fraction of a turn wherever `x` is, so its time only grows
//! when the run crosses a track boundary (head or cylinder switch, then the next track's
//! skew). Two-sector probes test one place exactly; 64-sector probes at shifting offsets
//! find a boundary within a window. The search is the paper's: from the last boundary `T`
//! with track size `S`, test `T + S`; when that is no boundary the size changed, so try the
//! sizes seen recently, then scan 64-sector windows from `T` and pin the boundary down by
//! shrinking the window.
//!
//! Assumptions, checked where they can be: tracks hold at least [`WINDOW`] sectors, and no
//! track is shorter than half another (true of zoned drives; a track found shorter than
//! the window is an error); the drive's read cache is off or cannot serve the probe (the
//! emulated timer has none; on a real drive turn read-ahead off, e.g. `sdparm --clear=RCD`
//! is not enough: `sdparm --set=DRA`).

pub mod bench;
pub mod device;
pub mod emulated;
pub mod map;
pub mod raid10_bench;
pub mod raid5_bench;
pub mod report;
pub mod stored;
#[cfg(test)]
mod tests;
pub mod volume_bench;

use std::collections::VecDeque;

use anyhow::{bail, Result};
use serde::Serialize;

/// Sectors in one window probe (the paper's 64).
pub const WINDOW: u64 = 64;

/// Track sizes remembered as candidates when the size changes.
const RECENT_SIZES: usize = 16;

/// The seam: timed reads, each issued as soon as the previous one completed.
pub trait AccessTimer {
    /// Sectors on the device.
    fn sectors(&self) -> u64;
    /// Read `count` sectors from `first`; the seconds the read took.
    fn read(&mut self, first: u64, count: u64) -> Result<f64>;
}

#[derive(Debug, Clone, Serialize)]
pub struct Extraction {
    /// The first LBA of every track but the first, ascending.
    pub boundaries: Vec<u64>,
    /// Sectors searched (from LBA 0).
    pub sectors: u64,
    /// Timed probes (each two reads; repetitions count).
    pub probes: u64,
    /// Device time the reads took (virtual seconds on an emulated drive).
    pub device_seconds: f64,
    /// Time of a two-sector probe that crosses no boundary.
    pub baseline_s: f64,
    /// Extra time that marks a crossing.
    pub margin_s: f64,
}

/// How to search.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExtractOptions {
    /// Search only the first this many sectors (all when None).
    pub limit: Option<u64>,
    /// Extra probe time that marks a crossing (default 0.1 ms).
    pub margin_s: Option<f64>,
    /// Time each probe this many times and keep the fastest (noise only adds time on a
    /// real device); 0 and 1 both mean once.
    pub repeat: usize,
}

struct Search<'a, T: AccessTimer + ?Sized> {
    timer: &'a mut T,
    repeat: usize,
    end: u64,
    probes: u64,
    device_seconds: f64,
    baseline: f64,
    margin: f64,
}

impl<T: AccessTimer + ?Sized> Search<'_, T> {
    /// Time to read `[first, first + count)` right after reading `first` alone.
    fn probe(&mut self, first: u64, count: u64) -> Result<f64> {
        let mut fastest = f64::INFINITY;
        for _ in 0..self.repeat.max(1) {
            let sync = self.timer.read(first, 1)?;
            let t = self.timer.read(first, count)?;
            if !(t.is_finite() && sync.is_finite() && t >= 0.0 && sync >= 0.0) {
                bail!("the timer returned an unusable time ({sync}, {t}) at sector {first}");
            }
            self.probes += 1;
            self.device_seconds += sync + t;
            fastest = fastest.min(t);
        }
        Ok(fastest)
    }

    /// Whether a track starts at `lba` (sectors `lba - 1` and `lba` on different tracks).
    fn boundary_at(&mut self, lba: u64) -> Result<bool> {
        if lba == 0 || lba >= self.end {
            return Ok(false);
        }
        Ok(self.probe(lba - 1, 2)? > self.baseline + self.margin)
    }

    /// The first boundary after `from` (itself a boundary, or 0) by 64-sector windows at
    /// shifting offsets; None when the device ends first.
    fn scan(&mut self, from: u64) -> Result<Option<u64>> {
        if from + WINDOW > self.end {
            // The tail: test what is left sector by sector.
            for lba in from + 1..self.end {
                if self.boundary_at(lba)? {
                    return Ok(Some(lba));
                }
            }
            return Ok(None);
        }
        // Calibrate here: a window starting on a boundary crosses none (tracks >= WINDOW).
        let base_pair = self.probe(from, 2)?;
        let base_window = self.probe(from, WINDOW)?;
        let per_sector = (base_window - base_pair) / (WINDOW - 2) as f64;
        let expected = |n: u64| base_pair + (n - 2) as f64 * per_sector;
        let mut start = from;
        loop {
            start += WINDOW - 1;
            if start + WINDOW > self.end {
                return self.scan_tail(start);
            }
            if self.probe(start, WINDOW)? <= expected(WINDOW) + self.margin {
                continue;
            }
            // A boundary lies in (start, start + WINDOW): the shortest window reaching it.
            let (mut lo, mut hi) = (2, WINDOW);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if self.probe(start, mid)? > expected(mid) + self.margin {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            let found = start + lo - 1;
            // Confirm with the exact test (a noisy window must not invent a boundary).
            if self.boundary_at(found)? {
                return Ok(Some(found));
            }
            bail!(
                "window probes at sector {start} found a boundary the exact probe at {found} \
                 does not confirm: timings too noisy (is the drive's read cache on?)"
            );
        }
    }

    fn scan_tail(&mut self, start: u64) -> Result<Option<u64>> {
        for lba in start + 1..self.end {
            if self.boundary_at(lba)? {
                return Ok(Some(lba));
            }
        }
        Ok(None)
    }
}

/// Extract the track boundaries of the first `limit` sectors (all when None).
pub fn extract(
    timer: &mut dyn AccessTimer,
    limit: Option<u64>,
    margin_s: Option<f64>,
) -> Result<Extraction> {
    extract_with(
        timer,
        &ExtractOptions {
            limit,
            margin_s,
            repeat: 1,
        },
    )
}

pub fn extract_with(timer: &mut dyn AccessTimer, options: &ExtractOptions) -> Result<Extraction> {
    let (limit, margin_s) = (options.limit, options.margin_s);
    if options.repeat > 64 {
        bail!("at most 64 repetitions per probe");
    }
    let end = limit.map_or(timer.sectors(), |l| l.min(timer.sectors()));
    if end < 2 * WINDOW {
        bail!(
            "{end} sectors is too small to extract tracks from (at least {})",
            2 * WINDOW
        );
    }
    let mut search = Search {
        timer,
        repeat: options.repeat,
        end,
        probes: 0,
        device_seconds: 0.0,
        baseline: 0.0,
        margin: 0.0,
    };
    // Baseline: the median two-sector probe near the start (at most one of them crosses).
    let mut samples = Vec::new();
    for lba in 1..=15 {
        samples.push(search.probe(lba - 1, 2)?);
    }
    samples.sort_by(f64::total_cmp);
    search.baseline = samples[samples.len() / 2];
    // A crossing costs at least a head switch (0.3 ms and more on the drives modelled).
    search.margin = margin_s.unwrap_or(1e-4);
    if !(search.margin > 0.0 && search.margin.is_finite()) {
        bail!("the crossing margin must be a positive number of seconds");
    }

    let mut boundaries = Vec::new();
    let mut recent: VecDeque<u64> = VecDeque::new();
    let mut last = 0;
    let mut size = match search.scan(0)? {
        Some(first) => {
            boundaries.push(first);
            last = first;
            first
        }
        None => 0,
    };
    while size > 0 {
        let next = if search.boundary_at(last + size)? {
            Some(last + size)
        } else {
            // The size changed: sizes seen before (smallest first), then a scan.
            let mut candidates: Vec<u64> = recent
                .iter()
                .copied()
                .chain((1..=3).map(|d| size.saturating_sub(d)))
                .filter(|&c| c >= WINDOW && c != size && last + c < end)
                .collect();
            candidates.sort_unstable();
            candidates.dedup();
            let mut hit = None;
            for c in candidates {
                if search.boundary_at(last + c)? {
                    hit = Some(last + c);
                    break;
                }
            }
            match hit {
                Some(b) => Some(b),
                None => search.scan(last)?,
            }
        };
        let Some(b) = next else { break };
        let track = b - last;
        if track < WINDOW {
            bail!("found a track of {track} sectors at {last}: shorter than the {WINDOW}-sector probe");
        }
        if !recent.contains(&track) {
            recent.push_back(track);
            if recent.len() > RECENT_SIZES {
                recent.pop_front();
            }
        }
        boundaries.push(b);
        last = b;
        size = track;
    }
    Ok(Extraction {
        boundaries,
        sectors: end,
        probes: search.probes,
        device_seconds: search.device_seconds,
        baseline_s: search.baseline,
        margin_s: search.margin,
    })
}
