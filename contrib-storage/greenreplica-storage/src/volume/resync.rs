//! Keeping each sync group consistent (mirrors equal, parity right): resync of the regions
//! the write-intent bitmap marks dirty after an unclean stop (MD's resync, limited by the
//! bitmap), the lazy clearing of idle bits, and scrub (MD's check/repair). The engine reads
//! the group; the personality's `reconcile` says what to rewrite.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::bitmap::CLEAR_AFTER_IDLE_S;
use super::{Health, Span, Volume, VolumeError};
use crate::layout::{SyncCopy, SYNC_BLOCK};
use crate::power_state::PowerState;
use crate::service_model::IoKind;
use crate::superblock::DATA_OFFSET;
use crate::sync::lock;

/// Copy and compare unit of resync and scrub.
const CHUNK: u64 = 1 << 20;
/// Resync work done per tick before the tick returns (the rest waits for the next one).
const RESYNC_BUDGET: Duration = Duration::from_millis(50);

/// Member I/O of background work done during a tick on the event core: (kind, member,
/// member offset, length).
pub(super) type BackgroundIo = (IoKind, usize, u64, u64);

/// Progress of the periodic scrub, done a little per tick while the members are awake.
#[derive(Debug, Default)]
pub struct ScrubRun {
    /// Next sync offset (member offset, unless the layout maps them) to compare, while a run
    /// is going on.
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
    /// Every sync group, as its members (lowest first).
    fn sync_groups(&self) -> Vec<Vec<usize>> {
        self.layout
            .sync_groups()
            .into_iter()
            .map(|mut g| {
                g.sort_unstable();
                g
            })
            .collect()
    }

    fn group_spans(&self, start: u64, end: u64) -> Vec<Span> {
        self.sync_groups()
            .iter()
            .flat_map(|g| self.group_spans_of(g, start, end - start))
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
                self.resync_region(region, true)?;
            }
        }
        Ok(())
    }

    /// Make a dirty region consistent: per sync group, the personality compares what the
    /// in-sync members hold and says what to rewrite (the first mirror's bytes over the
    /// others, parity recomputed from the data).
    /// Without `wait` (background work on the event core, which must never wait for a lock
    /// a request holds while it waits for the core) a region in use is left for later:
    /// returns false.
    fn resync_region(&self, region: u64, wait: bool) -> Result<bool, VolumeError> {
        let Some(intent) = &self.intent else {
            return Ok(true);
        };
        let start = region * intent.region_bytes();
        let end = (start + intent.region_bytes()).min(self.layout.member_data_bytes());
        let (start, end) = self.layout.sync_range(start, end);
        let spans = self.group_spans(start, end);
        let Some(_exclusive) = self.ranges.acquire_if(&spans, true, wait) else {
            return Ok(false);
        };
        if !intent.needs_resync(region) {
            return Ok(true); // another request did it while we waited
        }
        for members in self.sync_groups() {
            if !members
                .iter()
                .any(|&m| self.slots[m].health() == Health::InSync)
            {
                continue;
            }
            let mut offset = start;
            while offset < end {
                let len = CHUNK.min(end - offset);
                let copies = self.read_group(&members, offset, len, &mut ScrubReport::default());
                let verdict = self
                    .layout
                    .reconcile(offset, &copies, len)
                    .map_err(|problem| VolumeError::Io {
                        volume: self.name.clone(),
                        problem: format!("resync: {problem}"),
                    })?;
                for (target, bytes) in verdict.rewrites {
                    self.rewrite(target, offset, &bytes, "resync write error");
                }
                offset += len;
            }
        }
        intent.resynced(region, self.clock.now());
        tracing::debug!(volume = %self.name, region, "region resynced");
        Ok(true)
    }

    /// Rewrite member bytes for resync or scrub; true if they landed.
    fn rewrite(&self, member: usize, offset: u64, bytes: &[u8], what: &str) -> bool {
        let slot = &self.slots[member];
        let Some(store) = slot.live_store() else {
            return false;
        };
        let mut from = 0usize;
        for (at, n) in self.layout.sync_pieces(member, offset, bytes.len() as u64) {
            let piece = &bytes[from..from + n as usize];
            from += n as usize;
            self.account(member, IoKind::Write, at, n);
            if let Err(e) = store.write_at(piece, DATA_OFFSET + at) {
                self.fail_member(member, &format!("{what}: {e}"));
                return false;
            }
        }
        slot.unflushed.store(true, Ordering::SeqCst);
        true
    }

    /// Charge background I/O to the drive model (ledger and queue), without waiting on it:
    /// during a tick on the event core it is handed to the core (queued as background
    /// class), otherwise played on the drive at once.
    pub(super) fn account(&self, member: usize, kind: IoKind, offset: u64, len: u64) {
        if let Some(sink) = lock(&self.background_io).as_mut() {
            sink.push((kind, member, offset, len));
            return;
        }
        let now = self.clock.now();
        lock(&self.slots[member].drive).submit(now, kind, offset, len);
    }

    /// `Volume::tick` on the event core: returns the member I/O its background work did
    /// (kind, member, offset, len), for the core to queue.
    pub(super) fn tick_on_core(&self) -> Vec<BackgroundIo> {
        *lock(&self.background_io) = Some(Vec::new());
        self.tick();
        lock(&self.background_io).take().unwrap_or_default()
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
            match self.resync_region(region, false) {
                Ok(true) => {}
                Ok(false) => break, // in use: the next tick
                Err(e) => {
                    tracing::error!(volume = %self.name, region, error = %e, "resync failed");
                    break;
                }
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
        let end = self.layout.sync_bytes();
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
            let mut in_use = false;
            for group in self.sync_groups() {
                match self.scrub_chunk(&group, offset, len, true, false, &mut report) {
                    Ok(done) => in_use |= !done,
                    Err(e) => {
                        tracing::error!(volume = %self.name, offset, error = %e, "periodic scrub")
                    }
                }
            }
            run.report = report;
            if in_use {
                // A request holds part of the chunk: compare it again at the next tick.
                break;
            }
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
        let end = self.layout.sync_bytes();
        let mut offset = 0;
        while offset < end {
            let len = CHUNK.min(end - offset);
            for group in self.sync_groups() {
                self.scrub_chunk(&group, offset, len, repair, true, &mut report)?;
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

    /// Read member bytes `offset..offset+len` of every live member of a group; a member
    /// that cannot read them whole is read again 4 KiB at a time, so one bad sector does not
    /// hide the rest. Members not in sync are listed without bytes (they vouch for nothing
    /// but may be rewritten).
    fn read_group(
        &self,
        members: &[usize],
        offset: u64,
        len: u64,
        report: &mut ScrubReport,
    ) -> Vec<SyncCopy> {
        let blocks = len.div_ceil(SYNC_BLOCK) as usize;
        let mut copies = Vec::new();
        for &m in members {
            let Some(store) = self.slots[m].live_store() else {
                continue;
            };
            if self.slots[m].health() != Health::InSync {
                copies.push(SyncCopy {
                    member: m,
                    bytes: None,
                    readable: vec![false; blocks],
                });
                continue;
            }
            let mut buf = vec![0u8; len as usize];
            let mut readable = vec![true; blocks];
            // Sync bytes `from..` of the buffer are member bytes `at..at+n`.
            let mut from = 0u64;
            for (at, n) in self.layout.sync_pieces(m, offset, len) {
                self.account(m, IoKind::Read, at, n);
                let piece = &mut buf[from as usize..(from + n) as usize];
                if let Err(e) = store.read_at(piece, DATA_OFFSET + at) {
                    tracing::warn!(volume = %self.name, member = m, offset = at, %e, "read error in resync or scrub; retrying block by block");
                    // Block by block in the sync space, so `readable` keeps its meaning.
                    let mut x = from;
                    while x < from + n {
                        let y = ((x / SYNC_BLOCK + 1) * SYNC_BLOCK).min(from + n);
                        let part = &mut buf[x as usize..y as usize];
                        if store.read_at(part, DATA_OFFSET + at + (x - from)).is_err() {
                            readable[(x / SYNC_BLOCK) as usize] = false;
                            report.read_errors += 1;
                            self.slots[m].read_errors.fetch_add(1, Ordering::SeqCst);
                        }
                        x = y;
                    }
                }
                from += n;
            }
            copies.push(SyncCopy {
                member: m,
                bytes: Some(buf),
                readable,
            });
            report.bytes_compared += len;
        }
        copies
    }

    /// Check one chunk of a sync group whose members are all in sync; with `repair`, rewrite
    /// what the personality says is wrong. Without `wait`, a chunk in use is skipped:
    /// returns false.
    fn scrub_chunk(
        &self,
        members: &[usize],
        offset: u64,
        len: u64,
        repair: bool,
        wait: bool,
        report: &mut ScrubReport,
    ) -> Result<bool, VolumeError> {
        if members.len() < 2
            || members
                .iter()
                .any(|&m| self.slots[m].health() != Health::InSync)
        {
            return Ok(true);
        }
        let spans = self.group_spans_of(members, offset, len);
        let Some(_exclusive) = self.ranges.acquire_if(&spans, true, wait) else {
            return Ok(false);
        };
        let copies = self.read_group(members, offset, len, report);
        let verdict = self
            .layout
            .reconcile(offset, &copies, len)
            .map_err(|problem| VolumeError::Io {
                volume: self.name.clone(),
                problem: format!("scrub: {problem}"),
            })?;
        if verdict.rewrites.is_empty() {
            return Ok(true);
        }
        report.mismatched_chunks += 1;
        if !repair {
            return Ok(true);
        }
        for (m, bytes) in verdict.rewrites {
            if self.rewrite(m, offset, &bytes, "scrub repair write error") {
                report.repaired_chunks += 1;
            }
        }
        Ok(true)
    }

    /// The member ranges of sync bytes `start..start+len` of a group (the same range for
    /// every member, unless the layout's stripe units sit at different member offsets).
    fn group_spans_of(&self, members: &[usize], start: u64, len: u64) -> Vec<Span> {
        let Some(&group) = members.first() else {
            return Vec::new();
        };
        let mut spans: Vec<Span> = members
            .iter()
            .flat_map(|&m| self.layout.sync_pieces(m, start, len))
            .map(|(at, n)| Span {
                group,
                start: at,
                end: at + n,
            })
            .collect();
        spans.sort_unstable_by_key(|s| (s.start, s.end));
        spans.dedup();
        spans
    }
}
