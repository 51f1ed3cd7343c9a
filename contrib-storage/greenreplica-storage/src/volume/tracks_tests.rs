//! Track-aligned RAID0 and RAID5 on the engine over members of different track sizes (several tracks
//! per member, unlike the registry's default model on the small test members): every read
//! returns the last write, through a crash (the volume rebuilt over the same members from
//! their stored boundary lists, as assembly does), and no member I/O crosses a track.

use std::sync::Arc;

use super::tests::{dyn_stores, MEMBER};
use super::*;
use crate::clock::VirtualClock;
use crate::layout::raid5_tracks::Stripe;
use crate::layout::{Personality, Raid0Tracks, Raid10Tracks, Raid5Tracks};
use crate::ledger::Ledger;
use crate::member::memory::MemMember;
use crate::policy::PolicySpec;
use crate::profile::DriveProfile;
use crate::superblock::DATA_OFFSET;
use crate::synth::Rng;
use crate::tracks::map::TrackMap;
use crate::tracks::stored;

const SECTOR: u64 = 512;

/// Member `i`'s tracks in sectors: a size of its own (as units of one model differ), with
/// a few defect-shortened tracks.
fn member_tracks(i: u64, seed: u64) -> TrackMap {
    let mut rng = Rng(seed * 31 + i + 1);
    let size = 80 + 9 * i + rng.next() % 24;
    let limit = (MEMBER as u64 - DATA_OFFSET) / SECTOR;
    let mut b = Vec::new();
    let mut at = 0;
    loop {
        let shortened = rng.next().is_multiple_of(7);
        at += if shortened { size - 3 } else { size };
        if at > limit {
            break;
        }
        b.push(at);
    }
    // Whole tracks only: the member's end is the last boundary.
    let end = b.pop().unwrap();
    TrackMap::new(&b, end).unwrap()
}

/// RAID0, or RAID5 with its stripes placed one way or the other.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Raid0,
    Raid5(Stripe),
    Raid10,
}

fn volume_over(stores: &[Arc<MemMember>], shape: Shape) -> Volume {
    // The layout is built from what the members store, never from the test's own maps.
    let maps: Vec<TrackMap> = stores
        .iter()
        .map(|m| {
            let (map, sector) = stored::load(m.as_ref()).unwrap().unwrap();
            map.scaled(u64::from(sector)).unwrap()
        })
        .collect();
    let bytes = MEMBER as u64 - DATA_OFFSET;
    let layout: Box<dyn Personality> = match shape {
        Shape::Raid5(stripe) => Box::new(Raid5Tracks::with_stripe(maps, bytes, stripe).unwrap()),
        Shape::Raid0 => Box::new(Raid0Tracks::with_tracks(maps, bytes).unwrap()),
        Shape::Raid10 => Box::new(Raid10Tracks::with_tracks(maps, bytes).unwrap()),
    };
    let profile = Arc::new(DriveProfile::load("test-fast").unwrap());
    let slots = dyn_stores(stores)
        .into_iter()
        .map(|store| {
            let drive = Drive::new(
                profile.clone(),
                0,
                PolicySpec::AlwaysOn.build(48),
                0.0,
                Ledger::default(),
            );
            MemberSlot::new(Some(store), drive, Health::InSync)
        })
        .collect();
    Volume::new(
        "t",
        layout,
        slots,
        Arc::new(VirtualClock::new()),
        None,
        None,
    )
}

#[test]
fn track_aligned_raid0_returns_the_last_write_over_members_of_different_track_sizes() {
    returns_the_last_write(Shape::Raid0, &[2, 3, 5]);
}

/// The same for track-aligned RAID5 (stripes cut at every member's boundary), whose writes
/// must not cross a track either.
#[test]
fn track_aligned_raid5_returns_the_last_write_over_members_of_different_track_sizes() {
    returns_the_last_write(Shape::Raid5(Stripe::EqualOffset), &[3, 4, 5]);
}

/// The same for the paper's per-member rows (row k on track k of every member, units as
/// long as the row's shortest track): every row's units XOR to zero at the end.
#[test]
fn per_member_raid5_returns_the_last_write_over_members_of_different_track_sizes() {
    returns_the_last_write(Shape::Raid5(Stripe::PerMember), &[3, 4, 5]);
}

/// Track-aligned RAID10 (each mirror's rows on its own tracks): the same, and at the end
/// both mirrors of every pair hold the same rows at their own track offsets.
#[test]
fn track_aligned_raid10_returns_the_last_write_over_mirrors_of_different_track_sizes() {
    returns_the_last_write(Shape::Raid10, &[2, 4]);
}

fn check_mirrors(stores: &[Arc<MemMember>], tracks: &[TrackMap]) {
    let bytes = MEMBER as u64 - DATA_OFFSET;
    let l = Raid10Tracks::with_tracks(tracks.to_vec(), bytes).unwrap();
    let data: Vec<Vec<u8>> = stores
        .iter()
        .map(|m| lock(&m.bytes)[DATA_OFFSET as usize..].to_vec())
        .collect();
    for p in 0..stores.len() / 2 {
        for (k, &len) in l.row_lens(p).iter().enumerate() {
            let row = |m: usize| {
                let at = l.member_rows(m)[k] as usize;
                &data[m][at..at + len as usize]
            };
            assert!(
                row(2 * p) == row(2 * p + 1),
                "pair {p} row {k}: mirrors equal"
            );
        }
    }
}

/// Every row of a per-member RAID5 over these members XORs to zero (parity right), read
/// from the members' own bytes at each member's track starts.
fn check_rows(stores: &[Arc<MemMember>], tracks: &[TrackMap]) {
    let bytes = MEMBER as u64 - DATA_OFFSET;
    let l = Raid5Tracks::with_stripe(tracks.to_vec(), bytes, Stripe::PerMember).unwrap();
    let data: Vec<Vec<u8>> = stores
        .iter()
        .map(|m| lock(&m.bytes)[DATA_OFFSET as usize..].to_vec())
        .collect();
    for (s, &len) in l.unit_lens().iter().enumerate() {
        let mut x = vec![0u8; len as usize];
        for (m, d) in data.iter().enumerate() {
            let at = l.member_stripe_starts(m)[s] as usize;
            for (a, b) in x.iter_mut().zip(&d[at..at + len as usize]) {
                *a ^= b;
            }
        }
        assert!(x.iter().all(|&b| b == 0), "row {s}: parity");
    }
}

fn stores_with_tracks(members: u64, seed: u64) -> (Vec<Arc<MemMember>>, Vec<TrackMap>) {
    let stores: Vec<Arc<MemMember>> = (0..members).map(|_| MemMember::new(MEMBER)).collect();
    for (i, m) in stores.iter().enumerate() {
        stored::store(m.as_ref(), &member_tracks(i as u64, seed), 512).unwrap();
    }
    let tracks = (0..members)
        .map(|i| member_tracks(i, seed).scaled(SECTOR).unwrap())
        .collect();
    (stores, tracks)
}

/// A per-member RAID5 loses a member: every byte is served from the others' own track
/// offsets, a blank replacement is rebuilt, and with another member lost afterwards every
/// byte still reads back; the scrub (units side by side) finds nothing to repair.
#[test]
fn per_member_raid5_rebuilds_a_failed_member() {
    rebuilds_a_failed_member(Shape::Raid5(Stripe::PerMember), &[3, 5]);
}

/// The same for track-aligned RAID10: the replacement's rows are copied from its mirror's
/// own track offsets.
#[test]
fn track_aligned_raid10_rebuilds_a_failed_mirror() {
    rebuilds_a_failed_member(Shape::Raid10, &[2, 4]);
}

fn rebuilds_a_failed_member(shape: Shape, counts: &[u64]) {
    for &members in counts {
        let seed = 11 + members;
        let (stores, tracks) = stores_with_tracks(members, seed);
        let v = volume_over(&stores, shape);
        let cap = v.capacity();
        let mut rng = Rng(seed);
        let data: Vec<u8> = (0..cap).map(|_| rng.next() as u8).collect();
        v.write(0, &data).unwrap();
        let lost = (members / 2) as usize;
        v.fail_member(lost, "test: lost");
        // Rewrite part of it degraded: parity carries the lost member's share.
        let patch: Vec<u8> = (0..cap / 3).map(|i| (i % 251) as u8).collect();
        v.write(cap / 5, &patch).unwrap();
        let mut model = data.clone();
        model[(cap / 5) as usize..(cap / 5 + cap / 3) as usize].copy_from_slice(&patch);
        let mut back = vec![0u8; cap as usize];
        v.read(0, &mut back).unwrap();
        assert!(back == model, "{members} members: every byte degraded");
        let fresh = MemMember::new(MEMBER);
        v.replace_member(lost, fresh.clone()).unwrap();
        while v.rebuild_step(lost, 1 << 18).unwrap().is_some() {}
        let mut all = stores.clone();
        all[lost] = fresh;
        match shape {
            Shape::Raid10 => check_mirrors(&all, &tracks),
            _ => check_rows(&all, &tracks),
        }
        v.fail_member(
            (lost + 1) % members as usize,
            "test: lost after the rebuild",
        );
        v.read(0, &mut back).unwrap();
        assert!(
            back == model,
            "{members} members: every byte through the rebuilt one"
        );
    }
}

fn returns_the_last_write(shape: Shape, counts: &[u64]) {
    for &members in counts {
        for seed in 1..=4u64 {
            let (stores, tracks) = stores_with_tracks(members, seed);
            let mut v = volume_over(&stores, shape);
            let cap = v.capacity();
            let mut model = vec![0u8; cap as usize];
            let mut rng = Rng(seed * 7919 + members);
            for step in 0..400 {
                let sectors = cap / SECTOR;
                let len = 1 + rng.next()
                    % if rng.next().is_multiple_of(4) {
                        200
                    } else {
                        40
                    };
                let len = len.min(sectors);
                let at = rng.next() % (sectors - len + 1);
                let (offset, len) = (at * SECTOR, len * SECTOR);
                let range = offset as usize..(offset + len) as usize;
                if rng.next().is_multiple_of(2) {
                    let fill = rng.next() as u8;
                    let data: Vec<u8> = (0..len).map(|i| (i as u8) ^ fill).collect();
                    v.write(offset, &data).unwrap();
                    model[range].copy_from_slice(&data);
                } else {
                    let mut buf = vec![0u8; len as usize];
                    v.read(offset, &mut buf).unwrap();
                    assert!(buf == model[range], "step {step}: read {offset}+{len}");
                }
                // A crash: the volume is gone, the members stay; assembly rebuilds it.
                if rng.next().is_multiple_of(97) {
                    drop(v);
                    v = volume_over(&stores, shape);
                    assert_eq!(v.capacity(), cap);
                }
                let read = v.layout().plan(IoKind::Read, offset, len, &views(&v));
                let write = v.layout().plan(IoKind::Write, offset, len, &views(&v));
                let (read, write) = (read.unwrap(), write.unwrap());
                for (_, io) in read.ios().chain(write.ios()) {
                    let m = &tracks[io.member];
                    let (_, start, end) = m.track(io.member_offset);
                    assert!(io.member_offset >= start && io.member_offset + io.len <= end);
                }
            }
            let mut all = vec![0u8; cap as usize];
            v.read(0, &mut all).unwrap();
            assert!(all == model, "{members} members, seed {seed}: whole volume");
            assert_eq!(v.scrub(false).unwrap().mismatched_chunks, 0);
            match shape {
                Shape::Raid5(Stripe::PerMember) => check_rows(&stores, &tracks),
                Shape::Raid10 => check_mirrors(&stores, &tracks),
                _ => {}
            }
        }
    }
}

fn views(v: &Volume) -> Vec<MemberView> {
    (0..v.layout().member_count())
        .map(|_| MemberView::healthy(0.0))
        .collect()
}
