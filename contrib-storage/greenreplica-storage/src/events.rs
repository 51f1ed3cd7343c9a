//! The discrete-event core's queue (DiskSim's idea): pending events ordered by time, ties in
//! the order they were scheduled. The driver pops the next event and moves its clock to it
//! (`Clock::wait_until`): virtual time jumps there, real time sleeps until it, so the same
//! loop replays a trace and serves requests as they come.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::clock::Seconds;

#[derive(Debug)]
struct Entry<E> {
    at: Seconds,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    /// Reversed: the heap's top is the earliest event, then the first scheduled.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .at
            .total_cmp(&self.at)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<E> EventQueue<E> {
    pub fn push(&mut self, at: Seconds, event: E) {
        self.seq += 1;
        self.heap.push(Entry {
            at,
            seq: self.seq,
            event,
        });
    }

    /// The earliest event (of equal times, the first scheduled).
    pub fn pop(&mut self) -> Option<(Seconds, E)> {
        self.heap.pop().map(|e| (e.at, e.event))
    }

    pub fn next_time(&self) -> Option<Seconds> {
        self.heap.peek().map(|e| e.at)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_by_time_then_in_scheduling_order() {
        let mut q = EventQueue::default();
        q.push(3.0, "c");
        q.push(1.0, "a1");
        q.push(2.0, "b");
        q.push(1.0, "a2");
        assert_eq!(q.next_time(), Some(1.0));
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![(1.0, "a1"), (1.0, "a2"), (2.0, "b"), (3.0, "c")]
        );
        assert!(q.is_empty());
    }
}
