//! The engine: a volume is a layout over member slots, each slot a drive model plus (when
//! serving) a member that stores the bytes. The same code schedules requests in virtual
//! time for replays and in real time for the daemon; only the clock and the presence of
//! member storage differ.

mod bitmap;
mod engine;
mod identity;
mod io;
mod layout_work;
mod membership;
mod meta;
mod power;
mod range_lock;
mod range_sleep;
mod resync;
mod runner;
mod status;
mod temperature;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use serde::Serialize;
use thiserror::Error;

use crate::clock::{Clock, Seconds};
use crate::drive::Drive;
use crate::latency::Histogram;
use crate::layout::{LayoutError, MemberView, Personality, Plan};
use crate::member::Member;
use crate::power_manager::SharedPower;
use crate::power_state::PowerState;
use crate::service_model::IoKind;
use crate::superblock::Superblock;
use crate::sync::{lock, read};
use crate::trace::TraceRecorder;

pub use bitmap::{
    file_bytes as bitmap_file_bytes, region_bytes as bitmap_region_bytes, Recovered, WriteIntent,
};
pub use engine::Engine;
pub use power::MAX_HINT_EXTENTS;
pub use range_lock::{RangeGuard, RangeLocks, Span};
pub use range_sleep::RangeSleep;
pub use resync::ScrubReport;
pub use runner::{Finished, QueueDepths, Request, Runner};
pub use status::{MemberStatus, VolumeStatus};

/// Read errors a member may have (each corrected from its mirror) before it is failed
/// (MD's max_corr_read_errors).
pub const MAX_READ_ERRORS: u64 = 20;

#[derive(Debug, Error)]
pub enum VolumeError {
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("volume {volume}: {problem}")]
    Io { volume: String, problem: String },
    #[error("volume {volume}: member {member}: {problem}")]
    Member {
        volume: String,
        member: usize,
        problem: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "health", rename_all = "snake_case")]
pub enum Health {
    InSync,
    Failed { reason: String },
    Rebuilding { watermark: u64 },
}

#[derive(Debug)]
pub struct MemberSlot {
    store: RwLock<Option<Arc<dyn Member>>>,
    drive: Mutex<Drive>,
    health: Mutex<Health>,
    latency: Histogram,
    /// Written since its last flush (only those members are flushed).
    unflushed: AtomicBool,
    /// Read errors seen and corrected from a mirror.
    read_errors: AtomicU64,
}

impl MemberSlot {
    pub fn new(store: Option<Arc<dyn Member>>, drive: Drive, health: Health) -> Self {
        Self {
            store: RwLock::new(store),
            drive: Mutex::new(drive),
            health: Mutex::new(health),
            latency: Histogram::default(),
            unflushed: AtomicBool::new(false),
            read_errors: AtomicU64::new(0),
        }
    }

    pub fn health(&self) -> Health {
        lock(&self.health).clone()
    }

    fn live_store(&self) -> Option<Arc<dyn Member>> {
        if matches!(self.health(), Health::Failed { .. }) {
            return None;
        }
        read(&self.store).clone()
    }

    pub fn read_errors(&self) -> u64 {
        self.read_errors.load(Ordering::SeqCst)
    }
}

/// Background integrity work settings (from the volume's configuration).
#[derive(Debug, Clone, PartialEq)]
pub struct IntegritySettings {
    /// Rebuild rate while foreground I/O is going on (MD's speed_limit_min), MB/s.
    pub rebuild_min_mb_s: f64,
    /// Scrub every copy this often (None: only on request).
    pub scrub_interval_s: Option<f64>,
}

impl Default for IntegritySettings {
    fn default() -> Self {
        Self {
            rebuild_min_mb_s: 5.0,
            scrub_interval_s: None,
        }
    }
}

/// Result of a client's sleep request.
#[derive(Debug, Clone, PartialEq)]
pub enum SleepOutcome {
    Accepted(PowerState),
    Declined(String),
}

#[derive(Debug)]
pub struct Volume {
    name: String,
    layout: Box<dyn Personality>,
    slots: Vec<MemberSlot>,
    clock: Arc<dyn Clock>,
    /// Writes hold their member ranges exclusively, reads shared; rebuild, resync and scrub
    /// hold only the chunk they copy.
    ranges: RangeLocks,
    /// Generation bump, health change and header writes happen under this lock, so a
    /// concurrent persist cannot write an older picture of the array over a newer one.
    headers: Mutex<()>,
    /// Held from a personality's `complete` until its records are appended, and around the
    /// journal's commit: records drained from the layout's shared outbox by one thread are
    /// never missing from a commit that acknowledges another thread's write.
    journal_order: Mutex<()>,
    /// Write-intent bitmap (None in virtual time and for unmirrored volumes' replays).
    intent: Option<WriteIntent>,
    integrity: IntegritySettings,
    /// Foreground requests served so far (a rebuild slows down while it moves).
    foreground: AtomicU64,
    /// The periodic scrub's progress.
    scrub_run: Mutex<resync::ScrubRun>,
    hints: Mutex<Vec<(u64, u64)>>,
    /// The array's power manager (adopted from the first member's drive).
    power: SharedPower,
    recorder: Option<TraceRecorder>,
    /// The header template written to members (None in virtual time).
    identity: Mutex<Option<Superblock>>,
    /// The metadata journal on the state device (None in virtual time).
    meta: Option<crate::journal::meta::MetaJournal>,
    latency: Histogram,
    /// The event core serving requests in real time (the daemon); without it, a request's
    /// timing is modelled in the caller's thread.
    engine: OnceLock<Engine>,
    /// While a tick runs on the event core: the member I/O of its background work.
    background_io: Mutex<Option<Vec<resync::BackgroundIo>>>,
}

impl Volume {
    pub fn new(
        name: &str,
        layout: Box<dyn Personality>,
        slots: Vec<MemberSlot>,
        clock: Arc<dyn Clock>,
        recorder: Option<TraceRecorder>,
        identity: Option<Superblock>,
    ) -> Self {
        let power = power::adopt(&slots);
        Self {
            name: name.to_string(),
            layout,
            slots,
            clock,
            ranges: RangeLocks::default(),
            headers: Mutex::new(()),
            journal_order: Mutex::new(()),
            intent: None,
            integrity: IntegritySettings::default(),
            foreground: AtomicU64::new(0),
            scrub_run: Mutex::new(resync::ScrubRun::default()),
            hints: Mutex::new(Vec::new()),
            power,
            recorder,
            identity: Mutex::new(identity),
            meta: None,
            latency: Histogram::default(),
            engine: OnceLock::new(),
            background_io: Mutex::new(None),
        }
    }

    /// Keep a write-intent bitmap (set up by assembly).
    pub fn with_write_intent(mut self, intent: WriteIntent) -> Self {
        self.intent = Some(intent);
        self
    }

    pub fn with_integrity(mut self, settings: IntegritySettings) -> Self {
        self.integrity = settings;
        self
    }

    pub fn integrity(&self) -> &IntegritySettings {
        &self.integrity
    }

    /// Foreground requests served so far.
    pub fn foreground_requests(&self) -> u64 {
        self.foreground.load(Ordering::Relaxed)
    }

    pub fn write_intent(&self) -> Option<&WriteIntent> {
        self.intent.as_ref()
    }

    /// Sync group of a member (its lowest member): the members whose bytes depend on each
    /// other, locked, resynced and scrubbed together.
    fn group_of(&self, member: usize) -> usize {
        self.layout.group_of(member)
    }

    /// The member ranges, per sync group, that a request to volume bytes
    /// `offset..offset+len` holds (the personality's stripe locks).
    fn spans_of(&self, offset: u64, len: u64) -> Vec<Span> {
        self.layout
            .lock_spans(offset, len)
            .into_iter()
            .map(|(member, start, end)| Span {
                group: self.group_of(member),
                start,
                end,
            })
            .collect()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn layout(&self) -> &dyn Personality {
        self.layout.as_ref()
    }

    pub fn capacity(&self) -> u64 {
        self.layout.capacity()
    }

    pub fn member_count(&self) -> usize {
        self.slots.len()
    }

    pub fn slot(&self, i: usize) -> Option<&MemberSlot> {
        self.slots.get(i)
    }

    pub fn clock(&self) -> &dyn Clock {
        self.clock.as_ref()
    }

    fn member_error(&self, member: usize, problem: impl Into<String>) -> VolumeError {
        VolumeError::Member {
            volume: self.name.clone(),
            member,
            problem: problem.into(),
        }
    }

    fn views(&self, now: Seconds) -> Vec<MemberView> {
        let mut views = self.views_with(|slot| lock(&slot.drive).ready_estimate(now));
        for (view, slot) in views.iter_mut().zip(&self.slots) {
            let drive = lock(&slot.drive);
            (view.queued, view.window) = (drive.queued(), drive.queue_window());
        }
        views
    }

    /// Views from the members' health alone (ready now): asking the drive models for their
    /// readiness is not free of effects on them, and a flush of metadata blocks needs none.
    fn health_views(&self) -> Vec<MemberView> {
        self.views_with(|_| 0.0)
    }

    fn views_with(&self, ready: impl Fn(&MemberSlot) -> Seconds) -> Vec<MemberView> {
        self.slots
            .iter()
            .map(|slot| {
                let ready_at = ready(slot);
                match slot.health() {
                    Health::InSync => MemberView::healthy(ready_at),
                    Health::Failed { .. } => MemberView::failed(ready_at),
                    Health::Rebuilding { watermark } => MemberView {
                        valid_below: watermark,
                        ..MemberView::healthy(ready_at)
                    },
                }
            })
            .collect()
    }

    /// Plan a request and queue its member I/O on the drive models: the reads now, the
    /// writes once the reads they depend on are done. Returns the plan and the modelled
    /// completion of each of its I/O (reads first, as `Plan::ios`).
    pub fn schedule(
        &self,
        kind: IoKind,
        offset: u64,
        len: u64,
    ) -> Result<(Plan, Vec<Seconds>), VolumeError> {
        let now = self.clock.now();
        let plan = self.layout.plan(kind, offset, len, &self.views(now))?;
        let done = self.submit(&plan, now);
        Ok((plan, done))
    }

    /// Queue a plan's I/O on the drive models (reads at `now`, writes after the reads).
    fn submit(&self, plan: &Plan, now: Seconds) -> Vec<Seconds> {
        let mut done = Vec::with_capacity(plan.reads.len() + plan.writes.len());
        for io in &plan.reads {
            done.push(lock(&self.slots[io.member].drive).submit(
                now,
                IoKind::Read,
                io.member_offset,
                io.len,
            ));
        }
        let writes_at = done.iter().copied().fold(now, f64::max);
        for io in &plan.writes {
            done.push(lock(&self.slots[io.member].drive).submit(
                writes_at,
                IoKind::Write,
                io.member_offset,
                io.len,
            ));
        }
        done
    }

    /// Real time: wait out the modelled service of the members that emulate a drive.
    fn wait_for(&self, plan: &Plan, done: &[Seconds]) {
        let until = plan
            .ios()
            .zip(done)
            .filter(|((_, io), _)| {
                self.slots[io.member]
                    .live_store()
                    .is_some_and(|s| s.emulates_timing())
            })
            .map(|(_, done)| *done)
            .fold(f64::NEG_INFINITY, f64::max);
        if until.is_finite() {
            self.clock.sleep_until(until);
        }
    }

    fn observe(&self, disk: usize, kind: IoKind, offset: u64, len: u64, started: Seconds) {
        let elapsed = self.clock.now() - started;
        match disk.checked_sub(1) {
            None => self.latency.observe(elapsed),
            Some(member) => self.slots[member].latency.observe(elapsed),
        }
        if let Some(rec) = &self.recorder {
            rec.record(disk as u32, kind, offset, len, elapsed);
        }
    }

    /// Every byte of the volume is still readable from the members in sync (the
    /// personality says which member sets it survives; checked by health, not by mapping the
    /// whole volume).
    fn check_redundancy(&self) -> Result<(), VolumeError> {
        let in_sync = self.in_sync();
        if self.layout.survives(&in_sync) {
            return Ok(());
        }
        let missing: Vec<String> = in_sync
            .iter()
            .enumerate()
            .filter(|(_, ok)| !**ok)
            .map(|(i, _)| i.to_string())
            .collect();
        Err(VolumeError::Io {
            volume: self.name.clone(),
            problem: format!(
                "members {} are not in sync and layout {} cannot serve every byte without them",
                missing.join(", "),
                self.layout.kind()
            ),
        })
    }
}

#[cfg(test)]
mod ido_tests;
#[cfg(test)]
mod layout_props;
#[cfg(test)]
mod qmd_tests;
#[cfg(test)]
mod rolo_tests;
#[cfg(test)]
mod temperature_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tracks_tests;
