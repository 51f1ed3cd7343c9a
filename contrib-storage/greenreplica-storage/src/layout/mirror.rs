//! What every mirrored layout shares (Single is the one-copy case): reads from the copy that
//! can serve soonest, writes to every writable copy, recovery from another copy, and resync
//! and scrub by comparing the copies against the first readable in-sync one.

use super::{Buf, LayoutError, MemberIo, MemberView, Plan, Reconcile, SyncCopy, SYNC_BLOCK};
use crate::service_model::IoKind;

/// A piece of the volume and every place it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copies {
    pub buf_offset: u64,
    pub len: u64,
    /// (member, member offset) of each copy.
    pub placements: Vec<(usize, u64)>,
}

pub fn plan(
    kind: IoKind,
    offset: u64,
    pieces: Vec<Copies>,
    views: &[MemberView],
) -> Result<Plan, LayoutError> {
    let mut plan = Plan::default();
    for piece in pieces {
        let no_copy = || LayoutError::NoLiveCopy {
            offset: offset + piece.buf_offset,
            end: offset + piece.buf_offset + piece.len,
        };
        let io = |&(member, member_offset): &(usize, u64)| MemberIo {
            member,
            member_offset,
            len: piece.len,
            buf: Buf::Caller(piece.buf_offset),
        };
        match kind {
            IoKind::Read => {
                let best = piece
                    .placements
                    .iter()
                    .filter(|(m, off)| views[*m].holds(*off, piece.len))
                    .min_by(|a, b| views[a.0].ready_at.total_cmp(&views[b.0].ready_at))
                    .ok_or_else(no_copy)?;
                plan.reads.push(io(best));
            }
            IoKind::Write => {
                let valid_written = piece
                    .placements
                    .iter()
                    .any(|(m, off)| views[*m].writable && views[*m].holds(*off, piece.len));
                if !valid_written {
                    return Err(no_copy());
                }
                plan.writes.extend(
                    piece
                        .placements
                        .iter()
                        .filter(|(m, _)| views[*m].writable)
                        .map(io),
                );
            }
        }
    }
    Ok(plan)
}

/// Read member `member`'s bytes from the readiest other copy in `mirrors` that holds them.
pub fn recover(
    member: usize,
    offset: u64,
    len: u64,
    mirrors: &[usize],
    views: &[MemberView],
) -> Result<Plan, LayoutError> {
    let source = mirrors
        .iter()
        .copied()
        .filter(|&m| m != member && views[m].holds(offset, len))
        .min_by(|&a, &b| views[a].ready_at.total_cmp(&views[b].ready_at))
        .ok_or_else(|| LayoutError::Unrecoverable {
            member,
            offset,
            len,
            problem: "no other copy holds them".into(),
        })?;
    Ok(Plan {
        reads: vec![MemberIo {
            member: source,
            member_offset: offset,
            len,
            buf: Buf::Caller(0),
        }],
        ..Plan::default()
    })
}

/// The reference is, block by block, the first in-sync copy that could read it; every live
/// copy that differs from it (or could not be read) is rewritten with it.
pub fn reconcile(offset: u64, group: &[SyncCopy], len: u64) -> Result<Reconcile, String> {
    let mut reference = vec![0u8; len as usize];
    let blocks = len.div_ceil(SYNC_BLOCK) as usize;
    for b in 0..blocks {
        let range = b * SYNC_BLOCK as usize..((b + 1) * SYNC_BLOCK as usize).min(len as usize);
        let source = group.iter().find_map(|c| {
            c.bytes
                .as_ref()
                .filter(|_| c.readable.get(b).copied().unwrap_or(false))
        });
        let Some(bytes) = source else {
            return Err(format!(
                "no copy of member bytes {}+{SYNC_BLOCK} can be read",
                offset + b as u64 * SYNC_BLOCK
            ));
        };
        reference[range.clone()].copy_from_slice(&bytes[range]);
    }
    let rewrites = group
        .iter()
        .filter(|c| !(c.readable.iter().all(|&r| r) && c.bytes.as_ref() == Some(&reference)))
        .map(|c| (c.member, reference.clone()))
        .collect();
    Ok(Reconcile { rewrites })
}

/// Every group keeps at least one valid member.
pub fn survives(groups: &[Vec<usize>], valid: &[bool]) -> bool {
    groups
        .iter()
        .all(|g| g.iter().any(|&m| valid.get(m).copied().unwrap_or(false)))
}
