//! The timer of a real device: direct (uncached) reads, timed with the monotonic clock.
//! The device is opened read-only; the path is checked first (a block device or a regular
//! file, nothing else), since the caller may be root and the path is user input.
//!
//! SCSI SEND/RECEIVE DIAGNOSTIC address translation (the paper's method, sg3-utils) is not
//! done here: there is no SCSI drive on this machine to build and check it against.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::{AccessTimer, WINDOW};

/// Linux `BLKSSZGET`: the logical block size of a block device.
const BLKSSZGET: libc::c_ulong = 0x1268;

/// Alignment of direct I/O buffers (covers 4Kn devices).
const ALIGN: usize = 4096;

pub struct DeviceTimer {
    file: File,
    sectors: u64,
    sector_bytes: u64,
    buffer: Vec<u8>,
}

impl DeviceTimer {
    pub fn open(path: &Path) -> Result<Self> {
        let meta = std::fs::metadata(path)
            .with_context(|| format!("tracks: cannot stat {}", path.display()))?;
        let kind = meta.file_type();
        let block = kind.is_block_device();
        if !block && !kind.is_file() {
            bail!(
                "tracks: {} is neither a block device nor a regular file",
                path.display()
            );
        }
        let mut file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .with_context(|| {
                format!(
                    "tracks: cannot open {} read-only for direct I/O",
                    path.display()
                )
            })?;
        let bytes = file
            .seek(SeekFrom::End(0))
            .with_context(|| format!("tracks: cannot size {}", path.display()))?;
        let sector_bytes = if block {
            let mut size: libc::c_int = 0;
            // SAFETY: BLKSSZGET writes one int through the pointer, which outlives the call.
            let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKSSZGET as _, &mut size) };
            if rc != 0 || size <= 0 || size as usize > ALIGN {
                bail!("tracks: {}: no usable logical block size", path.display());
            }
            size as u64
        } else {
            512
        };
        Ok(Self {
            file,
            sectors: bytes / sector_bytes,
            sector_bytes,
            buffer: vec![0; WINDOW as usize * sector_bytes as usize + ALIGN],
        })
    }
}

impl AccessTimer for DeviceTimer {
    fn sectors(&self) -> u64 {
        self.sectors
    }

    fn read(&mut self, first: u64, count: u64) -> Result<f64> {
        if count == 0 || count > WINDOW || first.saturating_add(count) > self.sectors {
            bail!("read of {count} sectors at {first} outside the probe limits");
        }
        let len = (count * self.sector_bytes) as usize;
        let skip = self.buffer.as_ptr().align_offset(ALIGN);
        let buf = &mut self.buffer[skip..skip + len];
        let started = Instant::now();
        self.file
            .read_exact_at(buf, first * self.sector_bytes)
            .with_context(|| format!("tracks: read of {count} sectors at {first}"))?;
        Ok(started.elapsed().as_secs_f64())
    }
}
