//! Seek time by distance in cylinders: `a + b·√d` for short seeks (the arm accelerates and
//! decelerates), `c + e·d` for long ones (it coasts), as measured by Ruemmler & Wilkes and
//! used by DiskSim. The four coefficients are fitted to the figures a data sheet gives:
//! track-to-track (d = 1), full stroke (d = C − 1), continuity at the boundary, and the
//! average over random pairs of cylinders equal to the average seek.

use crate::clock::Seconds;

#[derive(Debug, Clone, PartialEq)]
pub struct SeekCurve {
    short_a: f64,
    short_b: f64,
    long_c: f64,
    long_e: f64,
    boundary: u64,
    write_settle_s: f64,
}

impl SeekCurve {
    /// Fit the curve; fails when the figures admit no curve that grows with distance.
    pub fn fit(
        track_to_track_s: f64,
        average_s: f64,
        full_stroke_s: f64,
        cylinders: u64,
        short_fraction: f64,
        write_settle_s: f64,
    ) -> Result<Self, String> {
        let max = cylinders.saturating_sub(1).max(2);
        let boundary = ((max as f64 * short_fraction).round() as u64).clamp(1, max - 1);
        // Random pairs of cylinders are d apart with weight C − d (d ≥ 1).
        let (mut w_short, mut w_sqrt, mut w_long, mut w_dist) = (0.0, 0.0, 0.0, 0.0);
        for d in 1..=max {
            let w = (max + 1 - d) as f64;
            if d <= boundary {
                w_short += w;
                w_sqrt += w * (d as f64).sqrt();
            } else {
                w_long += w;
                w_dist += w * d as f64;
            }
        }
        let total = w_short + w_long;
        // With a = t2t − b and c = full − e·max, continuity and the mean leave two
        // equations in b and e.
        let sqrt_b = (boundary as f64).sqrt();
        let (m11, m12, r1) = (
            sqrt_b - 1.0,
            max as f64 - boundary as f64,
            full_stroke_s - track_to_track_s,
        );
        let (m21, m22, r2) = (
            w_sqrt - w_short,
            w_dist - max as f64 * w_long,
            average_s * total - track_to_track_s * w_short - full_stroke_s * w_long,
        );
        let det = m11 * m22 - m12 * m21;
        if det.abs() < f64::MIN_POSITIVE {
            return Err("seek figures give a singular fit".into());
        }
        let b = (r1 * m22 - m12 * r2) / det;
        let e = (m11 * r2 - m21 * r1) / det;
        if !(b >= 0.0 && e >= 0.0) {
            return Err(format!(
                "no seek curve through track-to-track {:.3} ms, average {:.3} ms and full \
                 stroke {:.3} ms grows with distance (fitted slopes {b:.2e}, {e:.2e})",
                track_to_track_s * 1e3,
                average_s * 1e3,
                full_stroke_s * 1e3
            ));
        }
        Ok(Self {
            short_a: track_to_track_s - b,
            short_b: b,
            long_c: full_stroke_s - e * max as f64,
            long_e: e,
            boundary,
            write_settle_s,
        })
    }

    /// Time to move the arm `distance` cylinders (0: none), settle included.
    pub fn time(&self, distance: u64, write: bool) -> Seconds {
        if distance == 0 {
            return 0.0;
        }
        let d = distance as f64;
        let t = if distance <= self.boundary {
            self.short_a + self.short_b * d.sqrt()
        } else {
            self.long_c + self.long_e * d
        };
        t + if write { self.write_settle_s } else { 0.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fitted_curve_meets_the_data_sheet_figures() {
        let c = SeekCurve::fit(0.3e-3, 4.4e-3, 10.0e-3, 50_000, 0.2, 0.0).unwrap();
        assert!((c.time(1, false) - 0.3e-3).abs() < 1e-12);
        assert!((c.time(49_999, false) - 10.0e-3).abs() < 1e-9);
        // The mean over uniformly random cylinder pairs is the average seek.
        let mut next = crate::drive::geometry::tests::lcg(3);
        let n = 200_000;
        let mean = (0..n)
            .map(|_| {
                let (x, y) = (next() % 50_000, next() % 50_000);
                c.time(x.abs_diff(y), false)
            })
            .sum::<f64>()
            / n as f64;
        assert!((mean - 4.4e-3).abs() < 0.05e-3, "mean {mean}");
    }

    #[test]
    fn seek_time_grows_with_distance_and_is_continuous() {
        let c = SeekCurve::fit(0.6e-3, 3.4e-3, 6.5e-3, 20_000, 0.2, 0.1e-3).unwrap();
        let mut last = 0.0;
        for d in (1..20_000).step_by(97) {
            let t = c.time(d, false);
            assert!(t >= last, "d={d}");
            last = t;
        }
        let b = c.boundary;
        assert!((c.time(b, false) - c.time(b + 1, false)).abs() < 1e-6);
        assert!((c.time(5, true) - c.time(5, false) - 0.1e-3).abs() < 1e-12);
        assert_eq!(c.time(0, true), 0.0);
    }

    #[test]
    fn impossible_figures_are_refused() {
        // An average above the full stroke cannot be met by a growing curve.
        assert!(SeekCurve::fit(1e-3, 20e-3, 10e-3, 10_000, 0.2, 0.0).is_err());
    }
}
