//! The event-driven I/O path: requests arrive as events, each becomes its personality's
//! plan, whose member I/O is queued on the drive models (several commands per drive at once:
//! the drive's queue and scheduler order them), and drive completions come back as events
//! that move a request to its write phase or finish it. Periodic ticks (power transitions,
//! background integrity work) are events too. One loop serves both clocks: virtual time
//! jumps from event to event (replay), real time sleeps until the next one.
//!
//! Data: a request's bytes move when it arrives, in arrival order (members that store bytes
//! see the same sequence of writes as through `Volume::write`); the events model only when
//! each request completes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use super::io::Caller;
use super::resync::BackgroundIo;
use super::{Volume, VolumeError};
use crate::clock::Seconds;
use crate::drive::{Class, Completion, Op};
use crate::events::EventQueue;
use crate::layout::{MemberIo, Plan};
use crate::service_model::IoKind;
use crate::sync::lock;

/// A request to the volume.
#[derive(Debug, Clone)]
pub struct Request {
    pub kind: IoKind,
    pub offset: u64,
    pub len: u64,
    /// The bytes of a write (None: timing only, as in a trace replay without data).
    pub data: Option<Vec<u8>>,
}

/// A finished request.
#[derive(Debug, Clone)]
pub struct Finished {
    /// Position in the arrival sequence.
    pub index: u64,
    pub kind: IoKind,
    pub arrival: Seconds,
    pub done: Seconds,
    /// (member, completion) of every member command it issued.
    pub member_done: Vec<(usize, Seconds)>,
    /// The bytes a read returned (when the members store bytes).
    pub read: Option<Vec<u8>>,
}

/// What arrives at the core: a request whose bytes move on arrival (replay), or the member
/// I/O of a plan whose bytes the caller moves itself (the daemon's data path, which keeps
/// its range locks, write intent and read-error correction in the caller's thread).
#[derive(Debug)]
pub(super) enum Job {
    Request(u64, Request),
    Planned(Planned),
}

#[derive(Debug)]
pub(super) struct Planned {
    pub index: u64,
    pub kind: IoKind,
    pub reads: Vec<MemberIo>,
    pub writes: Vec<MemberIo>,
    pub class: Class,
    /// A FLUSH CACHE on every drive with something to flush (reads and writes empty): it
    /// is queued behind every command submitted before it.
    pub flush: bool,
    /// Told when the last member command finished (dropped unanswered if the core stops).
    pub reply: Option<Sender<Finished>>,
}

#[derive(Debug)]
enum Event {
    Arrival(Job),
    Drive(usize),
    Tick,
    /// The volume's background work (MD's md_do_sync): the next rebuild step.
    Sync,
}

/// The state of the background work the core runs as events.
#[derive(Debug)]
struct Background {
    /// Rebuild rate while the drives are idle of foreground I/O (MD's speed_limit_max).
    max_mb_s: f64,
    /// Bytes copied per rebuild step.
    chunk: u64,
    /// The queued Sync event.
    armed: Option<Seconds>,
    /// Waiting for the previous step's member I/O before the next step.
    waiting: bool,
    /// Foreground arrivals counted at the previous step.
    foreground_seen: u64,
    /// Bytes rebuilt since the watermark was last written to the headers.
    since_checkpoint: u64,
    /// Bytes rebuilt since the watermark was last journaled.
    since_journal: u64,
}

#[derive(Debug)]
struct Pending {
    index: u64,
    kind: IoKind,
    arrival: Seconds,
    class: Class,
    /// The write phase, queued once every read has completed.
    writes: Vec<MemberIo>,
    outstanding: usize,
    member_done: Vec<(usize, Seconds)>,
    read: Option<Vec<u8>>,
    reply: Option<Sender<Finished>>,
    /// It has member I/O on the array itself, not only on a surrogate set (IDO): only such
    /// user I/O slows a rebuild down to its minimum, as MD's idle check looks at the
    /// array's member disks.
    on_array: bool,
    /// Writes from this index of its write phase reach the media before they complete
    /// (FUA): the surrogate writes of a rebuild step (IDO's hand-over) are paced by the
    /// surrogate's media, not by its write cache, which they would otherwise fill ahead of
    /// the user writes sent there.
    fua_from: Option<usize>,
}

impl Pending {
    /// Background work of the core itself: nobody is told when it finishes.
    fn background(t: Seconds, writes: Vec<MemberIo>) -> Self {
        Self {
            index: u64::MAX,
            kind: IoKind::Read,
            arrival: t,
            class: Class::Background,
            writes,
            outstanding: 0,
            member_done: Vec::new(),
            read: None,
            reply: None,
            on_array: false,
            fua_from: None,
        }
    }
}

/// The deepest drive queue each member has had (commands queued or in service).
#[derive(Debug, Default)]
pub struct QueueDepths(Vec<AtomicUsize>);

impl QueueDepths {
    fn new(members: usize) -> Self {
        Self((0..members).map(|_| AtomicUsize::new(0)).collect())
    }

    fn observe(&self, member: usize, depth: usize) {
        if let Some(d) = self.0.get(member) {
            d.fetch_max(depth, Ordering::Relaxed);
        }
    }

    pub fn max(&self, member: usize) -> usize {
        self.0.get(member).map_or(0, |d| d.load(Ordering::Relaxed))
    }
}

/// The event core: pending events, requests in flight and the drives' wake-ups. It is
/// driven by `Runner` (replay: arrivals from an iterator, the clock jumps or sleeps to each
/// event) and by `Engine` (the daemon: arrivals from a channel, real time); both call the
/// same `accept` and `step`.
#[derive(Debug)]
pub(super) struct Core {
    queue: EventQueue<Event>,
    pending: Vec<Option<Pending>>,
    free: Vec<usize>,
    /// (member, drive command id) → pending request.
    commands: HashMap<(usize, u64), usize>,
    /// The wake-up queued for each drive.
    armed: Vec<Option<Seconds>>,
    tick_s: Option<f64>,
    /// Whether request bytes move on arrival (the members store bytes).
    with_data: bool,
    /// The time of the last event handled.
    now: Seconds,
    depths: Arc<QueueDepths>,
    background: Option<Background>,
    /// Foreground requests that arrived so far.
    foreground_arrivals: u64,
    /// Background requests (rebuild steps) with member I/O outstanding.
    background_outstanding: usize,
}

/// What one step handled.
pub(super) struct Step {
    /// Requests finished (those without a reply channel; the others were told).
    pub finished: Vec<Finished>,
    /// Whether the event was an arrival (a replay then feeds the next one).
    pub arrival: bool,
    /// The time a drive was played to (its own work, write-back, belongs to the run).
    pub played_to: Option<Seconds>,
}

impl Core {
    pub(super) fn new(volume: &Volume, now: Seconds) -> Self {
        let with_data = volume
            .slots
            .iter()
            .any(|s| crate::sync::read(&s.store).is_some());
        Self {
            queue: EventQueue::default(),
            pending: Vec::new(),
            free: Vec::new(),
            commands: HashMap::new(),
            armed: vec![None; volume.slots.len()],
            tick_s: None,
            with_data,
            now,
            depths: Arc::new(QueueDepths::new(volume.slots.len())),
            background: None,
            foreground_arrivals: 0,
            background_outstanding: 0,
        }
    }

    /// Run the volume's background work (rebuild) as events, at up to `max_mb_s` while no
    /// foreground I/O is going on and at the volume's minimum otherwise.
    pub(super) fn set_background(&mut self, max_mb_s: f64, chunk: u64) {
        self.background = Some(Background {
            max_mb_s,
            chunk: chunk.max(4096),
            armed: None,
            waiting: false,
            foreground_seen: 0,
            since_checkpoint: 0,
            since_journal: 0,
        });
    }

    /// Background work may have appeared (a member was replaced): look at once.
    pub(super) fn kick(&mut self, at: Seconds) {
        self.arm_sync(at.max(self.now));
    }

    fn arm_sync(&mut self, at: Seconds) {
        let Some(bg) = self.background.as_mut() else {
            return;
        };
        if bg.waiting || bg.armed.is_some_and(|armed| armed <= at) {
            return;
        }
        bg.armed = Some(at);
        self.queue.push(at, Event::Sync);
    }

    /// One step of background work at `t`; returns when the next is due (None: nothing
    /// left to do until the next kick).
    fn sync_step(&mut self, v: &Volume, t: Seconds) -> Option<Seconds> {
        let member = (0..v.slots.len())
            .find(|&m| matches!(v.slots[m].health(), super::Health::Rebuilding { .. }))?;
        let chunk = self.background.as_ref()?.chunk;
        let progress = match v.rebuild_chunk(member, chunk, true) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(volume = %v.name, member, error = %e, "rebuild stopped");
                return None;
            }
        };
        match progress {
            super::membership::RebuildProgress::Done => {
                if let Some(bg) = self.background.as_mut() {
                    bg.since_checkpoint = 0;
                    bg.since_journal = 0;
                }
                // Another member may be waiting for its rebuild.
                Some(t)
            }
            super::membership::RebuildProgress::Busy => Some(t + crate::rebuild::BUSY_RETRY_S),
            super::membership::RebuildProgress::Copied {
                watermark,
                reads,
                writes,
                write,
            } => {
                let len = write.len;
                let foreground = self.foreground_arrivals;
                let busy = self.foreground_busy();
                let bg = self.background.as_mut()?;
                let moved = busy || foreground != bg.foreground_seen;
                bg.foreground_seen = foreground;
                bg.since_checkpoint += len;
                bg.since_journal += len;
                if bg.since_journal >= crate::rebuild::JOURNAL_BYTES {
                    bg.since_journal = 0;
                    // Flushes the replacement up to the watermark, then journals it.
                    if let Err(e) = v.journal_rebuild_progress(member) {
                        tracing::warn!(volume = %v.name, error = %e, "cannot journal rebuild progress");
                    }
                }
                if bg.since_checkpoint >= crate::rebuild::CHECKPOINT_BYTES {
                    bg.since_checkpoint = 0;
                    // persist_headers flushes the copied data before the watermark.
                    if let Err(e) = v.persist_headers() {
                        tracing::warn!(volume = %v.name, error = %e, "cannot checkpoint rebuild");
                    }
                }
                let rate =
                    crate::rebuild::rate_mb_s(moved, v.integrity().rebuild_min_mb_s, bg.max_mb_s);
                tracing::trace!(volume = %v.name, member, watermark, rate, "rebuild step");
                self.background_outstanding += 1;
                let fua_from = (!writes.is_empty()).then_some(1);
                let mut all = vec![write];
                all.extend(writes);
                let pending = Pending {
                    fua_from,
                    ..Pending::background(t, all)
                };
                // Finished background work is never handed back (background_finished).
                let _ = self.start_phase(v, t, pending, &reads, Op::Read);
                Some(t + crate::rebuild::step_interval_s(len, rate))
            }
        }
    }

    /// Whether foreground requests are in flight.
    fn foreground_busy(&self) -> bool {
        self.pending
            .iter()
            .flatten()
            .any(|p| p.class == Class::Foreground && p.on_array)
    }

    pub(super) fn depths(&self) -> Arc<QueueDepths> {
        self.depths.clone()
    }

    /// Run `Volume::tick` every `seconds` while requests are outstanding (replay) or always
    /// (`keep_ticking`, the daemon).
    pub(super) fn set_ticks(&mut self, seconds: Option<f64>) {
        self.tick_s = seconds.filter(|s| s.is_finite() && *s > 0.0);
        if let Some(s) = self.tick_s {
            self.queue.push(self.now + s, Event::Tick);
        }
    }

    /// The time of the next event.
    pub(super) fn next_due(&self) -> Option<Seconds> {
        self.queue.next_time()
    }

    pub(super) fn busy(&self) -> bool {
        self.pending.iter().any(Option::is_some)
    }

    /// A job arrives at `at` (never before the last event handled: time only moves forward).
    pub(super) fn accept(&mut self, at: Seconds, job: Job) {
        self.queue.push(at.max(self.now), Event::Arrival(job));
    }

    /// Handle the earliest event; the caller has brought its clock to the event's time.
    /// `more` says whether more arrivals may come (ticks stop once nothing is left).
    pub(super) fn step(&mut self, volume: &Volume, more: bool) -> Result<Step, VolumeError> {
        let mut step = Step {
            finished: Vec::new(),
            arrival: false,
            played_to: None,
        };
        let Some((t, event)) = self.queue.pop() else {
            return Ok(step);
        };
        self.now = self.now.max(t);
        match event {
            Event::Arrival(Job::Request(i, request)) => {
                step.arrival = true;
                let what = format!(
                    "request {} (offset {}, size {})",
                    i + 1,
                    request.offset,
                    request.len
                );
                let started = self
                    .arrive(volume, t, i, request)
                    .map_err(|e| VolumeError::Io {
                        volume: volume.name.clone(),
                        problem: format!("{what}: {e}"),
                    })?;
                step.finished.extend(started);
            }
            Event::Arrival(Job::Planned(p)) => {
                step.arrival = true;
                if p.class == Class::Foreground {
                    self.foreground_arrivals += 1;
                }
                let pending = Pending {
                    index: p.index,
                    kind: p.kind,
                    arrival: t,
                    class: p.class,
                    writes: p.writes,
                    outstanding: 0,
                    member_done: Vec::new(),
                    read: None,
                    reply: p.reply,
                    on_array: true,
                    fua_from: None,
                };
                let (ios, op) = if p.flush {
                    (flushes(volume, t), Op::Flush)
                } else {
                    (p.reads, Op::Read)
                };
                step.finished
                    .extend(self.start_phase(volume, t, pending, &ios, op));
            }
            Event::Drive(m) => {
                if self.armed[m] != Some(t) {
                    return Ok(step); // superseded by an earlier wake-up
                }
                self.armed[m] = None;
                step.played_to = Some(t);
                let completions = {
                    let mut drive = lock(&volume.slots[m].drive);
                    drive.advance_to(t);
                    drive.poll(t)
                };
                for c in completions {
                    step.finished.extend(self.complete(volume, m, &c));
                }
                self.arm(volume, m);
            }
            Event::Sync => {
                let Some(bg) = self.background.as_mut() else {
                    return Ok(step);
                };
                if bg.armed != Some(t) {
                    return Ok(step); // superseded
                }
                bg.armed = None;
                if self.background_outstanding > 0 {
                    // The previous step's I/O first (MD keeps its resync window too).
                    bg.waiting = true;
                    return Ok(step);
                }
                if let Some(next) = self.sync_step(volume, t) {
                    self.arm_sync(next);
                }
            }
            Event::Tick => {
                let ios = volume.tick_on_core();
                self.queue_background(volume, t, ios);
                if let (Some(s), true) = (self.tick_s, more || self.busy()) {
                    // From now, not from when it was due: a late tick in real time is not
                    // followed by a burst of them (in virtual time now is `t`).
                    let from = volume.clock.now().max(t);
                    self.queue.push(from + s, Event::Tick);
                }
            }
        }
        Ok(step)
    }

    /// Queue member I/O the volume's own work did (a tick, a staged append) as background
    /// commands.
    fn queue_background(&mut self, v: &Volume, t: Seconds, ios: Vec<BackgroundIo>) {
        for (kind, member, offset, len) in ios {
            let io = MemberIo {
                member,
                member_offset: offset,
                len,
                buf: crate::layout::Buf::Caller(0),
            };
            let op = match kind {
                IoKind::Read => Op::Read,
                IoKind::Write => Op::Write { fua: false },
            };
            self.background_outstanding += 1;
            let _ = self.start_phase(v, t, Pending::background(t, Vec::new()), &[io], op);
        }
    }

    /// A request arrives at `t`: plan it, move its bytes, queue its first phase. Returns it
    /// when it needs no member I/O.
    fn arrive(
        &mut self,
        v: &Volume,
        t: Seconds,
        index: u64,
        request: Request,
    ) -> Result<Option<Finished>, VolumeError> {
        v.check_range(request.offset, request.len)?;
        let plan = v
            .layout
            .plan(request.kind, request.offset, request.len, &v.views(t))?;
        let on_array = plan
            .ios()
            .any(|(_, io)| v.layout.role(io.member) != crate::layout::Role::Surrogate);
        if on_array {
            self.foreground_arrivals += 1;
        }
        let read = if self.with_data {
            move_data(v, &plan, &request, t)?
        } else {
            // No bytes move, but a layout that redirects writes still follows them.
            if request.kind == IoKind::Write {
                v.complete_plan(&plan, None)?;
            }
            None
        };
        if request.kind == IoKind::Write {
            // A staging space half taken is appended now (QMD), as a background write.
            let ios = v.append_staged_if_due_on_core();
            self.queue_background(v, t, ios);
        }
        let pending = Pending {
            index,
            kind: request.kind,
            arrival: t,
            class: Class::Foreground,
            writes: plan.writes,
            outstanding: 0,
            member_done: Vec::new(),
            read,
            reply: None,
            on_array,
            fua_from: None,
        };
        Ok(self.start_phase(v, t, pending, &plan.reads, Op::Read))
    }

    /// Queue `ios` on their drives; the request waits for all of them. A phase without I/O
    /// goes on to the next (the writes) or finishes the request.
    fn start_phase(
        &mut self,
        v: &Volume,
        t: Seconds,
        mut pending: Pending,
        ios: &[MemberIo],
        op: Op,
    ) -> Option<Finished> {
        if ios.is_empty() {
            if matches!(op, Op::Read) {
                let writes = std::mem::take(&mut pending.writes);
                return self.start_phase(v, t, pending, &writes, Op::Write { fua: false });
            }
            if pending.class == Class::Background && pending.reply.is_none() {
                self.background_finished(t);
                return None;
            }
            let finished = Finished {
                index: pending.index,
                kind: pending.kind,
                arrival: pending.arrival,
                done: t,
                member_done: pending.member_done,
                read: pending.read,
            };
            return match pending.reply {
                Some(reply) => {
                    let _ = reply.send(finished);
                    None
                }
                None => Some(finished),
            };
        }
        pending.outstanding = ios.len();
        let class = pending.class;
        let fua_from = pending.fua_from;
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.pending.push(None);
                self.pending.len() - 1
            }
        };
        self.pending[slot] = Some(pending);
        for (i, io) in ios.iter().enumerate() {
            let op = match op {
                Op::Write { .. } if fua_from.is_some_and(|f| i >= f) => Op::Write { fua: true },
                op => op,
            };
            let (id, depth) = {
                let mut drive = lock(&v.slots[io.member].drive);
                let id = drive.enqueue(t, op, io.member_offset, io.len, class, None);
                (id, drive.queued())
            };
            self.depths.observe(io.member, depth);
            self.commands.insert((io.member, id), slot);
            self.arm(v, io.member);
        }
        None
    }

    /// A rebuild step's I/O finished: a step waiting for it may go.
    fn background_finished(&mut self, t: Seconds) {
        self.background_outstanding = self.background_outstanding.saturating_sub(1);
        if let Some(bg) = self.background.as_mut() {
            if bg.waiting && self.background_outstanding == 0 {
                bg.waiting = false;
                self.arm_sync(t);
            }
        }
    }

    /// A member command finished: the request moves on, or is finished.
    fn complete(&mut self, v: &Volume, member: usize, c: &Completion) -> Option<Finished> {
        let slot = self.commands.remove(&(member, c.id))?;
        let pending = self.pending.get_mut(slot)?.as_mut()?;
        pending.member_done.push((member, c.done));
        pending.outstanding -= 1;
        if pending.outstanding > 0 {
            return None;
        }
        let mut pending = self.pending[slot].take()?;
        self.free.push(slot);
        let writes = std::mem::take(&mut pending.writes);
        self.start_phase(v, c.done, pending, &writes, Op::Write { fua: false })
    }

    /// Make sure the drive's next event is queued.
    fn arm(&mut self, v: &Volume, member: usize) {
        let next = lock(&v.slots[member].drive).next_event();
        if let Some(at) = next {
            if self.armed[member].is_none_or(|armed| at < armed) {
                self.armed[member] = Some(at);
                self.queue.push(at, Event::Drive(member));
            }
        }
    }
}

/// A FLUSH CACHE command for every drive that has something to flush at `t`.
fn flushes(v: &Volume, t: Seconds) -> Vec<MemberIo> {
    (0..v.slots.len())
        .filter(|&m| lock(&v.slots[m].drive).flush_needed(t))
        .map(|member| MemberIo {
            member,
            member_offset: 0,
            len: 0,
            buf: crate::layout::Buf::Caller(0),
        })
        .collect()
}

/// The request's bytes, in arrival order: what a read returns, or the write applied.
fn move_data(
    v: &Volume,
    plan: &Plan,
    request: &Request,
    t: Seconds,
) -> Result<Option<Vec<u8>>, VolumeError> {
    match (request.kind, &request.data) {
        (IoKind::Read, _) => {
            let mut buf = vec![0u8; request.len as usize];
            v.run(plan, Caller::Read(&mut buf), true, t)?;
            Ok(Some(buf))
        }
        (IoKind::Write, Some(data)) => {
            let failed = v.run(plan, Caller::Write(data), true, t)?;
            if failed && !v.layout.survives(&v.in_sync()) {
                return Err(v.plan_error(format!(
                    "write of {} bytes at {} reached no valid copy",
                    data.len(),
                    request.offset
                )));
            }
            v.complete_plan(plan, Some(data))?;
            Ok(None)
        }
        (IoKind::Write, None) => {
            Err(v.plan_error("a write without data to a volume that stores bytes"))
        }
    }
}

/// Runs requests through a volume on the event core, under the volume's clock (a replay in
/// virtual time; real time sleeps until each event).
pub struct Runner<'v> {
    volume: &'v Volume,
    core: Core,
}

impl<'v> Runner<'v> {
    pub fn new(volume: &'v Volume) -> Self {
        Self {
            volume,
            core: Core::new(volume, volume.clock.now()),
        }
    }

    /// Run `Volume::tick` (power transitions, background integrity work) every `seconds`.
    pub fn with_ticks(mut self, seconds: f64) -> Self {
        self.core.set_ticks(Some(seconds));
        self
    }

    /// Run the volume's rebuilds as events from `from` on, `chunk` bytes a step, throttled
    /// to at most `max_mb_s` (MD's speed_limit_max; the volume's `rebuild_min_mb_s` while
    /// foreground I/O moves).
    pub fn with_background(mut self, max_mb_s: f64, chunk: u64, from: Seconds) -> Self {
        self.core.set_background(max_mb_s, chunk);
        self.core.kick(from);
        self
    }

    /// The deepest queue each drive had.
    pub fn queue_depths(&self) -> Arc<QueueDepths> {
        self.core.depths()
    }

    /// Serve `arrivals` ((time, request), in arrival order; a time earlier than the previous
    /// one is served at the previous one) until every request has finished; `finished` is
    /// called for each. Returns the time the last one finished.
    pub fn run<E: From<VolumeError>>(
        &mut self,
        arrivals: impl IntoIterator<Item = Result<(Seconds, Request), E>>,
        mut finished: impl FnMut(Finished),
    ) -> Result<Seconds, E> {
        let clock = self.volume.clock.clone();
        let mut arrivals = arrivals.into_iter();
        let mut index = 0u64;
        let mut end = clock.now();
        // One arrival is queued at a time: the next when the previous one is handled.
        let mut feed = |core: &mut Core| -> Result<bool, E> {
            match arrivals.next() {
                Some(Ok((at, request))) => {
                    core.accept(at, Job::Request(index, request));
                    index += 1;
                    Ok(true)
                }
                Some(Err(e)) => Err(e),
                None => Ok(false),
            }
        };
        let mut more = feed(&mut self.core)?;
        while let Some(t) = self.core.next_due() {
            clock.wait_until(t);
            let step = self.core.step(self.volume, more)?;
            end = step.played_to.map_or(end, |t| end.max(t));
            for f in step.finished {
                end = end.max(f.done);
                finished(f);
            }
            if step.arrival && more {
                more = feed(&mut self.core)?;
            }
        }
        Ok(end)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::{Clock, RealClock, VirtualClock};
    use crate::layout::LayoutKind;
    use crate::member::memory::MemMember;
    use crate::superblock::DATA_OFFSET;
    use crate::synth::Rng;
    use crate::volume::tests::memory_volume;

    const CHUNK: u64 = 16384;

    /// Requests 2 ms apart: writes with data and reads, sector-aligned, up to 3 chunks.
    fn sequence(capacity: u64, seed: u64, n: usize) -> Vec<(Seconds, Request)> {
        let mut rng = Rng(seed);
        (0..n)
            .map(|i| {
                let len = (1 + rng.next() % (3 * CHUNK / 512)) * 512;
                let offset = rng.next() % ((capacity - len) / 512 + 1) * 512;
                let write = rng.next() % 10 < 6;
                let fill = rng.next() as u8;
                let request = Request {
                    kind: if write { IoKind::Write } else { IoKind::Read },
                    offset,
                    len,
                    data: write.then(|| (0..len).map(|b| (b as u8).wrapping_add(fill)).collect()),
                };
                (i as f64 * 0.002, request)
            })
            .collect()
    }

    struct Outcome {
        members: Vec<Vec<u8>>,
        reads: Vec<(u64, Vec<u8>)>,
        finished: Vec<Finished>,
    }

    impl Outcome {
        fn of(mut finished: Vec<Finished>, stores: &[Arc<MemMember>]) -> Self {
            finished.sort_by_key(|f| f.index);
            let reads = finished
                .iter()
                .filter_map(|f| f.read.clone().map(|r| (f.index, r)))
                .collect();
            Outcome {
                members: bytes_of(stores),
                reads,
                finished,
            }
        }
    }

    fn volume(
        kind: LayoutKind,
        members: usize,
        clock: Arc<dyn Clock>,
    ) -> (Volume, Vec<Arc<MemMember>>) {
        memory_volume(kind, members, clock, CHUNK)
    }

    fn bytes_of(stores: &[Arc<MemMember>]) -> Vec<Vec<u8>> {
        stores
            .iter()
            .map(|m| lock(&m.bytes)[DATA_OFFSET as usize..].to_vec())
            .collect()
    }

    fn on_the_event_core(
        kind: LayoutKind,
        members: usize,
        clock: Arc<dyn Clock>,
        seed: u64,
    ) -> Outcome {
        let (v, stores) = volume(kind, members, clock.clone());
        let start = clock.now();
        let requests = sequence(v.capacity(), seed, 150);
        let mut finished = Vec::new();
        Runner::new(&v)
            .with_ticks(0.1)
            .run(
                requests
                    .into_iter()
                    .map(|(at, r)| Ok::<_, VolumeError>((start + at, r))),
                |f| finished.push(f),
            )
            .unwrap();
        Outcome::of(finished, &stores)
    }

    /// The daemon's path: one request after the other through `Volume::read`/`write`.
    fn one_by_one(kind: LayoutKind, members: usize, seed: u64) -> Outcome {
        let (v, stores) = volume(kind, members, Arc::new(VirtualClock::new()));
        let mut reads = Vec::new();
        for (i, (_, r)) in sequence(v.capacity(), seed, 150).into_iter().enumerate() {
            match r.data {
                Some(data) => v.write(r.offset, &data).unwrap(),
                None => {
                    let mut buf = vec![0u8; r.len as usize];
                    v.read(r.offset, &mut buf).unwrap();
                    reads.push((i as u64, buf));
                }
            }
        }
        Outcome {
            members: bytes_of(&stores),
            reads,
            finished: Vec::new(),
        }
    }

    #[test]
    fn the_same_requests_give_the_same_data_in_replay_and_in_real_time() {
        for (kind, members) in [
            (LayoutKind::RAID10, 4),
            (LayoutKind::RAID5, 4),
            (LayoutKind::RAID6, 5),
        ] {
            let virt = on_the_event_core(kind, members, Arc::new(VirtualClock::new()), 11);
            let real = on_the_event_core(kind, members, Arc::new(RealClock::new()), 11);
            let sync = one_by_one(kind, members, 11);
            assert_eq!(virt.finished.len(), 150, "{kind}: every request finished");
            assert_eq!(real.finished.len(), 150, "{kind}: every request finished");
            assert!(!virt.reads.is_empty(), "{kind}: the sequence reads");
            assert!(
                virt.members == real.members,
                "{kind}: members equal in both clocks"
            );
            assert!(
                virt.reads == real.reads,
                "{kind}: reads equal in both clocks"
            );
            assert!(
                virt.members == sync.members,
                "{kind}: members equal to the daemon's path"
            );
            assert!(
                virt.reads == sync.reads,
                "{kind}: reads equal to the daemon's path"
            );
            for f in virt.finished.iter().chain(&real.finished) {
                assert!(
                    f.done >= f.arrival,
                    "{kind}: request {} ends before it began",
                    f.index
                );
                assert!(f
                    .member_done
                    .iter()
                    .all(|&(_, d)| d >= f.arrival && d <= f.done));
            }
        }
    }

    /// The order in which a burst of reads to scattered places of a 3-member RAID5 finishes,
    /// with the drives queueing `depth` commands under `scheduler`.
    fn burst_order(depth: usize, scheduler: crate::profile::SchedulerKind) -> Vec<u64> {
        let (v, _stores) = volume(LayoutKind::RAID5, 3, Arc::new(VirtualClock::new()));
        for m in 0..3 {
            lock(&v.slots[m].drive).set_queueing(depth, scheduler);
        }
        // 21 reads arrive together, all on member 0's chunks (data index 0 of
        // stripes 3k, whose member 0 holds data), far apart and out of order.
        let stripes: Vec<u64> = (0..21u64).map(|i| (i * 37 % 21) * 3).collect();
        let burst = stripes.iter().map(|&s| {
            Ok::<_, VolumeError>((
                0.0,
                Request {
                    kind: IoKind::Read,
                    offset: s * 2 * CHUNK,
                    len: 4096,
                    data: None,
                },
            ))
        });
        let mut finished = Vec::new();
        Runner::new(&v).run(burst, |f| finished.push(f)).unwrap();
        assert_eq!(finished.len(), 21);
        assert!(finished
            .iter()
            .all(|f| f.member_done.iter().all(|&(m, _)| m == 0)));
        finished.sort_by(|a, b| a.done.total_cmp(&b.done));
        finished.iter().map(|f| f.index).collect()
    }

    /// A burst finishes in arrival order at depth 1 (FCFS) and reordered at depth 16 (SPTF).
    fn assert_sptf_reorders(order: impl Fn(usize, crate::profile::SchedulerKind) -> Vec<u64>) {
        use crate::profile::SchedulerKind;
        let fcfs = order(1, SchedulerKind::Fcfs);
        assert_eq!(
            fcfs,
            (0..21).collect::<Vec<_>>(),
            "depth 1, FCFS: arrival order"
        );
        let sptf = order(16, SchedulerKind::Sptf);
        assert_ne!(sptf, fcfs, "depth 16, SPTF: the drive picks from its queue");
        let mut sorted = sptf.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, fcfs, "every request finished once");
    }

    #[test]
    fn a_burst_is_queued_on_the_drive_and_its_scheduler_reorders_it() {
        assert_sptf_reorders(burst_order);
    }

    /// A memory member that says it emulates a drive, so callers wait out the model.
    #[derive(Debug)]
    struct Timed(Arc<MemMember>);

    impl crate::member::Member for Timed {
        fn kind(&self) -> crate::member::MemberKind {
            crate::member::MemberKind::EmulatedHdd
        }
        fn describe(&self) -> String {
            "timed memory".into()
        }
        fn size(&self) -> u64 {
            self.0.size()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            self.0.read_at(buf, offset)
        }
        fn write_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
            self.0.write_at(data, offset)
        }
        fn flush(&self) -> std::io::Result<()> {
            self.0.flush()
        }
    }

    /// A 3-member RAID5 on 7200 rpm drive models (milliseconds per command) with timed
    /// memory members, served by its engine thread in real time.
    fn engine_volume(depth: usize, scheduler: crate::profile::SchedulerKind) -> Arc<Volume> {
        use crate::member::Member;
        let stores: Vec<Arc<dyn Member>> = (0..3)
            .map(|_| {
                Arc::new(Timed(MemMember::new(crate::volume::tests::MEMBER))) as Arc<dyn Member>
            })
            .collect();
        let v = crate::volume::tests::build_with_profile(
            LayoutKind::RAID5,
            stores,
            Arc::new(RealClock::new()),
            CHUNK,
            "deskstar-t7k250",
        );
        for m in 0..3 {
            lock(&v.slots[m].drive).set_queueing(depth, scheduler);
        }
        let v = Arc::new(v);
        v.start_engine(200.0).unwrap();
        v
    }

    #[test]
    fn concurrent_requests_of_fuse_threads_queue_on_the_drive_together() {
        use crate::profile::SchedulerKind;
        let v = engine_volume(16, SchedulerKind::Sptf);
        // 8 threads, each reading 4 scattered chunks that all live on member 0.
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let v = &v;
                s.spawn(move || {
                    for k in 0..4u64 {
                        let stripe = ((t * 4 + k) * 37 % 21) * 3;
                        let mut buf = vec![0u8; 4096];
                        v.read(stripe * 2 * CHUNK, &mut buf).unwrap();
                    }
                });
            }
        });
        let depths = v.engine().unwrap().queue_depths();
        assert!(
            depths.max(0) > 1,
            "member 0's drive never had more than one command queued ({})",
            depths.max(0)
        );
        v.stop_engine();
    }

    /// The order in which the engine finishes a burst of plans submitted together (as FUSE
    /// threads would), all to member 0.
    fn engine_burst_order(depth: usize, scheduler: crate::profile::SchedulerKind) -> Vec<u64> {
        let v = engine_volume(depth, scheduler);
        let engine = v.engine().unwrap();
        let now = v.clock.now();
        let replies: Vec<_> = (0..21u64)
            .map(|i| {
                let stripe = (i * 37 % 21) * 3;
                let plan = v
                    .layout
                    .plan(IoKind::Read, stripe * 2 * CHUNK, 4096, &v.views(now))
                    .unwrap();
                assert!(plan.reads.iter().all(|io| io.member == 0));
                engine.submit(now, IoKind::Read, &plan, Class::Foreground)
            })
            .collect();
        let mut finished: Vec<Finished> = replies.iter().map(|r| r.recv().unwrap()).collect();
        v.stop_engine();
        finished.sort_by(|a, b| a.done.total_cmp(&b.done));
        finished.iter().map(|f| f.index).collect()
    }

    #[test]
    fn the_engine_queues_a_burst_on_the_drive_and_sptf_reorders_it() {
        assert_sptf_reorders(engine_burst_order);
    }

    /// One run of the sequence in two halves on the event core; between them member 1 is
    /// failed and replaced, and the second half runs with its rebuild as background events.
    /// `times` are the instants the real-time run used (the halves' starts); a virtual run
    /// is moved to the same ones.
    fn failed_and_replaced(
        clock: Arc<dyn Clock>,
        virt: Option<&VirtualClock>,
        times: &mut Vec<Seconds>,
    ) -> Outcome {
        let (v, mut stores) = volume(LayoutKind::RAID5, 4, clock.clone());
        let requests = sequence(v.capacity(), 23, 200);
        let (first, second) = requests.split_at(100);
        let mut finished = Vec::new();
        let mut start_of = |half: usize| match virt {
            Some(c) => {
                c.advance_to(times[half]);
                times[half]
            }
            None => {
                times.push(clock.now() + 0.02);
                times[half]
            }
        };
        let start = start_of(0);
        Runner::new(&v)
            .run(
                first
                    .iter()
                    .map(|(at, r)| Ok::<_, VolumeError>((start + at, r.clone()))),
                |f| finished.push(f),
            )
            .unwrap();
        v.fail_member(1, "test");
        let fresh = MemMember::new(crate::volume::tests::MEMBER);
        v.replace_member(1, fresh.clone()).unwrap();
        stores[1] = fresh;
        let start = start_of(1);
        Runner::new(&v)
            .with_background(20.0, 64 * 1024, start)
            .run(
                second
                    .iter()
                    .map(|(at, r)| Ok::<_, VolumeError>((start + at, r.clone()))),
                |mut f| {
                    f.index += 100;
                    finished.push(f)
                },
            )
            .unwrap();
        assert_eq!(
            v.slots[1].health(),
            super::super::Health::InSync,
            "the rebuild ran to the end as background events"
        );
        let scrub = v.scrub(false).unwrap();
        assert_eq!(
            scrub.mismatched_chunks, 0,
            "parity checks out after the rebuild"
        );
        Outcome::of(finished, &stores)
    }

    #[test]
    fn a_member_replaced_mid_way_gives_the_same_data_and_times_in_both_clocks() {
        let mut times = Vec::new();
        let real = failed_and_replaced(Arc::new(RealClock::new()), None, &mut times);
        let virtual_clock = Arc::new(VirtualClock::new());
        let virt = failed_and_replaced(virtual_clock.clone(), Some(&virtual_clock), &mut times);
        assert_eq!(real.finished.len(), 200);
        assert!(virt.members == real.members, "members equal in both clocks");
        assert!(virt.reads == real.reads, "reads equal in both clocks");
        let order = |o: &Outcome| {
            let mut by_done: Vec<(Seconds, u64)> =
                o.finished.iter().map(|f| (f.done, f.index)).collect();
            by_done.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            by_done
        };
        assert_eq!(order(&virt), order(&real), "completion order and times");
    }

    /// When a rebuild of member 1 of a RAID10 (1 MiB per member, 16 KiB steps, at most
    /// 20 MB/s, at least 5 MB/s) ends in virtual time, with `requests` reads 2 ms apart
    /// going on from the start.
    fn rebuild_end(requests: usize) -> Seconds {
        let (v, _stores) = volume(LayoutKind::RAID10, 2, Arc::new(VirtualClock::new()));
        v.fail_member(1, "test");
        v.replace_member(1, MemMember::new(crate::volume::tests::MEMBER))
            .unwrap();
        assert_eq!(v.integrity().rebuild_min_mb_s, 5.0);
        let reads = (0..requests).map(|i| {
            Ok::<_, VolumeError>((
                i as f64 * 0.002,
                Request {
                    kind: IoKind::Read,
                    offset: (i as u64 * 3 * CHUNK) % (v.capacity() - CHUNK),
                    len: 4096,
                    data: None,
                },
            ))
        });
        let end = Runner::new(&v)
            .with_background(20.0, CHUNK, 0.0)
            .run(reads, |_| {})
            .unwrap();
        assert_eq!(v.slots[1].health(), super::super::Health::InSync);
        end
    }

    #[test]
    fn the_rebuild_runs_at_the_maximum_when_idle_and_yields_to_foreground_io() {
        let mib = (1u64 << 20) as f64;
        let idle = rebuild_end(0);
        assert!(
            idle >= mib / 20e6 && idle < 1.5 * mib / 20e6,
            "idle drives: about 1 MiB at 20 MB/s, took {idle} s"
        );
        // 0.1 s of foreground reads: the rebuild crawls at 5 MB/s meanwhile (0.5 MB), then
        // finishes the rest at 20 MB/s.
        let busy = rebuild_end(50);
        assert!(
            busy > 0.1 && busy > 2.0 * idle,
            "foreground I/O slows the rebuild to its minimum: {busy} s against {idle} s idle"
        );
    }

    #[test]
    fn a_tick_on_the_core_leaves_a_region_in_use_for_later_and_hands_back_its_io() {
        use crate::member::Member;
        use crate::volume::WriteIntent;
        let (v, _stores) = volume(LayoutKind::RAID10, 2, Arc::new(VirtualClock::new()));
        let bitmap: Arc<dyn Member> = MemMember::new(1 << 16);
        let v = Arc::new(v.with_write_intent(WriteIntent::new(
            bitmap,
            "t",
            65536,
            (crate::volume::tests::MEMBER as u64) - crate::superblock::DATA_OFFSET,
        )));
        v.write(0, &vec![7u8; 131072]).unwrap();
        // After an unclean stop both regions are dirty; a request holds region 1 (and
        // would wait for the engine while holding it).
        v.write_intent().unwrap().set_recovered([0, 1].into());
        let held = v.ranges.acquire(&v.spans_of(65536, 65536), false);
        let (tx, rx) = std::sync::mpsc::channel();
        let ticking = {
            let v = v.clone();
            std::thread::spawn(move || tx.send(v.tick_on_core()).unwrap())
        };
        let io = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the tick waited for a lock a request holds");
        ticking.join().unwrap();
        assert_eq!(v.resync_pending(), 1, "region 1, in use, is left for later");
        assert!(
            io.iter()
                .any(|&(kind, _, offset, _)| kind == IoKind::Read && offset < 65536),
            "region 0's resync reads are handed to the core: {io:?}"
        );
        drop(held);
        v.tick_on_core();
        assert_eq!(v.resync_pending(), 0, "the next tick resyncs it");
    }

    #[test]
    fn a_flush_on_the_engine_writes_back_every_acknowledged_write() {
        use crate::profile::SchedulerKind;
        let v = engine_volume(16, SchedulerKind::Sptf);
        for m in 0..3 {
            lock(&v.slots[m].drive).set_write_cache(true);
        }
        let engine = v.engine().unwrap();
        let now = v.clock.now();
        // Writes acknowledged (from the drives' write caches) before the fsync is issued,
        // as FUSE replies to a write before the kernel sends its fsync.
        let writes: Vec<_> = (0..12u64)
            .map(|i| {
                let plan = v
                    .layout
                    .plan(
                        IoKind::Write,
                        (i * 37 % 21) * 2 * CHUNK,
                        4096,
                        &v.views(now),
                    )
                    .unwrap();
                engine.submit(now, IoKind::Write, &plan, Class::Foreground)
            })
            .collect();
        let acknowledged = writes
            .iter()
            .map(|w| w.recv().unwrap().done)
            .fold(f64::NEG_INFINITY, f64::max);
        let cached: u64 = (0..3).map(|m| lock(&v.slots[m].drive).dirty_bytes()).sum();
        assert!(cached > 0, "the writes sit in the drives' caches");
        let flushed = engine.submit_flush(v.clock.now()).recv().unwrap();
        assert!(flushed.done >= acknowledged);
        assert!(
            !flushed.member_done.is_empty(),
            "FLUSH CACHE reached the drives"
        );
        for m in 0..3 {
            assert_eq!(lock(&v.slots[m].drive).dirty_bytes(), 0, "member {m}");
        }
        // Through the volume (a FUSE fsync) with nothing cached: answered at once.
        v.flush().unwrap();
        v.stop_engine();
    }
}
