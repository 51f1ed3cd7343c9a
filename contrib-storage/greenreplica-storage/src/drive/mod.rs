//! One member drive: a command queue in front of a mechanism (a disk's arm, platters and
//! buffer, or a flash device), under a power-state machine with its energy ledger.
//!
//! The drive is an event engine of its own: commands arrive (`enqueue`), the queue's
//! scheduler picks the next one whenever the mechanism has a free slot, completions come
//! out (`poll`), and idle time drains the write-back cache and lets the power policy act.
//! It only knows the times it is given, so the same code runs under the real clock (the
//! daemon) and the virtual clock (replay); `submit` is the synchronous form the volume uses.
//! This is the seam for the array engine: submit, complete, queue, power state, head.

pub mod bench;
pub mod cache;
pub mod disk;
pub mod flash;
pub mod geometry;
pub mod mechanism;
pub mod power;
pub mod queue;
pub mod scheduler;
pub mod seek;

use std::collections::VecDeque;
use std::sync::Arc;

use crate::clock::Seconds;
use crate::ledger::Ledger;
use crate::power_manager::{ArrayView, MemberPower, MemberPowerView, WakeCause};
use crate::power_state::PowerState;
use crate::profile::{DriveProfile, SchedulerKind};

pub use cache::Extent;
pub use mechanism::{HeadPosition, Mechanism};
pub use power::PowerEvent;
pub use queue::{Class, Command, Op};

use disk::DiskMechanism;
use flash::FlashMechanism;
use power::PowerMachine;
use queue::CommandQueue;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    Read,
    Write,
}

/// A finished command.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub id: u64,
    pub op: Op,
    pub offset: u64,
    pub len: u64,
    pub class: Class,
    pub arrival: Seconds,
    pub started: Seconds,
    pub done: Seconds,
    pub cache_hit: bool,
    /// Bytes of a read served from dirty cached data, when the writes carried them.
    pub data: Option<Vec<u8>>,
}

#[derive(Debug)]
struct InFlight {
    /// None for the drive's own destage work.
    command: Option<Command>,
    started: Seconds,
    done: Seconds,
    cache_hit: bool,
    data: Option<Vec<u8>>,
    /// Cached extents this operation writes to the media (on it once `done`).
    destaging: Vec<(u64, Extent)>,
    /// Whether it holds a slot of the mechanism until `done` (a cached write does not: its
    /// interface transfer overlaps the next media operation).
    occupies: bool,
}

/// The mechanism a profile describes: flash for `rpm = 0`, else a disk.
pub fn mechanism_for(profile: &DriveProfile) -> Result<Box<dyn Mechanism>, String> {
    if profile.rpm == 0 {
        Ok(Box::new(FlashMechanism::new(profile)))
    } else {
        Ok(Box::new(DiskMechanism::new(profile)?))
    }
}

#[derive(Debug)]
pub struct Drive {
    power: PowerMachine,
    mechanism: Box<dyn Mechanism>,
    queue: CommandQueue,
    in_flight: Vec<InFlight>,
    completions: VecDeque<Completion>,
    /// When a slot of the mechanism last became free.
    free_since: Seconds,
    /// When the last host command finished: write-back starts `destage_delay` after it and
    /// then runs extent after extent until a host command arrives or the cache is clean.
    host_quiet_since: Seconds,
    next_id: u64,
    /// Extents that reached the media since the last `take_destaged`.
    on_media: Vec<(u64, Extent)>,
}

impl Drive {
    /// A drive that is spun up and idle at time `now`, continuing the totals in `ledger`.
    pub fn new(
        profile: Arc<DriveProfile>,
        standby_mode: usize,
        power: MemberPower,
        now: Seconds,
        ledger: Ledger,
    ) -> Self {
        let mechanism = mechanism_for(&profile).unwrap_or_else(|problem| {
            // Validated profiles cannot get here; a hand-built one gets a single-zone disk.
            tracing::warn!(%problem, "drive profile mechanism unusable; using a derived one");
            let mut plain = (*profile).clone();
            plain.geometry = None;
            match DiskMechanism::new(&plain) {
                Ok(disk) => Box::new(disk),
                Err(_) => Box::new(FlashMechanism::new(&plain)),
            }
        });
        let queue = CommandQueue::new(profile.queue.depth, profile.queue.scheduler);
        Self {
            power: PowerMachine::new(profile, standby_mode, power, now, ledger),
            mechanism,
            queue,
            in_flight: Vec::new(),
            completions: VecDeque::new(),
            free_since: now,
            host_quiet_since: now,
            next_id: 1,
            on_media: Vec::new(),
        }
    }

    pub fn profile(&self) -> &DriveProfile {
        self.power.profile()
    }

    pub fn standby_mode(&self) -> usize {
        self.power.standby_mode()
    }

    pub fn policy_description(&self) -> String {
        self.power.policy_description()
    }

    pub fn state(&self) -> PowerState {
        self.power.state()
    }

    /// Its link to the array's power manager.
    pub fn power_link(&self) -> &MemberPower {
        self.power.power_link()
    }

    /// Join an array's manager (a volume adopts its members' drives).
    pub fn rebind_power(&mut self, power: MemberPower) {
        self.power.rebind(power);
    }

    /// What the array's manager sees of this drive at `now`.
    pub fn power_view(
        &mut self,
        now: Seconds,
        role: crate::layout::Role,
        live: bool,
        rebuilding: bool,
    ) -> MemberPowerView {
        self.pump(now, true);
        self.power.view(role, live, rebuilding)
    }

    pub fn take_events(&mut self) -> Vec<PowerEvent> {
        self.power.take_events()
    }

    /// Where the head is (None for flash, or after a spin-up until the first access).
    pub fn head_position(&self) -> Option<HeadPosition> {
        self.mechanism.head()
    }

    /// Commands waiting (not yet started).
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    pub fn scheduler(&self) -> SchedulerKind {
        self.queue.scheduler()
    }

    /// How many queued commands the scheduler chooses among (the oldest first).
    pub fn queue_window(&self) -> usize {
        self.queue.depth()
    }

    /// Queue depth and scheduler for this member (the profile gives the defaults).
    pub fn set_queueing(&mut self, depth: usize, scheduler: SchedulerKind) {
        self.queue.set_policy(depth, scheduler);
    }

    /// `hdparm -W`: returns false if the drive has no write-back cache.
    pub fn set_write_cache(&mut self, on: bool) -> bool {
        self.mechanism.set_write_cache(on)
    }

    pub fn write_cache_enabled(&self) -> bool {
        self.mechanism.write_cache_enabled()
    }

    pub fn dirty_bytes(&self) -> u64 {
        self.mechanism.dirty_bytes()
    }

    /// Extents the drive has written from its cache to the media since the last call.
    pub fn take_destaged(&mut self) -> Vec<(u64, Extent)> {
        std::mem::take(&mut self.on_media)
    }

    /// When a free slot could start the next command, if there is work to start.
    fn dispatch_time(&self) -> Option<Seconds> {
        let busy = self.in_flight.iter().filter(|f| f.occupies).count();
        if busy >= self.mechanism.parallelism() {
            return None;
        }
        match self.queue.earliest_arrival() {
            Some(arrival) => Some(self.free_since.max(arrival)),
            // Idle with dirty data: destage it (background work, one extent at a time).
            None if busy == 0 && self.mechanism.dirty_bytes() > 0 => Some(
                self.free_since
                    .max(self.host_quiet_since + self.mechanism.destage_delay()),
            ),
            None => None,
        }
    }

    fn dispatch(&mut self, at: Seconds) {
        let was_asleep = matches!(
            self.power.state(),
            PowerState::Standby | PowerState::SpinningDown
        );
        let start = self.power.begin_service(at);
        if self.power.take_head_lost() {
            self.mechanism.forget_head();
        }
        let next = self.queue.take_next(self.mechanism.as_ref(), start);
        if was_asleep {
            // Which command spun a sleeping drive up (RUST_LOG=greenreplica_storage::drive=debug):
            // tells a read of a sleeping pair from the write-back or a destage.
            match &next {
                Some(c) => tracing::debug!(
                    op = ?c.op, offset = c.offset, len = c.len, class = ?c.class,
                    "drive woken by a command"
                ),
                None => tracing::debug!("drive woken by a destage of its cache"),
            }
        }
        let Some(command) = next else {
            let done = self.mechanism.destage_one(start);
            self.power.busy_until(done);
            self.in_flight.push(InFlight {
                command: None,
                started: start,
                done,
                cache_hit: false,
                data: None,
                destaging: self.mechanism.take_destaged(),
                occupies: true,
            });
            return;
        };
        let served = self.mechanism.serve(&command, start);
        self.power.busy_until(served.done);
        let occupies = served.media_free_at >= served.done;
        if !occupies {
            self.free_since = self.free_since.max(served.media_free_at);
        }
        let ledger = self.power.ledger_mut();
        match command.op {
            Op::Read => {
                ledger.reads += 1;
                ledger.bytes_read += command.len;
            }
            Op::Write { .. } => {
                ledger.writes += 1;
                ledger.bytes_written += command.len;
            }
            Op::Flush => {}
        }
        self.in_flight.push(InFlight {
            command: Some(command),
            started: start,
            done: served.done,
            cache_hit: served.cache_hit,
            data: served.data,
            destaging: self.mechanism.take_destaged(),
            occupies,
        });
    }

    fn next_done(&self) -> Option<(usize, Seconds)> {
        self.in_flight
            .iter()
            .enumerate()
            .map(|(i, f)| (i, f.done))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    fn complete(&mut self, index: usize) {
        let f = self.in_flight.swap_remove(index);
        if f.occupies {
            self.free_since = self.free_since.max(f.done);
        }
        self.on_media.extend(f.destaging);
        if let Some(c) = f.command {
            self.host_quiet_since = self.host_quiet_since.max(f.done);
            self.completions.push_back(Completion {
                id: c.id,
                op: c.op,
                offset: c.offset,
                len: c.len,
                class: c.class,
                arrival: c.arrival,
                started: f.started,
                done: f.done,
                cache_hit: f.cache_hit,
                data: f.data,
            });
        }
    }

    /// Play completions and dispatches up to `t`. A slot that frees exactly at `t` is
    /// filled only when `dispatch_at_t`, so commands arriving at `t` can still compete.
    fn pump(&mut self, t: Seconds, dispatch_at_t: bool) {
        loop {
            let done = self.next_done();
            let start = self.dispatch_time();
            match (done, start) {
                (Some((i, d)), s) if d <= t && s.is_none_or(|s| d <= s) => self.complete(i),
                (_, Some(s)) if s < t || (dispatch_at_t && s <= t) => self.dispatch(s),
                _ => break,
            }
        }
        self.power.advance_to(t);
    }

    /// Queue a command arriving at `now`; returns its id for `poll`.
    pub fn enqueue(
        &mut self,
        now: Seconds,
        op: Op,
        offset: u64,
        len: u64,
        class: Class,
        data: Option<Vec<u8>>,
    ) -> u64 {
        self.pump(now, false);
        let id = self.next_id;
        self.next_id += 1;
        self.queue.push(Command {
            id,
            op,
            offset,
            len,
            class,
            arrival: now,
            data,
        });
        self.pump(now, true);
        id
    }

    /// The time of the next completion, if a command is queued or in flight.
    pub fn next_completion(&mut self) -> Option<Seconds> {
        loop {
            if let Some(c) = self.completions.front() {
                return Some(c.done);
            }
            let next = match (self.next_done(), self.dispatch_time()) {
                (Some((_, d)), Some(s)) => d.min(s),
                (Some((_, d)), None) => d,
                (None, Some(s)) => s,
                (None, None) => return None,
            };
            // Only the drive's own destage work is left: no completion will come.
            if self.queue.is_empty() && self.in_flight.iter().all(|f| f.command.is_none()) {
                return None;
            }
            self.pump(next, true);
        }
    }

    /// When the drive next has something to do or report (a command starting or finishing,
    /// a finished command not yet polled), without playing it: the event core's wake-up for
    /// this drive. None when it is idle with nothing to write back.
    pub fn next_event(&self) -> Option<Seconds> {
        [
            self.completions.front().map(|c| c.done),
            self.next_done().map(|(_, d)| d),
            self.dispatch_time(),
        ]
        .into_iter()
        .flatten()
        .min_by(f64::total_cmp)
    }

    /// Completions up to `t` (the drive advanced to `t`).
    pub fn poll(&mut self, t: Seconds) -> Vec<Completion> {
        self.pump(t, false);
        let ready = self.completions.iter().take_while(|c| c.done <= t).count();
        self.completions.drain(..ready).collect()
    }

    /// Run until command `id` completes; returns its completion.
    fn wait_for(&mut self, id: u64) -> Option<Completion> {
        loop {
            if let Some(i) = self.completions.iter().position(|c| c.id == id) {
                return self.completions.remove(i);
            }
            let next = match (self.next_done(), self.dispatch_time()) {
                (Some((_, d)), Some(s)) => d.min(s),
                (Some((_, d)), None) => d,
                (None, Some(s)) => s,
                (None, None) => return None,
            };
            self.pump(next, true);
        }
    }

    /// Synchronous form: one request arriving at `now`; returns its completion time.
    pub fn submit(&mut self, now: Seconds, kind: IoKind, offset: u64, len: u64) -> Seconds {
        let op = match kind {
            IoKind::Read => Op::Read,
            IoKind::Write => Op::Write { fua: false },
        };
        self.submit_op(now, op, offset, len, Class::Foreground)
    }

    /// Synchronous form of any command, e.g. a background rebuild read or a FUA write.
    pub fn submit_op(
        &mut self,
        now: Seconds,
        op: Op,
        offset: u64,
        len: u64,
        class: Class,
    ) -> Seconds {
        let id = self.enqueue(now, op, offset, len, class, None);
        self.wait_for(id).map_or(now, |c| c.done)
    }

    /// FLUSH CACHE at `now`; returns when every cached write is on the media.
    pub fn flush(&mut self, now: Seconds) -> Seconds {
        if !self.flush_needed(now) {
            return now;
        }
        self.submit_op(now, Op::Flush, 0, 0, Class::Foreground)
    }

    /// Whether a FLUSH CACHE at `now` has anything to wait for; a drive with nothing cached
    /// or pending answers at once, without waking (the event core then queues none).
    pub fn flush_needed(&mut self, now: Seconds) -> bool {
        self.pump(now, false);
        !(self.mechanism.dirty_bytes() == 0 && self.queue.is_empty() && self.in_flight.is_empty())
    }

    /// Power is cut at `now`: queued and running commands and the volatile cache are
    /// lost. Returns the dirty extents that never reached the media.
    pub fn power_loss(&mut self, now: Seconds) -> Vec<(u64, u64)> {
        self.pump(now, false);
        let mut lost: Vec<(u64, u64)> = self
            .in_flight
            .drain(..)
            .flat_map(|f| f.destaging)
            .map(|(offset, e)| (offset, e.len))
            .collect();
        self.completions.clear();
        while self.queue.take_next(self.mechanism.as_ref(), now).is_some() {}
        self.free_since = self.free_since.max(now);
        lost.extend(self.mechanism.power_loss());
        lost.sort_unstable();
        lost
    }

    /// Client wake of a lone drive: start spinning up now; returns when it will be ready.
    pub fn wake(&mut self, now: Seconds) -> Seconds {
        self.wake_for(now, WakeCause::Request)
    }

    /// The array's manager chose this drive to wake, for `cause`.
    pub fn wake_for(&mut self, now: Seconds, cause: WakeCause) -> Seconds {
        self.pump(now, true);
        self.power.wake(now, cause)
    }

    /// Client sleep of a lone drive (an array of one): the manager decides.
    pub fn sleep(&mut self, now: Seconds, expected_idle_s: Option<f64>) -> Result<(), String> {
        self.pump(now, true);
        let view = ArrayView {
            now,
            members: vec![self.power.view(crate::layout::Role::Data, true, false)],
            redundant: false,
            groups: vec![vec![self.power.power_link().member()]],
            hinted: None,
            cold_groups: Vec::new(),
        };
        let grants = self
            .power
            .power_link()
            .decide_sleep(&view, expected_idle_s)?;
        if let Some(grant) = grants.first() {
            self.grant_sleep(now, grant.mode);
        }
        Ok(())
    }

    /// The array's manager granted sleep: write the cache back (as on STANDBY IMMEDIATE),
    /// then spin down as soon as the drive is idle.
    pub fn grant_sleep(&mut self, now: Seconds, mode: Option<usize>) {
        self.pump(now, true);
        if self.mechanism.dirty_bytes() > 0 {
            self.flush(now);
        }
        self.power.grant_sleep(now, mode);
    }

    /// When the drive could start serving a request arriving at `now` (for read balancing).
    /// Plays what is due first: a drive whose idle timeout passed must look asleep, not idle.
    pub fn ready_estimate(&mut self, now: Seconds) -> Seconds {
        self.pump(now, false);
        self.power.ready_estimate(now)
    }

    /// Play every event due up to `t`.
    pub fn advance_to(&mut self, t: Seconds) {
        self.pump(t, true);
    }

    /// Totals up to `now`, including the part of the current period already spent.
    pub fn ledger_at(&mut self, now: Seconds) -> Ledger {
        self.pump(now, true);
        self.power.ledger_at(now)
    }
}

#[cfg(test)]
mod tests;
