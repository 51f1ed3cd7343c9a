//! A rotating drive's mechanism: command overhead, seek or head switch, rotational latency
//! from the platter's angle, media transfer track by track (switches and skew included),
//! the read-ahead segments and the write-back cache.

use crate::clock::Seconds;
use crate::profile::DriveProfile;

use super::cache::{Extent, ReadCache, ReadLookup, WriteCache};
use super::geometry::{Geometry, Location};
use super::mechanism::{HeadPosition, Mechanism, Served};
use super::queue::{Command, Op};
use super::seek::SeekCurve;

/// Dirty extents considered per destage when none is on the head's cylinder (in sweep
/// order from the head): bounds the cost
/// of choosing among thousands of cached writes, as a drive's firmware does.
const DESTAGE_WINDOW: usize = 32;

#[derive(Debug, Clone)]
pub struct DiskMechanism {
    geometry: Geometry,
    seek: SeekCurve,
    head_switch_s: f64,
    read_overhead_s: f64,
    write_overhead_s: f64,
    /// Interface rate: buffer hits move at this speed.
    bus_rate: f64,
    head: Option<Location>,
    read_cache: Option<ReadCache>,
    write_cache: WriteCache,
    write_cache_on: bool,
    write_cache_capacity: u64,
    destage_delay_s: f64,
    destaged: Vec<(u64, Extent)>,
}

impl DiskMechanism {
    pub fn new(profile: &DriveProfile) -> Result<Self, String> {
        let geometry = Geometry::from_profile(profile);
        let spec = profile
            .geometry
            .clone()
            .unwrap_or_else(|| Geometry::derived_spec(profile, geometry.revolution_s()));
        let seek = SeekCurve::fit(
            profile.track_to_track_seek_ms / 1e3,
            profile.avg_seek_ms / 1e3,
            spec.full_stroke_seek_ms / 1e3,
            geometry.cylinders(),
            spec.short_seek_fraction,
            spec.write_settle_ms / 1e3,
        )
        .map_err(|e| format!("drive profile {}: {e}", profile.name))?;
        let cache = profile.cache.as_ref();
        Ok(Self {
            geometry,
            seek,
            head_switch_s: spec.head_switch_ms / 1e3,
            read_overhead_s: profile.read_overhead_ms / 1e3,
            write_overhead_s: profile.write_overhead_ms / 1e3,
            bus_rate: profile.read_rate_bytes_s(),
            head: None,
            read_cache: cache.map(|c| ReadCache::new(c.size_bytes, c.segments, c.read_ahead_bytes)),
            write_cache: WriteCache::default(),
            write_cache_on: cache.is_some_and(|c| c.write_cache),
            write_cache_capacity: cache.map_or(0, |c| c.size_bytes),
            destage_delay_s: cache.map_or(0.0, |c| c.destage_idle_ms / 1e3),
            destaged: Vec::new(),
        })
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn sectors(&self, offset: u64, len: u64) -> (u64, u64) {
        let sb = self.geometry.sector_bytes();
        let first = offset / sb;
        let last = (offset + len.max(1)).div_ceil(sb);
        (first, last - first)
    }

    /// Arm movement from `from` to `to`: a seek between cylinders, a head switch on the
    /// same cylinder, nothing on the same track.
    fn switch_time(&self, from: Option<Location>, to: Location, write: bool) -> Seconds {
        let from = from.unwrap_or(Location {
            zone: 0,
            cylinder: 0,
            head: 0,
            sector: 0,
        });
        if from.cylinder != to.cylinder {
            self.seek.time(from.cylinder.abs_diff(to.cylinder), write)
        } else if from.head != to.head {
            self.head_switch_s
        } else {
            0.0
        }
    }

    /// When sector `to` starts passing under the head, moving from `from` at `at`.
    fn sector_reached(
        &self,
        from: Option<Location>,
        to: Location,
        at: Seconds,
        write: bool,
    ) -> Seconds {
        let rev = self.geometry.revolution_s();
        let arrive = at + self.switch_time(from, to, write);
        let platter = (arrive / rev).fract();
        let mut wait = (self.geometry.angle(to) - platter).rem_euclid(1.0);
        // A sector that is just arriving is not a whole turn away (rounding).
        if wait > 1.0 - 1e-9 {
            wait = 0.0;
        }
        arrive + wait * rev
    }

    /// Read or write `count` sectors from `first` on the media; returns when done.
    fn media_access(&mut self, first: u64, count: u64, start: Seconds, write: bool) -> Seconds {
        let rev = self.geometry.revolution_s();
        let (mut t, mut lba, mut left) = (start, first, count);
        loop {
            let run = self.geometry.track_run(lba, left);
            let loc = run.start;
            let spt = run.track_sectors;
            let sector_s = rev / spt as f64;
            let mut last = loc.sector + run.sectors - 1;
            match self.zero_latency_start(loc, run.sectors, t, write) {
                // Zero latency: from the first whole sector under the head to the end of
                // the run, round to its start and up to that sector: one turn in all.
                Some((reached, under)) => {
                    t = reached + rev;
                    last = under - 1;
                }
                None => {
                    t = self.sector_reached(self.head, loc, t, write);
                    t += run.sectors as f64 * sector_s;
                }
            }
            self.head = Some(Location {
                sector: last,
                ..loc
            });
            left -= run.lbas;
            lba += run.lbas;
            if left == 0 {
                return t;
            }
        }
    }

    /// With zero-latency access, when the head reaches `loc`'s track inside the run of
    /// `sectors` sectors: (arrival time, the first whole sector of the run under the head).
    fn zero_latency_start(
        &self,
        loc: Location,
        sectors: u64,
        at: Seconds,
        write: bool,
    ) -> Option<(Seconds, u64)> {
        if !self.geometry.zero_latency() {
            return None;
        }
        let rev = self.geometry.revolution_s();
        let spt = self.geometry.track_sectors(loc) as f64;
        let arrive = at + self.switch_time(self.head, loc, write);
        let track_start = self.geometry.angle(Location { sector: 0, ..loc });
        let under = ((arrive / rev).fract() - track_start).rem_euclid(1.0) * spt;
        let first_whole = (under - 1e-9).ceil().max(0.0) as u64;
        // Arriving before the run (or at its first sector) is the ordinary case.
        let inside = first_whole > loc.sector && first_whole < loc.sector + sectors;
        let wait = (first_whole as f64 - under) / spt * rev;
        inside.then_some((arrive + wait, first_whole))
    }

    /// The read-ahead stream stops when the head is needed elsewhere; the head stays
    /// where the stream got to.
    fn stop_streaming(&mut self, at: Seconds) {
        if let Some(pos) = self.read_cache.as_mut().and_then(|c| c.stop_streaming(at)) {
            let sb = self.geometry.sector_bytes();
            self.head = Some(self.geometry.locate((pos / sb).saturating_sub(1)));
        }
    }

    fn buffered_write_fits(&self, command: &Command) -> bool {
        matches!(command.op, Op::Write { fua: false })
            && self.write_cache_on
            && self.write_cache.dirty_bytes() + command.len <= self.write_cache_capacity
    }

    /// The dirty extent to write back next: the one the head reaches first among those on
    /// its own track, else its own cylinder, else the next cylinder up that holds any.
    /// Finishing a track first keeps greedy choices from stranding extents behind the sweep
    /// (each stranded track costs another revolution later).
    fn next_destage(&self, at: Seconds) -> Option<u64> {
        let sb = self.geometry.sector_bytes();
        let mut candidates: Vec<u64> = Vec::new();
        if let Some(h) = self.head {
            let in_track = |head| {
                let (first, count) = self.geometry.track_lbas(Location { head, ..h });
                self.write_cache.starts_in(first * sb, (first + count) * sb)
            };
            candidates.extend(in_track(h.head));
            if candidates.is_empty() {
                // The cylinder's tracks need not be adjacent in LBA order (serpentine).
                for head in 0..self.geometry.surfaces() {
                    candidates.extend(in_track(head));
                }
            }
        }
        if candidates.is_empty() {
            // Move on to the next cylinder that holds dirty data (C-LOOK), not past it.
            let from = self.head.map_or(0, |h| self.geometry.lba(h) * sb);
            let mut ahead = self.write_cache.sweep_from(from).take(DESTAGE_WINDOW);
            if let Some(first) = ahead.next() {
                let cylinder = self.geometry.locate(first / sb).cylinder;
                candidates.push(first);
                candidates
                    .extend(ahead.filter(|&s| self.geometry.locate(s / sb).cylinder == cylinder));
            }
        }
        candidates
            .into_iter()
            .map(|s| {
                let loc = self.geometry.locate(s / sb);
                (s, self.sector_reached(self.head, loc, at, true))
            })
            .min_by(|x, y| x.1.total_cmp(&y.1))
            .map(|(s, _)| s)
    }
}

impl Mechanism for DiskMechanism {
    fn positioning(&self, command: &Command, at: Seconds) -> Seconds {
        let (overhead, write) = match command.op {
            Op::Read => (self.read_overhead_s, false),
            Op::Write { .. } => (self.write_overhead_s, true),
            Op::Flush => return 0.0,
        };
        if write && self.buffered_write_fits(command) {
            return overhead;
        }
        if !write {
            if self.write_cache.covers(command.offset, command.len) {
                return overhead;
            }
            if let Some(cache) = &self.read_cache {
                match cache.peek(command.offset, command.len, at) {
                    ReadLookup::Hit => return overhead,
                    ReadLookup::Stream { ready_at } => return (ready_at - at).max(overhead),
                    ReadLookup::Miss => {}
                }
            }
        }
        let (first, _) = self.sectors(command.offset, command.len);
        let loc = self.geometry.locate(first);
        self.sector_reached(self.head, loc, at + overhead, write) - at
    }

    fn cylinder(&self, offset: u64) -> u64 {
        self.geometry
            .locate(offset / self.geometry.sector_bytes())
            .cylinder
    }

    fn head(&self) -> Option<HeadPosition> {
        self.head.map(|h| HeadPosition {
            zone: h.zone,
            cylinder: h.cylinder,
            head: h.head,
            offset: self.geometry.lba(h) * self.geometry.sector_bytes(),
        })
    }

    fn serve(&mut self, command: &Command, start: Seconds) -> Served {
        let (offset, len) = (command.offset, command.len);
        let (first, count) = self.sectors(offset, len);
        let bus = len as f64 / self.bus_rate;
        let hit = |done| Served {
            done,
            media_free_at: done,
            cache_hit: true,
            data: None,
        };
        match command.op {
            Op::Read => {
                let t = start + self.read_overhead_s;
                if self.write_cache.covers(offset, len) {
                    return Served {
                        data: self.write_cache.read(offset, len),
                        ..hit(t + bus)
                    };
                }
                let lookup = self
                    .read_cache
                    .as_mut()
                    .map_or(ReadLookup::Miss, |c| c.lookup(offset, len, start));
                match lookup {
                    ReadLookup::Hit => hit(t + bus),
                    ReadLookup::Stream { ready_at } => hit((t + bus).max(ready_at)),
                    ReadLookup::Miss => {
                        self.stop_streaming(t);
                        let done = self.media_access(first, count, t, false);
                        let zone = self.head.map_or(0, |h| h.zone);
                        let rate = self.geometry.media_rate(zone);
                        if let Some(cache) = self.read_cache.as_mut() {
                            cache.start_stream(offset, offset + len, done, rate);
                        }
                        Served {
                            done,
                            media_free_at: done,
                            cache_hit: false,
                            data: None,
                        }
                    }
                }
            }
            Op::Write { fua } => {
                let mut t = start + self.write_overhead_s;
                if let Some(cache) = self.read_cache.as_mut() {
                    cache.invalidate(offset, len);
                }
                if self.write_cache_on && !fua {
                    // A full cache makes the write wait for room.
                    while self.write_cache.dirty_bytes() + len > self.write_cache_capacity
                        && !self.write_cache.is_empty()
                    {
                        t = self.destage_one(t);
                    }
                    if self.write_cache.dirty_bytes() + len <= self.write_cache_capacity {
                        self.write_cache
                            .insert(offset, len, command.data.as_deref());
                        // The host's data streams into the buffer while the media is free.
                        return Served {
                            media_free_at: t,
                            ..hit(t + bus)
                        };
                    }
                }
                self.stop_streaming(t);
                self.write_cache.remove_range(offset, len);
                let done = self.media_access(first, count, t, true);
                Served {
                    done,
                    media_free_at: done,
                    cache_hit: false,
                    data: None,
                }
            }
            Op::Flush => {
                let mut t = start + self.write_overhead_s;
                while !self.write_cache.is_empty() {
                    t = self.destage_one(t);
                }
                Served {
                    done: t,
                    media_free_at: t,
                    cache_hit: false,
                    data: None,
                }
            }
        }
    }

    fn dirty_bytes(&self) -> u64 {
        self.write_cache.dirty_bytes()
    }

    fn destage_delay(&self) -> Seconds {
        self.destage_delay_s
    }

    fn destage_one(&mut self, start: Seconds) -> Seconds {
        self.stop_streaming(start);
        let Some(offset) = self.next_destage(start) else {
            return start;
        };
        let Some(extent) = self.write_cache.take(offset) else {
            return start;
        };
        let (first, count) = self.sectors(offset, extent.len);
        let done = self.media_access(first, count, start, true);
        self.destaged.push((offset, extent));
        done
    }

    fn take_destaged(&mut self) -> Vec<(u64, Extent)> {
        std::mem::take(&mut self.destaged)
    }

    fn set_write_cache(&mut self, on: bool) -> bool {
        if self.write_cache_capacity == 0 {
            return false;
        }
        self.write_cache_on = on;
        true
    }

    fn write_cache_enabled(&self) -> bool {
        self.write_cache_on
    }

    fn forget_head(&mut self) {
        self.head = None;
        if let Some(cache) = self.read_cache.as_mut() {
            cache.stop_streaming(f64::NEG_INFINITY);
        }
    }

    fn power_loss(&mut self) -> Vec<(u64, u64)> {
        self.head = None;
        if let Some(cache) = self.read_cache.as_mut() {
            cache.clear();
        }
        self.write_cache.drop_all()
    }
}
