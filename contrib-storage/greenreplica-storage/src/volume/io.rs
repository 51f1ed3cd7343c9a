//! The data path: the engine runs a personality's plan (reads, computations, writes) with
//! MD's fix_read_error for reads that fail, range-locks every request, announces writes in
//! the write-intent bitmap first, and flushes only the members written since their last
//! flush.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use std::sync::Arc;

use super::{Engine, Health, MemberSlot, Volume, VolumeError, MAX_READ_ERRORS};
use crate::clock::Seconds;
use crate::drive::Class;
use crate::layout::{Buf, Compute, MemberIo, MemberView, Plan};
use crate::parity;
use crate::service_model::IoKind;
use crate::superblock::DATA_OFFSET;
use crate::sync::lock;

/// Granularity of read-error correction (a page, as MD's fix_read_error).
const FIX_BLOCK: u64 = 4096;

/// The caller's side of a plan: the buffer a read fills or a write takes its data from.
pub(super) enum Caller<'a> {
    Read(&'a mut [u8]),
    Write(&'a [u8]),
}

/// The buffers a plan runs on.
struct Buffers<'a> {
    caller: Caller<'a>,
    scratch: Vec<Vec<u8>>,
}

impl Buffers<'_> {
    fn new<'a>(plan: &Plan, caller: Caller<'a>) -> Buffers<'a> {
        Buffers {
            caller,
            scratch: plan.scratch.iter().map(|&n| vec![0; n as usize]).collect(),
        }
    }

    fn get(&self, buf: Buf, len: u64) -> Option<&[u8]> {
        let (bytes, at): (&[u8], u64) = match buf {
            Buf::Caller(at) => match &self.caller {
                Caller::Read(b) => (b, at),
                Caller::Write(b) => (b, at),
            },
            Buf::Scratch(i, at) => (self.scratch.get(i)?, at),
        };
        bytes.get(at as usize..(at + len) as usize)
    }

    /// None for the caller's buffer of a write (never written) or a range outside a buffer.
    fn get_mut(&mut self, buf: Buf, len: u64) -> Option<&mut [u8]> {
        let (bytes, at): (&mut [u8], u64) = match buf {
            Buf::Caller(at) => match &mut self.caller {
                Caller::Read(b) => (b, at),
                Caller::Write(_) => return None,
            },
            Buf::Scratch(i, at) => (self.scratch.get_mut(i)?, at),
        };
        bytes.get_mut(at as usize..(at + len) as usize)
    }

    fn copy_of(&self, buf: Buf, len: u64) -> Result<Vec<u8>, String> {
        self.get(buf, len)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| format!("{buf:?}+{len} is outside the plan's buffers"))
    }

    fn put(&mut self, buf: Buf, bytes: &[u8]) -> Result<(), String> {
        self.get_mut(buf, bytes.len() as u64)
            .ok_or_else(|| format!("{buf:?}+{} is not a writable buffer", bytes.len()))?
            .copy_from_slice(bytes);
        Ok(())
    }

    /// Run one computation. Inputs are copied out first, so a step may read and write
    /// buffers that alias (the parity arithmetic wants disjoint slices).
    fn compute(&mut self, step: &Compute) -> Result<(), String> {
        let fail = |e: parity::ParityError| e.to_string();
        match step {
            Compute::Copy { from, to, len } => {
                let bytes = self.copy_of(*from, *len)?;
                self.put(*to, &bytes)
            }
            Compute::Syndrome { data, p, q, len } => {
                let chunks = data
                    .iter()
                    .map(|&b| self.copy_of(b, *len))
                    .collect::<Result<Vec<_>, _>>()?;
                let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
                let mut pb = vec![0u8; *len as usize];
                match q {
                    None => parity::compute_p(&refs, &mut pb).map_err(fail)?,
                    Some(q) => {
                        let mut qb = vec![0u8; *len as usize];
                        parity::compute_pq(&refs, &mut pb, &mut qb).map_err(fail)?;
                        self.put(*q, &qb)?;
                    }
                }
                self.put(*p, &pb)
            }
            Compute::Delta {
                index,
                old,
                new,
                p,
                q,
                len,
            } => {
                let (old, new) = (self.copy_of(*old, *len)?, self.copy_of(*new, *len)?);
                if let Some(p) = p {
                    let mut pb = self.copy_of(*p, *len)?;
                    parity::update_p(&mut pb, &old, &new).map_err(fail)?;
                    self.put(*p, &pb)?;
                }
                if let Some(q) = q {
                    let mut qb = self.copy_of(*q, *len)?;
                    parity::update_q(&mut qb, *index, &old, &new).map_err(fail)?;
                    self.put(*q, &qb)?;
                }
                Ok(())
            }
            Compute::Reconstruct {
                level,
                chunks,
                lost,
                len,
            } => {
                let mut bufs = chunks
                    .iter()
                    .map(|&b| self.copy_of(b, *len))
                    .collect::<Result<Vec<_>, _>>()?;
                let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
                parity::reconstruct(*level, &mut refs, lost).map_err(fail)?;
                for &i in lost {
                    self.put(chunks[i], &bufs[i])?;
                }
                Ok(())
            }
        }
    }
}

impl Volume {
    /// Requests beyond the volume are refused before anything is mapped or locked.
    pub(super) fn check_range(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        Ok(self.layout.check_range(offset, len)?)
    }

    /// Bitmap regions touched by volume bytes `offset..offset+len`.
    fn regions_of(&self, offset: u64, len: u64) -> Vec<u64> {
        let Some(intent) = &self.intent else {
            return Vec::new();
        };
        let mut regions = BTreeSet::new();
        for span in self.spans_of(offset, len) {
            regions.extend(intent.regions_of(span.start, span.end));
        }
        regions.into_iter().collect()
    }

    pub(super) fn plan_error(&self, problem: impl Into<String>) -> VolumeError {
        VolumeError::Io {
            volume: self.name.clone(),
            problem: problem.into(),
        }
    }

    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), VolumeError> {
        self.foreground.fetch_add(1, Ordering::Relaxed);
        let started = self.clock.now();
        let len = buf.len() as u64;
        self.check_range(offset, len)?;
        let regions = self.regions_of(offset, len);
        self.resync_before_use(&regions)?;
        let spans = self.spans_of(offset, len);
        let _shared = self.ranges.acquire(&spans, false);
        let plan = self.time(IoKind::Read, offset, len)?;
        self.run(&plan, Caller::Read(buf), true, started)?;
        self.observe(0, IoKind::Read, offset, len, started);
        Ok(())
    }

    /// Write through the personality's plan. Succeeds unless a member failed on the way and
    /// the survivors no longer hold every byte.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), VolumeError> {
        self.foreground.fetch_add(1, Ordering::Relaxed);
        let started = self.clock.now();
        let len = data.len() as u64;
        self.check_range(offset, len)?;
        let regions = self.regions_of(offset, len);
        self.resync_before_use(&regions)?;
        let spans = self.spans_of(offset, len);
        let _exclusive = self.ranges.acquire(&spans, true);
        if let Some(intent) = &self.intent {
            intent
                .start_write(&regions)
                .map_err(|e| self.plan_error(format!("cannot record the write intent: {e}")))?;
        }
        let result = self.write_locked(offset, data, started);
        if let Some(intent) = &self.intent {
            intent.end_write(&regions, self.clock.now());
        }
        result
    }

    fn write_locked(&self, offset: u64, data: &[u8], started: f64) -> Result<(), VolumeError> {
        let plan = self.time(IoKind::Write, offset, data.len() as u64)?;
        let failed_members = self
            .run(&plan, Caller::Write(data), true, started)
            .inspect_err(|_| self.layout.abandon(&plan))?;
        if failed_members && !self.layout.survives(&self.in_sync()) {
            self.layout.abandon(&plan);
            return Err(self.plan_error(format!(
                "write of {} bytes at {offset} reached no valid copy",
                data.len()
            )));
        }
        self.complete_plan(&plan, Some(data))?;
        self.append_staged_if_due();
        self.observe(0, IoKind::Write, offset, data.len() as u64, started);
        Ok(())
    }

    /// Plan a request and wait out its member I/O on the drive models: on the volume's
    /// engine when it has one (the request queues with everyone else's), else in this thread.
    /// Only members that emulate a drive are waited for; real disks take their own time.
    fn time(&self, kind: IoKind, offset: u64, len: u64) -> Result<Plan, VolumeError> {
        let Some(engine) = self.engine.get() else {
            let (plan, done) = self.schedule(kind, offset, len)?;
            self.wait_for(&plan, &done);
            return Ok(plan);
        };
        let now = self.clock.now();
        let plan = self.layout.plan(kind, offset, len, &self.views(now))?;
        let done = engine.submit(now, kind, &plan, Class::Foreground);
        let timed = plan.ios().any(|(_, io)| {
            self.slots[io.member]
                .live_store()
                .is_some_and(|s| s.emulates_timing())
        });
        if timed {
            // Closed only if the engine stopped: the request then goes on untimed.
            let _ = done.recv();
        }
        Ok(plan)
    }

    /// Serve requests on an engine thread (the event core in real time) from now on; it
    /// also runs the rebuilds, at up to `rebuild_max_mb_s` while no foreground I/O moves.
    pub fn start_engine(self: &Arc<Self>, rebuild_max_mb_s: f64) -> std::io::Result<()> {
        if self.engine.get().is_none() {
            let engine = Engine::start(self, rebuild_max_mb_s)?;
            if let Err(engine) = self.engine.set(engine) {
                engine.stop();
            }
        }
        Ok(())
    }

    /// Stop the engine thread (at volume stop; requests after it are timed in their thread
    /// again).
    pub fn stop_engine(&self) {
        if let Some(engine) = self.engine.get() {
            engine.stop();
        }
    }

    /// A member was replaced: the engine starts its rebuild. False without an engine.
    pub fn kick_background(&self) -> bool {
        self.engine.get().inspect(|e| e.kick()).is_some()
    }

    pub fn engine(&self) -> Option<&Engine> {
        self.engine.get()
    }

    /// Which members are in sync.
    pub(super) fn in_sync(&self) -> Vec<bool> {
        self.slots
            .iter()
            .map(|s| s.health() == Health::InSync)
            .collect()
    }

    /// Run a plan's phases. Reads that fail are corrected block by block (`fix`) or fail the
    /// plan; writes that fail fail their member. Returns whether a member failed.
    pub(super) fn run(
        &self,
        plan: &Plan,
        caller: Caller<'_>,
        fix: bool,
        started: Seconds,
    ) -> Result<bool, VolumeError> {
        let mut bufs = Buffers::new(plan, caller);
        for io in &plan.reads {
            let Some(target) = bufs.get_mut(io.buf, io.len) else {
                return Err(self.plan_error(format!("plan reads into a buffer it lacks: {io:?}")));
            };
            let result = match self.slots[io.member].live_store() {
                Some(store) => store.read_at(target, DATA_OFFSET + io.member_offset),
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
                Err(e) if fix => self.recover_read(io, target, &e)?,
                Err(e) => {
                    self.slots[io.member]
                        .read_errors
                        .fetch_add(1, Ordering::SeqCst);
                    tracing::warn!(volume = %self.name, member = io.member, offset = io.member_offset, %e, "read error while recovering");
                    return Err(self.plan_error(format!(
                        "member {} bytes {}+{}: {e}",
                        io.member, io.member_offset, io.len
                    )));
                }
            }
        }
        for step in &plan.compute {
            bufs.compute(step)
                .map_err(|e| self.plan_error(format!("plan computation failed: {e}")))?;
        }
        let mut failed = false;
        for io in &plan.writes {
            let Some(piece) = bufs.get(io.buf, io.len) else {
                return Err(self.plan_error(format!("plan writes from a buffer it lacks: {io:?}")));
            };
            let slot = &self.slots[io.member];
            let result = match slot.live_store() {
                // Marked after the write: a flush that took the mark before the data
                // landed would otherwise leave it unflushed and unmarked.
                Some(store) => store
                    .write_at(piece, DATA_OFFSET + io.member_offset)
                    .inspect(|()| slot.unflushed.store(true, Ordering::SeqCst)),
                None => Err(std::io::Error::other("member has no storage")),
            };
            match result {
                Ok(()) => self.observe(
                    io.member + 1,
                    IoKind::Write,
                    io.member_offset,
                    io.len,
                    started,
                ),
                Err(e) => {
                    failed = true;
                    self.fail_member(io.member, &format!("write error: {e}"));
                }
            }
        }
        Ok(failed)
    }

    /// A member could not read its piece (MD's fix_read_error): go through the piece a block
    /// at a time; a block the member cannot read is recovered by the personality (from a
    /// mirror, or from the rest of a stripe), written back over the bad one (the disk remaps
    /// the sector) and read back. The member is failed only if the rewrite does not take or
    /// it has had too many read errors; a block that cannot be recovered fails the request
    /// but no member (failing the last copy would lose the rest of it). Runs under the
    /// request's range lock, so no write to these bytes slips in.
    fn recover_read(
        &self,
        io: &MemberIo,
        piece: &mut [u8],
        error: &std::io::Error,
    ) -> Result<(), VolumeError> {
        let bad = io.member;
        tracing::warn!(volume = %self.name, member = bad, offset = io.member_offset, len = io.len, %error, "read error; correcting it block by block");
        let mut start = 0u64;
        while start < io.len {
            let member_offset = io.member_offset + start;
            let end = ((member_offset / FIX_BLOCK + 1) * FIX_BLOCK - io.member_offset).min(io.len);
            let block = &mut piece[start as usize..end as usize];
            let at = DATA_OFFSET + member_offset;
            let Some(store) = self.slots[bad].live_store() else {
                // Failed meanwhile: serve the rest from the others.
                self.recover_block(bad, member_offset, block)?;
                start = end;
                continue;
            };
            if store.read_at(block, at).is_ok() {
                start = end;
                continue;
            }
            let errors = self.slots[bad].read_errors.fetch_add(1, Ordering::SeqCst) + 1;
            let sources: Vec<usize> = self
                .recover_block(bad, member_offset, block)?
                .reads
                .iter()
                .map(|io| io.member)
                .collect();
            if errors > MAX_READ_ERRORS {
                self.fail_member(
                    bad,
                    &format!("{errors} read errors (more than {MAX_READ_ERRORS})"),
                );
            } else {
                let rewritten = store.write_at(block, at).and_then(|()| {
                    self.slots[bad].unflushed.store(true, Ordering::SeqCst);
                    let mut check = vec![0u8; block.len()];
                    store.read_at(&mut check, at)?;
                    if check == block {
                        Ok(())
                    } else {
                        Err(std::io::Error::other("rewritten data reads back different"))
                    }
                });
                match rewritten {
                    Ok(()) => {
                        tracing::info!(volume = %self.name, member = bad, ?sources, offset = member_offset, len = block.len(), errors, "read error corrected");
                    }
                    Err(e) => self.fail_member(bad, &format!("cannot rewrite a bad block: {e}")),
                }
            }
            start = end;
        }
        Ok(())
    }

    /// Member `bad`'s bytes at `offset`, recovered without reading it (a rebuild, or a
    /// block the member cannot read); returns the plan that did it. A member that fails to
    /// serve the recovery is left out and the recovery planned again, as long as the
    /// personality can do without it.
    pub(super) fn recover_block(
        &self,
        bad: usize,
        offset: u64,
        block: &mut [u8],
    ) -> Result<Plan, VolumeError> {
        self.recover_into(bad, offset, block, false)
    }

    /// `recover_block` with the layout's rebuild plan (`Personality::rebuild_plan`) when
    /// `rebuild`: its writes, if any, are run too.
    pub(super) fn recover_into(
        &self,
        bad: usize,
        offset: u64,
        block: &mut [u8],
        rebuild: bool,
    ) -> Result<Plan, VolumeError> {
        let len = block.len() as u64;
        let mut views = self.views(self.clock.now());
        views[bad] = MemberView::failed(views[bad].ready_at);
        let unreadable = |why: String| {
            self.plan_error(format!(
                "member bytes {offset}+{len} (of member {bad}) cannot be read from any copy: {why}"
            ))
        };
        loop {
            let plan = if rebuild {
                self.layout.rebuild_plan(bad, offset, len, &views)
            } else {
                self.layout.recover(bad, offset, len, &views)
            }
            .map_err(|e| unreadable(e.to_string()))?;
            let errors: Vec<u64> = self.slots.iter().map(MemberSlot::read_errors).collect();
            match self.run(&plan, Caller::Read(block), false, self.clock.now()) {
                Ok(_) => return Ok(plan),
                Err(e) => {
                    let erring: Vec<usize> = (0..self.slots.len())
                        .filter(|&m| self.slots[m].read_errors() > errors[m])
                        .collect();
                    if erring.is_empty() {
                        return Err(unreadable(e.to_string()));
                    }
                    for m in erring {
                        views[m] = MemberView::failed(views[m].ready_at);
                    }
                }
            }
        }
    }

    /// Make every acknowledged write durable: flush, in parallel, only the members written
    /// since their last flush (a sleeping disk with nothing new gets no FLUSH CACHE).
    pub fn flush(&self) -> Result<(), VolumeError> {
        let epoch = self.intent.as_ref().map(|i| i.flush_started());
        self.write_metadata_blocks()?;
        self.flush_drive_caches();
        let failures = self.flush_members();
        for (i, e) in &failures {
            self.fail_member(*i, &format!("flush error: {e}"));
        }
        if let Some(rec) = &self.recorder {
            rec.flush();
        }
        // The metadata describing the flushed data is durable before the flush returns.
        self.commit_metadata()?;
        if let (Some(intent), Some(epoch)) = (&self.intent, epoch) {
            if failures.is_empty() {
                intent.flushed(epoch);
            }
        }
        self.check_redundancy()
    }

    /// FLUSH CACHE on the drive models: an fsync waits for their write-back caches. A drive
    /// with nothing cached answers at once, without waking.
    fn flush_drive_caches(&self) {
        let now = self.clock.now();
        // The engine's own background work (a tick clearing bitmap bits) flushes in place.
        if let Some(engine) = self.engine.get().filter(|e| !e.is_current_thread()) {
            let done = engine.submit_flush(now);
            if self
                .slots
                .iter()
                .any(|s| s.live_store().is_some_and(|s| s.emulates_timing()))
            {
                // Closed only if the engine stopped: the flush then goes on untimed.
                let _ = done.recv();
            }
            return;
        }
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
    }

    /// Flush the members with unflushed writes; returns the ones that failed.
    pub(super) fn flush_members(&self) -> Vec<(usize, std::io::Error)> {
        let dirty: Vec<_> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.unflushed.swap(false, Ordering::SeqCst))
            .filter_map(|(i, slot)| slot.live_store().map(|store| (i, store)))
            .collect();
        std::thread::scope(|scope| {
            let running: Vec<_> = dirty
                .iter()
                .map(|(i, store)| (*i, scope.spawn(move || store.flush())))
                .collect();
            running
                .into_iter()
                .filter_map(|(i, handle)| {
                    let result = handle
                        .join()
                        .unwrap_or_else(|_| Err(std::io::Error::other("flush thread panicked")));
                    result.err().map(|e| {
                        self.slots[i].unflushed.store(true, Ordering::SeqCst);
                        (i, e)
                    })
                })
                .collect()
        })
    }
}
