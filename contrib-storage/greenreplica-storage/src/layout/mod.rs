//! Layouts map volume byte ranges onto member byte ranges. RAID10 and a single member are
//! here; RoLo, QMD, IDO and track-aligned layouts implement the same trait later (they will
//! override `plan` to redirect writes).

mod raid10;
mod single;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use raid10::Raid10;
pub use single::Single;

use crate::clock::Seconds;
use crate::service_model::IoKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LayoutKind {
    Single,
    Raid10,
}

impl FromStr for LayoutKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "single" => Ok(LayoutKind::Single),
            "raid10" => Ok(LayoutKind::Raid10),
            other => Err(format!("unknown layout {other:?}; use single or raid10")),
        }
    }
}

impl fmt::Display for LayoutKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LayoutKind::Single => "single",
            LayoutKind::Raid10 => "raid10",
        })
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum LayoutError {
    #[error("layout {layout}: {problem}")]
    Shape { layout: LayoutKind, problem: String },
    #[error("no live copy of volume bytes {offset}..{end}")]
    NoLiveCopy { offset: u64, end: u64 },
    #[error("volume range {offset}+{len} is beyond the volume size {size}")]
    OutOfRange { offset: u64, len: u64, size: u64 },
}

/// One piece of a request on one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberIo {
    pub member: usize,
    pub member_offset: u64,
    pub len: u64,
    /// Offset of this piece inside the caller's buffer.
    pub buf_offset: u64,
}

/// A piece of the volume and every place it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copies {
    pub buf_offset: u64,
    pub len: u64,
    /// (member, member offset) of each copy.
    pub placements: Vec<(usize, u64)>,
}

/// What a layout needs to know about a member to plan around it.
#[derive(Debug, Clone, Copy)]
pub struct MemberView {
    /// Member bytes below this offset hold valid data (u64::MAX: all; 0: none).
    pub valid_below: u64,
    /// Writes may go to it (a rebuilding replacement accepts writes before it is valid).
    pub writable: bool,
    /// When it could start serving a new request (spun down members are far in the future).
    pub ready_at: Seconds,
}

impl MemberView {
    pub fn healthy(ready_at: Seconds) -> Self {
        Self {
            valid_below: u64::MAX,
            writable: true,
            ready_at,
        }
    }
}

pub trait Layout: Send + Sync + fmt::Debug {
    fn kind(&self) -> LayoutKind;
    fn member_count(&self) -> usize;
    /// Usable bytes per member (after the layout's rounding).
    fn member_data_bytes(&self) -> u64;
    fn stripe_unit(&self) -> u64;
    /// Size of the volume in bytes.
    fn capacity(&self) -> u64;
    /// Every copy of `offset..offset+len`, split where the placement changes.
    fn map(&self, offset: u64, len: u64) -> Vec<Copies>;
    /// The member holding the same bytes at the same offsets, for rebuilds.
    fn mirror_of(&self, member: usize) -> Option<usize>;

    /// Reads go to the copy that can serve soonest; writes to every writable copy.
    fn plan(
        &self,
        kind: IoKind,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Vec<MemberIo>, LayoutError> {
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.capacity())
        {
            return Err(LayoutError::OutOfRange {
                offset,
                len,
                size: self.capacity(),
            });
        }
        let mut plan = Vec::new();
        for piece in self.map(offset, len) {
            let no_copy = || LayoutError::NoLiveCopy {
                offset: offset + piece.buf_offset,
                end: offset + piece.buf_offset + piece.len,
            };
            let io = |&(member, member_offset): &(usize, u64)| MemberIo {
                member,
                member_offset,
                len: piece.len,
                buf_offset: piece.buf_offset,
            };
            match kind {
                IoKind::Read => {
                    let best = piece
                        .placements
                        .iter()
                        .filter(|(m, off)| views[*m].valid_below >= off + piece.len)
                        .min_by(|a, b| views[a.0].ready_at.total_cmp(&views[b.0].ready_at))
                        .ok_or_else(no_copy)?;
                    plan.push(io(best));
                }
                IoKind::Write => {
                    let before = plan.len();
                    plan.extend(
                        piece
                            .placements
                            .iter()
                            .filter(|(m, _)| views[*m].writable)
                            .map(io),
                    );
                    let valid_written = piece.placements.iter().any(|(m, off)| {
                        views[*m].writable && views[*m].valid_below >= off + piece.len
                    });
                    if plan.len() == before || !valid_written {
                        return Err(no_copy());
                    }
                }
            }
        }
        Ok(plan)
    }
}

/// Build a layout from its description.
pub fn build(
    kind: LayoutKind,
    members: usize,
    member_bytes: u64,
    stripe_unit: u64,
) -> Result<Box<dyn Layout>, LayoutError> {
    Ok(match kind {
        LayoutKind::Single => Box::new(Single::new(members, member_bytes)?),
        LayoutKind::Raid10 => Box::new(Raid10::new(members, member_bytes, stripe_unit)?),
    })
}
