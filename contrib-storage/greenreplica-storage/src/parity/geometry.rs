//! MD's left-symmetric layout for RAID5 and RAID6 (drivers/md/raid5.c,
//! `raid5_compute_sector`, `ALGORITHM_LEFT_SYMMETRIC`), in bytes instead of sectors.
//!
//! With n members, k = n − parity data chunks per stripe and chunk size c:
//!
//! * volume offset o lies in chunk `o / c`, which is data index `chunk % k` of stripe
//!   `chunk / k`, at member offset `stripe · c + o % c`;
//! * P of stripe s is on member `n − 1 − s mod n` (parity walks from the last member
//!   to the first, one step per stripe);
//! * RAID6's Q is on the member after P, `(P + 1) mod n`;
//! * data index d is on member `(P + parity + d) mod n`: the data start right after the
//!   parity and continue around the ring ("symmetric": consecutive chunks of the volume
//!   land on consecutive members, so a sequential read touches every member in turn).
//!
//! Each member is P once (and Q once) in every run of n stripes. Only whole chunks of a
//! member are used; the remainder of an odd-sized member is left alone.

use super::write_plan::Coverage;
use super::{Level, ParityError, MAX_MEMBERS};

/// What one member holds in one stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberRole {
    /// The chunk with this data index (0..k) of the stripe.
    Data(usize),
    /// The XOR parity.
    P,
    /// The Reed–Solomon syndrome (RAID6 only).
    Q,
}

/// Where a volume byte lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub stripe: u64,
    pub data_index: usize,
    pub member: usize,
    pub member_offset: u64,
    /// Offset of the byte within its chunk.
    pub chunk_offset: u64,
}

/// What a member byte is: part of a data chunk (then `volume_offset` says which volume
/// byte) or of a parity chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberPlace {
    pub stripe: u64,
    pub role: MemberRole,
    pub chunk_offset: u64,
    pub volume_offset: Option<u64>,
}

/// One piece of a volume range that lies within a single chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkPiece {
    pub data_index: usize,
    pub member: usize,
    pub member_offset: u64,
    pub chunk_offset: u64,
    pub len: u64,
    /// Where the piece starts in the caller's buffer (relative to the range's start).
    pub buf_offset: u64,
}

/// The pieces of a volume range that fall into one stripe, in volume order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeRange {
    pub stripe: u64,
    pub pieces: Vec<ChunkPiece>,
}

/// A RAID5 or RAID6 array's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    level: Level,
    members: usize,
    chunk_bytes: u64,
    stripes: u64,
}

impl Geometry {
    /// `members` members of `member_bytes` usable bytes each (after any reserved region),
    /// striped in chunks of `chunk_bytes` (a non-zero multiple of 512; MD uses 512 KiB by
    /// default).
    pub fn new(
        level: Level,
        members: usize,
        chunk_bytes: u64,
        member_bytes: u64,
    ) -> Result<Self, ParityError> {
        if members < level.min_members() || members > MAX_MEMBERS {
            return Err(ParityError::MemberCount {
                level,
                members,
                min: level.min_members(),
            });
        }
        if chunk_bytes == 0 || !chunk_bytes.is_multiple_of(512) {
            return Err(ParityError::ChunkSize(chunk_bytes));
        }
        let stripes = member_bytes / chunk_bytes;
        if stripes == 0 {
            return Err(ParityError::MemberTooSmall {
                member_bytes,
                chunk_bytes,
            });
        }
        let data_per_stripe = (members - level.parity_count()) as u64;
        let capacity = chunk_bytes
            .checked_mul(data_per_stripe)
            .and_then(|b| b.checked_mul(stripes));
        if capacity.is_none() {
            return Err(ParityError::CapacityOverflow {
                members,
                chunk_bytes,
                member_bytes,
            });
        }
        Ok(Self {
            level,
            members,
            chunk_bytes,
            stripes,
        })
    }

    pub fn level(&self) -> Level {
        self.level
    }

    pub fn members(&self) -> usize {
        self.members
    }

    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }

    /// Data chunks per stripe (k = members − parity chunks).
    pub fn data_per_stripe(&self) -> usize {
        self.members - self.level.parity_count()
    }

    pub fn stripes(&self) -> u64 {
        self.stripes
    }

    /// Volume bytes per stripe.
    pub fn stripe_data_bytes(&self) -> u64 {
        self.chunk_bytes * self.data_per_stripe() as u64
    }

    /// Bytes of each member in use (whole chunks).
    pub fn member_data_bytes(&self) -> u64 {
        self.stripes * self.chunk_bytes
    }

    /// Volume size in bytes.
    pub fn capacity(&self) -> u64 {
        self.stripes * self.stripe_data_bytes()
    }

    /// The member holding P in `stripe`.
    pub fn p_member(&self, stripe: u64) -> usize {
        self.members - 1 - (stripe % self.members as u64) as usize
    }

    /// The member holding Q in `stripe` (RAID6), right after P on the ring.
    pub fn q_member(&self, stripe: u64) -> Option<usize> {
        (self.level == Level::Raid6).then(|| (self.p_member(stripe) + 1) % self.members)
    }

    /// The parity members of `stripe`: P, then Q for RAID6.
    pub fn parity_members(&self, stripe: u64) -> Vec<usize> {
        let mut m = vec![self.p_member(stripe)];
        m.extend(self.q_member(stripe));
        m
    }

    /// The member holding data index `data_index` of `stripe`.
    pub fn data_member(&self, stripe: u64, data_index: usize) -> Result<usize, ParityError> {
        let k = self.data_per_stripe();
        if data_index >= k {
            return Err(ParityError::NoSuchChunk {
                index: data_index,
                chunks: k,
            });
        }
        Ok((self.p_member(stripe) + self.level.parity_count() + data_index) % self.members)
    }

    /// What `member` holds in `stripe`.
    pub fn member_role(&self, stripe: u64, member: usize) -> Result<MemberRole, ParityError> {
        if member >= self.members {
            return Err(ParityError::NoSuchMember {
                member,
                members: self.members,
            });
        }
        let after_p = (member + self.members - self.p_member(stripe)) % self.members;
        Ok(match (after_p, self.level) {
            (0, _) => MemberRole::P,
            (1, Level::Raid6) => MemberRole::Q,
            (rel, level) => MemberRole::Data(rel - level.parity_count()),
        })
    }

    /// The members of `stripe` in syndrome order — data index 0..k, then P, then Q — the
    /// order [`super::syndrome::reconstruct`] takes the chunks in.
    pub fn syndrome_members(&self, stripe: u64) -> Vec<usize> {
        let p = self.p_member(stripe);
        let parity = self.level.parity_count();
        let mut members: Vec<usize> = (0..self.data_per_stripe())
            .map(|d| (p + parity + d) % self.members)
            .collect();
        members.extend(self.parity_members(stripe));
        members
    }

    /// The position of `member` in [`Geometry::syndrome_members`] of `stripe`: its data
    /// index, k for P, k + 1 for Q.
    pub fn syndrome_index(&self, stripe: u64, member: usize) -> Result<usize, ParityError> {
        Ok(match self.member_role(stripe, member)? {
            MemberRole::Data(d) => d,
            MemberRole::P => self.data_per_stripe(),
            MemberRole::Q => self.data_per_stripe() + 1,
        })
    }

    /// Where volume byte `offset` lives.
    pub fn locate(&self, offset: u64) -> Result<Location, ParityError> {
        if offset >= self.capacity() {
            return Err(ParityError::OutOfRange {
                offset,
                len: 1,
                capacity: self.capacity(),
            });
        }
        let chunk = offset / self.chunk_bytes;
        let chunk_offset = offset % self.chunk_bytes;
        let k = self.data_per_stripe() as u64;
        let stripe = chunk / k;
        let data_index = (chunk % k) as usize;
        Ok(Location {
            stripe,
            data_index,
            member: self.data_member(stripe, data_index)?,
            member_offset: stripe * self.chunk_bytes + chunk_offset,
            chunk_offset,
        })
    }

    /// What byte `member_offset` of `member` is (the inverse of [`Geometry::locate`] for
    /// data, and the parity chunks besides).
    pub fn resolve(&self, member: usize, member_offset: u64) -> Result<MemberPlace, ParityError> {
        if member_offset >= self.member_data_bytes() {
            return Err(ParityError::MemberOffsetOutOfRange {
                offset: member_offset,
                limit: self.member_data_bytes(),
            });
        }
        let stripe = member_offset / self.chunk_bytes;
        let chunk_offset = member_offset % self.chunk_bytes;
        let role = self.member_role(stripe, member)?;
        let volume_offset = match role {
            MemberRole::Data(d) => Some(
                (stripe * self.data_per_stripe() as u64 + d as u64) * self.chunk_bytes
                    + chunk_offset,
            ),
            MemberRole::P | MemberRole::Q => None,
        };
        Ok(MemberPlace {
            stripe,
            role,
            chunk_offset,
            volume_offset,
        })
    }

    /// The pieces of volume range `offset..offset + len`, one [`StripeRange`] per stripe
    /// touched, lazily (a huge range allocates nothing up front).
    pub fn split(&self, offset: u64, len: u64) -> Result<StripeRanges<'_>, ParityError> {
        let capacity = self.capacity();
        match offset.checked_add(len) {
            Some(end) if end <= capacity => Ok(StripeRanges {
                geometry: self,
                start: offset,
                pos: offset,
                end,
            }),
            _ => Err(ParityError::OutOfRange {
                offset,
                len,
                capacity,
            }),
        }
    }

    /// How much of each data chunk of the stripe `range` writes (indexed by data index).
    pub fn coverage(&self, range: &StripeRange) -> Vec<Coverage> {
        let mut cover = vec![Coverage::Untouched; self.data_per_stripe()];
        for piece in &range.pieces {
            if let Some(c) = cover.get_mut(piece.data_index) {
                *c = if piece.chunk_offset == 0 && piece.len == self.chunk_bytes {
                    Coverage::Full
                } else {
                    Coverage::Partial
                };
            }
        }
        cover
    }
}

/// Iterator over the stripes of a volume range (see [`Geometry::split`]).
#[derive(Debug, Clone)]
pub struct StripeRanges<'a> {
    geometry: &'a Geometry,
    start: u64,
    pos: u64,
    end: u64,
}

impl Iterator for StripeRanges<'_> {
    type Item = StripeRange;

    fn next(&mut self) -> Option<StripeRange> {
        if self.pos >= self.end {
            return None;
        }
        let g = self.geometry;
        let stripe = self.pos / g.stripe_data_bytes();
        let stripe_end = ((stripe + 1) * g.stripe_data_bytes()).min(self.end);
        let mut pieces = Vec::new();
        while self.pos < stripe_end {
            let loc = g.locate(self.pos).ok()?;
            let len = (g.chunk_bytes - loc.chunk_offset).min(stripe_end - self.pos);
            pieces.push(ChunkPiece {
                data_index: loc.data_index,
                member: loc.member,
                member_offset: loc.member_offset,
                chunk_offset: loc.chunk_offset,
                len,
                buf_offset: self.pos - self.start,
            });
            self.pos += len;
        }
        Some(StripeRange { stripe, pieces })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    /// The member of every data chunk and parity of the first `rows` stripes, as a table
    /// of labels ("D7", "P", "Q") per member.
    fn table(g: &Geometry, rows: u64) -> Vec<Vec<String>> {
        (0..rows)
            .map(|s| {
                (0..g.members())
                    .map(|m| match g.member_role(s, m).unwrap() {
                        MemberRole::P => "P".to_string(),
                        MemberRole::Q => "Q".to_string(),
                        MemberRole::Data(d) => {
                            format!("D{}", s * g.data_per_stripe() as u64 + d as u64)
                        }
                    })
                    .collect()
            })
            .collect()
    }

    fn rows(text: &str) -> Vec<Vec<String>> {
        text.lines()
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect()
    }

    /// raid5.c, level 5, ALGORITHM_LEFT_SYMMETRIC: pd_idx = data_disks − stripe % raid_disks
    /// and dd_idx = (pd_idx + 1 + dd_idx) % raid_disks. On 5 disks stripe 1 has P on disk 3
    /// and its first data chunk (chunk 4) wraps to disk 4; worked out by hand:
    #[test]
    fn raid5_left_symmetric_matches_md_on_five_members() {
        let g = Geometry::new(Level::Raid5, 5, 64 * KIB, 5 * 64 * KIB).unwrap();
        assert_eq!(
            table(&g, 5),
            rows(
                "D0 D1 D2 D3 P
                 D5 D6 D7 P D4
                 D10 D11 P D8 D9
                 D15 P D12 D13 D14
                 P D16 D17 D18 D19"
            )
        );
        // Volume byte 4·64 KiB + 5 (chunk 4, stripe 1) is on member 4 at 64 KiB + 5.
        let loc = g.locate(4 * 64 * KIB + 5).unwrap();
        assert_eq!((loc.stripe, loc.data_index, loc.member), (1, 0, 4));
        assert_eq!(loc.member_offset, 64 * KIB + 5);
    }

    /// raid5.c, level 6, ALGORITHM_LEFT_SYMMETRIC: pd_idx = raid_disks − 1 − stripe %
    /// raid_disks, qd_idx = (pd_idx + 1) % raid_disks, dd_idx = (pd_idx + 2 + dd_idx) %
    /// raid_disks. Stripe 0 puts P on the last disk, so Q wraps to disk 0 and the data
    /// start on disk 1 (raid6_d0: "md starts just after Q block"); worked out by hand:
    #[test]
    fn raid6_left_symmetric_matches_md_on_five_members() {
        let g = Geometry::new(Level::Raid6, 5, 4 * KIB, 5 * 4 * KIB).unwrap();
        assert_eq!(
            table(&g, 5),
            rows(
                "Q D0 D1 D2 P
                 D3 D4 D5 P Q
                 D7 D8 P Q D6
                 D11 P Q D9 D10
                 P Q D12 D13 D14"
            )
        );
        assert_eq!(g.parity_members(2), vec![2, 3]);
        assert_eq!(g.data_member(2, 0).unwrap(), 4);
    }

    #[test]
    fn every_member_holds_each_role_once_per_cycle_of_stripes() {
        for level in [Level::Raid5, Level::Raid6] {
            for n in level.min_members()..=9 {
                let g = Geometry::new(level, n, 4 * KIB, 3 * n as u64 * 4 * KIB).unwrap();
                for first in [0u64, 1, 7] {
                    for m in 0..n {
                        let roles: Vec<MemberRole> = (first..first + n as u64)
                            .map(|s| g.member_role(s, m).unwrap())
                            .collect();
                        let count = |r: MemberRole| roles.iter().filter(|&&x| x == r).count();
                        assert_eq!(count(MemberRole::P), 1, "{level} n={n} m={m}");
                        let q = usize::from(level == Level::Raid6);
                        assert_eq!(count(MemberRole::Q), q);
                        for d in 0..g.data_per_stripe() {
                            assert_eq!(count(MemberRole::Data(d)), 1, "data {d}");
                        }
                    }
                }
            }
        }
    }

    /// Offsets at every chunk boundary, one byte either side and mid-chunk, in every
    /// position of every stripe of a full parity cycle: locate then resolve gives the
    /// offset back, and the stripe's members are all distinct.
    #[test]
    fn locate_and_resolve_round_trip_for_every_offset_class() {
        for level in [Level::Raid5, Level::Raid6] {
            for n in level.min_members()..=8 {
                let chunk = 8 * KIB;
                let g = Geometry::new(level, n, chunk, (2 * n as u64 + 1) * chunk + 100).unwrap();
                assert_eq!(g.stripes(), 2 * n as u64 + 1, "partial chunk unused");
                assert_eq!(
                    g.capacity(),
                    g.stripes() * (n - level.parity_count()) as u64 * chunk
                );
                for c in 0..g.capacity() / chunk {
                    for delta in [0, 1, chunk / 2, chunk - 1] {
                        let offset = c * chunk + delta;
                        let loc = g.locate(offset).unwrap();
                        let place = g.resolve(loc.member, loc.member_offset).unwrap();
                        assert_eq!(place.volume_offset, Some(offset));
                        assert_eq!(place.role, MemberRole::Data(loc.data_index));
                        assert_eq!(place.stripe, loc.stripe);
                        assert_eq!(loc.chunk_offset, delta);
                    }
                }
                for s in 0..g.stripes() {
                    let order = g.syndrome_members(s);
                    for (i, &m) in order.iter().enumerate() {
                        assert_eq!(g.syndrome_index(s, m).unwrap(), i);
                    }
                    let k = g.data_per_stripe();
                    assert_eq!(order[k], g.p_member(s));
                    assert_eq!(order.get(k + 1).copied(), g.q_member(s));
                    let mut owners: Vec<usize> = g.parity_members(s);
                    for d in 0..g.data_per_stripe() {
                        owners.push(g.data_member(s, d).unwrap());
                    }
                    owners.sort_unstable();
                    assert_eq!(owners, (0..n).collect::<Vec<_>>());
                    let p = g.resolve(g.p_member(s), s * chunk + 3).unwrap();
                    assert_eq!((p.role, p.volume_offset), (MemberRole::P, None));
                    if let Some(q) = g.q_member(s) {
                        assert_eq!(g.resolve(q, s * chunk).unwrap().role, MemberRole::Q);
                    }
                }
            }
        }
    }

    #[test]
    fn split_groups_pieces_by_stripe_and_covers_the_range_exactly() {
        let chunk = 4 * KIB;
        let g = Geometry::new(Level::Raid6, 6, chunk, 10 * chunk).unwrap();
        let stripe_bytes = g.stripe_data_bytes();
        let cases = [
            (0, g.capacity()),
            (1, 1),
            (chunk - 1, 2),
            (stripe_bytes - 10, 20),
            (3 * chunk + 17, 2 * stripe_bytes + 5),
            (g.capacity() - 1, 1),
            (5, 0),
        ];
        for (offset, len) in cases {
            let ranges: Vec<StripeRange> = g.split(offset, len).unwrap().collect();
            let mut next = offset;
            let mut prev_stripe = None;
            for r in &ranges {
                assert!(
                    prev_stripe < Some(r.stripe),
                    "one range per stripe, in order"
                );
                prev_stripe = Some(r.stripe);
                for p in &r.pieces {
                    assert_eq!(p.buf_offset, next - offset, "contiguous");
                    let loc = g.locate(next).unwrap();
                    assert_eq!(
                        (loc.stripe, loc.data_index, loc.member, loc.member_offset),
                        (r.stripe, p.data_index, p.member, p.member_offset)
                    );
                    assert!(p.len > 0 && p.chunk_offset + p.len <= chunk);
                    next += p.len;
                }
            }
            assert_eq!(next, offset + len, "covers {offset}+{len}");
        }
        let full = g.split(stripe_bytes, stripe_bytes).unwrap().next().unwrap();
        assert!(g.coverage(&full).iter().all(|c| *c == Coverage::Full));
        let part = g.split(chunk + 1, chunk).unwrap().next().unwrap();
        assert_eq!(
            g.coverage(&part),
            vec![
                Coverage::Untouched,
                Coverage::Partial,
                Coverage::Partial,
                Coverage::Untouched
            ]
        );
    }

    #[test]
    fn hostile_shapes_and_ranges_are_errors() {
        assert!(Geometry::new(Level::Raid5, 1, 4096, 1 << 20).is_err());
        assert!(Geometry::new(Level::Raid6, 3, 4096, 1 << 20).is_err());
        assert!(Geometry::new(Level::Raid5, 256, 4096, 1 << 20).is_err());
        assert!(Geometry::new(Level::Raid5, 4, 0, 1 << 20).is_err());
        assert!(Geometry::new(Level::Raid5, 4, 1000, 1 << 20).is_err());
        assert!(Geometry::new(Level::Raid5, 4, 4096, 4095).is_err());
        assert!(Geometry::new(Level::Raid5, 255, 1 << 40, u64::MAX).is_err());
        let g = Geometry::new(Level::Raid5, 4, 4096, 1 << 20).unwrap();
        assert!(g.locate(g.capacity()).is_err());
        assert!(g.split(u64::MAX, 2).is_err());
        assert!(g.split(g.capacity(), 1).is_err());
        assert!(g.split(g.capacity(), 0).is_ok());
        assert!(g.resolve(4, 0).is_err());
        assert!(g.resolve(0, g.member_data_bytes()).is_err());
        assert!(g.data_member(0, 3).is_err());
        assert!(g.member_role(0, 9).is_err());
        assert!(g.syndrome_index(0, 4).is_err());
    }
}
