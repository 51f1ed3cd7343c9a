//! RAID5 and RAID6 arithmetic and geometry, as Linux MD lays them out.
//!
//! This module knows nothing of members, drives or requests in flight: it maps byte
//! offsets and computes parity over caller-owned buffers. A RAID5/RAID6 personality builds
//! its plans from these pieces.
//!
//! * [`gf256`]: the field GF(2^8) of lib/raid6 (polynomial 0x11d, generator 2).
//! * [`syndrome`]: P (XOR) and Q (Reed–Solomon) syndromes over the data chunks of a
//!   stripe, their delta update for read-modify-write, and reconstruction of any one
//!   (RAID5) or any two (RAID6) lost chunks.
//! * [`geometry`]: MD's left-symmetric layout (`ALGORITHM_LEFT_SYMMETRIC`, mdadm's default
//!   for both levels): volume offset ↔ (stripe, data index, member, member offset), the
//!   rotating parity members, splitting a byte range into per-chunk pieces grouped by
//!   stripe, capacity.
//! * [`write_plan`]: for a write covering some chunks of a stripe, read-modify-write or
//!   reconstruct-write, whichever pre-reads fewer chunks (MD's `handle_stripe_dirtying`
//!   rule), and which members to read, also when members have failed.
//!
//! # Layout in one picture
//!
//! Five members, RAID5 (`Dn` = the n-th chunk of the volume, `P` = parity):
//!
//! ```text
//! stripe   m0   m1   m2   m3   m4
//!   0      D0   D1   D2   D3   P
//!   1      D5   D6   D7   P    D4
//!   2      D10  D11  P    D8   D9
//!   3      D15  P    D12  D13  D14
//!   4      P    D16  D17  D18  D19
//! ```
//!
//! RAID6 on five members (P rotates the same way, Q sits right after it on the ring, and
//! the data start right after Q):
//!
//! ```text
//! stripe   m0   m1   m2   m3   m4
//!   0      Q    D0   D1   D2   P
//!   1      D3   D4   D5   P    Q
//!   2      D7   D8   P    Q    D6
//!   3      D11  P    Q    D9   D10
//!   4      P    Q    D12  D13  D14
//! ```
//!
//! Member offsets start at 0 for the first stripe: a caller that keeps a superblock or
//! reserved region at the start of each member adds its own data offset.
//!
//! # Q and the order of data chunks
//!
//! Q = Σ g^i · D_i where i is the data index within the stripe (0 for the chunk right after
//! Q on the ring, as in MD's `raid6_d0`/`raid6_idx_to_slot` for the non-DDF layouts). An
//! array written here therefore carries the same P and Q bytes MD would compute.

pub mod geometry;
pub mod gf256;
pub mod syndrome;
#[cfg(test)]
pub(crate) mod test_rng;
pub mod write_plan;

use std::fmt;

use thiserror::Error;

pub use geometry::{
    ChunkPiece, Geometry, Location, MemberPlace, MemberRole, StripeRange, StripeRanges,
};
pub use syndrome::{compute_p, compute_pq, reconstruct, update_p, update_q};
pub use write_plan::{plan_write, Coverage, WritePlan, WriteStrategy};

/// The parity level of a striped layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Level {
    /// One parity chunk (P) per stripe; survives one lost member.
    Raid5,
    /// Two parity chunks (P and Q) per stripe; survives two lost members.
    Raid6,
}

impl Level {
    /// Parity chunks per stripe (and members that may be lost).
    pub const fn parity_count(self) -> usize {
        match self {
            Level::Raid5 => 1,
            Level::Raid6 => 2,
        }
    }

    /// Fewest members MD accepts for the level.
    pub const fn min_members(self) -> usize {
        match self {
            Level::Raid5 => 2,
            Level::Raid6 => 4,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Raid5 => "raid5",
            Level::Raid6 => "raid6",
        })
    }
}

/// Most members of a parity array: Q weighs data chunks by distinct powers of g, and g has
/// only 255 of them (MD's own limit for RAID6 is lower still).
pub const MAX_MEMBERS: usize = 255;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ParityError {
    #[error("{level} needs {min}..={max} members, not {members}", max = MAX_MEMBERS)]
    MemberCount {
        level: Level,
        members: usize,
        min: usize,
    },
    #[error("chunk size {0} must be a non-zero multiple of 512 bytes")]
    ChunkSize(u64),
    #[error("member size {member_bytes} holds no whole chunk of {chunk_bytes} bytes")]
    MemberTooSmall { member_bytes: u64, chunk_bytes: u64 },
    #[error(
        "{members} members of {member_bytes} bytes in chunks of {chunk_bytes} exceed 2^64 bytes"
    )]
    CapacityOverflow {
        members: usize,
        chunk_bytes: u64,
        member_bytes: u64,
    },
    #[error("volume range {offset}+{len} is beyond the capacity {capacity}")]
    OutOfRange {
        offset: u64,
        len: u64,
        capacity: u64,
    },
    #[error("member {member} does not exist (the array has {members})")]
    NoSuchMember { member: usize, members: usize },
    #[error("member offset {offset} is beyond the {limit} bytes of data space per member")]
    MemberOffsetOutOfRange { offset: u64, limit: u64 },
    #[error("{what}: expected {expected} buffers, got {got}")]
    BufferCount {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("{what}: buffer {index} has {got} bytes, the others {expected}")]
    BufferLength {
        what: &'static str,
        index: usize,
        expected: usize,
        got: usize,
    },
    #[error("chunk index {index} is not in a stripe of {chunks} chunks")]
    NoSuchChunk { index: usize, chunks: usize },
    #[error("chunk {0} is listed as lost twice")]
    DuplicateLoss(usize),
    #[error("{lost} chunks lost but {level} recovers at most {tolerated}")]
    TooManyLost {
        level: Level,
        lost: usize,
        tolerated: usize,
    },
}
