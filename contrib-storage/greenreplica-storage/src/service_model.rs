//! Service time of one request on a drive: seek by distance, rotational latency from the
//! platter's angle, transfer; sequential follow-ons skip seek and rotation.

use crate::clock::Seconds;
use crate::profile::DriveProfile;

/// E[sqrt(|x − y|)] for x, y uniform on [0, 1]: lets us derive the full-stroke seek so that
/// the mean over random requests equals the profile's average seek.
const MEAN_SQRT_DISTANCE: f64 = 8.0 / 15.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    Read,
    Write,
}

#[derive(Debug, Clone)]
pub struct ServiceModel {
    capacity: f64,
    track_to_track_s: f64,
    /// Seek time added per unit of sqrt(distance / capacity).
    seek_span_s: f64,
    revolution_s: f64,
    track_bytes: f64,
    read_rate: f64,
    write_rate: f64,
    read_overhead_s: f64,
    write_overhead_s: f64,
    /// Where the head ends after the last request, for sequential detection.
    head: Option<u64>,
}

impl ServiceModel {
    pub fn new(profile: &DriveProfile) -> Self {
        let revolution_s = if profile.rpm > 0 {
            60.0 / f64::from(profile.rpm)
        } else {
            0.0
        };
        let t2t = profile.track_to_track_seek_ms / 1e3;
        let avg = profile.avg_seek_ms / 1e3;
        Self {
            capacity: profile.capacity_bytes as f64,
            track_to_track_s: t2t,
            seek_span_s: (avg - t2t).max(0.0) / MEAN_SQRT_DISTANCE,
            revolution_s,
            track_bytes: profile.read_rate_bytes_s() * revolution_s,
            read_rate: profile.read_rate_bytes_s(),
            write_rate: profile.write_rate_bytes_s(),
            read_overhead_s: profile.read_overhead_ms / 1e3,
            write_overhead_s: profile.write_overhead_ms / 1e3,
            head: None,
        }
    }

    /// Seek time between two byte offsets. A target on the head's own track needs no seek,
    /// only rotation: charging a track-to-track seek there would make sorted write-back of
    /// nearby blocks cost as much as random I/O.
    pub fn seek_time(&self, from: u64, to: u64) -> Seconds {
        if from == to || self.seek_span_s == 0.0 && self.track_to_track_s == 0.0 {
            return 0.0;
        }
        if (from.abs_diff(to) as f64) < self.track_bytes {
            return 0.0;
        }
        let distance = (from.abs_diff(to) as f64 / self.capacity).min(1.0);
        self.track_to_track_s + self.seek_span_s * distance.sqrt()
    }

    /// Wait for the target sector to come under the head, given the platter's angle at `at`.
    fn rotational_latency(&self, offset: u64, at: Seconds) -> Seconds {
        if self.revolution_s == 0.0 || self.track_bytes == 0.0 {
            return 0.0;
        }
        let head_angle = (at / self.revolution_s).fract();
        let target_angle = (offset as f64 / self.track_bytes).fract();
        (target_angle - head_angle).rem_euclid(1.0) * self.revolution_s
    }

    /// Time to serve a request that starts at `start`; moves the head.
    pub fn service(&mut self, kind: IoKind, offset: u64, len: u64, start: Seconds) -> Seconds {
        let (rate, overhead) = match kind {
            IoKind::Read => (self.read_rate, self.read_overhead_s),
            IoKind::Write => (self.write_rate, self.write_overhead_s),
        };
        let positioning = match self.head {
            Some(head) if head == offset => 0.0,
            head => {
                let seek = self.seek_time(head.unwrap_or(0), offset);
                seek + self.rotational_latency(offset, start + overhead + seek)
            }
        };
        self.head = Some(offset.saturating_add(len));
        overhead + positioning + len as f64 / rate
    }

    /// After a spin-up the head position is unknown again.
    pub fn forget_head(&mut self) {
        self.head = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str) -> ServiceModel {
        ServiceModel::new(&DriveProfile::load(name).unwrap())
    }

    #[test]
    fn sequential_follow_on_is_transfer_only() {
        let mut m = model("ultrastar-36z15");
        m.service(IoKind::Read, 1 << 30, 4096, 0.0);
        let t = m.service(IoKind::Read, (1 << 30) + 4096, 65536, 1.0);
        assert!((t - 65536.0 / 55e6).abs() < 1e-12);
    }

    #[test]
    fn a_target_on_the_same_track_needs_rotation_only() {
        let mut m = model("deskstar-t7k250");
        assert_eq!(m.seek_time(1 << 30, (1 << 30) + 65536), 0.0);
        assert!(m.seek_time(1 << 30, 2 << 30) > 0.0);
        // 64 KiB further on the same track: the wait is the platter's turn over the gap,
        // well under half a revolution.
        let end = m.service(IoKind::Write, 1 << 30, 8192, 0.0);
        let t = m.service(IoKind::Write, (1 << 30) + 8192 + 65536, 8192, end);
        assert!(t < 0.5 * 60.0 / 7200.0, "took {t}");
    }

    #[test]
    fn longer_seeks_take_longer() {
        let m = model("ultrastar-36z15");
        let near = m.seek_time(0, 1 << 20);
        let far = m.seek_time(0, 10 << 30);
        assert!(near < far);
        assert!(far <= 0.0006 + (0.0034 - 0.0006) / MEAN_SQRT_DISTANCE + 1e-12);
    }

    #[test]
    fn random_requests_average_to_the_profile_figures() {
        // Deterministic pseudo-random offsets: mean positioning ≈ avg seek + half a turn.
        let mut m = model("ultrastar-36z15");
        let cap = 18_400_000_000u64;
        let mut x: u64 = 12345;
        let mut total = 0.0;
        let mut t = 0.0;
        let n = 20_000;
        for _ in 0..n {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let off = (x >> 11) % cap / 4096 * 4096;
            let s = m.service(IoKind::Read, off, 512, t);
            t += s + 0.0123;
            total += s;
        }
        let mean_ms = total / n as f64 * 1e3;
        let expected_ms = 3.4 + 2.0;
        assert!(
            (mean_ms - expected_ms).abs() < 0.3,
            "mean {mean_ms} ms vs {expected_ms} ms"
        );
    }

    #[test]
    fn flash_has_no_positioning_cost() {
        let mut m = model("ssd");
        let t = m.service(IoKind::Write, 123 << 20, 4096, 0.5);
        assert!((t - (0.085e-3 + 4096.0 / 70e6)).abs() < 1e-12);
    }
}
