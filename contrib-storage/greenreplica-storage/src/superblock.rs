//! The small header at the start of every member: which volume it belongs to, where it sits,
//! whether the filesystem was created and whether the member holds valid data. It is how a
//! restarted agent knows a volume is not new (and must never be formatted again).

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::layout::{LayoutKind, LayoutOptions};
use crate::member::Member;

/// Member bytes reserved for the header; data starts here.
pub const DATA_OFFSET: u64 = 1 << 20;
const HEADER_BYTES: usize = 4096;
const MAGIC_LINE: &[u8] = b"GREENREPLICA-STORAGE-MEMBER v1\n";

#[derive(Debug, Error)]
pub enum SuperblockError {
    #[error("member {member}: cannot read its header: {cause}")]
    Read {
        member: String,
        cause: std::io::Error,
    },
    #[error("member {member}: cannot write its header: {cause}")]
    Write {
        member: String,
        cause: std::io::Error,
    },
    #[error("member {member} is not empty and carries no greenreplica header; refusing to use it (wipe it yourself if it really is free: e.g. `wipefs -a` or `dd if=/dev/zero of=… bs=1M count=2`)")]
    Foreign { member: String },
    #[error("member {member}: damaged greenreplica header: {problem}")]
    Damaged { member: String, problem: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum MemberData {
    InSync,
    /// A replacement being rebuilt; bytes below the watermark are valid.
    Rebuilding {
        watermark: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Superblock {
    pub volume: String,
    pub volume_id: String,
    pub layout: LayoutKind,
    pub members: usize,
    pub member_index: usize,
    pub stripe_unit: u64,
    /// The logged layouts' options the volume was created with (absent: the defaults).
    #[serde(default, skip_serializing_if = "LayoutOptions::is_empty")]
    pub layout_options: LayoutOptions,
    pub member_data_bytes: u64,
    /// Bumped on every membership change, so a member that missed one is recognised as stale.
    pub generation: u64,
    /// mkfs has completed on the volume.
    pub formatted: bool,
    /// The volume was released cleanly (not mounted, no crash).
    pub clean: bool,
    pub data: MemberData,
}

/// Read a member's header: `Ok(None)` if the member is blank (new).
pub fn read(member: &dyn Member) -> Result<Option<Superblock>, SuperblockError> {
    let name = member.describe();
    let mut head = vec![0u8; HEADER_BYTES];
    member
        .read_at(&mut head, 0)
        .map_err(|cause| SuperblockError::Read {
            member: name.clone(),
            cause,
        })?;
    if let Some(body) = head.strip_prefix(MAGIC_LINE) {
        let end = body.iter().position(|&b| b == 0).unwrap_or(body.len());
        return serde_json::from_slice(&body[..end]).map(Some).map_err(|e| {
            SuperblockError::Damaged {
                member: name,
                problem: e.to_string(),
            }
        });
    }
    if is_blank(member)? {
        Ok(None)
    } else {
        Err(SuperblockError::Foreign { member: name })
    }
}

/// Blank means zeros in the header area and the first MiB of data (where any filesystem or
/// partition table that was there before would have left its marks).
fn is_blank(member: &dyn Member) -> Result<bool, SuperblockError> {
    let mut buf = vec![0u8; 1 << 20];
    for offset in [0, DATA_OFFSET] {
        let len = member.size().saturating_sub(offset).min(buf.len() as u64) as usize;
        member
            .read_at(&mut buf[..len], offset)
            .map_err(|cause| SuperblockError::Read {
                member: member.describe(),
                cause,
            })?;
        if buf[..len].iter().any(|&b| b != 0) {
            return Ok(false);
        }
    }
    Ok(true)
}

pub fn write(member: &dyn Member, sb: &Superblock) -> Result<(), SuperblockError> {
    let err = |cause| SuperblockError::Write {
        member: member.describe(),
        cause,
    };
    let json = serde_json::to_vec(sb).map_err(|e| err(std::io::Error::other(e)))?;
    let mut head = vec![0u8; HEADER_BYTES];
    if MAGIC_LINE.len() + json.len() >= HEADER_BYTES {
        return Err(err(std::io::Error::other("header too large")));
    }
    head[..MAGIC_LINE.len()].copy_from_slice(MAGIC_LINE);
    head[MAGIC_LINE.len()..MAGIC_LINE.len() + json.len()].copy_from_slice(&json);
    member.write_at(&head, 0).map_err(err)?;
    member.flush().map_err(err)
}

/// A fresh random volume id (from the kernel's generator).
pub fn new_volume_id() -> String {
    let mut bytes = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut bytes);
    }
    if bytes.iter().all(|&b| b == 0) {
        // Without /dev/urandom fall back to time and pid; uniqueness is all that matters.
        let t = crate::trace::filetime_now();
        bytes[..8].copy_from_slice(&t.to_le_bytes());
        bytes[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::{FileMember, MemberKind};

    fn member(name: &str) -> (std::path::PathBuf, FileMember) {
        let dir = std::env::temp_dir().join(format!("grs-sb-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m = FileMember::open_or_create(MemberKind::File, &dir.join("m"), 4 << 20).unwrap();
        (dir, m)
    }

    fn sample() -> Superblock {
        Superblock {
            volume: "v".into(),
            volume_id: new_volume_id(),
            layout: LayoutKind::RAID10,
            members: 2,
            member_index: 1,
            stripe_unit: 65536,
            layout_options: Default::default(),
            member_data_bytes: 3 << 20,
            generation: 3,
            formatted: true,
            clean: false,
            data: MemberData::Rebuilding { watermark: 4096 },
        }
    }

    #[test]
    fn blank_member_has_no_header_and_header_round_trips() {
        let (dir, m) = member("rt");
        assert_eq!(read(&m).unwrap(), None);
        let sb = sample();
        write(&m, &sb).unwrap();
        assert_eq!(read(&m).unwrap(), Some(sb));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn foreign_data_is_refused() {
        let (dir, m) = member("foreign");
        m.write_at(&[0x53, 0xef], DATA_OFFSET + 1080).unwrap();
        let err = read(&m).unwrap_err().to_string();
        assert!(err.contains("not empty"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
