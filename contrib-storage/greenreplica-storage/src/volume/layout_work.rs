//! The personality's own background work (RoLo's and GRAID's destage) on the engine: each
//! volume tick runs a few steps. A step takes the range lock of the volume bytes the
//! personality names (without waiting: the event core must never wait for a lock a caller
//! holds while it waits for the core), moves the bytes of its plan when the members store
//! bytes, charges its member I/O to the drives as background work, and completes it like a
//! write, so its records reach the metadata journal.

use super::io::Caller;
use super::{Volume, VolumeError};

/// Bytes of personality background work per tick at most (a destage spread over idle
/// slots rather than done in one burst).
const BYTES_PER_TICK: u64 = 8 << 20;

impl Volume {
    /// One step; the volume bytes it covered, Ok(0) when there is nothing to do now (or its
    /// range is in use).
    pub fn layout_background_step(&self) -> Result<u64, VolumeError> {
        let now = self.clock.now();
        let Some((offset, len)) = self.layout.background_work(&self.views(now)) else {
            return Ok(0);
        };
        let spans = self.spans_of(offset, len);
        let Some(_guard) = self.ranges.acquire_if(&spans, true, false) else {
            return Ok(0);
        };
        let plan = self.layout.background_plan(offset, len, &self.views(now))?;
        let stores = self.slots.iter().any(|s| s.live_store().is_some());
        if stores {
            let mut buf = vec![0u8; len as usize];
            // A step that does not complete releases what its planning reserved (QMD's
            // flash slot for a run its compaction moves).
            let failed = self
                .run(&plan, Caller::Read(&mut buf), true, now)
                .inspect_err(|_| self.layout.abandon(&plan))?;
            if failed {
                // A member failed on the way: the personality re-plans on the next step.
                self.layout.abandon(&plan);
                return Ok(len);
            }
        }
        for (kind, io) in plan.ios() {
            self.account(io.member, kind, io.member_offset, io.len);
        }
        // Background plans stage nothing (only foreground writes do).
        self.complete_plan(&plan, None)?;
        Ok(len)
    }

    /// A tick's share of the personality's background work.
    pub(super) fn layout_background_tick(&self) {
        if self.meta.is_none() {
            // Nothing to make durable: the personality's metadata blocks are written (their
            // I/O is real work on the members) and what it freed may be reused now.
            if let Err(e) = self.write_metadata_blocks() {
                tracing::warn!(volume = %self.name, error = %e, "layout metadata blocks failed");
            }
            self.layout.committed();
        }
        if let Some(pinned) = self.layout.pinned() {
            self.power.with(|c| c.manager_mut().pin(&pinned));
        }
        self.layout_prewake();
        let mut moved = 0;
        while moved < BYTES_PER_TICK {
            let before = self.layout.next_wakeup(self.clock.now());
            if before.is_none() {
                return;
            }
            match self.layout_background_step() {
                Ok(0) => return,
                Ok(len) => moved += len,
                Err(e) => {
                    tracing::warn!(volume = %self.name, error = %e, "layout background work failed");
                    return;
                }
            }
        }
    }

    /// Make all of the personality's deferred work due (RoLo: destage every pair) and run
    /// it until none is left that can be done now; returns the steps taken.
    pub fn drain_layout_background(&self) -> Result<usize, VolumeError> {
        self.layout.background_all();
        let mut steps = 0;
        while self.layout_background_step()? > 0 {
            steps += 1;
        }
        Ok(steps)
    }
}
