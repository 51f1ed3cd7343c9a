//! The system tools an export needs: losetup, mkfs.ext4, e2fsck, umount (of stale mounts).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::member::{CommandRunner, SystemRunner};

fn run(program: &str, args: &[&str]) -> Result<String> {
    SystemRunner
        .run(program, args)
        .map(|out| out.trim().to_string())
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("path {} is not UTF-8", p.display()))
}

/// Attach with direct I/O (no second page cache between loop and FUSE); kernels or
/// filesystems that refuse it get a buffered loop device instead.
pub fn loop_attach(image: &Path) -> Result<String> {
    let path = path_str(image)?;
    match run("losetup", &["--find", "--show", "--direct-io=on", path]) {
        Ok(device) => Ok(device),
        Err(e) => {
            tracing::warn!(image = path, error = %e, "loop direct I/O refused; attaching buffered");
            for device in loops_backed_by(image) {
                let _ = loop_detach(&device);
            }
            run("losetup", &["--find", "--show", path])
                .with_context(|| format!("cannot attach a loop device to {}", image.display()))
        }
    }
}

pub fn loop_detach(device: &str) -> Result<()> {
    run("losetup", &["--detach", device]).map(|_| ())
}

/// Wait until a detached loop device has let go of its backing file. The kernel detaches a
/// loop device that is still open (udev's blkid probing after the unmount, say) only when
/// its last opener closes it; until then the backing file stays open, and the FUSE image it
/// lives on cannot be unmounted. True once released, false if `timeout` passed first.
pub fn wait_for_loop_release(device: &str, timeout: Duration) -> bool {
    let Some(name) = Path::new(device).file_name() else {
        return true;
    };
    let backing = Path::new("/sys/block").join(name).join("loop/backing_file");
    let deadline = std::time::Instant::now() + timeout;
    while backing.exists() {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// Loop devices whose backing file is `image`.
pub fn loops_backed_by(image: &Path) -> Vec<String> {
    let Ok(image) = path_str(image) else {
        return Vec::new();
    };
    run(
        "losetup",
        &["--noheadings", "--output", "NAME", "--associated", image],
    )
    .map(|out| {
        out.lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    })
    .unwrap_or_default()
}

pub fn mkfs_ext4(device: &str, label: &str) -> Result<()> {
    let label: String = label.chars().take(16).collect();
    // nodiscard: the image has no hole punching; lazy init off so the first hours of a new
    // volume are not spent zeroing inode tables behind the user's back.
    run(
        "mkfs.ext4",
        &[
            "-q",
            "-F",
            "-m",
            "0",
            "-L",
            &label,
            "-E",
            "nodiscard,lazy_itable_init=0,lazy_journal_init=0",
            device,
        ],
    )
    .map(|_| ())
}

/// Repair what a crash left behind (journal replay, preen). Exit codes 0 and 1 are fine.
pub fn fsck_preen(device: &str) -> Result<()> {
    let out = Command::new("e2fsck")
        .args(["-p", device])
        .output()
        .context("cannot run e2fsck")?;
    match out.status.code() {
        Some(0) | Some(1) => Ok(()),
        code => bail!(
            "e2fsck -p {device} exited with {code:?}; the filesystem needs manual repair: {}{}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    }
}

pub fn umount_lazy(target: &Path) -> Result<()> {
    run("umount", &["--lazy", path_str(target)?]).map(|_| ())
}

/// One line of /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq)]
pub struct MountEntry {
    pub target: PathBuf,
    pub fstype: String,
    pub source: String,
}

fn unescape(field: &str) -> String {
    // mountinfo escapes space, tab, newline and backslash as \ooo.
    let mut out = String::new();
    let mut chars = field.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let code: String = chars.by_ref().take(3).collect();
            match u8::from_str_radix(&code, 8) {
                Ok(b) => out.push(b as char),
                Err(_) => {
                    out.push('\\');
                    out.push_str(&code);
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let target = left.split(' ').nth(4)?;
            let mut r = right.split(' ');
            let fstype = r.next()?;
            let source = r.next()?;
            Some(MountEntry {
                target: PathBuf::from(unescape(target)),
                fstype: fstype.to_string(),
                source: unescape(source),
            })
        })
        .collect()
}

pub fn mounts() -> Vec<MountEntry> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mountinfo_lines_with_escapes() {
        let text = "36 35 98:0 / /mnt/my\\040disk rw,noatime master:1 - ext4 /dev/loop3 rw,errors=continue\n\
                    40 35 0:50 / /run/grs/v.img rw shared:2 - fuse.greenreplica greenreplica-v rw,user_id=0";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].target, PathBuf::from("/mnt/my disk"));
        assert_eq!(
            (m[0].fstype.as_str(), m[0].source.as_str()),
            ("ext4", "/dev/loop3")
        );
        assert_eq!(m[1].fstype, "fuse.greenreplica");
    }
}
