//! Figure 4 of the QMD paper, as the personality's background work: per mirror, buffered
//! runs are written back to its second disk in elevator order from the head position, at
//! most K per volume tick (between two ticks the engine serves foreground requests: reads
//! hit in flash or go to a disk, writes keep going to the buffer while the flush runs).
//!
//! The budget follows Figure 4's loop (each iteration takes the incoming requests, then K
//! write-backs): a tick may write back K runs per foreground request planned since the last
//! tick, and without any requests as many as the engine's per-tick share allows.
//!
//! A drive serves queued foreground commands before background ones only among the oldest
//! commands of its queue (its window, `drive/queue.rs`): a read queued behind a longer
//! backlog waits for all of it. So reads of a pair go to the active disk while the second
//! disk holds half its window or more (`backlogged`), and the write-back keeps at most four
//! windows queued on a second disk (what the engine reports in its view plus what this tick
//! gave it, which the engine queues after the tick): about a second of small writes on a
//! 15K disk, enough to keep it busy between two ticks, where before a tick could queue 8 MiB
//! of small runs (many seconds of work) on it.
//!
//! A mirror flushes when its second disk is up (the power policy woke it: utilization rose)
//! or when the buffer passes its fill threshold (then the write-back itself wakes it), and
//! keeps flushing until its index is empty.

use super::index::{Head, MirrorIndex};
use crate::clock::Seconds;
use crate::layout::MemberView;

/// Shortest budget period (volume ticks are further apart).
const BUDGET_PERIOD_S: Seconds = 0.05;

/// The flush's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlushParams {
    /// Write-backs per volume tick (the paper's K: 2 favours reads, 10 the write-back).
    pub k: usize,
    /// Share of the flash extents in use above which every mirror flushes.
    pub fill_threshold: f64,
}

impl Default for FlushParams {
    fn default() -> Self {
        Self {
            k: 2,
            fill_threshold: 0.8,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Flush {
    pub params: FlushParams,
    pub heads: Vec<Head>,
    /// Mirrors flushing because the buffer filled (until their index is empty).
    pub forced: Vec<bool>,
    /// The tick whose budget `used` counts, and that budget.
    tick: Option<Seconds>,
    used: usize,
    allowed: usize,
    /// Foreground requests planned since the last tick.
    requests: usize,
    /// A drain (`background_all`): no budget until every index is empty.
    pub draining: bool,
    /// Write-backs given to each pair's second disk in this budget period.
    issued: Vec<usize>,
}

/// Write-backs a second disk may hold queued: four times its drive's window.
fn queue_cap(window: usize) -> usize {
    window.saturating_mul(4).max(1)
}

/// A disk holding half its drive's window or more: a read sent there could queue behind
/// background commands outside the window.
pub fn backlogged(view: &MemberView) -> bool {
    view.queued >= (view.window / 2).max(1)
}

impl Flush {
    pub fn new(pairs: usize, params: FlushParams) -> Self {
        Self {
            params,
            heads: vec![Head::default(); pairs],
            forced: vec![false; pairs],
            tick: None,
            used: 0,
            allowed: 0,
            requests: 0,
            draining: false,
            issued: vec![0; pairs],
        }
    }

    /// A foreground request was planned.
    pub fn request(&mut self) {
        self.requests = self.requests.saturating_add(1);
    }

    /// A new budget period (a volume tick: the steps of one tick ask within microseconds of
    /// each other in real time) sets the budget: K per request since the last period,
    /// unlimited without requests; whether any is left.
    pub fn budget_left(&mut self, now: Seconds) -> bool {
        if self
            .tick
            .is_none_or(|t| now - t >= BUDGET_PERIOD_S || now < t)
        {
            self.tick = Some(now);
            self.used = 0;
            self.allowed = match self.requests {
                0 => usize::MAX,
                n => n.saturating_mul(self.params.k),
            };
            self.requests = 0;
            self.issued.fill(0);
        }
        self.draining || self.used < self.allowed
    }

    /// Whether pair `p`'s second disk, seen as `second`, can take one more write-back
    /// without a read arriving there being queued behind write-backs (a drain has no bound:
    /// it serves nothing else).
    pub fn room(&self, p: usize, second: &MemberView) -> bool {
        self.draining || second.queued.saturating_add(self.issued[p]) < queue_cap(second.window)
    }

    /// Take one write-back of the budget for pair `p`.
    pub fn take(&mut self, p: usize) -> bool {
        if self.draining || self.used < self.allowed {
            self.used += 1;
            self.issued[p] += 1;
            return true;
        }
        false
    }

    /// After a change: force every mirror with buffered runs to flush once the fill passes
    /// the threshold; mirrors with nothing left stop.
    pub fn update(&mut self, fill: f64, index: &[MirrorIndex]) {
        let over = fill >= self.params.fill_threshold;
        for (p, i) in index.iter().enumerate() {
            if i.is_empty() {
                self.forced[p] = false;
            } else if over {
                self.forced[p] = true;
            }
        }
        if index.iter().all(MirrorIndex::is_empty) {
            self.draining = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::qmd::index::Entry;

    #[test]
    fn k_write_backs_per_request_unlimited_when_idle_or_draining() {
        let mut f = Flush::new(
            1,
            FlushParams {
                k: 2,
                ..FlushParams::default()
            },
        );
        f.request();
        assert!(f.budget_left(1.0));
        assert!(f.take(0) && f.take(0));
        assert!(!f.take(0));
        assert!(!f.budget_left(1.0), "same tick");
        assert!(!f.budget_left(1.001), "the same tick in real time");
        (0..3).for_each(|_| f.request());
        assert!(f.budget_left(2.0), "a new tick");
        assert_eq!((0..10).filter(|_| f.take(0)).count(), 6, "K per request");
        assert!(f.budget_left(3.0), "no requests: idle");
        assert!((0..1000).all(|_| f.take(0)));
        f.request();
        f.budget_left(4.0);
        f.draining = true;
        assert!((0..100).all(|_| f.take(0)));
    }

    #[test]
    fn the_fill_threshold_forces_mirrors_with_buffered_runs() {
        let mut f = Flush::new(2, FlushParams::default());
        let mut busy = MirrorIndex::default();
        busy.set_range(
            0,
            8,
            Some(Entry {
                len: 8,
                flash_off: 0,
                sole: false,
            }),
            |_, _| {},
            |_, _| {},
        );
        let index = vec![busy, MirrorIndex::default()];
        f.update(0.5, &index);
        assert_eq!(f.forced, vec![false, false]);
        f.update(0.8, &index);
        assert_eq!(f.forced, vec![true, false]);
        f.update(0.1, &index);
        assert_eq!(f.forced, vec![true, false], "until its index is empty");
        f.update(0.1, &[MirrorIndex::default(), MirrorIndex::default()]);
        assert_eq!(f.forced, vec![false, false]);
    }
}
