//! RAID5 and RAID6: MD's left-symmetric layout with one (P) or two (P, Q) rotating parity
//! chunks per stripe (`crate::parity` holds the geometry and the arithmetic). Reads go to
//! the data chunk, or are reconstructed from the rest of the stripe when its member cannot
//! serve them; writes read-modify-write or reconstruct-write the parity, whichever pre-reads
//! less (MD's rule). A request locks the whole stripes it touches, so two writes to
//! different chunks of one stripe cannot interleave their parity updates.
//!
//! Plans work on a "row": the member byte range of one stripe that a request touches
//! (from the lowest to the highest chunk offset of its pieces), the same on every member.

use super::{
    Buf, Compute, LayoutError, LayoutKind, MemberIo, MemberView, Personality, Plan, Reconcile,
    Role, Shape, ShapeProblem, SyncCopy, SYNC_BLOCK,
};
use crate::parity::{
    self, plan_write, ChunkPiece, Coverage, Geometry, Level, ParityError, StripeRange,
    WriteStrategy,
};
use crate::service_model::IoKind;

#[derive(Debug)]
pub struct Raid56 {
    geometry: Geometry,
}

use super::registry::check_chunk;

fn check_members(level: Level, members: usize) -> Result<(), ShapeProblem> {
    // MD accepts a 2-member RAID5 (a mirror in disguise); three is the useful minimum.
    let min = level.min_members().max(3);
    if members < min || members > parity::MAX_MEMBERS {
        return Err(ShapeProblem {
            key: "member",
            problem: format!(
                "layout {level} needs {min} to {} members, got {members}",
                parity::MAX_MEMBERS
            ),
        });
    }
    Ok(())
}

/// One stripe's member bytes `start..start+len` (the same offsets on every member).
#[derive(Debug, Clone, Copy)]
struct Row {
    stripe: u64,
    /// Member offset of the row's first byte.
    start: u64,
    len: u64,
}

/// Scratch buffers of a plan under construction.
struct Builder {
    plan: Plan,
}

impl Builder {
    fn new() -> Self {
        Self {
            plan: Plan::default(),
        }
    }

    fn scratch(&mut self, len: u64) -> usize {
        self.plan.scratch.push(len);
        self.plan.scratch.len() - 1
    }

    fn read(&mut self, member: usize, member_offset: u64, len: u64, buf: Buf) {
        self.plan.reads.push(MemberIo {
            member,
            member_offset,
            len,
            buf,
        });
    }

    fn write(&mut self, member: usize, member_offset: u64, len: u64, buf: Buf) {
        self.plan.writes.push(MemberIo {
            member,
            member_offset,
            len,
            buf,
        });
    }
}

impl Raid56 {
    pub fn check5(members: usize, chunk: u64) -> Result<(), ShapeProblem> {
        check_members(Level::Raid5, members)?;
        check_chunk(chunk)
    }

    pub fn check6(members: usize, chunk: u64) -> Result<(), ShapeProblem> {
        check_members(Level::Raid6, members)?;
        check_chunk(chunk)
    }

    pub fn new(level: Level, shape: &Shape) -> Result<Self, LayoutError> {
        let kind = Self::kind_of(level);
        check_members(level, shape.members)
            .and_then(|()| check_chunk(shape.chunk))
            .map_err(|p| kind.shape_error(p))?;
        let geometry = Geometry::new(level, shape.members, shape.chunk, shape.member_bytes)
            .map_err(|e| {
                kind.shape_error(ShapeProblem {
                    key: "member",
                    problem: e.to_string(),
                })
            })?;
        Ok(Self { geometry })
    }

    fn kind_of(level: Level) -> LayoutKind {
        match level {
            Level::Raid5 => LayoutKind::RAID5,
            Level::Raid6 => LayoutKind::RAID6,
        }
    }

    fn level(&self) -> Level {
        self.geometry.level()
    }

    fn k(&self) -> usize {
        self.geometry.data_per_stripe()
    }

    fn chunks(&self) -> usize {
        self.k() + self.level().parity_count()
    }

    fn internal(e: ParityError) -> LayoutError {
        LayoutError::Unrecoverable {
            member: 0,
            offset: 0,
            len: 0,
            problem: format!("parity geometry: {e}"),
        }
    }

    /// Read every member that holds `row` validly into a scratch buffer and reconstruct the
    /// others. Returns the buffers in syndrome order, or None if too many are missing.
    fn reconstruct_row(
        &self,
        b: &mut Builder,
        row: Row,
        views: &[MemberView],
    ) -> Result<Option<Vec<Buf>>, LayoutError> {
        let mut bufs = Vec::with_capacity(self.chunks());
        let mut lost = Vec::new();
        for (i, m) in self
            .geometry
            .syndrome_members(row.stripe)
            .into_iter()
            .enumerate()
        {
            let s = Buf::Scratch(b.scratch(row.len), 0);
            if views[m].holds(row.start, row.len) {
                b.read(m, row.start, row.len, s);
            } else {
                lost.push(i);
            }
            bufs.push(s);
        }
        if lost.len() > self.level().parity_count() {
            return Ok(None);
        }
        if !lost.is_empty() {
            b.plan.compute.push(Compute::Reconstruct {
                level: self.level(),
                chunks: bufs.clone(),
                lost,
                len: row.len,
            });
        }
        Ok(Some(bufs))
    }

    /// A stripe's pieces cut where a rebuilding member's valid bytes end, so that in each
    /// part every member holds the whole row validly or not at all: a write then updates
    /// what the rebuild already copied and leaves the rest to the rebuild.
    fn split_at_watermarks(&self, range: &StripeRange, views: &[MemberView]) -> Vec<StripeRange> {
        let cuts: Vec<u64> = views.iter().map(|v| v.valid_below).collect();
        self.split_row_at(range, cuts)
    }

    /// A stripe's pieces as rows that each cover one connected span of chunk offsets: a
    /// write touching the end of one chunk and the start of the next updates parity over
    /// the two spans it writes (as MD, page by page), not over the chunk between them.
    fn split_into_spans(&self, range: &StripeRange) -> Vec<StripeRange> {
        let mut spans: Vec<(u64, u64)> = range
            .pieces
            .iter()
            .map(|p| (p.member_offset, p.member_offset + p.len))
            .collect();
        spans.sort_unstable();
        let mut cuts = Vec::new();
        let mut reach = spans.first().map_or(0, |s| s.1);
        for &(from, to) in spans.iter().skip(1) {
            if from > reach {
                cuts.extend([reach, from]);
            }
            reach = reach.max(to);
        }
        self.split_row_at(range, cuts)
    }

    /// `range` cut at the member offsets `cuts` that fall inside its row; parts without a
    /// piece are dropped.
    fn split_row_at(&self, range: &StripeRange, cuts: Vec<u64>) -> Vec<StripeRange> {
        let row = self.row_of(range);
        let end = row.start + row.len;
        let mut cuts: Vec<u64> = cuts
            .into_iter()
            .filter(|&w| w > row.start && w < end)
            .collect();
        if cuts.is_empty() {
            return vec![range.clone()];
        }
        cuts.sort_unstable();
        cuts.dedup();
        let bounds: Vec<u64> = std::iter::once(row.start)
            .chain(cuts)
            .chain(std::iter::once(end))
            .collect();
        bounds
            .windows(2)
            .map(|w| StripeRange {
                stripe: range.stripe,
                pieces: range
                    .pieces
                    .iter()
                    .filter_map(|p| {
                        let from = p.member_offset.max(w[0]);
                        let to = (p.member_offset + p.len).min(w[1]);
                        (from < to).then(|| ChunkPiece {
                            member_offset: from,
                            chunk_offset: p.chunk_offset + (from - p.member_offset),
                            buf_offset: p.buf_offset + (from - p.member_offset),
                            len: to - from,
                            ..*p
                        })
                    })
                    .collect(),
            })
            .filter(|part| !part.pieces.is_empty())
            .collect()
    }

    /// The row a stripe's pieces span.
    fn row_of(&self, range: &StripeRange) -> Row {
        let lo = range
            .pieces
            .iter()
            .map(|p| p.chunk_offset)
            .min()
            .unwrap_or(0);
        let hi = range
            .pieces
            .iter()
            .map(|p| p.chunk_offset + p.len)
            .max()
            .unwrap_or(lo);
        Row {
            stripe: range.stripe,
            start: range.stripe * self.geometry.chunk_bytes() + lo,
            len: hi - lo,
        }
    }

    fn plan_read(
        &self,
        b: &mut Builder,
        offset: u64,
        range: &StripeRange,
        views: &[MemberView],
    ) -> Result<(), LayoutError> {
        for piece in &range.pieces {
            if views[piece.member].holds(piece.member_offset, piece.len) {
                b.read(
                    piece.member,
                    piece.member_offset,
                    piece.len,
                    Buf::Caller(piece.buf_offset),
                );
                continue;
            }
            let row = Row {
                stripe: range.stripe,
                start: piece.member_offset,
                len: piece.len,
            };
            let Some(bufs) = self.reconstruct_row(b, row, views)? else {
                return Err(LayoutError::NoLiveCopy {
                    offset: offset + piece.buf_offset,
                    end: offset + piece.buf_offset + piece.len,
                });
            };
            b.plan.compute.push(Compute::Copy {
                from: bufs[piece.data_index],
                to: Buf::Caller(piece.buf_offset),
                len: piece.len,
            });
        }
        Ok(())
    }

    fn plan_write(
        &self,
        b: &mut Builder,
        offset: u64,
        range: &StripeRange,
        views: &[MemberView],
    ) -> Result<(), LayoutError> {
        let row = self.row_of(range);
        let lo = row.start - row.stripe * self.geometry.chunk_bytes();
        let n = self.geometry.members();
        let down: Vec<usize> = (0..n)
            .filter(|&m| !views[m].holds(row.start, row.len))
            .collect();
        let mut coverage = vec![Coverage::Untouched; self.k()];
        for piece in &range.pieces {
            coverage[piece.data_index] = if piece.len == row.len {
                Coverage::Full
            } else {
                Coverage::Partial
            };
        }
        let no_copy = || LayoutError::NoLiveCopy {
            offset: offset + range.pieces.first().map_or(0, |p| p.buf_offset),
            end: offset + range.pieces.last().map_or(0, |p| p.buf_offset + p.len),
        };
        let wp = plan_write(&self.geometry, row.stripe, &coverage, &down).map_err(|e| match e {
            ParityError::TooManyLost { .. } => no_copy(),
            other => Self::internal(other),
        })?;
        let parity: Vec<usize> = self.geometry.parity_members(row.stripe);
        let live_parity: Vec<(usize, usize)> = parity
            .iter()
            .enumerate()
            .filter(|(_, m)| wp.writes.contains(m))
            .map(|(j, &m)| (j, m))
            .collect();
        let data_writes = |b: &mut Builder| {
            for piece in &range.pieces {
                if wp.writes.contains(&piece.member) {
                    b.write(
                        piece.member,
                        piece.member_offset,
                        piece.len,
                        Buf::Caller(piece.buf_offset),
                    );
                }
            }
        };
        if live_parity.is_empty() {
            // No parity left to keep up to date (a degraded RAID5 that lost this stripe's P).
            data_writes(b);
            return Ok(());
        }
        match wp.strategy {
            WriteStrategy::ReadModifyWrite => {
                // Old parity of the row, old data of each piece; parity ^= old ^ new.
                let pbufs: Vec<(usize, usize, Buf)> = live_parity
                    .iter()
                    .map(|&(j, m)| {
                        let s = Buf::Scratch(b.scratch(row.len), 0);
                        b.read(m, row.start, row.len, s);
                        (j, m, s)
                    })
                    .collect();
                let at = |buf: Buf, off: u64| match buf {
                    Buf::Scratch(i, _) => Buf::Scratch(i, off),
                    other => other,
                };
                for piece in &range.pieces {
                    let old = Buf::Scratch(b.scratch(piece.len), 0);
                    b.read(piece.member, piece.member_offset, piece.len, old);
                    let within = piece.chunk_offset - lo;
                    let find = |j: usize| {
                        pbufs
                            .iter()
                            .find(|(pj, _, _)| *pj == j)
                            .map(|(_, _, s)| at(*s, within))
                    };
                    b.plan.compute.push(Compute::Delta {
                        index: piece.data_index,
                        old,
                        new: Buf::Caller(piece.buf_offset),
                        p: find(0),
                        q: find(1),
                        len: piece.len,
                    });
                }
                data_writes(b);
                for (_, m, s) in pbufs {
                    b.write(m, row.start, row.len, s);
                }
            }
            WriteStrategy::ReconstructWrite => {
                // The whole row of every chunk (read, reconstructed, or about to be
                // replaced), the new data laid over it, parity from all of it.
                let bufs: Vec<Buf> = if wp.reconstruct.is_empty() {
                    self.geometry
                        .syndrome_members(row.stripe)
                        .into_iter()
                        .enumerate()
                        .map(|(i, m)| {
                            let s = Buf::Scratch(b.scratch(row.len), 0);
                            if i < self.k() && coverage[i] != Coverage::Full {
                                b.read(m, row.start, row.len, s);
                            }
                            s
                        })
                        .collect()
                } else {
                    self.reconstruct_row(b, row, views)?.ok_or_else(no_copy)?
                };
                for piece in &range.pieces {
                    let Buf::Scratch(i, _) = bufs[piece.data_index] else {
                        continue;
                    };
                    b.plan.compute.push(Compute::Copy {
                        from: Buf::Caller(piece.buf_offset),
                        to: Buf::Scratch(i, piece.chunk_offset - lo),
                        len: piece.len,
                    });
                }
                let k = self.k();
                b.plan.compute.push(Compute::Syndrome {
                    data: bufs[..k].to_vec(),
                    p: bufs[k],
                    q: bufs.get(k + 1).copied(),
                    len: row.len,
                });
                data_writes(b);
                for (j, m) in live_parity {
                    b.write(m, row.start, row.len, bufs[k + j]);
                }
            }
        }
        Ok(())
    }

    /// The stripe rows of member bytes `offset..offset+len`.
    fn rows(&self, offset: u64, len: u64) -> Vec<Row> {
        let c = self.geometry.chunk_bytes();
        let mut rows = Vec::new();
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let stripe = at / c;
            let row_end = ((stripe + 1) * c).min(end);
            rows.push(Row {
                stripe,
                start: at,
                len: row_end - at,
            });
            at = row_end;
        }
        rows
    }

    /// Make one row of a group consistent (see `reconcile`).
    fn reconcile_row(
        &self,
        row: Row,
        within: u64,
        group: &[SyncCopy],
        out: &mut Reconcile,
    ) -> Result<(), String> {
        let k = self.k();
        let range = within as usize..(within + row.len) as usize;
        let mut chunks: Vec<Vec<u8>> = vec![vec![0u8; row.len as usize]; self.chunks()];
        let mut lost = Vec::new();
        let mut targets = Vec::new();
        let members = self.geometry.syndrome_members(row.stripe);
        for (i, &m) in members.iter().enumerate() {
            let copy = group.iter().find(|c| c.member == m);
            if copy.is_some() {
                targets.push(i);
            }
            let first_block = (within / SYNC_BLOCK) as usize;
            let last_block = (within + row.len).div_ceil(SYNC_BLOCK) as usize;
            let readable = copy.and_then(|c| {
                let ok = (first_block..last_block)
                    .all(|blk| c.readable.get(blk).copied().unwrap_or(false));
                c.bytes.as_ref().filter(|_| ok)
            });
            match readable {
                Some(bytes) => chunks[i].copy_from_slice(&bytes[range.clone()]),
                None => lost.push(i),
            }
        }
        let parity_count = self.level().parity_count();
        if lost.len() > parity_count {
            return Err(format!(
                "stripe {}: {} of its chunks cannot be read, parity covers {parity_count}",
                row.stripe,
                lost.len()
            ));
        }
        let before = chunks.clone();
        // Lost data first (from the parity that is left), then parity from the data.
        let lost_data: Vec<usize> = lost.iter().copied().filter(|&i| i < k).collect();
        if !lost_data.is_empty() {
            let mut refs: Vec<&mut [u8]> = chunks.iter_mut().map(Vec::as_mut_slice).collect();
            parity::reconstruct(self.level(), &mut refs, &lost).map_err(|e| e.to_string())?;
        }
        let (data, par) = chunks.split_at_mut(k);
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        match par {
            [p] => parity::compute_p(&refs, p),
            [p, q] => parity::compute_pq(&refs, p, q),
            _ => Ok(()),
        }
        .map_err(|e| e.to_string())?;
        for i in targets {
            if lost.contains(&i) || chunks[i] != before[i] {
                let m = members[i];
                match out.rewrites.iter_mut().find(|(rm, _)| *rm == m) {
                    Some((_, bytes)) => bytes[range.clone()].copy_from_slice(&chunks[i]),
                    None => {
                        // Rewrites cover the whole sync unit: start from what the member
                        // holds (or zeros where it is unknown) and lay this row over it.
                        let copy = group.iter().find(|c| c.member == m);
                        let mut bytes = copy
                            .and_then(|c| c.bytes.clone())
                            .unwrap_or_else(|| vec![0u8; group_len(group)]);
                        bytes[range.clone()].copy_from_slice(&chunks[i]);
                        out.rewrites.push((m, bytes));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Length of the sync unit the group was read for.
fn group_len(group: &[SyncCopy]) -> usize {
    group
        .iter()
        .find_map(|c| c.bytes.as_ref().map(Vec::len))
        .unwrap_or_else(|| group.first().map_or(0, |c| c.readable.len()) * SYNC_BLOCK as usize)
}

impl Personality for Raid56 {
    fn kind(&self) -> LayoutKind {
        Self::kind_of(self.level())
    }

    fn member_count(&self) -> usize {
        self.geometry.members()
    }

    fn member_data_bytes(&self) -> u64 {
        self.geometry.member_data_bytes()
    }

    fn stripe_unit(&self) -> u64 {
        self.geometry.chunk_bytes()
    }

    fn capacity(&self) -> u64 {
        self.geometry.capacity()
    }

    fn role(&self, _member: usize) -> Role {
        Role::DataAndParity
    }

    fn plan(
        &self,
        kind: IoKind,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.check_range(offset, len)?;
        let mut b = Builder::new();
        let ranges = self
            .geometry
            .split(offset, len)
            .map_err(|_| LayoutError::OutOfRange {
                offset,
                len,
                size: self.capacity(),
            })?;
        for range in ranges {
            match kind {
                IoKind::Read => self.plan_read(&mut b, offset, &range, views)?,
                IoKind::Write => {
                    for span in self.split_into_spans(&range) {
                        for part in self.split_at_watermarks(&span, views) {
                            self.plan_write(&mut b, offset, &part, views)?;
                        }
                    }
                }
            }
        }
        Ok(b.plan)
    }

    fn recover(
        &self,
        member: usize,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        let mut b = Builder::new();
        let mut views = views.to_vec();
        if let Some(v) = views.get_mut(member) {
            *v = MemberView::failed(v.ready_at);
        }
        for row in self.rows(offset, len) {
            let unrecoverable = |problem: String| LayoutError::Unrecoverable {
                member,
                offset: row.start,
                len: row.len,
                problem,
            };
            let Some(bufs) = self.reconstruct_row(&mut b, row, &views)? else {
                return Err(unrecoverable(
                    "more members of its stripe are missing than parity covers".into(),
                ));
            };
            let i = self
                .geometry
                .syndrome_index(row.stripe, member)
                .map_err(|e| unrecoverable(e.to_string()))?;
            b.plan.compute.push(Compute::Copy {
                from: bufs[i],
                to: Buf::Caller(row.start - offset),
                len: row.len,
            });
        }
        Ok(b.plan)
    }

    fn sync_groups(&self) -> Vec<Vec<usize>> {
        vec![(0..self.geometry.members()).collect()]
    }

    fn lock_spans(&self, offset: u64, len: u64) -> Vec<(usize, u64, u64)> {
        let c = self.geometry.chunk_bytes();
        let per_stripe = self.geometry.stripe_data_bytes();
        if len == 0 {
            return Vec::new();
        }
        let first = offset / per_stripe;
        let last = (offset + len - 1) / per_stripe;
        vec![(0, first * c, (last + 1) * c)]
    }

    /// Parity is recomputed from the data (MD's resync trusts the data); a chunk that cannot
    /// be read, or a member not in sync, is reconstructed from the rest of its stripe.
    fn reconcile(&self, offset: u64, group: &[SyncCopy], len: u64) -> Result<Reconcile, String> {
        let mut out = Reconcile::default();
        for row in self.rows(offset, len) {
            self.reconcile_row(row, row.start - offset, group, &mut out)?;
        }
        Ok(out)
    }

    fn survives(&self, valid: &[bool]) -> bool {
        let missing = (0..self.geometry.members())
            .filter(|&m| !valid.get(m).copied().unwrap_or(false))
            .count();
        missing <= self.level().parity_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::registry::Shape;

    const KIB: u64 = 1024;

    fn raid6_of_4() -> Raid56 {
        let shape = Shape {
            members: 4,
            member_bytes: 64 * 64 * KIB,
            chunk: 64 * KIB,
            options: Default::default(),
        };
        match Raid56::new(Level::Raid6, &shape) {
            Ok(r) => r,
            Err(e) => panic!("raid6/4: {e}"),
        }
    }

    #[test]
    fn a_write_across_a_chunk_boundary_rewrites_parity_only_where_it_writes() {
        // 28 KiB at 40 KiB on raid6/4 (64 KiB chunks): the last 24 KiB of chunk 0 and the first
        // 4 KiB of chunk 1. MD updates P and Q over those 28 KiB; so must we (not 64 KiB each).
        let r = raid6_of_4();
        let views = vec![MemberView::healthy(0.0); 4];
        let plan = match r.plan(IoKind::Write, 40 * KIB, 28 * KIB, &views) {
            Ok(p) => p,
            Err(e) => panic!("plan: {e}"),
        };
        let parity = r.geometry.parity_members(0);
        let parity_written: u64 = plan
            .writes
            .iter()
            .filter(|io| parity.contains(&io.member))
            .map(|io| io.len)
            .sum();
        assert_eq!(parity_written, 2 * 28 * KIB);
        let data_written: u64 = plan
            .writes
            .iter()
            .filter(|io| !parity.contains(&io.member))
            .map(|io| io.len)
            .sum();
        assert_eq!(data_written, 28 * KIB);
    }

    #[test]
    fn a_write_of_overlapping_chunk_spans_stays_one_row() {
        // 64 KiB at 32 KiB: chunk 0 from 32 KiB, chunk 1 up to 32 KiB; the spans meet at 32 KiB,
        // so one 64 KiB row covers them (no gap to skip).
        let r = raid6_of_4();
        let views = vec![MemberView::healthy(0.0); 4];
        let plan = match r.plan(IoKind::Write, 32 * KIB, 64 * KIB, &views) {
            Ok(p) => p,
            Err(e) => panic!("plan: {e}"),
        };
        let parity = r.geometry.parity_members(0);
        let parity_writes: Vec<u64> = plan
            .writes
            .iter()
            .filter(|io| parity.contains(&io.member))
            .map(|io| io.len)
            .collect();
        assert_eq!(parity_writes, vec![64 * KIB, 64 * KIB]);
    }
}
