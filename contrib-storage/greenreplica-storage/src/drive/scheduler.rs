//! Which queued command a drive serves next: FCFS, SSTF, C-LOOK or SPTF (Worthington,
//! Ganger & Patt 1994; DiskSim's per-disk schedulers).

use crate::clock::Seconds;
use crate::profile::SchedulerKind;

use super::mechanism::Mechanism;
use super::queue::Command;

/// The index in `choices` (oldest first) to serve at `at`; ties go to the oldest.
pub fn pick(
    kind: SchedulerKind,
    choices: &[&Command],
    mechanism: &dyn Mechanism,
    at: Seconds,
) -> usize {
    if choices.len() <= 1 {
        return 0;
    }
    let head = mechanism.head().map_or(0, |h| h.cylinder);
    let min_by = |key: &dyn Fn(&Command) -> f64| {
        let mut best = (0, f64::INFINITY);
        for (i, c) in choices.iter().enumerate() {
            let k = key(c);
            if k < best.1 {
                best = (i, k);
            }
        }
        best.0
    };
    match kind {
        SchedulerKind::Fcfs => 0,
        SchedulerKind::Sstf => min_by(&|c| mechanism.cylinder(c.offset).abs_diff(head) as f64),
        SchedulerKind::CLook => {
            // Ascending from the head; past the last request, back to the lowest cylinder.
            let ahead = |c: &Command| {
                let cyl = mechanism.cylinder(c.offset);
                if cyl >= head {
                    (cyl - head) as f64
                } else {
                    1e18 + cyl as f64
                }
            };
            min_by(&ahead)
        }
        SchedulerKind::Sptf => min_by(&|c| mechanism.positioning(c, at)),
    }
}
