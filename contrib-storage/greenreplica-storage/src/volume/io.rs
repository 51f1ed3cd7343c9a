//! The data path: reads (with MD's fix_read_error), writes (range-locked, announced in the
//! write-intent bitmap first) and flushes (only members written since their last flush).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use super::{Health, Volume, VolumeError, MAX_READ_ERRORS};
use crate::layout::{LayoutError, MemberIo};
use crate::service_model::IoKind;
use crate::superblock::DATA_OFFSET;

impl Volume {
    /// Requests beyond the volume are refused before anything is mapped or locked.
    fn check_range(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
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

    /// A copy could not be read: serve the piece from another copy, then rewrite the bad
    /// one (the disk remaps the sector) and read it back; the member is failed only if that
    /// does not work or it has had too many errors. Runs under the request's shared range
    /// lock, so no write to these bytes can slip in between.
    fn recover_read(
        &self,
        io: &MemberIo,
        volume_offset: u64,
        piece: &mut [u8],
        error: &std::io::Error,
    ) -> Result<(), VolumeError> {
        let bad = io.member;
        let errors = self.slots[bad].read_errors.fetch_add(1, Ordering::SeqCst) + 1;
        tracing::warn!(volume = %self.name, member = bad, offset = io.member_offset, len = io.len, errors, %error, "read error; reading the mirror");
        let copies = self.layout.map(volume_offset, io.len);
        let mut served_by = None;
        for &(member, member_offset) in copies.iter().flat_map(|c| c.placements.iter()) {
            if member == bad || !self.holds_valid(member, member_offset, io.len) {
                continue;
            }
            let Some(store) = self.slots[member].live_store() else {
                continue;
            };
            match store.read_at(piece, DATA_OFFSET + member_offset) {
                Ok(()) => {
                    served_by = Some(member);
                    break;
                }
                Err(e) => {
                    self.slots[member]
                        .read_errors
                        .fetch_add(1, Ordering::SeqCst);
                    tracing::warn!(volume = %self.name, member, %e, "read error on the mirror too");
                }
            }
        }
        let Some(source) = served_by else {
            self.fail_member(bad, &format!("read error: {error}"));
            return Err(VolumeError::Io {
                volume: self.name.clone(),
                problem: format!(
                    "read of {} bytes at {volume_offset} failed on every copy",
                    io.len
                ),
            });
        };
        if errors > MAX_READ_ERRORS {
            self.fail_member(
                bad,
                &format!("{errors} read errors (more than {MAX_READ_ERRORS})"),
            );
            return Ok(());
        }
        let repaired = self.slots[bad].live_store().map(|store| {
            store
                .write_at(piece, DATA_OFFSET + io.member_offset)
                .and_then(|()| {
                    self.slots[bad].unflushed.store(true, Ordering::SeqCst);
                    let mut check = vec![0u8; piece.len()];
                    store.read_at(&mut check, DATA_OFFSET + io.member_offset)?;
                    if check == piece {
                        Ok(())
                    } else {
                        Err(std::io::Error::other("rewritten data reads back different"))
                    }
                })
        });
        match repaired {
            Some(Ok(())) => {
                tracing::info!(volume = %self.name, member = bad, source, offset = io.member_offset, len = io.len, "read error corrected from the mirror");
            }
            Some(Err(e)) => self.fail_member(bad, &format!("cannot rewrite a bad range: {e}")),
            None => {}
        }
        Ok(())
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
