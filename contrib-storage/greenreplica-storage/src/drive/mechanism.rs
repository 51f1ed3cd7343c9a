//! The seam between the command queue and what serves a command: a disk mechanism (seek,
//! rotation, zones, buffer) or a flash device. One trait, two implementations.

use crate::clock::Seconds;

use super::cache::Extent;
use super::queue::Command;

/// Where the head is: the personality that sorts by it (QMD's elevator) reads this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct HeadPosition {
    pub zone: usize,
    pub cylinder: u64,
    pub head: u64,
    /// Byte offset of the sector under the head.
    pub offset: u64,
}

/// The outcome of serving one command.
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    pub done: Seconds,
    /// When the mechanism can start the next command: before `done` when the rest is an
    /// interface transfer into the buffer (a cached write), which overlaps media work.
    pub media_free_at: Seconds,
    /// A read served from the buffer (no media access).
    pub cache_hit: bool,
    /// For reads of data still dirty in the write cache, the cached bytes when kept.
    pub data: Option<Vec<u8>>,
}

pub trait Mechanism: Send + std::fmt::Debug {
    /// Commands served at once (1 for a disk arm, the parallel units of flash).
    fn parallelism(&self) -> usize {
        1
    }

    /// Time from `at` until the command's data transfer could start (SPTF's key); does not
    /// change any state.
    fn positioning(&self, command: &Command, at: Seconds) -> Seconds;

    /// The cylinder an offset lies on (0 for flash): SSTF's and C-LOOK's key.
    fn cylinder(&self, offset: u64) -> u64;

    fn head(&self) -> Option<HeadPosition>;

    /// Serve the command starting at `start`; moves the head and updates the buffer.
    fn serve(&mut self, command: &Command, start: Seconds) -> Served;

    /// Dirty data waiting in a write-back cache.
    fn dirty_bytes(&self) -> u64 {
        0
    }

    /// Idle time before destaging starts.
    fn destage_delay(&self) -> Seconds {
        0.0
    }

    /// Destage one dirty extent starting at `start`; returns when it is on the media.
    fn destage_one(&mut self, start: Seconds) -> Seconds {
        start
    }

    /// Extents written to the media by destaging since the last call (with their bytes
    /// when the writes carried them).
    fn take_destaged(&mut self) -> Vec<(u64, Extent)> {
        Vec::new()
    }

    /// `hdparm -W`: turn the write-back cache on or off; false if there is none.
    fn set_write_cache(&mut self, _on: bool) -> bool {
        false
    }

    fn write_cache_enabled(&self) -> bool {
        false
    }

    /// After a spin-up or power cycle the head position is unknown.
    fn forget_head(&mut self);

    /// Power is cut: volatile buffer contents are lost; returns the dirty extents lost.
    fn power_loss(&mut self) -> Vec<(u64, u64)>;
}
