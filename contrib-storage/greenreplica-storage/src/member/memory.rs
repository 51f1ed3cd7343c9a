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
