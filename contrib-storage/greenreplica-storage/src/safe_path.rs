//! Paths named by socket callers, resolved once and then held as file descriptors.
//!
//! The agent runs as root and the caller owns parts of the trees it names, so a path may be
//! swapped for a symlink between a check and its use. Everything here resolves a caller's
//! path with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//! RESOLVE_NO_XDEV)` relative to an administrator-configured root and then acts only on the
//! resulting descriptor (or on names relative to it, with `O_NOFOLLOW`).

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};

fn cstring(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .with_context(|| format!("path {} contains a NUL byte", p.display()))
}

fn fd_result(rc: libc::c_long, what: impl FnOnce() -> String) -> Result<OwnedFd> {
    if rc < 0 {
        return Err(std::io::Error::last_os_error()).with_context(what);
    }
    // SAFETY: the syscall returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as i32) })
}

/// Open a trusted (administrator-configured) directory as an `O_PATH` descriptor.
pub fn open_trusted_dir(path: &Path) -> Result<OwnedFd> {
    let c = cstring(path)?;
    // SAFETY: `c` is a valid C string for the duration of the call.
    let rc = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    fd_result(rc as libc::c_long, || {
        format!("cannot open directory {}", path.display())
    })
}

/// The part of `target` below `root`, compared lexically: `target` must be absolute and
/// consist of plain names only (no `.`, `..`), and must lie strictly below `root`.
pub fn relative_below(root: &Path, target: &Path) -> Option<PathBuf> {
    if !target.is_absolute() {
        return None;
    }
    let plain = target
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !plain {
        return None;
    }
    let rel = target.strip_prefix(root).ok()?;
    (!rel.as_os_str().is_empty()).then(|| rel.to_path_buf())
}

/// Flags for `open_beneath`: what the final component is opened as.
pub const OPEN_DIR_PATH: u64 = (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64;

/// `openat2(root, rel)` refusing symlinks (anywhere), `..` escapes and mount crossings.
pub fn open_beneath(
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: u64,
    no_xdev: bool,
) -> Result<OwnedFd> {
    let c = cstring(rel)?;
    let mut resolve =
        libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    if no_xdev {
        resolve |= libc::RESOLVE_NO_XDEV;
    }
    // SAFETY: an all-zero open_how is valid; the fields are set below.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags;
    how.resolve = resolve;
    // SAFETY: `how` and `c` are valid for the call; size is the struct's size.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    fd_result(rc, || {
        format!(
            "{} (resolved without symlinks, `..` or mount crossings)",
            rel.display()
        )
    })
}

pub fn fstat(fd: BorrowedFd<'_>) -> Result<libc::stat> {
    // SAFETY: an all-zero stat is valid; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error()).context("fstat");
    }
    Ok(st)
}

/// The id of the mount a descriptor lives on (statx STATX_MNT_ID).
pub fn mount_id(fd: BorrowedFd<'_>) -> Result<u64> {
    // SAFETY: an all-zero statx is valid; statx fills it.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: `empty` is a valid C string and `stx` a valid out pointer.
    let rc = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_MNT_ID,
            &mut stx,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("statx(STATX_MNT_ID)");
    }
    if stx.stx_mask & libc::STATX_MNT_ID == 0 {
        bail!("the kernel did not report a mount id");
    }
    Ok(stx.stx_mnt_id)
}

/// A path that reaches exactly the object behind `fd` (procfs magic link), for tools and
/// calls that only take paths.
pub fn proc_path(fd: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Whether the directory behind `fd` has no entries.
pub fn dir_is_empty(fd: BorrowedFd<'_>) -> Result<bool> {
    Ok(std::fs::read_dir(proc_path(fd))
        .context("cannot list the directory")?
        .next()
        .is_none())
}

/// A directory a caller named, held open: below which configured root, and the relative
/// path (for a later check that the name still leads to the same place).
#[derive(Debug)]
pub struct HeldDir {
    pub root: OwnedFd,
    pub rel: PathBuf,
    pub dir: OwnedFd,
    pub shown: PathBuf,
}

/// Resolve `target` below one of `roots` and hold it open (a directory, on the root's
/// filesystem, reached without symlinks). Errors name the problem, never follow it.
pub fn hold_dir_below(roots: &[PathBuf], target: &Path, what: &str) -> Result<HeldDir> {
    for root in roots {
        let canonical = root.canonicalize().ok();
        let rel = relative_below(root, target)
            .or_else(|| canonical.as_deref().and_then(|c| relative_below(c, target)));
        let Some(rel) = rel else { continue };
        let root_fd = open_trusted_dir(root)?;
        let dir = open_beneath(root_fd.as_fd(), &rel, OPEN_DIR_PATH, true)
            .with_context(|| format!("{what} {}", target.display()))?;
        return Ok(HeldDir {
            root: root_fd,
            rel,
            dir,
            shown: target.to_path_buf(),
        });
    }
    bail!(
        "{what} {} is not below one of {} (absolute path of plain names required)",
        target.display(),
        roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Split a member path into (parent below a root, final name).
pub fn split_name(path: &Path) -> Result<(PathBuf, CString)> {
    let name = match path.components().next_back() {
        Some(Component::Normal(n)) => n,
        _ => bail!("{} does not end in a file name", path.display()),
    };
    let parent = path
        .parent()
        .with_context(|| format!("{} has no parent directory", path.display()))?;
    Ok((
        parent.to_path_buf(),
        CString::new(name.as_bytes()).context("file name contains a NUL byte")?,
    ))
}

/// What sits at `name` inside `dir`, without following a symlink (None: nothing).
pub fn lstat_at(dir: BorrowedFd<'_>, name: &CString) -> Result<Option<libc::stat>> {
    // SAFETY: an all-zero stat is valid; fstatat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor, C string and out pointer.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc == 0 {
        return Ok(Some(st));
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == std::io::ErrorKind::NotFound {
        return Ok(None);
    }
    Err(e).context("fstatat")
}

/// Create `name` inside the held directory as a new regular file (mode 0600), never
/// following or reusing what is there: an existing regular file is unlinked first only if
/// `replace_existing`; anything else in the way is refused.
pub fn create_file_at(dir: BorrowedFd<'_>, name: &CString, replace_existing: bool) -> Result<File> {
    let shown = name.to_string_lossy();
    if let Some(st) = lstat_at(dir, name)? {
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            bail!("{shown} exists and is not a regular file; refusing to touch it");
        }
        if !replace_existing {
            bail!("{shown} already exists; a replacement must be a new file (remove it first)");
        }
        // SAFETY: valid descriptor and C string.
        if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("cannot remove old member {shown}"));
        }
    }
    // SAFETY: valid descriptor and C string; O_EXCL|O_NOFOLLOW create a new file only.
    let rc = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    let fd = fd_result(rc as libc::c_long, || format!("cannot create {shown}"))?;
    Ok(File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_below_is_lexical_and_strict() {
        let root = Path::new("/srv/gr");
        assert_eq!(
            relative_below(root, Path::new("/srv/gr/a/b")),
            Some(PathBuf::from("a/b"))
        );
        assert_eq!(relative_below(root, Path::new("/srv/gr")), None);
        assert_eq!(relative_below(root, Path::new("/srv/gr/../etc")), None);
        assert_eq!(
            relative_below(root, Path::new("/srv/gr/./a")),
            Some(PathBuf::from("a"))
        );
        assert_eq!(relative_below(root, Path::new("/srv/grx/a")), None);
        assert_eq!(relative_below(root, Path::new("srv/gr/a")), None);
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("grs-safe-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn symlinks_and_escapes_below_the_root_are_refused() {
        let base = scratch("sym");
        let root = base.join("root");
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::os::unix::fs::symlink(base.join("outside"), root.join("link")).unwrap();
        std::os::unix::fs::symlink("real", root.join("rel-link")).unwrap();
        let roots = vec![root.clone()];
        assert!(hold_dir_below(&roots, &root.join("real"), "directory").is_ok());
        for bad in ["link", "rel-link", "real/../../outside"] {
            let err = hold_dir_below(&roots, &root.join(bad), "directory").unwrap_err();
            assert!(format!("{err:#}").contains("directory"), "{bad}: {err:#}");
        }
        assert!(hold_dir_below(&roots, &base.join("outside"), "directory")
            .unwrap_err()
            .to_string()
            .contains("is not below"));
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn create_file_at_never_follows_or_clobbers_what_it_should_not() {
        let base = scratch("create");
        let victim = base.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, base.join("link")).unwrap();
        std::fs::write(base.join("old"), b"old member").unwrap();
        let dir = open_trusted_dir(&base).unwrap();
        let name = |s: &str| CString::new(s).unwrap();
        assert!(create_file_at(dir.as_fd(), &name("link"), true).is_err());
        assert!(create_file_at(dir.as_fd(), &name("old"), false).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(base.join("old")).unwrap(), b"old member");
        let f = create_file_at(dir.as_fd(), &name("old"), true).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 0);
        assert!(create_file_at(dir.as_fd(), &name("new"), false).is_ok());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
