//! Commands and the drive's command queue: a window of `depth` commands the drive may
//! reorder (NCQ/TCQ), foreground commands ahead of background work, FLUSH CACHE as a
//! barrier.

use crate::clock::Seconds;
use crate::profile::SchedulerKind;

use super::mechanism::Mechanism;
use super::scheduler;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    /// `fua`: Force Unit Access, the write reaches the media before it completes.
    Write {
        fua: bool,
    },
    /// FLUSH CACHE: completes when every cached write is on the media.
    Flush,
}

/// Foreground I/O is served before background work (rebuild, destage, scrub).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    Foreground,
    Background,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    pub id: u64,
    pub op: Op,
    pub offset: u64,
    pub len: u64,
    pub class: Class,
    pub arrival: Seconds,
    /// The bytes of a write, when the caller wants the cache to keep them (crash tests).
    pub data: Option<Vec<u8>>,
}

#[derive(Debug, Clone)]
pub struct CommandQueue {
    /// In arrival order.
    pending: Vec<Command>,
    depth: usize,
    scheduler: SchedulerKind,
}

impl CommandQueue {
    pub fn new(depth: usize, scheduler: SchedulerKind) -> Self {
        Self {
            pending: Vec::new(),
            depth: depth.max(1),
            scheduler,
        }
    }

    pub fn push(&mut self, command: Command) {
        self.pending.push(command);
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn depth(&self) -> usize {
        self.depth
    }

    pub fn scheduler(&self) -> SchedulerKind {
        self.scheduler
    }

    pub fn set_policy(&mut self, depth: usize, scheduler: SchedulerKind) {
        self.depth = depth.max(1);
        self.scheduler = scheduler;
    }

    pub fn earliest_arrival(&self) -> Option<Seconds> {
        self.pending.iter().map(|c| c.arrival).reduce(f64::min)
    }

    /// Indices the scheduler may choose from: the drive sees only `depth` commands, nothing
    /// passes a FLUSH, and background work waits while foreground commands are queued.
    fn eligible(&self) -> Vec<usize> {
        let window = self.pending.len().min(self.depth);
        let barrier = self.pending[..window]
            .iter()
            .position(|c| c.op == Op::Flush);
        let candidates: Vec<usize> = match barrier {
            Some(0) => vec![0],
            Some(p) => (0..p).collect(),
            None => (0..window).collect(),
        };
        let best_class = candidates
            .iter()
            .map(|&i| self.pending[i].class)
            .min()
            .unwrap_or(Class::Foreground);
        candidates
            .into_iter()
            .filter(|&i| self.pending[i].class == best_class)
            .collect()
    }

    /// Remove and return the command to serve next, chosen at time `at`.
    pub fn take_next(&mut self, mechanism: &dyn Mechanism, at: Seconds) -> Option<Command> {
        if self.pending.is_empty() {
            return None;
        }
        let eligible = self.eligible();
        let choices: Vec<&Command> = eligible.iter().map(|&i| &self.pending[i]).collect();
        let pick = scheduler::pick(self.scheduler, &choices, mechanism, at);
        Some(self.pending.remove(eligible[pick]))
    }
}
