//! A member backed by a regular file (or, for `blockdev`, a device node).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::{Member, MemberKind};

/// Large writes start their write-back at once (write-behind): the data will have to reach
/// the disk at the next flush anyway, and letting dirty pages pile up instead ends in
/// dirty-page throttling that stalls the FUSE threads for whole seconds.
const WRITE_BEHIND_MIN: usize = 64 << 10;

fn start_write_back(file: &File, offset: u64, len: usize) {
    use std::os::fd::AsRawFd;
    // SAFETY: sync_file_range only takes the descriptor and plain integers.
    let rc = unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "sync_file_range failed");
    }
}

/// The filesystem above the volume already reads ahead and FUSE delivers requests at the
/// size it wants, so kernel readahead on the member would only read what nobody asked for.
fn advise_random(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: posix_fadvise only takes the descriptor and plain integers.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::from_raw_os_error(rc), "posix_fadvise failed");
    }
}

#[derive(Debug)]
pub struct FileMember {
    kind: MemberKind,
    path: PathBuf,
    file: File,
    size: u64,
}

impl FileMember {
    /// Open the backing file, creating it (sparse) at `size` bytes if it does not exist.
    pub fn open_or_create(kind: MemberKind, path: &Path, size: u64) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("cannot open member file {}", path.display()))?;
        let current = file
            .metadata()
            .with_context(|| format!("cannot stat member file {}", path.display()))?
            .len();
        if current == 0 {
            file.set_len(size).with_context(|| {
                format!("cannot size member file {} to {size} bytes", path.display())
            })?;
        } else if current < size {
            bail!(
                "member file {} has {current} bytes, fewer than the configured {size}",
                path.display()
            );
        }
        advise_random(&file);
        Ok(Self {
            kind,
            path: path.to_path_buf(),
            file,
            size,
        })
    }

    /// Start over with an empty file of `size` bytes (a replacement member).
    pub fn recreate(kind: MemberKind, path: &Path, size: u64) -> Result<Self> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot remove old member {}", path.display()))
            }
        }
        Self::open_or_create(kind, path, size)
    }

    /// Take over a file the caller has just created empty (through a held directory),
    /// sized to `size` bytes; `path` is only for messages.
    pub fn from_new_file(kind: MemberKind, path: &Path, file: File, size: u64) -> Result<Self> {
        file.set_len(size).with_context(|| {
            format!("cannot size member file {} to {size} bytes", path.display())
        })?;
        advise_random(&file);
        Ok(Self {
            kind,
            path: path.to_path_buf(),
            file,
            size,
        })
    }

    /// Open an existing device node, whose size is the device's.
    pub fn open_device(kind: MemberKind, path: &Path) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .with_context(|| format!("cannot open device {}", path.display()))?;
        let size = {
            use std::io::{Seek, SeekFrom};
            let mut f = &file;
            f.seek(SeekFrom::End(0))
                .with_context(|| format!("cannot find the size of {}", path.display()))?
        };
        Ok(Self {
            kind,
            path: path.to_path_buf(),
            file,
            size,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Member for FileMember {
    fn kind(&self) -> MemberKind {
        self.kind
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(data, offset)?;
        if data.len() >= WRITE_BEHIND_MIN {
            start_write_back(&self.file, offset, data.len());
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_sparse_file_and_round_trips_data() {
        let dir = std::env::temp_dir().join(format!("grs-member-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m0.img");
        let m = FileMember::open_or_create(MemberKind::File, &path, 1 << 20).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20);
        m.write_at(b"hello", 4096).unwrap();
        m.flush().unwrap();
        let mut buf = [0u8; 5];
        m.read_at(&mut buf, 4096).unwrap();
        assert_eq!(&buf, b"hello");
        assert!(FileMember::open_or_create(MemberKind::File, &path, 2 << 20).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
