//! The drive-model benchmark (`greenreplica-storage drive-bench`, run by bench/drive-model):
//! one profile in virtual time — random 4 KiB reads at several queue depths under FCFS and
//! SPTF, sequential bandwidth per zone, sorted scattered writes with and without the write
//! cache — each beside the figure of the previous model (square-root seek, one track size,
//! no queueing or cache), which is what the agent used before.

use std::sync::Arc;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::clock::Seconds;
use crate::latency::{ResponseSummary, Samples};
use crate::ledger::Ledger;
use crate::policy::PolicySpec;
use crate::profile::{DriveProfile, SchedulerKind};

use super::geometry::Geometry;
use super::{Class, Drive, IoKind, Op};

const BLOCK: u64 = 4096;
pub const DEPTHS: [usize; 4] = [1, 4, 16, 32];
pub const DENSITIES: [f64; 3] = [0.10, 0.33, 0.66];
/// The scattered-write region: 64 MiB from 1 GiB on.
const SCATTER_AT: u64 = 1 << 30;
const SCATTER_BYTES: u64 = 64 << 20;

#[derive(Debug, Serialize)]
pub struct RandomReads {
    pub scheduler: SchedulerKind,
    pub depth: usize,
    pub requests: usize,
    pub iops: f64,
    /// Arrival to completion (includes waiting in the queue).
    pub response_ms: ResponseSummary,
    /// Start of service to completion.
    pub service_ms: ResponseSummary,
}

#[derive(Debug, Serialize)]
pub struct ZoneBandwidth {
    pub zone: usize,
    pub first_offset: u64,
    pub sectors_per_track: u64,
    /// Sectors per track times rotation rate: the ceiling without switches.
    pub media_mb_s: f64,
    /// 32 MiB read in 1 MiB requests, one at a time.
    pub measured_mb_s: f64,
}

#[derive(Debug, Serialize)]
pub struct ScatteredWrites {
    pub density: f64,
    pub write_cache: bool,
    pub writes: usize,
    /// From the first write to the end of the FLUSH CACHE that follows the last.
    pub seconds: f64,
    pub mb_s: f64,
    pub legacy_seconds: f64,
}

#[derive(Debug, Serialize)]
pub struct DriveBench {
    pub profile: String,
    pub kind: &'static str,
    pub rpm: u32,
    pub avg_seek_ms: f64,
    /// Average seek plus half a revolution: what random reads at depth 1 should cost.
    pub expected_depth1_ms: f64,
    pub legacy_depth1_mean_ms: f64,
    pub random_reads: Vec<RandomReads>,
    pub zones: Vec<ZoneBandwidth>,
    pub scattered_writes: Vec<ScatteredWrites>,
}

pub(crate) fn lcg(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 11
    }
}

pub(crate) fn fresh_drive(profile: &Arc<DriveProfile>) -> Result<Drive> {
    let policy: PolicySpec = "always-on"
        .parse()
        .map_err(|e: String| anyhow::anyhow!(e))?;
    Ok(Drive::new(
        profile.clone(),
        profile.default_mode_index(),
        policy.build(48),
        0.0,
        Ledger::default(),
    ))
}

/// Closed loop: `depth` reads outstanding, a new one issued at each completion.
fn random_reads(
    profile: &Arc<DriveProfile>,
    scheduler: SchedulerKind,
    depth: usize,
    requests: usize,
    seed: u64,
) -> Result<RandomReads> {
    let mut d = fresh_drive(profile)?;
    d.set_queueing(depth, scheduler);
    d.set_write_cache(false);
    let mut next = lcg(seed);
    let blocks = profile.capacity_bytes / BLOCK;
    let mut issued = 0;
    let warmup = 2 * depth;
    let (mut response, mut service) = (Samples::default(), Samples::default());
    let (mut first, mut last, mut counted) = (None, 0.0f64, 0usize);
    while issued < depth {
        d.enqueue(
            0.0,
            Op::Read,
            next() % blocks * BLOCK,
            BLOCK,
            Class::Foreground,
            None,
        );
        issued += 1;
    }
    let mut completed = 0;
    while let Some(t) = d.next_completion() {
        for c in d.poll(t) {
            completed += 1;
            if completed > warmup {
                response.push(c.done - c.arrival);
                service.push(c.done - c.started);
                first.get_or_insert(c.arrival);
                last = last.max(c.done);
                counted += 1;
            }
            if issued < requests + warmup {
                d.enqueue(
                    t,
                    Op::Read,
                    next() % blocks * BLOCK,
                    BLOCK,
                    Class::Foreground,
                    None,
                );
                issued += 1;
            }
        }
    }
    let span = last - first.unwrap_or(0.0);
    Ok(RandomReads {
        scheduler,
        depth,
        requests: counted,
        iops: if span > 0.0 {
            counted as f64 / span
        } else {
            0.0
        },
        response_ms: response.summary(1e3),
        service_ms: service.summary(1e3),
    })
}

fn sequential_mb_s(profile: &Arc<DriveProfile>, offset: u64) -> Result<f64> {
    let mut d = fresh_drive(profile)?;
    let chunk = 1u64 << 20;
    let mut t = d.submit(0.0, IoKind::Read, offset, chunk);
    let start = t;
    for i in 1..32u64 {
        t = d.submit(t, IoKind::Read, offset + i * chunk, chunk);
    }
    Ok(31.0 * chunk as f64 / (t - start) / 1e6)
}

fn scatter_offsets(density: f64, seed: u64) -> Vec<u64> {
    let mut next = lcg(seed);
    (0..SCATTER_BYTES / BLOCK)
        .filter(|_| (next() % 1_000_000) as f64 / 1e6 < density)
        .map(|b| SCATTER_AT + b * BLOCK)
        .collect()
}

/// Ascending 4 KiB writes, up to 32 outstanding (as writeback issues them), then FLUSH.
fn scattered_writes(
    profile: &Arc<DriveProfile>,
    offsets: &[u64],
    write_cache: bool,
) -> Result<Seconds> {
    let mut d = fresh_drive(profile)?;
    let depth = 32;
    d.set_queueing(depth, profile.queue.scheduler);
    d.set_write_cache(write_cache);
    // Put the head at the start of the region first.
    let t0 = d.submit(0.0, IoKind::Read, SCATTER_AT, BLOCK);
    let mut pending = offsets.iter();
    for &o in pending.by_ref().take(depth) {
        d.enqueue(
            t0,
            Op::Write { fua: false },
            o,
            BLOCK,
            Class::Foreground,
            None,
        );
    }
    let mut end = t0;
    while let Some(t) = d.next_completion() {
        for c in d.poll(t) {
            end = end.max(c.done);
            if let Some(&o) = pending.next() {
                d.enqueue(
                    t,
                    Op::Write { fua: false },
                    o,
                    BLOCK,
                    Class::Foreground,
                    None,
                );
            }
        }
    }
    Ok(d.flush(end) - t0)
}

pub fn run(name: &str, requests: usize, seed: u64) -> Result<DriveBench> {
    let profile = Arc::new(DriveProfile::load(name)?);
    let flash = profile.rpm == 0;
    let half_turn_ms = if flash {
        0.0
    } else {
        30_000.0 / f64::from(profile.rpm)
    };
    let mut legacy = legacy::Model::new(&profile);
    let mut random = Vec::new();
    for scheduler in [SchedulerKind::Fcfs, SchedulerKind::Sptf] {
        for depth in DEPTHS {
            random.push(
                random_reads(&profile, scheduler, depth, requests, seed)
                    .with_context(|| format!("{name}: random reads at depth {depth}"))?,
            );
        }
    }
    let legacy_depth1_mean_ms = {
        let mut next = lcg(seed);
        let blocks = profile.capacity_bytes / BLOCK;
        let mut t = 0.0;
        let mut total = 0.0;
        for _ in 0..requests {
            let s = legacy.service(false, next() % blocks * BLOCK, BLOCK, t);
            total += s;
            t += s;
        }
        total / requests as f64 * 1e3
    };
    let zones = if flash {
        vec![ZoneBandwidth {
            zone: 0,
            first_offset: 0,
            sectors_per_track: 0,
            media_mb_s: profile.transfer_mb_s,
            measured_mb_s: sequential_mb_s(&profile, 0)?,
        }]
    } else {
        let g = Geometry::from_profile(&profile);
        g.zones()
            .iter()
            .enumerate()
            .map(|(i, z)| {
                let first_offset = z.first_lba * g.sector_bytes();
                Ok(ZoneBandwidth {
                    zone: i,
                    first_offset,
                    sectors_per_track: z.sectors_per_track,
                    media_mb_s: g.media_rate(i) / 1e6,
                    measured_mb_s: sequential_mb_s(&profile, first_offset)?,
                })
            })
            .collect::<Result<Vec<_>>>()?
    };
    let mut scattered = Vec::new();
    for density in DENSITIES {
        let offsets = scatter_offsets(density, seed);
        let legacy_seconds = {
            let mut m = legacy::Model::new(&profile);
            let mut t = m.service(false, SCATTER_AT, BLOCK, 0.0);
            let t0 = t;
            for &o in &offsets {
                t += m.service(true, o, BLOCK, t);
            }
            t - t0
        };
        for write_cache in [false, true] {
            let seconds = scattered_writes(&profile, &offsets, write_cache)?;
            scattered.push(ScatteredWrites {
                density,
                write_cache,
                writes: offsets.len(),
                seconds,
                mb_s: offsets.len() as f64 * BLOCK as f64 / seconds / 1e6,
                legacy_seconds,
            });
        }
    }
    Ok(DriveBench {
        profile: profile.name.clone(),
        kind: if flash { "flash" } else { "disk" },
        rpm: profile.rpm,
        avg_seek_ms: profile.avg_seek_ms,
        expected_depth1_ms: profile.avg_seek_ms + half_turn_ms,
        legacy_depth1_mean_ms,
        random_reads: random,
        zones,
        scattered_writes: scattered,
    })
}

/// The model the agent used before the drive/ module, kept here only as the benchmark's
/// comparator: seek `t2t + k·√(d/capacity)`, one track size (rate × revolution), rotation
/// from the platter's angle, requests served one at a time in arrival order.
mod legacy {
    use crate::clock::Seconds;
    use crate::profile::DriveProfile;

    pub struct Model {
        capacity: f64,
        t2t: f64,
        span: f64,
        revolution: f64,
        track_bytes: f64,
        rate: f64,
        read_overhead: f64,
        write_overhead: f64,
        head: Option<u64>,
    }

    impl Model {
        pub fn new(p: &DriveProfile) -> Self {
            let revolution = if p.rpm > 0 {
                60.0 / f64::from(p.rpm)
            } else {
                0.0
            };
            // The old profiles' transfer_mb_s was the media rate: use the outer zone's.
            let rate = match &p.geometry {
                Some(g) => g.zones[0].sectors_per_track as f64 * g.sector_bytes as f64 / revolution,
                None => p.read_rate_bytes_s(),
            };
            let t2t = p.track_to_track_seek_ms / 1e3;
            Self {
                capacity: p.capacity_bytes as f64,
                t2t,
                span: (p.avg_seek_ms / 1e3 - t2t).max(0.0) / (8.0 / 15.0),
                revolution,
                track_bytes: rate * revolution,
                rate,
                read_overhead: p.read_overhead_ms / 1e3,
                write_overhead: p.write_overhead_ms / 1e3,
                head: None,
            }
        }

        pub fn service(&mut self, write: bool, offset: u64, len: u64, start: Seconds) -> Seconds {
            let overhead = if write {
                self.write_overhead
            } else {
                self.read_overhead
            };
            if self.revolution == 0.0 {
                return overhead + len as f64 / self.rate;
            }
            let positioning = match self.head {
                Some(h) if h == offset => 0.0,
                head => {
                    let from = head.unwrap_or(0);
                    let d = from.abs_diff(offset) as f64;
                    let seek = if d < self.track_bytes {
                        0.0
                    } else {
                        self.t2t + self.span * (d / self.capacity).min(1.0).sqrt()
                    };
                    let head_angle = ((start + seek) / self.revolution).fract();
                    let target = (offset as f64 / self.track_bytes).fract();
                    seek + (target - head_angle).rem_euclid(1.0) * self.revolution
                }
            };
            self.head = Some(offset + len);
            overhead + positioning + len as f64 / self.rate
        }
    }
}
