//! Membership: failing and replacing members and rebuilding a replacement (the headers that
//! record who is in sync are written by `identity`, under the same `headers` lock).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Health, Span, Volume, VolumeError};
use crate::layout::{Buf, MemberIo};
use crate::member::Member;
use crate::service_model::IoKind;
use crate::superblock::DATA_OFFSET;
use crate::sync::{lock, write};

impl Volume {
    pub fn fail_member(&self, member: usize, reason: &str) {
        {
            let _headers = lock(&self.headers);
            if !self.mark_failed(member, reason) {
                return;
            }
            self.bump_generation();
            if let Err(e) = self.write_headers_locked() {
                tracing::error!(volume = %self.name, error = %e, "cannot record the member failure in the headers");
            }
        }
        // Staged bytes may have had their only other copy on it.
        self.append_staged_now();
    }

    /// Set a member's health to failed; false if it already was (or does not exist).
    pub(super) fn mark_failed(&self, member: usize, reason: &str) -> bool {
        let Some(slot) = self.slots.get(member) else {
            return false;
        };
        {
            let mut health = lock(&slot.health);
            if matches!(*health, Health::Failed { .. }) {
                return false;
            }
            let failed = Health::Failed {
                reason: reason.to_string(),
            };
            // Journaled before any write can skip the member: the flush that acknowledges
            // such a write commits the failure first.
            self.journal_member(member, &failed);
            *health = failed;
        }
        tracing::warn!(volume = %self.name, member, reason, "member failed; volume is degraded");
        true
    }

    /// Put a replacement into a failed slot and mark it for rebuild.
    pub fn replace_member(&self, member: usize, store: Arc<dyn Member>) -> Result<(), VolumeError> {
        let _headers = lock(&self.headers);
        let slot = self
            .slots
            .get(member)
            .ok_or_else(|| self.member_error(member, "no such member"))?;
        if !matches!(slot.health(), Health::Failed { .. }) {
            return Err(self.member_error(
                member,
                "only a failed member can be replaced (fail it first)",
            ));
        }
        if !self.layout.redundant() {
            return Err(self.member_error(
                member,
                format!(
                    "layout {} keeps no second copy to rebuild from",
                    self.layout.kind()
                ),
            ));
        }
        if !self.layout.survives(&self.in_sync()) {
            return Err(self.member_error(
                member,
                "the members in sync do not hold all of its data (the rest of its group is not in sync)",
            ));
        }
        *write(&slot.store) = Some(store.clone());
        slot.read_errors.store(0, Ordering::SeqCst);
        *lock(&slot.health) = Health::Rebuilding { watermark: 0 };
        self.layout.member_replaced(member);
        self.bump_generation();
        self.write_headers_locked()?;
        // After its header, as at creation: a blank member never holds metadata alone.
        for (at, bytes) in self.layout.member_metadata(member) {
            store
                .write_at(&bytes, at)
                .and_then(|()| store.flush())
                .map_err(|e| self.member_error(member, format!("layout metadata: {e}")))?;
        }
        tracing::info!(volume = %self.name, member, "member replaced; rebuild pending");
        Ok(())
    }

    /// Copy the next `chunk` bytes onto a rebuilding member; returns the new watermark, or
    /// None once the member is in sync. Only I/O to the chunk being copied waits for it.
    pub fn rebuild_step(&self, member: usize, chunk: u64) -> Result<Option<u64>, VolumeError> {
        Ok(match self.rebuild_chunk(member, chunk, false)? {
            RebuildProgress::Copied { watermark, .. } => Some(watermark),
            RebuildProgress::Done | RebuildProgress::Busy => None,
        })
    }

    /// One rebuild step. In the thread (`on_core` false) it waits for the chunk's lock and
    /// waits out the drive model; on the event core it never waits (Busy if a request holds
    /// the chunk) and hands the member I/O back for the core to queue as background work.
    pub(super) fn rebuild_chunk(
        &self,
        member: usize,
        chunk: u64,
        on_core: bool,
    ) -> Result<RebuildProgress, VolumeError> {
        let slot = self
            .slots
            .get(member)
            .ok_or_else(|| self.member_error(member, "no such member"))?;
        let Health::Rebuilding { watermark } = slot.health() else {
            return Ok(RebuildProgress::Done);
        };
        let end = self.layout.member_data_bytes();
        if watermark >= end {
            let _headers = lock(&self.headers);
            let target = slot
                .live_store()
                .ok_or_else(|| self.member_error(member, "replacement has no storage"))?;
            target
                .flush()
                .map_err(|e| self.member_error(member, format!("flush after rebuild: {e}")))?;
            {
                let mut health = lock(&slot.health);
                if !matches!(*health, Health::Rebuilding { .. }) {
                    return Ok(RebuildProgress::Done);
                }
                *health = Health::InSync;
            }
            self.write_headers_locked()?;
            tracing::info!(volume = %self.name, member, "rebuild complete");
            return Ok(RebuildProgress::Done);
        }
        // The personality picks the bytes (MD's PR: the next ones; IDO: hot zones first).
        let (start, len) = self.layout.rebuild_next(member, watermark, chunk);
        if len == 0 || start.checked_add(len).is_none_or(|e| e > end) {
            return Err(self.member_error(
                member,
                format!("rebuild asked for member bytes {start}+{len} beyond {end}"),
            ));
        }
        let span = [Span {
            group: self.group_of(member),
            start,
            end: start + len,
        }];
        let Some(_exclusive) = self.ranges.acquire_if(&span, true, !on_core) else {
            return Ok(RebuildProgress::Busy);
        };
        let to = slot
            .live_store()
            .ok_or_else(|| self.member_error(member, "the replacement is gone"))?;
        // The personality says where the member's bytes come from (its mirror, or the rest of
        // its stripes); the replacement itself is not valid here yet.
        let mut buf = vec![0u8; len as usize];
        let now = self.clock.now();
        let plan = self
            .recover_into(member, start, &mut buf, true)
            .map_err(|e| self.member_error(member, format!("rebuild read: {e}")))?;
        if !on_core {
            let reads_done = self.submit(&plan, now).into_iter().fold(now, f64::max);
            let write_done = lock(&slot.drive).submit(reads_done, IoKind::Write, start, len);
            let timed = to.emulates_timing()
                || plan.reads.iter().any(|io| {
                    self.slots[io.member]
                        .live_store()
                        .is_some_and(|s| s.emulates_timing())
                });
            if timed {
                self.clock.sleep_until(write_done);
            }
        }
        to.write_at(&buf, DATA_OFFSET + start)
            .map_err(|e| self.member_error(member, format!("rebuild write: {e}")))?;
        slot.unflushed.store(true, Ordering::SeqCst);
        if !plan.writes.is_empty() {
            // What the step also wrote (IDO: a hot zone's stripes on the surrogate set).
            self.complete_plan(&plan, Some(&buf))?;
        }
        let watermark = self.layout.rebuilt(member, start, len, watermark);
        {
            let mut health = lock(&slot.health);
            if matches!(*health, Health::Rebuilding { .. }) {
                *health = Health::Rebuilding { watermark };
            }
        }
        Ok(RebuildProgress::Copied {
            watermark,
            reads: plan.reads,
            writes: plan.writes,
            write: MemberIo {
                member,
                member_offset: start,
                len,
                buf: Buf::Caller(0),
            },
        })
    }
}

/// What one rebuild step did.
#[derive(Debug)]
pub(super) enum RebuildProgress {
    /// The member is in sync (or no longer rebuilding).
    Done,
    /// A request holds the chunk: try again a little later.
    Busy,
    /// Copied up to `watermark`, with this member I/O (`writes`: the rebuild plan's own,
    /// besides the replacement's `write`).
    Copied {
        watermark: u64,
        reads: Vec<MemberIo>,
        writes: Vec<MemberIo>,
        write: MemberIo,
    },
}
