//! Keeping the mirrors equal: resync of the regions the write-intent bitmap marks dirty after
//! an unclean stop (MD's resync, limited by the bitmap), the lazy clearing of idle bits, and
//! scrub (MD's check/repair): compare every copy and rewrite the ones that differ.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::bitmap::CLEAR_AFTER_IDLE_S;
use super::{Health, Span, Volume, VolumeError};
use crate::power_state::PowerState;
use crate::service_model::IoKind;
use crate::superblock::DATA_OFFSET;
use crate::sync::lock;

/// Copy and compare unit of resync and scrub.
const CHUNK: u64 = 1 << 20;
/// Unit in which a chunk that cannot be read whole is read again.
const SCRUB_BLOCK: u64 = 4096;
/// Resync work done per tick before the tick returns (the rest waits for the next one).
const RESYNC_BUDGET: Duration = Duration::from_millis(50);

/// Progress of the periodic scrub, done a little per tick while the members are awake.
#[derive(Debug, Default)]
pub struct ScrubRun {
    /// Next member offset to compare, while a run is going on.
    cursor: Option<u64>,
    report: ScrubReport,
    /// When the next run is due (None: not scheduled yet).
    next_due: Option<f64>,
    last: Option<(f64, ScrubReport)>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ScrubReport {
    pub bytes_compared: u64,
    /// Chunks (of 1 MiB, per mirror group) whose copies differed or could not be read.
    pub mismatched_chunks: u64,
    /// Copies of chunks rewritten from the reference.
    pub repaired_chunks: u64,
    /// 4 KiB blocks that could not be read (each later rewritten by a repair).
    pub read_errors: u64,
}

impl Volume {
    /// Members of a mirror group, lowest first.
    fn group_members(&self, group: usize) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&m| self.group_of(m) == group)
            .collect()
    }

    fn group_spans(&self, start: u64, end: u64) -> Vec<Span> {
        self.groups()
            .into_iter()
            .map(|group| Span { group, start, end })
            .collect()
    }

    /// Regions about to be read or written must not be served while their copies may
    /// differ: resync them first.
    pub(super) fn resync_before_use(&self, regions: &[u64]) -> Result<(), VolumeError> {
        let Some(intent) = &self.intent else {
            return Ok(());
        };
        for &region in regions {
            if intent.needs_resync(region) {
                self.resync_region(region)?;
            }
        }
        Ok(())
    }

    /// Copy a dirty region from the first in-sync copy of each mirror group to the others.
    fn resync_region(&self, region: u64) -> Result<(), VolumeError> {
        let Some(intent) = &self.intent else {
            return Ok(());
        };
        let start = region * intent.region_bytes();
        let end = (start + intent.region_bytes()).min(self.layout.member_data_bytes());
        let _exclusive = self.ranges.acquire(&self.group_spans(start, end), true);
        if !intent.needs_resync(region) {
            return Ok(()); // another request did it while we waited
        }
        for group in self.groups() {
            let members = self.group_members(group);
            let sources: Vec<usize> = members
                .iter()
                .copied()
                .filter(|&m| self.slots[m].health() == Health::InSync)
                .collect();
            if sources.is_empty() {
                continue;
            }
            let mut offset = start;
            while offset < end {
                let len = CHUNK.min(end - offset);
                let (reference, copies) =
                    self.read_copies(&sources, offset, len, &mut ScrubReport::default())?;
                // Every live copy but those already equal to the reference gets it (a source
                // with an unreadable block gets it too: the rewrite remaps the sector).
                for &target in &members {
                    let slot = &self.slots[target];
                    let same = copies
                        .iter()
                        .any(|(m, c)| *m == target && c.as_ref() == Some(&reference));
                    let Some(to) = slot.live_store().filter(|_| !same) else {
                        continue;
                    };
                    self.account(target, IoKind::Write, offset, len);
                    match to.write_at(&reference, DATA_OFFSET + offset) {
                        Ok(()) => slot.unflushed.store(true, Ordering::SeqCst),
                        Err(e) => self.fail_member(target, &format!("resync write error: {e}")),
                    }
                }
                offset += len;
            }
        }
        intent.resynced(region, self.clock.now());
        tracing::debug!(volume = %self.name, region, "region resynced");
        Ok(())
    }

    /// Charge background I/O to the drive model (ledger and queue), without waiting on it.
    fn account(&self, member: usize, kind: IoKind, offset: u64, len: u64) {
        let now = self.clock.now();
        lock(&self.slots[member].drive).submit(now, kind, offset, len);
    }

    /// Regions still to resync after an unclean stop.
    pub fn resync_pending(&self) -> usize {
        self.intent.as_ref().map_or(0, |i| i.resync_pending())
    }

    /// Background integrity work of one tick: resync some dirty regions, then clear the bits
    /// of regions idle long enough (flushing the members written since their last flush).
    pub(super) fn integrity_tick(&self) {
        self.scrub_tick();
        let Some(intent) = &self.intent else {
            return;
        };
        let began = Instant::now();
        while began.elapsed() < RESYNC_BUDGET {
            let Some(region) = intent.next_to_resync() else {
                break;
            };
            if let Err(e) = self.resync_region(region) {
                tracing::error!(volume = %self.name, region, error = %e, "resync failed");
                break;
            }
            if intent.resync_pending() == 0 {
                tracing::info!(volume = %self.name, "resync complete");
            }
        }
        let idle_since = self.clock.now() - CLEAR_AFTER_IDLE_S;
        if intent.awaiting_flush(idle_since) {
            if let Err(e) = self.flush() {
                tracing::warn!(volume = %self.name, error = %e, "flush before clearing bitmap bits failed");
                return;
            }
        }
        if let Err(e) = intent.clear_idle(idle_since) {
            tracing::warn!(volume = %self.name, error = %e, "cannot rewrite the write-intent bitmap");
        }
    }

    /// The periodic scrub: start a run when one is due, then compare a few chunks per tick,
    /// but never wake a sleeping disk for it.
    fn scrub_tick(&self) {
        let Some(interval) = self.integrity.scrub_interval_s else {
            return;
        };
        let now = self.clock.now();
        let mut run = lock(&self.scrub_run);
        let due = *run.next_due.get_or_insert(now + interval);
        if run.cursor.is_none() {
            if now < due {
                return;
            }
            run.cursor = Some(0);
            run.report = ScrubReport::default();
            tracing::info!(volume = %self.name, "periodic scrub started");
        }
        if matches!(
            self.power_state(),
            PowerState::Standby | PowerState::SpinningDown | PowerState::SpinningUp
        ) {
            return;
        }
        let end = self.layout.member_data_bytes();
        let began = Instant::now();
        while let Some(offset) = run.cursor {
            if offset >= end {
                let report = std::mem::take(&mut run.report);
                tracing::info!(volume = %self.name, ?report, "periodic scrub finished");
                run.last = Some((now, report));
                run.cursor = None;
                run.next_due = Some(now + interval);
                break;
            }
            if began.elapsed() >= RESYNC_BUDGET {
                break;
            }
            let len = CHUNK.min(end - offset);
            let mut report = std::mem::take(&mut run.report);
            for group in self.groups() {
                if let Err(e) = self.scrub_chunk(group, offset, len, true, &mut report) {
                    tracing::error!(volume = %self.name, offset, error = %e, "periodic scrub");
                }
            }
            run.report = report;
            run.cursor = Some(offset + len);
        }
    }

    /// When the last periodic scrub finished and what it found.
    pub fn last_scrub(&self) -> Option<serde_json::Value> {
        let run = lock(&self.scrub_run);
        run.last
            .as_ref()
            .map(|(at, report)| serde_json::json!({"finished_at_s": at, "report": report}))
    }

    /// A clean stop: every flushed, idle bit can go.
    pub(super) fn clear_all_intent(&self) {
        if let Some(intent) = &self.intent {
            if let Err(e) = intent.clear_idle(f64::INFINITY) {
                tracing::warn!(volume = %self.name, error = %e, "cannot rewrite the write-intent bitmap");
            }
        }
    }

    /// Compare every copy of every chunk; with `repair`, rewrite the copies that differ from
    /// (or cannot be read like) the first readable in-sync copy. I/O elsewhere proceeds: only
    /// the chunk being compared is locked.
    pub fn scrub(&self, repair: bool) -> Result<ScrubReport, VolumeError> {
        let mut report = ScrubReport::default();
        let end = self.layout.member_data_bytes();
        let mut offset = 0;
        while offset < end {
            let len = CHUNK.min(end - offset);
            for group in self.groups() {
                self.scrub_chunk(group, offset, len, repair, &mut report)?;
            }
            offset += len;
        }
        if report.mismatched_chunks > 0 {
            tracing::warn!(volume = %self.name, ?report, repair, "scrub found copies that differ");
        } else {
            tracing::info!(volume = %self.name, ?report, "scrub: copies agree");
        }
        Ok(report)
    }

    /// Read member bytes `offset..offset+len` from each of `members`; a copy that cannot be
    /// read whole is read again 4 KiB at a time. Returns the reference (each block from the
    /// first member that could read it) and each copy (None if some block was unreadable).
    #[allow(clippy::type_complexity)]
    fn read_copies(
        &self,
        members: &[usize],
        offset: u64,
        len: u64,
        report: &mut ScrubReport,
    ) -> Result<(Vec<u8>, Vec<(usize, Option<Vec<u8>>)>), VolumeError> {
        // Each copy with, per 4 KiB block, whether it could be read (a failed chunk read is
        // retried block by block, so one bad sector does not hide the rest of the chunk).
        let mut copies: Vec<(usize, Vec<u8>, Vec<bool>)> = Vec::new();
        let blocks = len.div_ceil(SCRUB_BLOCK) as usize;
        for &m in members {
            let Some(store) = self.slots[m].live_store() else {
                continue;
            };
            self.account(m, IoKind::Read, offset, len);
            let mut buf = vec![0u8; len as usize];
            let mut readable = vec![true; blocks];
            if let Err(e) = store.read_at(&mut buf, DATA_OFFSET + offset) {
                tracing::warn!(volume = %self.name, member = m, offset, %e, "scrub read error; retrying block by block");
                for (b, chunk) in buf.chunks_mut(SCRUB_BLOCK as usize).enumerate() {
                    let at = DATA_OFFSET + offset + b as u64 * SCRUB_BLOCK;
                    if store.read_at(chunk, at).is_err() {
                        readable[b] = false;
                        report.read_errors += 1;
                        self.slots[m].read_errors.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            copies.push((m, buf, readable));
            report.bytes_compared += len;
        }
        // The reference: each block from the first copy that could read it.
        let mut reference = vec![0u8; len as usize];
        for b in 0..blocks {
            let Some((_, buf, _)) = copies.iter().find(|(_, _, ok)| ok[b]) else {
                return Err(VolumeError::Io {
                    volume: self.name.clone(),
                    problem: format!(
                        "scrub: no copy of member bytes {}+{SCRUB_BLOCK} can be read",
                        offset + b as u64 * SCRUB_BLOCK
                    ),
                });
            };
            let range = b * SCRUB_BLOCK as usize..((b + 1) * SCRUB_BLOCK as usize).min(buf.len());
            reference[range.clone()].copy_from_slice(&buf[range]);
        }
        let copies = copies
            .into_iter()
            .map(|(m, buf, ok)| (m, ok.iter().all(|&r| r).then_some(buf)))
            .collect();
        Ok((reference, copies))
    }

    fn scrub_chunk(
        &self,
        group: usize,
        offset: u64,
        len: u64,
        repair: bool,
        report: &mut ScrubReport,
    ) -> Result<(), VolumeError> {
        let members: Vec<usize> = self
            .group_members(group)
            .into_iter()
            .filter(|&m| self.slots[m].health() == Health::InSync)
            .collect();
        if members.len() < 2 {
            return Ok(());
        }
        let _exclusive = self.ranges.acquire(
            &[Span {
                group,
                start: offset,
                end: offset + len,
            }],
            true,
        );
        let (reference, copies) = self.read_copies(&members, offset, len, report)?;
        let differing: Vec<usize> = copies
            .iter()
            .filter(|(_, b)| b.as_ref() != Some(&reference))
            .map(|(m, _)| *m)
            .collect();
        if differing.is_empty() {
            return Ok(());
        }
        report.mismatched_chunks += 1;
        if !repair {
            return Ok(());
        }
        for m in differing {
            let slot = &self.slots[m];
            let Some(store) = slot.live_store() else {
                continue;
            };
            self.account(m, IoKind::Write, offset, len);
            match store.write_at(&reference, DATA_OFFSET + offset) {
                Ok(()) => {
                    slot.unflushed.store(true, Ordering::SeqCst);
                    report.repaired_chunks += 1;
                }
                Err(e) => self.fail_member(m, &format!("scrub repair write error: {e}")),
            }
        }
        Ok(())
    }
}
