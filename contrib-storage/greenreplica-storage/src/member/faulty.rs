//! A member that fails reads of chosen ranges, like a disk with latent sector errors: a write
//! over a bad range succeeds and heals it (the drive remaps the sector). For tests of the
//! read-error path (MD's fix_read_error) and of scrub.

use std::io;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use super::{Member, MemberKind};
use crate::sync::lock;

#[derive(Debug)]
pub struct FaultyMember {
    inner: Arc<dyn Member>,
    bad: Mutex<Vec<Range<u64>>>,
    failed_reads: Mutex<u64>,
}

impl FaultyMember {
    pub fn new(inner: Arc<dyn Member>) -> Self {
        Self {
            inner,
            bad: Mutex::new(Vec::new()),
            failed_reads: Mutex::new(0),
        }
    }

    /// Reads touching member bytes `range` fail until they are written.
    pub fn add_bad_range(&self, range: Range<u64>) {
        lock(&self.bad).push(range);
    }

    pub fn bad_ranges(&self) -> Vec<Range<u64>> {
        lock(&self.bad).clone()
    }

    pub fn failed_reads(&self) -> u64 {
        *lock(&self.failed_reads)
    }
}

fn overlaps(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

impl Member for FaultyMember {
    fn kind(&self) -> MemberKind {
        self.inner.kind()
    }

    fn describe(&self) -> String {
        format!("faulty({})", self.inner.describe())
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let asked = offset..offset + buf.len() as u64;
        if lock(&self.bad).iter().any(|b| overlaps(b, &asked)) {
            *lock(&self.failed_reads) += 1;
            return Err(io::Error::other(format!(
                "injected read error at {}..{}",
                asked.start, asked.end
            )));
        }
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(data, offset)?;
        let written = offset..offset + data.len() as u64;
        // Only the written part of a bad range is healed.
        let mut bad = lock(&self.bad);
        let mut kept = Vec::new();
        for b in bad.drain(..) {
            if !overlaps(&b, &written) {
                kept.push(b);
                continue;
            }
            if b.start < written.start {
                kept.push(b.start..written.start);
            }
            if written.end < b.end {
                kept.push(written.end..b.end);
            }
        }
        *bad = kept;
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }

    fn emulates_timing(&self) -> bool {
        self.inner.emulates_timing()
    }
}
