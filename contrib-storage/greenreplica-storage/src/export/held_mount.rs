//! Mounting onto a directory held as a descriptor (the new mount API), so that a caller who
//! swaps the directory for a symlink cannot redirect the mount, the chown or the unmount.
//!
//! fsopen → fsconfig(source) → fsconfig(create) → fsmount gives a detached mount; its root
//! is chowned and chmodded through a descriptor before anyone can see it; move_mount
//! attaches it to the held directory (MOVE_MOUNT_T_EMPTY_PATH). Unmounting goes through the
//! held directory's procfs link, which reaches the mount stacked on that very inode.

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::safe_path::{self, open_beneath, OPEN_DIR_PATH};

/// Where a volume is mounted: the held directory, and (for caller-named directories) how to
/// check afterwards that the name still leads to the mount.
#[derive(Debug)]
pub struct MountTarget {
    pub shown: PathBuf,
    pub dir: OwnedFd,
    /// (configured root, path below it): after attaching, the name must reach the mount.
    pub recheck: Option<(OwnedFd, PathBuf)>,
}

impl MountTarget {
    /// An administrator-configured mount point (trusted path, still held from here on).
    pub fn trusted(path: &Path) -> Result<Self> {
        Ok(Self {
            shown: path.to_path_buf(),
            dir: safe_path::open_trusted_dir(path)
                .with_context(|| format!("mount point {}", path.display()))?,
            recheck: None,
        })
    }
}

fn check(rc: libc::c_long, what: &str) -> std::io::Result<libc::c_long> {
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(rc)
}

/// The messages the kernel left in a filesystem context (fsopen fd), for error reports.
fn context_messages(fs: &OwnedFd) -> String {
    let mut out = Vec::new();
    let Ok(dup) = fs.try_clone() else {
        return String::new();
    };
    let mut file = std::fs::File::from(dup);
    let mut buf = [0u8; 1024];
    // Each read returns one message; ENODATA ends the list.
    for _ in 0..16 {
        match file.read(&mut buf) {
            Ok(n) if n > 0 => out.push(String::from_utf8_lossy(&buf[..n]).trim().to_string()),
            _ => break,
        }
    }
    out.join("; ")
}

// <linux/mount.h> mount attributes, for fsmount(2).
const MOUNT_ATTR_NOSUID: libc::c_uint = 0x0000_0002;
const MOUNT_ATTR_NODEV: libc::c_uint = 0x0000_0004;
const MOUNT_ATTR_NOATIME: libc::c_uint = 0x0000_0010;

/// noatime: with the default relatime the first read of a file after a batch wrote it
/// updates the inode's atime, and ext4's next journal commit writes to the volume, waking
/// a sleeping disk for a standby's read-only query. nosuid, nodev: a volume holds database
/// files, never programs or device nodes its owner could use against the root daemon's host.
const VOLUME_MOUNT_ATTRS: libc::c_uint = MOUNT_ATTR_NOATIME | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;

fn fsconfig(fs: &OwnedFd, cmd: libc::c_uint, key: Option<&str>, value: Option<&str>) -> Result<()> {
    let key = key.map(CString::new).transpose().context("fsconfig key")?;
    let value = value
        .map(CString::new)
        .transpose()
        .context("fsconfig value")?;
    // SAFETY: the pointers are null or valid C strings for the duration of the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            cmd,
            key.as_ref().map_or(std::ptr::null(), |k| k.as_ptr()),
            value.as_ref().map_or(std::ptr::null(), |v| v.as_ptr()),
            0,
        )
    };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        bail!("fsconfig: {e} {}", context_messages(fs));
    }
    Ok(())
}

fn owned(rc: libc::c_long) -> OwnedFd {
    // SAFETY: a successful syscall returned a fresh descriptor owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(rc as i32) }
}

/// Mount `device` (`fstype`) onto the held directory, its root owned uid:gid with `mode`.
/// Returns the id of the new mount.
pub fn mount_onto(
    device: &str,
    fstype: &str,
    target: &MountTarget,
    uid: u32,
    gid: u32,
    mode: u32,
) -> Result<u64> {
    let fstype_c = CString::new(fstype).context("filesystem type")?;
    // SAFETY: valid C string; plain flags.
    let fs = owned(
        check(
            unsafe { libc::syscall(libc::SYS_fsopen, fstype_c.as_ptr(), libc::FSOPEN_CLOEXEC) },
            "fsopen",
        )
        .with_context(|| format!("filesystem type {fstype}"))?,
    );
    fsconfig(&fs, libc::FSCONFIG_SET_STRING, Some("source"), Some(device))
        .with_context(|| format!("source {device}"))?;
    fsconfig(&fs, libc::FSCONFIG_CMD_CREATE, None, None)
        .with_context(|| format!("cannot mount {device} ({fstype})"))?;
    // SAFETY: plain descriptor and flags.
    let mnt = owned(
        check(
            unsafe {
                libc::syscall(
                    libc::SYS_fsmount,
                    fs.as_raw_fd(),
                    libc::FSMOUNT_CLOEXEC,
                    VOLUME_MOUNT_ATTRS,
                )
            },
            "fsmount",
        )
        .context("cannot create the mount")?,
    );
    let mount_id = safe_path::mount_id(mnt.as_fd())?;
    set_root_owner(mnt.as_fd(), uid, gid, mode)?;

    let empty = c"";
    // SAFETY: both descriptors are valid; the empty paths are valid C strings.
    check(
        unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                mnt.as_raw_fd(),
                empty.as_ptr(),
                target.dir.as_raw_fd(),
                empty.as_ptr(),
                libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH,
            )
        },
        "move_mount",
    )
    .with_context(|| format!("cannot attach the mount at {}", target.shown.display()))?;
    drop(mnt);

    if let Some((root, rel)) = &target.recheck {
        let reached = open_beneath(root.as_fd(), rel, OPEN_DIR_PATH, false)
            .and_then(|fd| safe_path::mount_id(fd.as_fd()));
        if reached.as_ref().ok() != Some(&mount_id) {
            let _ = unmount(target, mount_id, false);
            bail!(
                "directory {} was moved or replaced while the volume was being created; \
                 the mount was taken down again",
                target.shown.display()
            );
        }
    }
    Ok(mount_id)
}

/// chown/chmod the root of a not yet attached mount, through descriptors only.
fn set_root_owner(mnt: BorrowedFd<'_>, uid: u32, gid: u32, mode: u32) -> Result<()> {
    let dot = c".";
    // SAFETY: valid descriptor and C string.
    let rc = unsafe {
        libc::openat(
            mnt.as_raw_fd(),
            dot.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    let root = owned(check(rc as libc::c_long, "open the new filesystem's root")?);
    // SAFETY: valid descriptor.
    if unsafe { libc::fchown(root.as_raw_fd(), uid, gid) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("cannot give the filesystem root to {uid}:{gid}"));
    }
    // SAFETY: valid descriptor.
    if unsafe { libc::fchmod(root.as_raw_fd(), mode as libc::mode_t) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("cannot set mode {mode:o} on the filesystem root"));
    }
    Ok(())
}

/// Whether a mount with this id is still in this process's mount namespace.
pub fn is_mounted(mount_id: u64) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| {
            t.lines().any(|l| {
                l.split(' ').next().and_then(|id| id.parse::<u64>().ok()) == Some(mount_id)
            })
        })
        .unwrap_or(false)
}

fn umount_held(dir: BorrowedFd<'_>, flags: libc::c_int) -> std::io::Result<()> {
    let path = CString::new(
        safe_path::proc_path(dir)
            .into_os_string()
            .into_encoded_bytes(),
    )
    .map_err(std::io::Error::other)?;
    // SAFETY: valid C string.
    if unsafe { libc::umount2(path.as_ptr(), flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Write the filesystem back before unmounting: if another mount namespace holds a copy of
/// the mount (one created while it was up), our unmount does not shut the filesystem down,
/// and what it still caches would be lost when the agent stops serving it.
fn sync_mount(target: &MountTarget, mount_id: u64) {
    let Ok(path) = CString::new(target.shown.as_os_str().as_encoded_bytes()) else {
        return;
    };
    // SAFETY: valid C string; the descriptor is owned below.
    let rc = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if rc < 0 {
        return;
    }
    let root = owned(rc as libc::c_long);
    // Only our own mount: the name may lead elsewhere by now (syncfs would be harmless, but
    // pointless).
    if safe_path::mount_id(root.as_fd()).ok() == Some(mount_id) {
        // SAFETY: valid descriptor.
        if unsafe { libc::syncfs(root.as_raw_fd()) } != 0 {
            tracing::warn!(target = %target.shown.display(), error = %std::io::Error::last_os_error(), "syncfs before unmount failed");
        }
    }
}

/// Unmount the mount `mount_id` from the held directory: retry while busy, lazily as the
/// last resort (or at once with `lazy`). Anything stacked on top of it goes first.
pub fn unmount(target: &MountTarget, mount_id: u64, lazy: bool) -> Result<()> {
    sync_mount(target, mount_id);
    let mut last = None;
    for _ in 0..20 {
        if !is_mounted(mount_id) {
            return Ok(());
        }
        let flags = if lazy { libc::MNT_DETACH } else { 0 };
        match umount_held(target.dir.as_fd(), flags) {
            Ok(()) => continue,
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    if !is_mounted(mount_id) {
        return Ok(());
    }
    tracing::warn!(target = %target.shown.display(), error = ?last, "unmount kept failing; detaching lazily");
    umount_held(target.dir.as_fd(), libc::MNT_DETACH)
        .with_context(|| format!("cannot unmount {}", target.shown.display()))
}
