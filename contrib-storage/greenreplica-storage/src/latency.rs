//! Response-time statistics: exact percentiles for replays, a lock-free histogram with
//! Prometheus buckets for the daemon.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Upper bounds in seconds of the histogram buckets (plus +Inf).
pub const BUCKETS_S: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 10.0, 60.0,
];

#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize)]
pub struct ResponseSummary {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    /// The tail QMD's paper reports (99.5, 99.9 and 99.95th percentiles).
    pub p99_5: f64,
    pub p99_9: f64,
    pub p99_95: f64,
    pub max: f64,
}

/// Collects every sample; fine for replays (8 bytes per request).
#[derive(Debug, Default)]
pub struct Samples {
    values: Vec<f64>,
}

impl Samples {
    pub fn push(&mut self, v: f64) {
        self.values.push(v);
    }

    /// Nearest-rank percentiles, scaled by `scale` (e.g. 1000 for milliseconds).
    pub fn summary(&mut self, scale: f64) -> ResponseSummary {
        if self.values.is_empty() {
            return ResponseSummary::default();
        }
        self.values.sort_by(f64::total_cmp);
        let n = self.values.len();
        let rank = |p: f64| {
            let idx = ((p / 100.0) * n as f64).ceil() as usize;
            self.values[idx.clamp(1, n) - 1] * scale
        };
        ResponseSummary {
            count: n as u64,
            mean: self.values.iter().sum::<f64>() / n as f64 * scale,
            p50: rank(50.0),
            p95: rank(95.0),
            p99: rank(99.0),
            p99_5: rank(99.5),
            p99_9: rank(99.9),
            p99_95: rank(99.95),
            max: self.values[n - 1] * scale,
        }
    }
}

#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS_S.len()],
    count: AtomicU64,
    /// Sum in nanoseconds, so it fits an atomic integer.
    sum_ns: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, seconds: f64) {
        if let Some(i) = BUCKETS_S.iter().position(|&b| seconds <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add((seconds.max(0.0) * 1e9) as u64, Ordering::Relaxed);
    }

    /// Cumulative counts per bucket, then the total count and the sum in seconds.
    pub fn snapshot(&self) -> (Vec<u64>, u64, f64) {
        let mut cumulative = Vec::with_capacity(BUCKETS_S.len());
        let mut running = 0;
        for b in &self.buckets {
            running += b.load(Ordering::Relaxed);
            cumulative.push(running);
        }
        (
            cumulative,
            self.count.load(Ordering::Relaxed),
            self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut s = Samples::default();
        for v in 1..=100 {
            s.push(f64::from(v));
        }
        let r = s.summary(1.0);
        assert_eq!((r.p50, r.p95, r.p99, r.max), (50.0, 95.0, 99.0, 100.0));
        assert_eq!(r.mean, 50.5);
    }

    #[test]
    fn histogram_is_cumulative() {
        let h = Histogram::default();
        h.observe(0.00005);
        h.observe(0.003);
        h.observe(1000.0);
        let (buckets, count, sum) = h.snapshot();
        assert_eq!(buckets[0], 1);
        assert_eq!(buckets[5], 2);
        assert_eq!(*buckets.last().unwrap(), 2, "1000 s only counts in +Inf");
        assert_eq!(count, 3);
        assert!((sum - 1000.00305).abs() < 1e-6);
    }
}
