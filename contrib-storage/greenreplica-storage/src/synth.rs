//! Synthetic block traces in the MSR Cambridge format, for when the real traces are not at
//! hand: Poisson arrivals whose rate follows a daily sine (diurnal shape), a write ratio,
//! a request size, and a share of sequential follow-ons. Deterministic for a given seed.
//! Optionally bursty (arrivals only in busy periods separated by idle gaps, the long-run rate
//! unchanged) with variable request sizes; `PRESETS` carries the RoLo paper's seven traces.

use std::io::Write;

use crate::service_model::IoKind;
use crate::trace::{format_record, TraceRecord};

/// 2008-02-22 00:00 UTC in FILETIME ticks, about when the MSR traces were taken.
const START_TICKS: u64 = 128_480_832_000_000_000;
const DAY_S: f64 = 86_400.0;

#[derive(Debug, Clone)]
pub struct SynthOptions {
    pub requests: u64,
    /// Mean arrival rate, requests per second.
    pub iops: f64,
    pub write_ratio: f64,
    pub request_bytes: u64,
    pub volume_bytes: u64,
    /// Probability that a request continues where the previous one ended.
    pub sequential: f64,
    /// Relative amplitude of the daily rate swing (0 = flat, 0.9 = nights 10x quieter).
    pub diurnal: f64,
    pub seed: u64,
    /// Bursts: share of time in busy periods (1 = no idle gaps); arrivals come only then, at
    /// iops / busy_share, so the long-run rate stays `iops`.
    pub busy_share: f64,
    /// Mean idle gap between busy periods, seconds (both lengths exponential).
    pub idle_gap_s: f64,
    /// Sizes vary: 4 KiB plus a geometric number of 512-byte sectors, mean `request_bytes`
    /// (otherwise every request is `request_bytes`, 4 KiB-aligned).
    pub variable_size: bool,
    /// Temporal locality (issue 17): a share `hot.1` of the random requests falls into a hot
    /// set of `hot.0` of the volume (8 MiB extents spread over the whole volume, so that no
    /// address order happens to visit it first); (0, 0): uniform.
    pub hot: (f64, f64),
}

/// A named workload shape: one of the seven MSR Cambridge traces of the RoLo paper's
/// Table 6 (write ratio, IOPS, average request size as published; the rest assumed, see
/// docs/storage-agent.md "Trace presets").
#[derive(Debug, Clone, Copy)]
pub struct Preset {
    pub name: &'static str,
    pub write_ratio: f64,
    pub iops: f64,
    pub mean_request_kib: f64,
    pub sequential: f64,
    pub diurnal: f64,
    pub busy_share: f64,
    pub idle_gap_s: f64,
    /// See `SynthOptions::hot`.
    pub hot: (f64, f64),
}

macro_rules! preset {
    ($name:literal, $w:expr, $iops:expr, $kib:expr, $seq:expr, $diurnal:expr, $busy:expr, $idle:expr) => {
        Preset {
            name: $name,
            write_ratio: $w,
            iops: $iops,
            mean_request_kib: $kib,
            sequential: $seq,
            diurnal: $diurnal,
            busy_share: $busy,
            idle_gap_s: $idle,
            hot: (0.0, 0.0),
        }
    };
}

/// Table 6: trace, write ratio, IOPS, average request size (KiB); then assumed: sequential
/// share, diurnal swing, busy share, mean idle gap (s).
pub const PRESETS: [Preset; 7] = [
    preset!("src2_2", 0.996, 78.80, 63.64, 0.5, 0.5, 0.3, 10.0),
    preset!("proj_0", 0.949, 23.89, 51.42, 0.4, 0.5, 0.3, 10.0),
    preset!("mds_0", 0.881, 2.00, 9.20, 0.2, 0.5, 0.2, 30.0),
    preset!("wdev_0", 0.799, 1.89, 9.08, 0.2, 0.6, 0.2, 30.0),
    preset!("web_1", 0.459, 0.27, 29.07, 0.3, 0.6, 0.1, 120.0),
    preset!("rsrch_2", 0.343, 0.35, 4.08, 0.1, 0.3, 0.1, 120.0),
    preset!("hm_1", 0.047, 1.02, 15.16, 0.3, 0.1, 0.2, 30.0),
];

/// The QMD paper's three traces (its Table 2): a preset plus the published length and peak
/// request rate. The peak is the in-burst arrival rate at the top of the daily swing,
/// `iops * (1 + diurnal) / busy_share`; the mean rate, write ratio, sizes and burst lengths
/// are assumptions (docs/storage-agent.md "QMD").
#[derive(Debug, Clone, Copy)]
pub struct QmdPreset {
    pub preset: Preset,
    pub days: f64,
    pub peak_iops: f64,
}

impl QmdPreset {
    /// Requests in the trace's published length at its mean rate.
    pub fn requests(&self) -> u64 {
        (self.preset.iops * self.days * DAY_S).round() as u64
    }
}

/// cambridge-src1_1 and cambridge-usr2: 7 days, strong diurnal swing, rare bursts (long
/// low-utilization periods); LiveMaps: 1 day, no diurnal swing, short idle gaps (spiky).
pub const QMD_PRESETS: [QmdPreset; 3] = [
    QmdPreset {
        preset: preset!(
            "cambridge-src1_1",
            0.55,
            75.0,
            32.0,
            0.3,
            0.9,
            0.040_71,
            60.0
        ),
        days: 7.0,
        peak_iops: 3500.0,
    },
    QmdPreset {
        preset: preset!("cambridge-usr2", 0.2, 18.0, 48.0, 0.3, 0.9, 0.014_87, 120.0),
        days: 7.0,
        peak_iops: 2300.0,
    },
    QmdPreset {
        preset: preset!("livemaps", 0.3, 600.0, 8.0, 0.1, 0.0, 0.127_66, 10.0),
        days: 1.0,
        peak_iops: 4700.0,
    },
];

/// The IDO paper's four traces (issue 17; Wu et al., FAST'12, Table 2 is not in our copy of
/// the text): Fin1, Fin2 and WebSearch2 with the read ratio, IOPS and mean request size
/// published for the UMass SPC traces in WorkOut (Wu et al., FAST'09, Table 2), as recalled;
/// Proj wholly assumed (read-intensive and without temporal locality, as IDO's section 4
/// describes it). Sequential share, bursts and the hot set are assumptions (see
/// docs/storage-agent.md "IDO").
pub const IDO_PRESETS: [Preset; 4] = [
    Preset {
        hot: (0.10, 0.80),
        ..preset!("fin1", 0.672, 69.0, 6.2, 0.1, 0.0, 1.0, 1.0)
    },
    Preset {
        hot: (0.10, 0.80),
        // Published 2.2 KB; 4 KiB is the generator's smallest request.
        ..preset!("fin2", 0.176, 125.0, 4.0, 0.1, 0.0, 1.0, 1.0)
    },
    Preset {
        hot: (0.10, 0.90),
        ..preset!("websearch2", 0.0002, 113.0, 15.1, 0.1, 0.0, 1.0, 1.0)
    },
    Preset {
        hot: (0.30, 0.30),
        ..preset!("msproject", 0.12, 40.0, 38.0, 0.5, 0.0, 1.0, 1.0)
    },
];

impl Preset {
    pub fn find(name: &str) -> Result<Preset, String> {
        let all = || {
            PRESETS
                .into_iter()
                .chain(QMD_PRESETS.map(|q| q.preset))
                .chain(IDO_PRESETS)
        };
        all().find(|p| p.name == name).ok_or_else(|| {
            let names: Vec<&str> = all().map(|p| p.name).collect();
            format!("unknown preset {name:?} (one of {})", names.join(", "))
        })
    }

    /// The preset's shape over `volume_bytes`, `requests` requests long.
    pub fn options(&self, requests: u64, volume_bytes: u64, seed: u64) -> SynthOptions {
        SynthOptions {
            requests,
            iops: self.iops,
            write_ratio: self.write_ratio,
            request_bytes: (self.mean_request_kib * 1024.0).round() as u64,
            volume_bytes,
            sequential: self.sequential,
            diurnal: self.diurnal,
            seed,
            busy_share: self.busy_share,
            idle_gap_s: self.idle_gap_s,
            variable_size: true,
            hot: self.hot,
        }
    }
}

/// xorshift64*: small, fast and good enough for workload shapes (and test sequences).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in (0, 1].
    pub(crate) fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

pub fn validate(o: &SynthOptions) -> Result<(), String> {
    if !(o.iops.is_finite() && o.iops > 0.0) {
        return Err("--iops must be > 0".into());
    }
    for (name, v) in [
        ("--write-ratio", o.write_ratio),
        ("--sequential", o.sequential),
    ] {
        if !(0.0..=1.0).contains(&v) {
            return Err(format!("{name} must be between 0 and 1"));
        }
    }
    if !(0.0..1.0).contains(&o.diurnal) {
        return Err("--diurnal must be in [0, 1)".into());
    }
    if o.request_bytes == 0 || o.volume_bytes < o.request_bytes {
        return Err("--request-bytes must be > 0 and fit in --volume-bytes".into());
    }
    if !(o.busy_share > 0.0 && o.busy_share <= 1.0) {
        return Err("the busy share must be in (0, 1]".into());
    }
    if o.busy_share < 1.0 && !(o.idle_gap_s.is_finite() && o.idle_gap_s > 0.0) {
        return Err("the idle gap must be > 0 seconds".into());
    }
    if !((0.0..=1.0).contains(&o.hot.0) && (0.0..=1.0).contains(&o.hot.1)) {
        return Err("the hot set's fraction and share must be between 0 and 1".into());
    }
    if o.variable_size && (o.request_bytes < 4096 || o.volume_bytes < 1 << 24) {
        return Err("variable sizes need a mean >= 4096 bytes and a volume >= 16 MiB".into());
    }
    Ok(())
}

/// One synthetic request: seconds from the start, kind, offset and size in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrival {
    pub t: f64,
    pub kind: IoKind,
    pub offset: u64,
    pub size: u64,
}

/// The requests of `o`, in time order (`o` validated).
pub struct Arrivals<'a> {
    o: &'a SynthOptions,
    rng: Rng,
    left: u64,
    t: f64,
    next_offset: u64,
    /// End of the current busy period (infinite without bursts).
    busy_until: f64,
}

impl<'a> Arrivals<'a> {
    pub fn new(o: &'a SynthOptions) -> Self {
        let mut rng = Rng(o.seed.max(1));
        let busy_until = if o.busy_share < 1.0 {
            Self::busy_length(o, &mut rng)
        } else {
            f64::INFINITY
        };
        Arrivals {
            o,
            rng,
            left: o.requests,
            t: 0.0,
            next_offset: 0,
            busy_until,
        }
    }

    fn busy_length(o: &SynthOptions, rng: &mut Rng) -> f64 {
        -rng.unit().ln() * o.idle_gap_s * o.busy_share / (1.0 - o.busy_share)
    }

    fn size(&mut self) -> u64 {
        let o = self.o;
        if !o.variable_size {
            return o.request_bytes;
        }
        // 4 KiB plus a geometric count of sectors with the mean that completes request_bytes.
        let extra = (o.request_bytes - 4096) as f64 / 512.0;
        let sectors = if extra > 0.0 {
            let q = extra / (1.0 + extra);
            (self.rng.unit().ln() / q.ln()).floor() as u64
        } else {
            0
        };
        (4096 + 512 * sectors).min(o.volume_bytes / 2)
    }
}

impl Iterator for Arrivals<'_> {
    type Item = Arrival;

    fn next(&mut self) -> Option<Arrival> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let o = self.o;
        let rng = &mut self.rng;
        loop {
            // Exponential gap at the current rate; the rate swings over the day. Arrivals
            // are memoryless, so a gap crossing the end of a busy period is redrawn after
            // the idle gap that follows.
            let rate = o.iops / o.busy_share
                * (1.0 + o.diurnal * (2.0 * std::f64::consts::PI * self.t / DAY_S).sin());
            let next = self.t - rng.unit().ln() / rate;
            if next <= self.busy_until {
                self.t = next;
                break;
            }
            self.t = self.busy_until - rng.unit().ln() * o.idle_gap_s;
            self.busy_until = self.t + Self::busy_length(o, rng);
        }
        let size = self.size();
        let rng = &mut self.rng;
        let offset = if rng.unit() <= o.sequential && self.next_offset + size <= o.volume_bytes {
            self.next_offset
        } else {
            // Random requests start on a request (fixed size) or 4 KiB boundary.
            let block = if o.variable_size {
                4096
            } else {
                o.request_bytes
            };
            let start = match hot_start(o, rng) {
                Some(start) => start,
                None => (rng.next() % (o.volume_bytes / block)) * block,
            };
            start.min((o.volume_bytes - size) / block * block)
        };
        self.next_offset = offset + size;
        let kind = if rng.unit() <= o.write_ratio {
            IoKind::Write
        } else {
            IoKind::Read
        };
        Some(Arrival {
            t: self.t,
            kind,
            offset,
            size,
        })
    }
}

/// Bytes of a hot-set block.
const HOT_BLOCK: u64 = 8 << 20;

/// A random request's start inside the hot set (4 KiB-aligned), or None (a uniform one).
fn hot_start(o: &SynthOptions, rng: &mut Rng) -> Option<u64> {
    let (fraction, share) = o.hot;
    let blocks = o.volume_bytes / HOT_BLOCK;
    let hot_blocks = (blocks as f64 * fraction) as u64;
    if hot_blocks == 0 || rng.unit() > share {
        return None;
    }
    // Hot block i sits at i * stride (mod blocks), stride odd and coprime with most sizes:
    // the set spreads over the volume.
    let i = rng.next() % hot_blocks;
    let block = (i.wrapping_mul(0x9E37_79B1) | 1) % blocks;
    Some(block * HOT_BLOCK + (rng.next() % (HOT_BLOCK / 4096)) * 4096)
}

pub fn generate(o: &SynthOptions, out: &mut impl Write) -> std::io::Result<()> {
    for a in Arrivals::new(o) {
        let record = TraceRecord {
            timestamp: START_TICKS + (a.t * 1e7) as u64,
            hostname: "synth".into(),
            disk: 0,
            kind: a.kind,
            offset: a.offset,
            size: a.size,
            response_ticks: 0,
        };
        writeln!(out, "{}", format_record(&record))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::parse_line;

    fn options() -> SynthOptions {
        SynthOptions {
            hot: (0.0, 0.0),
            requests: 20_000,
            iops: 50.0,
            write_ratio: 0.7,
            request_bytes: 4096,
            volume_bytes: 1 << 30,
            sequential: 0.2,
            diurnal: 0.5,
            seed: 42,
            busy_share: 1.0,
            idle_gap_s: 0.0,
            variable_size: false,
        }
    }

    fn records(o: &SynthOptions) -> Vec<TraceRecord> {
        let mut buf = Vec::new();
        generate(o, &mut buf).unwrap();
        String::from_utf8(buf)
            .unwrap()
            .lines()
            .map(|l| parse_line(l).unwrap().unwrap())
            .collect()
    }

    #[test]
    fn shape_follows_the_options() {
        let r = records(&options());
        assert_eq!(r.len(), 20_000);
        let writes = r.iter().filter(|x| x.kind == IoKind::Write).count() as f64;
        assert!((writes / 20_000.0 - 0.7).abs() < 0.02);
        assert!(r.windows(2).all(|w| w[0].timestamp <= w[1].timestamp));
        assert!(r
            .iter()
            .all(|x| x.offset + x.size <= 1 << 30 && x.offset % 4096 == 0));
        let span_s = (r[r.len() - 1].timestamp - r[0].timestamp) as f64 / 1e7;
        assert!(
            (span_s - 400.0).abs() < 40.0,
            "20k requests at ~50/s: {span_s} s"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_trace() {
        assert_eq!(records(&options()), records(&options()));
        let other = SynthOptions {
            seed: 7,
            ..options()
        };
        assert_ne!(records(&options()), records(&other));
    }

    #[test]
    fn presets_hit_their_published_ratios() {
        // 300,000 requests span thousands of busy/idle cycles for every preset; the rate is
        // checked without the diurnal swing (a run shorter than a day would sample only part
        // of it), ratio and sizes with the full preset.
        for p in PRESETS {
            let o = p.options(300_000, 4_000_000_000_000, 9);
            validate(&o).unwrap();
            let (mut writes, mut bytes, mut n) = (0u64, 0u64, 0u64);
            for a in Arrivals::new(&o) {
                n += 1;
                writes += (a.kind == IoKind::Write) as u64;
                bytes += a.size;
                assert!(a.offset + a.size <= o.volume_bytes && a.offset % 512 == 0);
                assert!(a.size >= 4096 && a.size % 512 == 0);
            }
            assert_eq!(n, 300_000);
            let ratio = writes as f64 / n as f64;
            assert!((ratio - p.write_ratio).abs() < 0.005, "{}: {ratio}", p.name);
            let mean_kib = bytes as f64 / n as f64 / 1024.0;
            assert!(
                (mean_kib / p.mean_request_kib - 1.0).abs() < 0.02,
                "{}: {mean_kib} KiB",
                p.name
            );
            let flat = SynthOptions { diurnal: 0.0, ..o };
            let span = Arrivals::new(&flat).last().map_or(0.0, |a| a.t);
            let iops = 300_000.0 / span;
            assert!(
                (iops / p.iops - 1.0).abs() < 0.05,
                "{}: {iops} IOPS",
                p.name
            );
        }
    }

    #[test]
    fn ido_presets_keep_their_ratios_and_their_hot_set() {
        for p in IDO_PRESETS {
            let o = p.options(100_000, 10 << 30, 5);
            validate(&o).unwrap();
            let (mut writes, mut n) = (0u64, 0u64);
            let mut per_block = std::collections::HashMap::<u64, u64>::new();
            for a in Arrivals::new(&o) {
                n += 1;
                writes += (a.kind == IoKind::Write) as u64;
                *per_block.entry(a.offset / HOT_BLOCK).or_default() += 1;
                assert!(a.offset + a.size <= o.volume_bytes);
            }
            let ratio = writes as f64 / n as f64;
            assert!((ratio - p.write_ratio).abs() < 0.01, "{}: {ratio}", p.name);
            // The busiest tenth of the blocks takes about the hot share (plus its part of
            // the uniform and sequential rest).
            let mut counts: Vec<u64> = per_block.values().copied().collect();
            counts.sort_unstable_by(|a, b| b.cmp(a));
            let blocks = (10u64 << 30) / HOT_BLOCK;
            let top: u64 = counts.iter().take((blocks / 10) as usize).sum();
            let share = top as f64 / n as f64;
            let (fraction, hot) = p.hot;
            let floor = hot * (1.0 - p.sequential) * (0.1 / fraction).min(1.0);
            assert!(share >= floor * 0.9, "{}: top tenth {share}", p.name);
        }
        assert!(Preset::find("fin2").is_ok());
    }

    #[test]
    fn bursts_leave_idle_gaps() {
        let o = Preset::find("mds_0").unwrap().options(50_000, 1 << 34, 2);
        let times: Vec<f64> = Arrivals::new(&o).map(|a| a.t).collect();
        // Without bursts, gaps over 30 s at 2 IOPS would be rare (e^-60); here idle gaps
        // (mean 30 s) take 80 % of the time.
        let idle: f64 = times
            .windows(2)
            .map(|w| w[1] - w[0])
            .filter(|&g| g > 10.0)
            .sum();
        let share = idle / times[times.len() - 1];
        assert!(share > 0.6, "idle share {share}");
        assert!(Preset::find("src2_9").is_err());
    }

    #[test]
    fn qmd_presets_have_table_2s_lengths_and_peak_rates() {
        for q in QMD_PRESETS {
            let p = q.preset;
            let peak = p.iops * (1.0 + p.diurnal) / p.busy_share;
            assert!(
                (peak / q.peak_iops - 1.0).abs() < 0.001,
                "{}: {peak}",
                p.name
            );
            assert_eq!(Preset::find(p.name).unwrap().name, p.name);
            validate(&p.options(1000, 1 << 40, 1)).unwrap();
        }
        assert_eq!(QMD_PRESETS[0].requests(), 45_360_000);
        // LiveMaps is flat: the busiest seconds of a generated trace arrive at its peak.
        let o = Preset::find("livemaps")
            .unwrap()
            .options(300_000, 1 << 40, 4);
        let mut per_second = std::collections::HashMap::new();
        for a in Arrivals::new(&o) {
            *per_second.entry(a.t as u64).or_insert(0u64) += 1;
        }
        let busiest = per_second.values().copied().max().unwrap_or(0) as f64;
        assert!(
            (busiest / 4700.0 - 1.0).abs() < 0.1,
            "busiest second {busiest} requests"
        );
    }

    #[test]
    fn bad_options_are_refused() {
        assert!(validate(&SynthOptions {
            write_ratio: 1.5,
            ..options()
        })
        .is_err());
        assert!(validate(&SynthOptions {
            iops: 0.0,
            ..options()
        })
        .is_err());
        assert!(validate(&options()).is_ok());
    }
}
