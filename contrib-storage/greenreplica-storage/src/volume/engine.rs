//! The daemon's side of the event core: one engine thread per volume owns the core (the
//! same `Core` a replay runs), takes arrivals from a channel and, between them, sleeps until
//! the core's next event. FUSE threads submit their plan's member I/O and block until it
//! completes, so requests from concurrent threads sit in the drive models' queues together
//! and each member's scheduler orders them. The bytes still move in the caller's thread
//! (range locks, write intent, read-error correction stay where they were).
//!
//! ```text
//!  FUSE threads ──submit(plan ios)──▶ channel ──▶ engine thread: Core
//!        ▲                                         │  accept → Arrival event
//!        │                                         │  recv_timeout(next event)
//!        └──────── reply (Finished) ◀──────────────┘  step: drive enqueue / poll
//! ```

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use super::runner::{Core, Finished, Job, Planned, QueueDepths};
use super::Volume;
use crate::clock::Seconds;
use crate::drive::Class;
use crate::layout::{MemberIo, Plan};
use crate::service_model::IoKind;
use crate::sync::lock;

/// The longest the engine sleeps without looking at its channel or the volume (it stops
/// once the volume is gone).
const MAX_NAP: Duration = Duration::from_millis(500);
/// How often the engine runs `Volume::tick` (power transitions are booked at their exact
/// model time; this is how soon a real disk is told, how fresh `status` is without a
/// request, and the pace of resync and scrub).
pub const TICK_S: f64 = 0.1;

#[derive(Debug)]
enum Message {
    Submit(Seconds, Planned),
    /// Background work may have appeared (a member was replaced).
    Kick,
    Stop,
}

/// The handle a volume keeps to its engine thread.
#[derive(Debug)]
pub struct Engine {
    tx: std::sync::Mutex<Sender<Message>>,
    depths: Arc<QueueDepths>,
    thread: std::sync::Mutex<Option<JoinHandle<()>>>,
    thread_id: std::thread::ThreadId,
    next_index: std::sync::atomic::AtomicU64,
}

impl Engine {
    /// Start the engine thread of `volume`, rebuilding at up to `rebuild_max_mb_s`. It
    /// holds the volume weakly: it ends when the volume is dropped or `stop` is called.
    pub(super) fn start(volume: &Arc<Volume>, rebuild_max_mb_s: f64) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let mut core = Core::new(volume, volume.clock.now());
        core.set_background(rebuild_max_mb_s, crate::rebuild::CHUNK);
        core.kick(volume.clock.now());
        core.set_ticks(Some(TICK_S));
        let depths = core.depths();
        let weak = Arc::downgrade(volume);
        let thread = std::thread::Builder::new()
            .name(format!("engine-{}", volume.name()))
            .spawn(move || run(&weak, core, &rx))?;
        Ok(Self {
            tx: std::sync::Mutex::new(tx),
            depths,
            thread_id: thread.thread().id(),
            thread: std::sync::Mutex::new(Some(thread)),
            next_index: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Queue a plan's member I/O (reads, then writes once the reads are done) arriving at
    /// `at`; the receiver gets the request when its last command completes (or is closed
    /// if the engine stopped).
    pub(super) fn submit(
        &self,
        at: Seconds,
        kind: IoKind,
        plan: &Plan,
        class: Class,
    ) -> Receiver<Finished> {
        self.send(
            at,
            kind,
            plan.reads.clone(),
            plan.writes.clone(),
            class,
            false,
        )
    }

    /// FLUSH CACHE on every drive with something cached or queued, behind every command
    /// submitted before it.
    pub(super) fn submit_flush(&self, at: Seconds) -> Receiver<Finished> {
        self.send(
            at,
            IoKind::Write,
            Vec::new(),
            Vec::new(),
            Class::Foreground,
            true,
        )
    }

    fn send(
        &self,
        at: Seconds,
        kind: IoKind,
        reads: Vec<MemberIo>,
        writes: Vec<MemberIo>,
        class: Class,
        flush: bool,
    ) -> Receiver<Finished> {
        let (reply, done) = mpsc::channel();
        let index = self
            .next_index
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let job = Planned {
            index,
            kind,
            reads,
            writes,
            class,
            flush,
            reply: Some(reply),
        };
        // A send fails only once the engine is gone; the receiver then reports closed.
        let _ = lock(&self.tx).send(Message::Submit(at, job));
        done
    }

    /// Whether the caller is the engine thread itself (its background work must not wait
    /// for the engine).
    pub(super) fn is_current_thread(&self) -> bool {
        std::thread::current().id() == self.thread_id
    }

    /// Look for background work now (a member was replaced).
    pub(super) fn kick(&self) {
        let _ = lock(&self.tx).send(Message::Kick);
    }

    /// The deepest queue each member's drive has had.
    pub fn queue_depths(&self) -> &QueueDepths {
        &self.depths
    }

    /// Stop the thread (requests in flight are answered by closing their channel).
    pub(super) fn stop(&self) {
        let _ = lock(&self.tx).send(Message::Stop);
        if let Some(thread) = lock(&self.thread).take() {
            if !self.is_current_thread() {
                let _ = thread.join();
            }
        }
    }
}

/// The loop: arrivals are taken as they come; between them the thread sleeps until the
/// core's next event (real time), then steps the core exactly as a replay does.
fn run(volume: &Weak<Volume>, mut core: Core, rx: &Receiver<Message>) {
    loop {
        let Some(v) = volume.upgrade() else { return };
        let clock = v.clock.clone();
        // Everything that arrived before the next event is queued before it is handled.
        loop {
            match rx.try_recv() {
                Ok(Message::Submit(at, job)) => core.accept(at, Job::Planned(job)),
                Ok(Message::Kick) => core.kick(clock.now()),
                Ok(Message::Stop) | Err(mpsc::TryRecvError::Disconnected) => return,
                Err(mpsc::TryRecvError::Empty) => break,
            }
        }
        let now = clock.now();
        match core.next_due() {
            Some(t) if t <= now => {
                if let Err(e) = core.step(&v, true) {
                    tracing::error!(volume = %v.name(), error = %e, "engine step failed");
                }
                continue;
            }
            _ => {}
        }
        let nap = core
            .next_due()
            .map_or(MAX_NAP, |t| Duration::from_secs_f64((t - now).max(0.0)))
            .min(MAX_NAP);
        drop(v);
        match rx.recv_timeout(nap) {
            Ok(Message::Submit(at, job)) => core.accept(at, Job::Planned(job)),
            Ok(Message::Kick) => core.kick(clock.now()),
            Ok(Message::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}
