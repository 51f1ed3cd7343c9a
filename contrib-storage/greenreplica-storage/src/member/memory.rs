//! Member storage in memory for tests: shared by every layout's tests (the engine's and the
//! personalities' property tests), with hooks to fail it and to hold an I/O mid-way.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use super::Member;
use crate::sync::lock;

/// Member storage in memory that can be told to fail.
#[derive(Debug)]
pub struct MemMember {
    pub bytes: Mutex<Vec<u8>>,
    pub broken: AtomicBool,
    /// Every write ("w OFFSET") and flush ("f"), in order.
    pub ops: Mutex<Vec<String>>,
    /// When set, a header write (offset 0) announces itself and waits for a go.
    pub header_pause: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>,
    /// When set, a read at this offset announces itself and waits for a go (a slow disk).
    pub read_pause: Mutex<Option<ReadPause>>,
}

pub type ReadPause = (u64, mpsc::Sender<()>, mpsc::Receiver<()>);

impl MemMember {
    pub fn new(size: usize) -> Arc<Self> {
        Arc::new(Self {
            bytes: Mutex::new(vec![0; size]),
            broken: AtomicBool::new(false),
            ops: Mutex::new(Vec::new()),
            header_pause: Mutex::new(None),
            read_pause: Mutex::new(None),
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
        let pause = {
            let mut p = lock(&self.read_pause);
            if matches!(&*p, Some((at, _, _)) if *at == offset) {
                p.take()
            } else {
                None
            }
        };
        if let Some((_, entered, go)) = pause {
            entered.send(()).unwrap();
            go.recv().unwrap();
        }
        let b = lock(&self.bytes);
        buf.copy_from_slice(&b[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
        self.check()?;
        if offset == 0 {
            let pause = lock(&self.header_pause).take();
            if let Some((entered, go)) = pause {
                entered.send(()).unwrap();
                go.recv().unwrap();
            }
        }
        lock(&self.ops).push(format!("w {offset}"));
        // Half now, half after a yield: lets concurrent writers interleave as on a real disk.
        let half = data.len() / 2;
        lock(&self.bytes)[offset as usize..offset as usize + half].copy_from_slice(&data[..half]);
        std::thread::yield_now();
        lock(&self.bytes)[offset as usize + half..offset as usize + data.len()]
            .copy_from_slice(&data[half..]);
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        self.check()?;
        lock(&self.ops).push("f".into());
        Ok(())
    }
}

/// A drive's volatile write-back cache in front of a member's bytes (`hdparm -W1`): a write
/// is acknowledged into the cache, a FLUSH CACHE puts everything cached on the medium, and
/// a power loss keeps only what the drive had already destaged. The drive model
/// (`drive::cache`) tracks which extents are dirty for timing but never holds the member's
/// bytes; this is the same rule applied to the bytes, for the engine's crash tests.
#[derive(Debug)]
pub struct VolatileCache {
    inner: Arc<dyn Member>,
    /// Writes acknowledged since the last flush, in order.
    cached: Mutex<Vec<(u64, Vec<u8>)>>,
}

impl VolatileCache {
    pub fn new(inner: Arc<dyn Member>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            cached: Mutex::new(Vec::new()),
        })
    }

    /// Power fails: the drive had destaged some of its cached writes, in any order
    /// (`destaged` decides for each), and the rest is gone. Returns the writes lost.
    pub fn power_loss(&self, mut destaged: impl FnMut() -> bool) -> std::io::Result<usize> {
        let cached = std::mem::take(&mut *lock(&self.cached));
        let mut lost = 0;
        for (offset, data) in cached {
            if destaged() {
                self.inner.write_at(&data, offset)?;
            } else {
                lost += 1;
            }
        }
        Ok(lost)
    }

    pub fn cached_writes(&self) -> usize {
        lock(&self.cached).len()
    }
}

impl Member for VolatileCache {
    fn kind(&self) -> crate::member::MemberKind {
        self.inner.kind()
    }
    fn describe(&self) -> String {
        format!("{} behind a volatile write cache", self.inner.describe())
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)?;
        // Cache hits: every cached write overlapping the read, oldest first.
        let end = offset + buf.len() as u64;
        for (at, data) in lock(&self.cached).iter() {
            let (from, to) = (offset.max(*at), end.min(at + data.len() as u64));
            if from < to {
                buf[(from - offset) as usize..(to - offset) as usize]
                    .copy_from_slice(&data[(from - at) as usize..(to - at) as usize]);
            }
        }
        Ok(())
    }
    fn write_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
        if offset + data.len() as u64 > self.inner.size() {
            return Err(std::io::Error::other("write beyond the member"));
        }
        lock(&self.cached).push((offset, data.to_vec()));
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        let cached = std::mem::take(&mut *lock(&self.cached));
        for (offset, data) in &cached {
            self.inner.write_at(data, *offset)?;
        }
        self.inner.flush()
    }
}

#[cfg(test)]
mod volatile_cache_tests {
    use super::*;

    #[test]
    fn a_cached_write_reads_back_survives_a_flush_and_is_lost_without_one() {
        let disk = MemMember::new(8192);
        let cache = VolatileCache::new(disk.clone());
        cache.write_at(b"flushed", 0).unwrap();
        cache.flush().unwrap();
        cache.write_at(b"cached!", 4096).unwrap();
        let mut buf = [0u8; 7];
        cache.read_at(&mut buf, 4096).unwrap();
        assert_eq!(&buf, b"cached!", "a read after a cached write returns it");
        assert_eq!(
            &lock(&disk.bytes)[4096..4103],
            &[0u8; 7],
            "not on the medium yet"
        );
        assert_eq!(cache.power_loss(|| false).unwrap(), 1);
        cache.read_at(&mut buf, 4096).unwrap();
        assert_eq!(buf, [0u8; 7], "lost with the power");
        cache.read_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"flushed");
    }
}
