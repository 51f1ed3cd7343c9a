//! The journal's directory, held open as a descriptor: every file in it is opened,
//! created, renamed and removed relative to that descriptor and never through a symlink.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::safe_path::{create_file_at, lstat_at};

#[derive(Debug)]
pub struct JournalDir {
    fd: File,
    path: PathBuf,
}

fn cname(name: &str) -> Result<CString> {
    CString::new(name).with_context(|| format!("file name {name:?} contains a NUL byte"))
}

/// One writer per journal: a second agent (or a restart overlapping the old one) appending
/// to the same log would interleave records. The lock belongs to the open directory, so a
/// killed holder releases it. A process forked by this one holds a copy of every descriptor
/// until it execs (and closes it, O_CLOEXEC), so a just-released lock can look taken for a
/// moment: wait up to a second before calling the journal busy.
fn lock_exclusive(fd: &File, path: &Path) -> Result<()> {
    for attempt in 0..50 {
        // SAFETY: valid descriptor.
        if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::WouldBlock {
            return Err(e).with_context(|| format!("cannot lock {}", path.display()));
        }
        if attempt < 49 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    bail!(
        "journal directory {} is in use by another process",
        path.display()
    )
}

impl JournalDir {
    /// Open `path` as a directory (creating it, mode 0700, if missing); a symlink in its
    /// place is refused.
    pub fn open_or_create(path: &Path) -> Result<Self> {
        match std::fs::DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot create journal directory {}", path.display()))
            }
        }
        let c = CString::new(path.as_os_str().as_bytes())
            .with_context(|| format!("path {} contains a NUL byte", path.display()))?;
        // SAFETY: `c` is a valid C string for the duration of the call.
        let rc = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error()).with_context(|| {
                format!(
                    "cannot open journal directory {} (a symlink is refused)",
                    path.display()
                )
            });
        }
        // SAFETY: open returned a new descriptor that nothing else owns.
        let fd = File::from(unsafe { OwnedFd::from_raw_fd(rc) });
        lock_exclusive(&fd, path)?;
        Ok(Self {
            fd,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` shown with the directory, for messages.
    pub fn show(&self, name: &str) -> String {
        self.path.join(name).display().to_string()
    }

    /// Open an existing regular file read-write; `None` when there is none.
    pub fn open_existing(&self, name: &str) -> Result<Option<File>> {
        let c = cname(name)?;
        match lstat_at(self.fd.as_fd(), &c)? {
            None => return Ok(None),
            Some(st) if st.st_mode & libc::S_IFMT != libc::S_IFREG => {
                bail!("{} is not a regular file; refusing it", self.show(name))
            }
            Some(_) => {}
        }
        // SAFETY: valid descriptor and C string; O_NOFOLLOW refuses a symlink swapped in.
        let rc = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::NotFound {
                return Ok(None);
            }
            return Err(e).with_context(|| format!("cannot open {}", self.show(name)));
        }
        // SAFETY: openat returned a new descriptor that nothing else owns.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(rc) });
        let meta = file
            .metadata()
            .with_context(|| format!("cannot stat {}", self.show(name)))?;
        if !meta.is_file() {
            bail!("{} is not a regular file; refusing it", self.show(name));
        }
        Ok(Some(file))
    }

    /// Create `name` as a new empty file (O_EXCL), replacing a regular file left there.
    pub fn create_new(&self, name: &str) -> Result<File> {
        create_file_at(self.fd.as_fd(), &cname(name)?, true)
            .with_context(|| format!("in journal directory {}", self.path.display()))
    }

    /// Remove `name` if it is there; true when something was removed.
    pub fn remove(&self, name: &str) -> Result<bool> {
        let c = cname(name)?;
        // SAFETY: valid descriptor and C string.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::NotFound {
            return Ok(false);
        }
        Err(e).with_context(|| format!("cannot remove {}", self.show(name)))
    }

    /// Atomically replace `to` with `from`.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        let (cf, ct) = (cname(from)?, cname(to)?);
        let fd = self.fd.as_raw_fd();
        // SAFETY: valid descriptors and C strings.
        if unsafe { libc::renameat(fd, cf.as_ptr(), fd, ct.as_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("cannot rename {} to {to}", self.show(from)));
        }
        Ok(())
    }

    /// Make the directory's entries (creations, renames, removals) durable.
    pub fn sync(&self) -> Result<()> {
        self.fd
            .sync_all()
            .with_context(|| format!("cannot fsync journal directory {}", self.path.display()))
    }
}
