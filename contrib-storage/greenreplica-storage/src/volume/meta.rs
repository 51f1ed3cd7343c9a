//! The engine's side of the metadata journal (`journal::meta`): what it records and when.
//!
//! * A member's failure is appended before I/O can see it, so the flush that acknowledges
//!   a write that skipped the member commits the failure first.
//! * The membership picture (generation and every member's health) is committed before the
//!   member headers are written.
//! * A rebuild's progress is appended after the rebuilt bytes were flushed.
//! * The personality's records are appended when a write completes and committed by the
//!   next flush, after the members' flush and before the flush returns.

use super::{Health, Volume, VolumeError};
use crate::journal::meta::{JournaledHealth, MetaJournal};
use std::sync::atomic::Ordering;

use crate::layout::{Buf, Plan};
use crate::service_model::IoKind;
use crate::superblock::DATA_OFFSET;
use crate::sync::lock;

pub(super) fn journaled(health: &Health) -> JournaledHealth {
    match health {
        Health::InSync => JournaledHealth::InSync,
        Health::Rebuilding { watermark } => JournaledHealth::Rebuilding {
            watermark: *watermark,
        },
        Health::Failed { reason } => JournaledHealth::Failed {
            reason: reason.clone(),
        },
    }
}

impl Volume {
    /// Keep a metadata journal (set up by assembly, which has replayed it).
    pub fn with_metadata_journal(mut self, journal: MetaJournal) -> Self {
        self.meta = Some(journal);
        self
    }

    pub fn metadata_journal(&self) -> Option<&MetaJournal> {
        self.meta.as_ref()
    }

    fn journal_error(&self, what: &str, e: anyhow::Error) -> VolumeError {
        VolumeError::Io {
            volume: self.name.clone(),
            problem: format!("metadata journal: cannot {what}: {e:#}"),
        }
    }

    /// Append a member's new health (before it becomes visible to I/O).
    pub(super) fn journal_member(&self, member: usize, health: &Health) {
        if let Some(meta) = &self.meta {
            if let Err(e) = meta.record_member(member, journaled(health)) {
                tracing::error!(volume = %self.name, member, error = %format!("{e:#}"),
                    "cannot journal a member's health change");
            }
        }
    }

    /// Commit the membership picture; the caller holds `headers` and writes the headers
    /// next. A journal that cannot be written leaves the headers to record the change.
    pub(super) fn journal_picture(&self, generation: u64, volume_id: &str) {
        let Some(meta) = &self.meta else { return };
        let members = self.slots.iter().map(|s| journaled(&s.health())).collect();
        if let Err(e) = meta
            .record_picture(volume_id, generation, members)
            .and_then(|()| meta.commit())
        {
            tracing::error!(volume = %self.name, error = %format!("{e:#}"),
                "cannot journal the membership; the member headers still record it");
        }
    }

    /// A write's data landed: let the personality update its metadata and journal it.
    /// `data` is the write's buffer (None in a replay, which moves no bytes): the plan's
    /// staged pieces are taken from it.
    pub(super) fn complete_plan(
        &self,
        plan: &Plan,
        data: Option<&[u8]>,
    ) -> Result<(), VolumeError> {
        // The layout's outbox is shared: whatever this thread drains (its own records and
        // any another thread's `complete` left there) is appended before a commit can run.
        let _order = lock(&self.journal_order);
        // Under the same lock as the flush's `staged_appends`: a flush that sees this
        // write's index entry also appends its bytes.
        for io in &plan.stage {
            let zeros;
            let bytes = match (data, io.buf) {
                (Some(d), Buf::Caller(at)) => {
                    d.get(at as usize..(at + io.len) as usize).ok_or_else(|| {
                        self.plan_error(format!("a staged piece is outside the write: {io:?}"))
                    })?
                }
                _ => {
                    zeros = vec![0u8; io.len as usize];
                    &zeros
                }
            };
            self.layout.stage(io, bytes);
        }
        self.layout.complete(plan);
        let records = self.layout.journal_records(plan);
        if records.is_empty() {
            return Ok(());
        }
        let Some(meta) = &self.meta else {
            return Ok(());
        };
        for r in records {
            meta.record_layout(r.kind, &r.payload)
                .map_err(|e| self.journal_error("append a layout record", e))?;
        }
        Ok(())
    }

    /// A flush's first step: the personality's metadata blocks (QMD's address blocks) are
    /// written and made durable, then the records pointing at them are appended, so the
    /// commit that follows never makes durable a pointer to a block that is not.
    /// Staged bytes (QMD's staging buffer) are appended first, in the same step: every
    /// index entry the blocks hold has its bytes written.
    pub(super) fn write_metadata_blocks(&self) -> Result<(), VolumeError> {
        let (failed, result) = {
            let _order = lock(&self.journal_order);
            let failed = self.append_staged();
            (failed, self.write_blocks_locked())
        };
        self.staged_append_failed(failed);
        result
    }

    /// A member failed: bytes staged in memory for the next flush are appended now, so
    /// they do not depend on the failed member (QMD: a staged run whose active disk
    /// failed is read from the flash once appended).
    pub(super) fn append_staged_now(&self) {
        let failed = {
            let _order = lock(&self.journal_order);
            self.append_staged()
        };
        self.staged_append_failed(failed);
    }

    /// A write completed: if the personality's staging space is half taken, its staged
    /// bytes are appended now (a burst between flushes keeps finding room).
    pub(super) fn append_staged_if_due(&self) {
        if self.layout.staged_due() {
            self.append_staged_now();
        }
    }

    /// `append_staged_if_due` on the event core: the member I/O it did (kind, member,
    /// offset, len), for the core to queue.
    pub(super) fn append_staged_if_due_on_core(&self) -> Vec<super::resync::BackgroundIo> {
        if !self.layout.staged_due() {
            return Vec::new();
        }
        *lock(&self.background_io) = Some(Vec::new());
        self.append_staged_now();
        lock(&self.background_io).take().unwrap_or_default()
    }

    fn write_blocks_locked(&self) -> Result<(), VolumeError> {
        let blocks = self.layout.metadata_blocks(&self.health_views());
        let stores = self.slots.iter().any(|s| s.live_store().is_some());
        let mut durable = true;
        let mut written = Vec::new();
        for b in &blocks {
            self.account(b.member, IoKind::Write, b.offset, b.bytes.len() as u64);
            if !stores {
                continue;
            }
            match self.slots.get(b.member).and_then(|s| s.live_store()) {
                Some(store) => match store.write_at(&b.bytes, DATA_OFFSET + b.offset) {
                    Ok(()) => written.push(b.member),
                    Err(e) => {
                        durable = false;
                        tracing::warn!(volume = %self.name, member = b.member, error = %e,
                            "cannot write a layout metadata block; its entries go to the journal");
                    }
                },
                None => durable = false,
            }
        }
        written.sort_unstable();
        written.dedup();
        for m in written {
            if let Some(store) = self.slots[m].live_store() {
                if let Err(e) = store.flush() {
                    durable = false;
                    self.slots[m].unflushed.store(true, Ordering::SeqCst);
                    tracing::warn!(volume = %self.name, member = m, error = %e,
                        "cannot flush a layout metadata block; its entries go to the journal");
                }
            }
        }
        let records = self.layout.metadata_blocks_written(durable);
        let Some(meta) = &self.meta else {
            return Ok(());
        };
        for r in records {
            meta.record_layout(r.kind, &r.payload)
                .map_err(|e| self.journal_error("append a layout record", e))?;
        }
        Ok(())
    }

    /// The personality's staged bytes go to their members (under `journal_order`), as
    /// data: the members' flush before the commit makes them durable. Returns the members
    /// that could not take them; until the caller has failed those (outside the journal
    /// order: failing takes it) the personality keeps the bytes as not yet on flash.
    fn append_staged(&self) -> Vec<(usize, String)> {
        let appends = self.layout.staged_appends();
        if appends.is_empty() {
            return Vec::new();
        }
        let stores = self.slots.iter().any(|s| s.live_store().is_some());
        let mut failed = Vec::new();
        for a in &appends {
            self.account(a.member, IoKind::Write, a.offset, a.bytes.len() as u64);
            let Some(store) = self
                .slots
                .get(a.member)
                .filter(|_| stores)
                .and_then(|s| s.live_store())
            else {
                continue;
            };
            match store.write_at(&a.bytes, DATA_OFFSET + a.offset) {
                Ok(()) => self.slots[a.member].unflushed.store(true, Ordering::SeqCst),
                Err(e) => failed.push((a.member, format!("staged append error: {e}"))),
            }
        }
        if failed.is_empty() {
            self.layout.staged_appended();
        }
        failed
    }

    /// Fail the members a staged append could not write; the bytes are then no longer
    /// expected on them.
    fn staged_append_failed(&self, failed: Vec<(usize, String)>) {
        if failed.is_empty() {
            return;
        }
        for (member, reason) in &failed {
            self.fail_member(*member, reason);
        }
        self.layout.staged_appended();
    }

    /// Make the journal durable (in a flush, after the members' data, before the flush
    /// returns) and fold it into a checkpoint when it has grown.
    pub(super) fn commit_metadata(&self) -> Result<(), VolumeError> {
        let Some(meta) = &self.meta else {
            return Ok(());
        };
        {
            let _order = lock(&self.journal_order);
            meta.commit().map_err(|e| self.journal_error("commit", e))?;
            self.layout.committed();
        }
        if meta.wants_checkpoint() {
            meta.checkpoint(|| self.layout.checkpoint_image())
                .map_err(|e| self.journal_error("checkpoint", e))?;
        }
        Ok(())
    }

    /// Journal how far a member's rebuild has come: flush the member, then append and
    /// commit its watermark, so a restart resumes there and never beyond the bytes really
    /// on the member.
    pub fn journal_rebuild_progress(&self, member: usize) -> Result<(), VolumeError> {
        let Some(meta) = &self.meta else {
            return Ok(());
        };
        // Serialized with failures and replacements: the watermark is this rebuild's.
        let _headers = lock(&self.headers);
        let Some(slot) = self.slots.get(member) else {
            return Err(self.member_error(member, "no such member"));
        };
        let Health::Rebuilding { watermark } = slot.health() else {
            return Ok(());
        };
        let Some(store) = slot.live_store() else {
            return Ok(());
        };
        store
            .flush()
            .map_err(|e| self.member_error(member, format!("flush before journaling: {e}")))?;
        meta.record_progress(member, watermark)
            .and_then(|()| meta.commit())
            .map_err(|e| self.journal_error("record rebuild progress", e))
    }

    /// Fold the journal into a checkpoint now (assembly does, after replay).
    pub fn checkpoint_metadata(&self) -> Result<(), VolumeError> {
        let Some(meta) = &self.meta else {
            return Ok(());
        };
        meta.checkpoint(|| self.layout.checkpoint_image())
            .map_err(|e| self.journal_error("checkpoint", e))
    }
}
