//! The engine: a volume is a layout over member slots, each slot a drive model plus (when
//! serving) a member that stores the bytes. The same code schedules requests in virtual
//! time for replays and in real time for the daemon; only the clock and the presence of
//! member storage differ.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, RwLock};

use serde::Serialize;
use thiserror::Error;

use crate::clock::{Clock, Seconds};
use crate::drive::{Drive, PowerEvent};
use crate::latency::Histogram;
use crate::layout::{Layout, LayoutError, MemberIo, MemberView};
use crate::ledger::Ledger;
use crate::member::Member;
use crate::power_state::PowerState;
use crate::service_model::IoKind;
use crate::superblock::{self, MemberData, Superblock, DATA_OFFSET};
use crate::sync::{lock, read, write};
use crate::trace::TraceRecorder;

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
}

impl MemberSlot {
    pub fn new(store: Option<Arc<dyn Member>>, drive: Drive, health: Health) -> Self {
        Self {
            store: RwLock::new(store),
            drive: Mutex::new(drive),
            health: Mutex::new(health),
            latency: Histogram::default(),
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
    layout: Box<dyn Layout>,
    slots: Vec<MemberSlot>,
    clock: Arc<dyn Clock>,
    /// Rebuild copies take it exclusively per chunk so user writes cannot interleave.
    gate: RwLock<()>,
    hints: Mutex<Vec<(u64, u64)>>,
    recorder: Option<TraceRecorder>,
    /// The header template written to members (None in virtual time).
    identity: Mutex<Option<Superblock>>,
    latency: Histogram,
}

impl Volume {
    pub fn new(
        name: &str,
        layout: Box<dyn Layout>,
        slots: Vec<MemberSlot>,
        clock: Arc<dyn Clock>,
        recorder: Option<TraceRecorder>,
        identity: Option<Superblock>,
    ) -> Self {
        Self {
            name: name.to_string(),
            layout,
            slots,
            clock,
            gate: RwLock::new(()),
            hints: Mutex::new(Vec::new()),
            recorder,
            identity: Mutex::new(identity),
            latency: Histogram::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn layout(&self) -> &dyn Layout {
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
        self.slots
            .iter()
            .map(|slot| {
                let ready_at = lock(&slot.drive).ready_estimate(now);
                match slot.health() {
                    Health::InSync => MemberView::healthy(ready_at),
                    Health::Failed { .. } => MemberView {
                        valid_below: 0,
                        writable: false,
                        ready_at,
                    },
                    Health::Rebuilding { watermark } => MemberView {
                        valid_below: watermark,
                        writable: true,
                        ready_at,
                    },
                }
            })
            .collect()
    }

    /// Plan a request and queue its pieces on the drive models; returns each piece with
    /// its modelled completion time.
    pub fn schedule(
        &self,
        kind: IoKind,
        offset: u64,
        len: u64,
    ) -> Result<Vec<(MemberIo, Seconds)>, VolumeError> {
        let now = self.clock.now();
        let plan = self.layout.plan(kind, offset, len, &self.views(now))?;
        Ok(plan
            .into_iter()
            .map(|io| {
                let done =
                    lock(&self.slots[io.member].drive).submit(now, kind, io.member_offset, io.len);
                (io, done)
            })
            .collect())
    }

    /// Virtual time: the completion time of a request arriving now.
    pub fn simulate(&self, kind: IoKind, offset: u64, len: u64) -> Result<Seconds, VolumeError> {
        let now = self.clock.now();
        Ok(self
            .schedule(kind, offset, len)?
            .iter()
            .map(|(_, done)| *done)
            .fold(now, f64::max))
    }

    /// Real time: wait out the modelled service of the members that emulate a drive.
    fn wait_for(&self, scheduled: &[(MemberIo, Seconds)]) {
        let until = scheduled
            .iter()
            .filter(|(io, _)| {
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

    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), VolumeError> {
        let _gate = read(&self.gate);
        let started = self.clock.now();
        let len = buf.len() as u64;
        // Each failed attempt removes a member, so this ends.
        for _ in 0..=self.slots.len() {
            let scheduled = self.schedule(IoKind::Read, offset, len)?;
            self.wait_for(&scheduled);
            let mut failed = None;
            for (io, _) in &scheduled {
                let piece = &mut buf[io.buf_offset as usize..(io.buf_offset + io.len) as usize];
                let slot = &self.slots[io.member];
                let result = match slot.live_store() {
                    Some(store) => store.read_at(piece, DATA_OFFSET + io.member_offset),
                    None => Err(std::io::Error::other("member has no storage")),
                };
                match result {
                    Ok(()) => self.observe(
                        io.member + 1,
                        IoKind::Read,
                        io.member_offset,
                        io.len,
                        started,
                    ),
                    Err(e) => {
                        failed = Some((io.member, e));
                        break;
                    }
                }
            }
            match failed {
                None => {
                    self.observe(0, IoKind::Read, offset, len, started);
                    return Ok(());
                }
                Some((member, e)) => self.fail_member(member, &format!("read error: {e}")),
            }
        }
        Err(VolumeError::Io {
            volume: self.name.clone(),
            problem: format!("read of {len} bytes at {offset} failed on every copy"),
        })
    }

    /// Write to every live copy; succeeds only if every piece reached at least one member
    /// that holds valid data (members that fail are dropped from the array).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), VolumeError> {
        let _gate = read(&self.gate);
        let started = self.clock.now();
        let scheduled = self.schedule(IoKind::Write, offset, data.len() as u64)?;
        self.wait_for(&scheduled);
        let mut pieces = BTreeSet::new();
        let mut written = BTreeSet::new();
        for (io, _) in &scheduled {
            pieces.insert(io.buf_offset);
            let piece = &data[io.buf_offset as usize..(io.buf_offset + io.len) as usize];
            let slot = &self.slots[io.member];
            let result = match slot.live_store() {
                Some(store) => store.write_at(piece, DATA_OFFSET + io.member_offset),
                None => Err(std::io::Error::other("member has no storage")),
            };
            match result {
                Ok(()) => {
                    self.observe(
                        io.member + 1,
                        IoKind::Write,
                        io.member_offset,
                        io.len,
                        started,
                    );
                    if slot.health() == Health::InSync {
                        written.insert(io.buf_offset);
                    }
                }
                Err(e) => self.fail_member(io.member, &format!("write error: {e}")),
            }
        }
        if written != pieces {
            return Err(VolumeError::Io {
                volume: self.name.clone(),
                problem: format!(
                    "write of {} bytes at {offset} reached no valid copy",
                    data.len()
                ),
            });
        }
        self.observe(0, IoKind::Write, offset, data.len() as u64, started);
        Ok(())
    }

    /// Make every acknowledged write durable on every live member.
    pub fn flush(&self) -> Result<(), VolumeError> {
        // FLUSH CACHE on the drive models: an fsync waits for their write-back caches.
        let now = self.clock.now();
        let mut until = f64::NEG_INFINITY;
        for slot in &self.slots {
            let done = lock(&slot.drive).flush(now);
            if slot.live_store().is_some_and(|s| s.emulates_timing()) {
                until = until.max(done);
            }
        }
        if until.is_finite() {
            self.clock.sleep_until(until);
        }
        for (i, slot) in self.slots.iter().enumerate() {
            if let Some(store) = slot.live_store() {
                if let Err(e) = store.flush() {
                    self.fail_member(i, &format!("flush error: {e}"));
                }
            }
        }
        if let Some(rec) = &self.recorder {
            rec.flush();
        }
        self.check_redundancy()
    }

    /// Every byte of the volume still has a valid copy: each member that is not in sync has
    /// an in-sync mirror. (Checked by health, not by mapping the whole volume.)
    fn check_redundancy(&self) -> Result<(), VolumeError> {
        for (i, slot) in self.slots.iter().enumerate() {
            if slot.health() == Health::InSync {
                continue;
            }
            let covered = self
                .layout
                .mirror_of(i)
                .and_then(|m| self.slots.get(m))
                .is_some_and(|m| m.health() == Health::InSync);
            if !covered {
                return Err(VolumeError::Io {
                    volume: self.name.clone(),
                    problem: format!(
                        "member {i} is not in sync and no in-sync copy of its data is left"
                    ),
                });
            }
        }
        Ok(())
    }

    pub fn fail_member(&self, member: usize, reason: &str) {
        let Some(slot) = self.slots.get(member) else {
            return;
        };
        {
            let mut health = lock(&slot.health);
            if matches!(*health, Health::Failed { .. }) {
                return;
            }
            *health = Health::Failed {
                reason: reason.to_string(),
            };
        }
        tracing::warn!(volume = %self.name, member, reason, "member failed; volume is degraded");
        self.bump_generation();
        if let Err(e) = self.persist_headers() {
            tracing::error!(volume = %self.name, error = %e, "cannot record the member failure in the headers");
        }
    }

    /// Put a replacement into a failed slot and mark it for rebuild.
    pub fn replace_member(&self, member: usize, store: Arc<dyn Member>) -> Result<(), VolumeError> {
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
        let source = self.layout.mirror_of(member).ok_or_else(|| {
            self.member_error(
                member,
                format!(
                    "layout {} keeps no second copy to rebuild from",
                    self.layout.kind()
                ),
            )
        })?;
        if self.slots[source].health() != Health::InSync {
            return Err(self.member_error(
                member,
                format!("its mirror, member {source}, is not in sync"),
            ));
        }
        *write(&slot.store) = Some(store);
        *lock(&slot.health) = Health::Rebuilding { watermark: 0 };
        self.bump_generation();
        self.persist_headers()?;
        tracing::info!(volume = %self.name, member, source, "member replaced; rebuild pending");
        Ok(())
    }

    /// Copy the next `chunk` bytes onto a rebuilding member; returns the new watermark, or
    /// None once the member is in sync.
    pub fn rebuild_step(&self, member: usize, chunk: u64) -> Result<Option<u64>, VolumeError> {
        let slot = self
            .slots
            .get(member)
            .ok_or_else(|| self.member_error(member, "no such member"))?;
        let Health::Rebuilding { watermark } = slot.health() else {
            return Ok(None);
        };
        let end = self.layout.member_data_bytes();
        if watermark >= end {
            let target = slot
                .live_store()
                .ok_or_else(|| self.member_error(member, "replacement has no storage"))?;
            target
                .flush()
                .map_err(|e| self.member_error(member, format!("flush after rebuild: {e}")))?;
            *lock(&slot.health) = Health::InSync;
            self.persist_headers()?;
            tracing::info!(volume = %self.name, member, "rebuild complete");
            return Ok(None);
        }
        let source = self
            .layout
            .mirror_of(member)
            .ok_or_else(|| self.member_error(member, "no mirror to rebuild from"))?;
        let len = chunk.min(end - watermark);
        let _exclusive = write(&self.gate);
        let (Some(from), Some(to)) = (self.slots[source].live_store(), slot.live_store()) else {
            return Err(self.member_error(
                member,
                format!("mirror {source} or the replacement is gone"),
            ));
        };
        let mut buf = vec![0u8; len as usize];
        let now = self.clock.now();
        let read_done = lock(&self.slots[source].drive).submit(now, IoKind::Read, watermark, len);
        let write_done = lock(&slot.drive).submit(read_done, IoKind::Write, watermark, len);
        if from.emulates_timing() || to.emulates_timing() {
            self.clock.sleep_until(write_done);
        }
        from.read_at(&mut buf, DATA_OFFSET + watermark)
            .map_err(|e| self.member_error(source, format!("rebuild read: {e}")))?;
        to.write_at(&buf, DATA_OFFSET + watermark)
            .map_err(|e| self.member_error(member, format!("rebuild write: {e}")))?;
        let watermark = watermark + len;
        *lock(&slot.health) = Health::Rebuilding { watermark };
        Ok(Some(watermark))
    }

    fn bump_generation(&self) {
        if let Some(id) = lock(&self.identity).as_mut() {
            id.generation += 1;
        }
    }

    pub fn identity(&self) -> Option<Superblock> {
        lock(&self.identity).clone()
    }

    pub fn set_identity_flags(&self, formatted: bool, clean: bool) -> Result<(), VolumeError> {
        if let Some(id) = lock(&self.identity).as_mut() {
            id.formatted = formatted;
            id.clean = clean;
        }
        self.persist_headers()
    }

    /// Write the current header to every member that is not failed.
    pub fn persist_headers(&self) -> Result<(), VolumeError> {
        let Some(identity) = self.identity() else {
            return Ok(());
        };
        for (i, slot) in self.slots.iter().enumerate() {
            let data = match slot.health() {
                Health::InSync => MemberData::InSync,
                Health::Rebuilding { watermark } => MemberData::Rebuilding { watermark },
                Health::Failed { .. } => continue,
            };
            let Some(store) = slot.live_store() else {
                continue;
            };
            let header = Superblock {
                member_index: i,
                data,
                ..identity.clone()
            };
            if let Err(e) = superblock::write(store.as_ref(), &header) {
                self.fail_member(i, &e.to_string());
            }
        }
        self.check_redundancy()
    }

    /// Apply due power transitions and hand spin-downs to the members that act on them.
    pub fn tick(&self) {
        let now = self.clock.now();
        for (i, slot) in self.slots.iter().enumerate() {
            let events = {
                let mut drive = lock(&slot.drive);
                drive.advance_to(now);
                drive.take_events()
            };
            for event in events {
                tracing::debug!(volume = %self.name, member = i, ?event, "power transition");
                if let PowerEvent::SpinDownStarted { .. } = event {
                    if let Some(store) = slot.live_store() {
                        if let Err(e) = store.spin_down() {
                            tracing::warn!(volume = %self.name, member = i, error = %e, "spin-down command failed");
                        }
                    }
                }
            }
        }
    }

    fn live_slots(&self) -> impl Iterator<Item = &MemberSlot> {
        self.slots
            .iter()
            .filter(|s| !matches!(s.health(), Health::Failed { .. }))
    }

    pub fn power_state(&self) -> PowerState {
        let now = self.clock.now();
        PowerState::aggregate(self.live_slots().map(|s| {
            let mut d = lock(&s.drive);
            d.advance_to(now);
            d.state()
        }))
    }

    /// Spin up every live member; returns the aggregate state and seconds until all are ready.
    pub fn wake(&self) -> (PowerState, f64) {
        let now = self.clock.now();
        let ready = self
            .live_slots()
            .map(|s| lock(&s.drive).wake(now))
            .fold(now, f64::max);
        (self.power_state(), ready - now)
    }

    pub fn sleep(&self, expected_idle_s: Option<f64>) -> SleepOutcome {
        let now = self.clock.now();
        for slot in self.live_slots() {
            if let Err(reason) = lock(&slot.drive).sleep(now, expected_idle_s) {
                return SleepOutcome::Declined(reason);
            }
        }
        SleepOutcome::Accepted(self.power_state())
    }

    /// Record the extents the client will touch next (later layouts act on them).
    pub fn hint(&self, extents: &[(u64, u64)]) -> Result<usize, VolumeError> {
        for &(offset, len) in extents {
            if offset
                .checked_add(len)
                .is_none_or(|end| end > self.capacity())
            {
                return Err(LayoutError::OutOfRange {
                    offset,
                    len,
                    size: self.capacity(),
                }
                .into());
            }
        }
        let mut hints = lock(&self.hints);
        *hints = extents.to_vec();
        Ok(hints.len())
    }

    pub fn hints(&self) -> Vec<(u64, u64)> {
        lock(&self.hints).clone()
    }

    /// Ledgers of every member up to `now`.
    pub fn member_ledgers(&self, now: Seconds) -> Vec<Ledger> {
        self.slots
            .iter()
            .map(|s| lock(&s.drive).ledger_at(now))
            .collect()
    }

    pub fn latency(&self) -> &Histogram {
        &self.latency
    }

    pub fn member_latency(&self, member: usize) -> Option<&Histogram> {
        self.slots.get(member).map(|s| &s.latency)
    }

    /// The volume object of the control protocol.
    pub fn status(&self) -> serde_json::Value {
        let now = self.clock.now();
        let ledgers = self.member_ledgers(now);
        let total = Ledger::sum(&ledgers);
        let members: Vec<_> = self
            .slots
            .iter()
            .zip(&ledgers)
            .enumerate()
            .map(|(i, (slot, ledger))| {
                let (state, profile, policy) = {
                    let d = lock(&slot.drive);
                    (
                        d.state(),
                        d.profile().summary(d.standby_mode()),
                        d.policy_description(),
                    )
                };
                let store = read(&slot.store).clone();
                serde_json::json!({
                    "index": i,
                    "kind": store.as_ref().map(|s| s.kind().to_string()),
                    "path": store.as_ref().map(|s| s.describe()),
                    "device_power_state": store.as_ref().and_then(|s| s.reported_power_state()),
                    "health": slot.health(),
                    "state": state,
                    "policy": policy,
                    "profile": profile,
                    "ledger": ledger,
                })
            })
            .collect();
        let profile = self
            .slots
            .first()
            .map(|s| {
                let d = lock(&s.drive);
                d.profile().summary(d.standby_mode())
            })
            .unwrap_or(serde_json::Value::Null);
        let degraded = self.slots.iter().any(|s| s.health() != Health::InSync);
        serde_json::json!({
            "name": self.name,
            "layout": self.layout.kind(),
            "stripe_unit": self.layout.stripe_unit(),
            "capacity_bytes": self.capacity(),
            "state": self.power_state(),
            "degraded": degraded,
            "profile": profile,
            "energy_joules": total.energy_joules,
            "ledger": total,
            "hints": self.hints().len(),
            "members": members,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;
    use crate::layout;
    use crate::layout::LayoutKind;
    use crate::policy::PolicySpec;
    use crate::profile::DriveProfile;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Member storage in memory that can be told to fail.
    #[derive(Debug)]
    struct MemMember {
        bytes: Mutex<Vec<u8>>,
        broken: AtomicBool,
    }

    impl MemMember {
        fn new(size: usize) -> Arc<Self> {
            Arc::new(Self {
                bytes: Mutex::new(vec![0; size]),
                broken: AtomicBool::new(false),
            })
        }

        fn check(&self) -> std::io::Result<()> {
            if self.broken.load(Ordering::SeqCst) {
                Err(std::io::Error::other("injected failure"))
            } else {
                Ok(())
            }
        }
    }

    impl Member for MemMember {
        fn kind(&self) -> crate::member::MemberKind {
            crate::member::MemberKind::File
        }
        fn describe(&self) -> String {
            "memory".into()
        }
        fn size(&self) -> u64 {
            lock(&self.bytes).len() as u64
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            self.check()?;
            let b = lock(&self.bytes);
            buf.copy_from_slice(&b[offset as usize..offset as usize + buf.len()]);
            Ok(())
        }
        fn write_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
            self.check()?;
            lock(&self.bytes)[offset as usize..offset as usize + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            self.check()
        }
    }

    const MEMBER: usize = (DATA_OFFSET as usize) + (1 << 20);

    fn volume(kind: LayoutKind, members: &[Arc<MemMember>]) -> Volume {
        let profile = Arc::new(DriveProfile::load("test-fast").unwrap());
        let layout =
            layout::build(kind, members.len(), (MEMBER as u64) - DATA_OFFSET, 65536).unwrap();
        let slots = members
            .iter()
            .map(|m| {
                let drive = Drive::new(
                    profile.clone(),
                    0,
                    PolicySpec::AlwaysOn.build(48),
                    0.0,
                    Ledger::default(),
                );
                let store: Arc<dyn Member> = m.clone();
                MemberSlot::new(Some(store), drive, Health::InSync)
            })
            .collect();
        Volume::new(
            "t",
            layout,
            slots,
            Arc::new(VirtualClock::new()),
            None,
            None,
        )
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn raid10_write_lands_on_both_copies_and_reads_back() {
        let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
        let v = volume(LayoutKind::Raid10, &m);
        let data = pattern(200_000, 1);
        v.write(12345, &data).unwrap();
        v.flush().unwrap();
        let mut back = vec![0; data.len()];
        v.read(12345, &mut back).unwrap();
        assert_eq!(back, data);
        let off = DATA_OFFSET as usize + 12345;
        assert_eq!(lock(&m[0].bytes)[off..off + data.len()], data[..]);
        assert_eq!(lock(&m[1].bytes)[off..off + data.len()], data[..]);
    }

    #[test]
    fn a_failing_member_degrades_the_volume_without_an_error() {
        let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
        let v = volume(LayoutKind::Raid10, &m);
        m[1].broken.store(true, Ordering::SeqCst);
        let data = pattern(8192, 2);
        v.write(0, &data).unwrap();
        assert!(matches!(v.slot(1).unwrap().health(), Health::Failed { .. }));
        v.flush().unwrap();
        let mut back = vec![0; data.len()];
        v.read(0, &mut back).unwrap();
        assert_eq!(back, data);
    }

    #[test]
    fn a_read_error_falls_back_to_the_mirror() {
        let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
        let v = volume(LayoutKind::Raid10, &m);
        let data = pattern(4096, 3);
        v.write(65536, &data).unwrap();
        m[0].broken.store(true, Ordering::SeqCst);
        m[1].broken.store(false, Ordering::SeqCst);
        let mut back = vec![0; data.len()];
        v.read(65536, &mut back).unwrap();
        assert_eq!(back, data);
    }

    #[test]
    fn losing_the_last_copy_is_an_error() {
        let m = [MemMember::new(MEMBER)];
        let v = volume(LayoutKind::Single, &m);
        m[0].broken.store(true, Ordering::SeqCst);
        assert!(v.write(0, &[1; 512]).is_err());
        assert!(v.flush().is_err());
    }

    #[test]
    fn replace_and_rebuild_copies_the_mirror() {
        let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
        let v = volume(LayoutKind::Raid10, &m);
        let data = pattern(300_000, 4);
        v.write(1000, &data).unwrap();
        assert!(
            v.replace_member(1, MemMember::new(MEMBER)).is_err(),
            "not failed yet"
        );
        v.fail_member(1, "test");
        let fresh = MemMember::new(MEMBER);
        v.replace_member(1, fresh.clone()).unwrap();
        // Written while rebuilding: must reach the replacement too.
        let late = pattern(4096, 5);
        v.write(900_000, &late).unwrap();
        while v.rebuild_step(1, 128 * 1024).unwrap().is_some() {}
        assert_eq!(v.slot(1).unwrap().health(), Health::InSync);
        let off = DATA_OFFSET as usize;
        assert_eq!(lock(&fresh.bytes)[off..], lock(&m[0].bytes)[off..]);
        m[0].broken.store(true, Ordering::SeqCst);
        let mut back = vec![0; data.len()];
        v.read(1000, &mut back).unwrap();
        assert_eq!(back, data, "served by the rebuilt member alone");
    }

    #[test]
    fn sleep_and_wake_follow_the_policy() {
        let m = [MemMember::new(MEMBER)];
        let v = volume(LayoutKind::Single, &m);
        assert!(
            matches!(v.sleep(Some(600.0)), SleepOutcome::Declined(r) if r.contains("always-on"))
        );
        let (state, ready_in) = v.wake();
        assert_eq!((state, ready_in), (PowerState::Idle, 0.0));
    }

    #[test]
    fn a_model_spin_down_is_sent_to_a_real_disk() {
        use crate::member::{BlockDevice, FileMember, MemberKind, RecordingRunner};
        let dir = std::env::temp_dir().join(format!("grs-vol-bd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let io = FileMember::open_or_create(MemberKind::Blockdev, &dir.join("d"), MEMBER as u64)
            .unwrap();
        let runner = Arc::new(RecordingRunner::default());
        let disk: Arc<dyn Member> = Arc::new(BlockDevice::with_io(io, "/dev/sdz", runner.clone()));
        let profile = Arc::new(DriveProfile::load("test-fast").unwrap());
        let drive = Drive::new(
            profile,
            0,
            "idle-timeout:1".parse::<PolicySpec>().unwrap().build(48),
            0.0,
            Ledger::default(),
        );
        let clock = Arc::new(VirtualClock::new());
        let layout =
            layout::build(LayoutKind::Single, 1, (MEMBER as u64) - DATA_OFFSET, 65536).unwrap();
        let v = Volume::new(
            "bd",
            layout,
            vec![MemberSlot::new(Some(disk), drive, Health::InSync)],
            clock.clone(),
            None,
            None,
        );
        v.tick();
        assert!(
            lock(&runner.calls).is_empty(),
            "still within the idle timeout"
        );
        clock.advance_to(5.0);
        v.tick();
        assert_eq!(*lock(&runner.calls), vec!["hdparm -y /dev/sdz".to_string()]);
        assert_eq!(v.power_state(), PowerState::Standby);
        v.tick();
        assert_eq!(lock(&runner.calls).len(), 1, "one spin-down, one command");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn hints_are_checked_against_the_volume_size() {
        let m = [MemMember::new(MEMBER)];
        let v = volume(LayoutKind::Single, &m);
        assert_eq!(v.hint(&[(0, 4096), (8192, 4096)]).unwrap(), 2);
        assert!(v.hint(&[(v.capacity(), 1)]).is_err());
    }
}
