//! Synthetic block traces in the MSR Cambridge format, for when the real traces are not at
//! hand: Poisson arrivals whose rate follows a daily sine (diurnal shape), a write ratio,
//! a request size, and a share of sequential follow-ons. Deterministic for a given seed.

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
    Ok(())
}

pub fn generate(o: &SynthOptions, out: &mut impl Write) -> std::io::Result<()> {
    let mut rng = Rng(o.seed.max(1));
    let blocks = o.volume_bytes / o.request_bytes;
    let mut t = 0.0f64;
    let mut next_offset = 0u64;
    for _ in 0..o.requests {
        // Exponential gap at the current rate; the rate swings over the day.
        let rate = o.iops * (1.0 + o.diurnal * (2.0 * std::f64::consts::PI * t / DAY_S).sin());
        t += -rng.unit().ln() / rate;
        let offset =
            if rng.unit() <= o.sequential && next_offset + o.request_bytes <= o.volume_bytes {
                next_offset
            } else {
                (rng.next() % blocks) * o.request_bytes
            };
        next_offset = offset + o.request_bytes;
        let kind = if rng.unit() <= o.write_ratio {
            IoKind::Write
        } else {
            IoKind::Read
        };
        let record = TraceRecord {
            timestamp: START_TICKS + (t * 1e7) as u64,
            hostname: "synth".into(),
            disk: 0,
            kind,
            offset,
            size: o.request_bytes,
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
            requests: 20_000,
            iops: 50.0,
            write_ratio: 0.7,
            request_bytes: 4096,
            volume_bytes: 1 << 30,
            sequential: 0.2,
            diurnal: 0.5,
            seed: 42,
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
