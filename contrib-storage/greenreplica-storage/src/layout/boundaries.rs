//! Alignment boundaries of a volume: the volume offsets where a request's member I/O is
//! cut — a chunk (stripe unit) ends, or, for the track-aligned layouts, a member track
//! ends. Software above the volume (the PostgreSQL extension's sorted prefetch and
//! write-back runs) uses them to avoid runs that cross a boundary by a few sectors.
//!
//! They are read off the layout's own read plan, so every striping layout answers with
//! exactly the cuts its plans make, without a second copy of its geometry.

use super::{LayoutError, MemberView, Personality};
use crate::service_model::IoKind;

/// Bytes planned at a time while collecting boundaries (bounds the plan's memory).
const SLICE_BYTES: u64 = 64 << 20;

/// The boundaries found in a range, ascending; `complete_to` is where the list stops being
/// complete (the range's end unless `cap` was reached first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boundaries {
    pub offsets: Vec<u64>,
    pub complete_to: u64,
}

/// The volume offsets strictly inside `offset..offset+len` where a read plan of the range
/// (every member healthy and ready) starts a new member I/O, at most `cap` of them.
pub fn read_plan_cuts<P: Personality + ?Sized>(
    layout: &P,
    offset: u64,
    len: u64,
    cap: usize,
) -> Result<Boundaries, LayoutError> {
    layout.check_range(offset, len)?;
    let views = vec![MemberView::healthy(0.0); layout.member_count()];
    let end = offset + len;
    let mut offsets: Vec<u64> = Vec::new();
    let mut at = offset;
    while at < end {
        let n = (end - at).min(SLICE_BYTES);
        let plan = layout.plan(IoKind::Read, at, n, &views)?;
        let mut cuts: Vec<u64> = plan
            .reads
            .iter()
            .filter_map(|io| match io.buf {
                super::Buf::Caller(b) => Some(at + b),
                super::Buf::Scratch(..) => None,
            })
            .filter(|&v| v > offset)
            .collect();
        // A slice's start is a cut only if the layout cuts there too: planning from one
        // byte before tells (the slice edges are ours, not the layout's).
        cuts.retain(|&v| v != at || layout_cuts_at(layout, at, &views));
        cuts.sort_unstable();
        cuts.dedup();
        for v in cuts {
            if offsets.len() == cap {
                return Ok(Boundaries {
                    offsets,
                    complete_to: v,
                });
            }
            offsets.push(v);
        }
        at += n;
    }
    Ok(Boundaries {
        offsets,
        complete_to: end,
    })
}

/// Whether a two-byte read across `at` is cut at `at`.
fn layout_cuts_at<P: Personality + ?Sized>(layout: &P, at: u64, views: &[MemberView]) -> bool {
    match layout.plan(IoKind::Read, at - 1, 2, views) {
        Ok(plan) => plan.reads.iter().any(|io| io.buf == super::Buf::Caller(1)),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{build, LayoutKind};

    const MIB: u64 = 1 << 20;

    #[test]
    fn raid5_cuts_at_every_chunk_end_inside_the_range() {
        let layout = build(LayoutKind::RAID5, 3, 64 * MIB, 65536).unwrap();
        let b = read_plan_cuts(layout.as_ref(), 10_000, 300_000, 100).unwrap();
        assert_eq!(b.offsets, vec![65536, 131072, 196608, 262144]);
        assert_eq!(b.complete_to, 310_000);
    }

    #[test]
    fn the_cap_stops_the_list_and_says_where() {
        let layout = build(LayoutKind::RAID5, 3, 64 * MIB, 65536).unwrap();
        let b = read_plan_cuts(layout.as_ref(), 0, 10 * MIB, 4).unwrap();
        assert_eq!(b.offsets, vec![65536, 131072, 196608, 262144]);
        assert_eq!(
            b.complete_to, 327680,
            "complete up to the first one left out"
        );
    }

    #[test]
    fn slices_of_a_long_range_add_no_boundary_of_their_own() {
        // raid5 over 3 members of 64 KiB chunks: the 64 MiB slice edge is a chunk end,
        // so it stays; the count over 200 MiB is exactly one per chunk.
        let layout = build(LayoutKind::RAID5, 3, 128 * MIB, 65536).unwrap();
        let b = read_plan_cuts(layout.as_ref(), 0, 200 * MIB, usize::MAX).unwrap();
        assert_eq!(b.offsets.len() as u64, 200 * MIB / 65536 - 1);
        // A layout whose stripes do not divide the slice (raid5-tracks: stripes end at
        // member track ends): across the 64 MiB slice edge every cut is still the layout's,
        // and between two cuts the bytes are one member I/O.
        let layout = build(LayoutKind::RAID5_TRACKS, 3, 128 * MIB, 65536).unwrap();
        let b = read_plan_cuts(layout.as_ref(), 60 * MIB, 70 * MIB, usize::MAX).unwrap();
        assert_one_io_between(layout.as_ref(), 60 * MIB, &b.offsets);
    }

    /// Between consecutive cuts (from `start`) a read is one member I/O, and each cut is one.
    fn assert_one_io_between(layout: &dyn Personality, start: u64, cuts: &[u64]) {
        let views = vec![MemberView::healthy(0.0); layout.member_count()];
        let caller_reads = |o: u64, n: u64| {
            let plan = layout.plan(IoKind::Read, o, n, &views).unwrap();
            plan.reads
                .iter()
                .filter(|io| matches!(io.buf, super::super::Buf::Caller(_)))
                .count()
        };
        let mut prev = start;
        for &v in cuts {
            assert_eq!(
                caller_reads(prev, v - prev),
                1,
                "{prev}..{v} is one member I/O"
            );
            assert_eq!(caller_reads(v - 1, 2), 2, "{v} cuts");
            prev = v;
        }
    }

    #[test]
    fn a_single_member_has_none_and_a_range_outside_is_refused() {
        let layout = build(LayoutKind::SINGLE, 1, 64 * MIB, 65536).unwrap();
        assert!(read_plan_cuts(layout.as_ref(), 0, 4 * MIB, 100)
            .unwrap()
            .offsets
            .is_empty());
        assert!(read_plan_cuts(layout.as_ref(), 64 * MIB, 1, 100).is_err());
        assert!(read_plan_cuts(layout.as_ref(), u64::MAX, 2, 100).is_err());
    }

    #[test]
    fn raid0_tracks_cuts_where_member_tracks_end() {
        let layout = build(LayoutKind::RAID0_TRACKS, 2, 64 * MIB, 65536).unwrap();
        let b = read_plan_cuts(layout.as_ref(), 0, 8 * MIB, 1000).unwrap();
        assert!(!b.offsets.is_empty());
        assert_one_io_between(layout.as_ref(), 0, &b.offsets);
    }
}
