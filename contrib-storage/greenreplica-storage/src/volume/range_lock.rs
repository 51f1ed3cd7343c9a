//! Range locks over member byte ranges, per mirror group (like MD's barriers, but per range):
//! a write holds its ranges exclusively so two overlapping writes cannot land in a different
//! order on the two copies; reads share them; a rebuild or resync holds only the chunk it
//! copies, so I/O elsewhere never waits for it.

use std::sync::{Condvar, Mutex};

use crate::sync::lock;

/// One locked piece: mirror group and member byte range `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub group: usize,
    pub start: u64,
    pub end: u64,
}

impl Span {
    fn overlaps(&self, other: &Span) -> bool {
        self.group == other.group && self.start < other.end && other.start < self.end
    }
}

#[derive(Debug, Default)]
pub struct RangeLocks {
    held: Mutex<Vec<(u64, Span, bool)>>,
    released: Condvar,
    next_id: Mutex<u64>,
}

/// Held until dropped.
#[derive(Debug)]
pub struct RangeGuard<'a> {
    locks: &'a RangeLocks,
    id: u64,
}

impl RangeLocks {
    /// Take every span at once (all or nothing, so two requests cannot deadlock).
    pub fn acquire(&self, spans: &[Span], exclusive: bool) -> RangeGuard<'_> {
        loop {
            if let Some(guard) = self.take(spans, exclusive, true) {
                return guard;
            }
        }
    }

    /// Take the spans, waiting for conflicting holders to release them if `wait`.
    fn take(&self, spans: &[Span], exclusive: bool, wait: bool) -> Option<RangeGuard<'_>> {
        let id = {
            let mut next = lock(&self.next_id);
            *next += 1;
            *next
        };
        let mut held = lock(&self.held);
        loop {
            let conflict = held.iter().any(|(_, h, h_excl)| {
                (exclusive || *h_excl) && spans.iter().any(|s| s.overlaps(h))
            });
            if !conflict {
                held.extend(spans.iter().map(|s| (id, *s, exclusive)));
                return Some(RangeGuard { locks: self, id });
            }
            if !wait {
                return None;
            }
            held = self
                .released
                .wait(held)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

impl RangeLocks {
    /// `acquire` when `wait`; otherwise the spans only if none conflicts now, else None
    /// (the event core must never wait for a lock a caller holds while it waits for the
    /// core).
    pub fn acquire_if(
        &self,
        spans: &[Span],
        exclusive: bool,
        wait: bool,
    ) -> Option<RangeGuard<'_>> {
        self.take(spans, exclusive, wait)
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        lock(&self.locks.held).retain(|(id, _, _)| *id != self.id);
        self.locks.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    fn span(group: usize, start: u64, end: u64) -> Span {
        Span { group, start, end }
    }

    #[test]
    fn readers_share_and_a_writer_waits_for_them() {
        let locks = Arc::new(RangeLocks::default());
        let r1 = locks.acquire(&[span(0, 0, 100)], false);
        let _r2 = locks.acquire(&[span(0, 50, 150)], false);
        // Another group and a disjoint range do not conflict with anything.
        let _w_other = locks.acquire(&[span(1, 0, 100), span(0, 200, 300)], true);
        let done = Arc::new(AtomicBool::new(false));
        let t = {
            let (locks, done) = (locks.clone(), done.clone());
            std::thread::spawn(move || {
                let _w = locks.acquire(&[span(0, 90, 95)], true);
                done.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!done.load(Ordering::SeqCst), "writer overlapped a reader");
        drop(r1);
        drop(_r2);
        t.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
    }
}
