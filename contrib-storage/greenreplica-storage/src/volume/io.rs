//! The data path: reads (with MD's fix_read_error), writes (range-locked, announced in the
//! write-intent bitmap first) and flushes (only members written since their last flush).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use super::{Health, Volume, VolumeError, MAX_READ_ERRORS};

/// Granularity of read-error correction (a page, as MD's fix_read_error).
const FIX_BLOCK: u64 = 4096;
use crate::layout::{LayoutError, MemberIo};
use crate::service_model::IoKind;
use crate::superblock::DATA_OFFSET;
use crate::sync::lock;

impl Volume {
    /// Requests beyond the volume are refused before anything is mapped or locked.
    pub(super) fn check_range(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
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
        Ok(())
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

    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), VolumeError> {
        self.foreground.fetch_add(1, Ordering::Relaxed);
        let started = self.clock.now();
        let len = buf.len() as u64;
        self.check_range(offset, len)?;
        let regions = self.regions_of(offset, len);
        self.resync_before_use(&regions)?;
        let spans = self.spans_of(offset, len);
        let _shared = self.ranges.acquire(&spans, false);
        let scheduled = self.schedule(IoKind::Read, offset, len)?;
        self.wait_for(&scheduled);
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
                Err(e) => self.recover_read(io, offset + io.buf_offset, piece, &e)?,
            }
        }
        self.observe(0, IoKind::Read, offset, len, started);
        Ok(())
    }

    /// A copy could not be read (MD's fix_read_error): go through the piece a block at a
    /// time; a block the member cannot read is read from another copy, written back over the
    /// bad one (the disk remaps the sector) and read back. The member is failed only if the
    /// rewrite does not take or it has had too many read errors; a block no copy can read
    /// fails the request but no member (failing the last copy would lose the rest of it).
    /// Runs under the request's shared range lock, so no write to these bytes slips in.
    fn recover_read(
        &self,
        io: &MemberIo,
        volume_offset: u64,
        piece: &mut [u8],
        error: &std::io::Error,
    ) -> Result<(), VolumeError> {
        let bad = io.member;
        tracing::warn!(volume = %self.name, member = bad, offset = io.member_offset, len = io.len, %error, "read error; correcting it block by block from the mirror");
        let copies = self.layout.map(volume_offset, io.len);
        let mut start = 0u64;
        while start < io.len {
            let member_offset = io.member_offset + start;
            let end = ((member_offset / FIX_BLOCK + 1) * FIX_BLOCK - io.member_offset).min(io.len);
            let block = &mut piece[start as usize..end as usize];
            let at = DATA_OFFSET + member_offset;
            let Some(store) = self.slots[bad].live_store() else {
                // Failed meanwhile: serve the rest from the copies.
                self.read_block_elsewhere(bad, &copies, start, member_offset, block)?;
                start = end;
                continue;
            };
            if store.read_at(block, at).is_ok() {
                start = end;
                continue;
            }
            let errors = self.slots[bad].read_errors.fetch_add(1, Ordering::SeqCst) + 1;
            let source = self.read_block_elsewhere(bad, &copies, start, member_offset, block)?;
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
                        tracing::info!(volume = %self.name, member = bad, source, offset = member_offset, len = block.len(), errors, "read error corrected from the mirror");
                    }
                    Err(e) => self.fail_member(bad, &format!("cannot rewrite a bad block: {e}")),
                }
            }
            start = end;
        }
        Ok(())
    }

    /// Read one block of a piece from a copy other than `bad`; returns the member used.
    fn read_block_elsewhere(
        &self,
        bad: usize,
        copies: &[crate::layout::Copies],
        start_in_piece: u64,
        bad_offset: u64,
        block: &mut [u8],
    ) -> Result<usize, VolumeError> {
        let len = block.len() as u64;
        let placements = copies.iter().flat_map(|c| c.placements.iter());
        for &(member, piece_offset) in placements {
            let member_offset = piece_offset + start_in_piece;
            if member == bad || !self.holds_valid(member, member_offset, len) {
                continue;
            }
            let Some(store) = self.slots[member].live_store() else {
                continue;
            };
            match store.read_at(block, DATA_OFFSET + member_offset) {
                Ok(()) => return Ok(member),
                Err(e) => {
                    self.slots[member]
                        .read_errors
                        .fetch_add(1, Ordering::SeqCst);
                    tracing::warn!(volume = %self.name, member, offset = member_offset, %e, "read error on the mirror too");
                }
            }
        }
        Err(VolumeError::Io {
            volume: self.name.clone(),
            problem: format!(
                "member bytes {bad_offset}+{len} (of member {bad}) cannot be read from any copy"
            ),
        })
    }

    /// The member holds valid data at member bytes `offset..offset+len`.
    pub(super) fn holds_valid(&self, member: usize, offset: u64, len: u64) -> bool {
        match self.slots[member].health() {
            Health::InSync => true,
            Health::Rebuilding { watermark } => watermark >= offset + len,
            Health::Failed { .. } => false,
        }
    }

    /// Write to every live copy; succeeds only if every piece reached at least one member
    /// that holds valid data (members that fail are dropped from the array).
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
            intent.start_write(&regions).map_err(|e| VolumeError::Io {
                volume: self.name.clone(),
                problem: format!("cannot record the write intent: {e}"),
            })?;
        }
        let result = self.write_copies(offset, data, started);
        if let Some(intent) = &self.intent {
            intent.end_write(&regions, self.clock.now());
        }
        result
    }

    fn write_copies(&self, offset: u64, data: &[u8], started: f64) -> Result<(), VolumeError> {
        let scheduled = self.schedule(IoKind::Write, offset, data.len() as u64)?;
        self.wait_for(&scheduled);
        let mut pieces = BTreeSet::new();
        let mut written = BTreeSet::new();
        for (io, _) in &scheduled {
            pieces.insert(io.buf_offset);
            let piece = &data[io.buf_offset as usize..(io.buf_offset + io.len) as usize];
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

    /// Make every acknowledged write durable: flush, in parallel, only the members written
    /// since their last flush (a sleeping disk with nothing new gets no FLUSH CACHE).
    pub fn flush(&self) -> Result<(), VolumeError> {
        let epoch = self.intent.as_ref().map(|i| i.flush_started());
        self.flush_drive_caches();
        let failures = self.flush_members();
        for (i, e) in &failures {
            self.fail_member(*i, &format!("flush error: {e}"));
        }
        if let Some(rec) = &self.recorder {
            rec.flush();
        }
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
