//! IDO on the engine (issue 17): a rebuild of a `raid5-ido` volume copies the hinted zone,
//! then the hot ones, before the cold ones; plain `raid5` keeps MD's address order.

use std::sync::Arc;

use super::tests::{memory_volume, MEMBER};
use super::Volume;
use crate::clock::VirtualClock;
use crate::layout::LayoutKind;
use crate::member::memory::MemMember;
use crate::superblock::DATA_OFFSET;
use crate::sync::lock;

const CHUNK: u64 = 16384;
/// Volume bytes of a zone: the small volume (2 MiB) gets 64 zones of one stripe.
const ZONE: u64 = 2 * CHUNK;
/// Member bytes of a zone.
const ZONE_M: u64 = CHUNK;

fn pattern(len: u64) -> Vec<u8> {
    (0..len).map(|i| (i * 31 / 7 + i / 4096) as u8).collect()
}

/// A 3-member volume of `layout` filled with a pattern; member 1 failed and replaced after
/// zone 40 was read five times, zone 20 twice, and zone 50 hinted. Returns the volume, the
/// replacement and the bytes member 1 held.
fn degraded(layout: &str) -> (Volume, Arc<MemMember>, Vec<u8>, Vec<u8>) {
    let kind: LayoutKind = layout.parse().unwrap();
    let (v, stores) = memory_volume(kind, 3, Arc::new(VirtualClock::new()), CHUNK);
    let data = pattern(v.capacity());
    v.write(0, &data).unwrap();
    let mut buf = vec![0u8; 4096];
    for (zone, reads) in [(40u64, 5), (20, 2)] {
        for _ in 0..reads {
            v.read(zone * ZONE, &mut buf).unwrap();
        }
    }
    v.hint(&[(50 * ZONE + 100, 10)]).unwrap();
    let before = lock(&stores[1].bytes)[DATA_OFFSET as usize..].to_vec();
    v.fail_member(1, "test: pulled");
    let fresh = MemMember::new(MEMBER);
    v.replace_member(1, fresh.clone()).unwrap();
    (v, fresh, before, data)
}

/// The zones whose member bytes the replacement holds right.
fn rebuilt_zones(fresh: &MemMember, before: &[u8]) -> Vec<u64> {
    let bytes = lock(&fresh.bytes);
    (0..64u64)
        .filter(|z| {
            let at = (DATA_OFFSET + z * ZONE_M) as usize;
            let want = &before[(z * ZONE_M) as usize..((z + 1) * ZONE_M) as usize];
            bytes[at..at + ZONE_M as usize] == *want && want.iter().any(|&b| b != 0)
        })
        .collect()
}

#[test]
fn a_hot_first_rebuild_copies_the_hinted_then_the_hot_zones_before_the_cold_ones() {
    let (v, fresh, before, data) = degraded("raid5-ido");
    let mut order = Vec::new();
    for _ in 0..4 {
        v.rebuild_step(1, ZONE_M).unwrap();
        for z in rebuilt_zones(&fresh, &before) {
            if !order.contains(&z) {
                order.push(z);
            }
        }
    }
    assert_eq!(
        order,
        vec![50, 40, 20, 0],
        "hinted zone first, then hottest, then the cold ones in address order"
    );
    // Every byte reads right meanwhile: the zones copied out of order are served (and
    // written) on the replacement, the rest reconstructed from the other members.
    let mut back = vec![0u8; data.len()];
    v.read(0, &mut back).unwrap();
    assert!(back == data, "reads during the hot-first rebuild");
    let update = vec![0xa5u8; (3 * ZONE) as usize];
    v.write(39 * ZONE, &update).unwrap();
    while v.rebuild_step(1, ZONE_M).unwrap().is_some() {}
    assert!(v.in_sync().iter().all(|&s| s), "the rebuild ends in sync");
    let mut want = data;
    want[(39 * ZONE) as usize..(42 * ZONE) as usize].copy_from_slice(&update);
    v.read(0, &mut back).unwrap();
    assert!(
        back == want,
        "reads after the rebuild, with the write made during it"
    );
    let report = v.scrub(false).unwrap();
    assert_eq!(
        report.mismatched_chunks, 0,
        "parity right after the rebuild"
    );
}

#[test]
fn plain_raid5_keeps_rebuilding_in_address_order() {
    let (v, fresh, before, _) = degraded("raid5");
    v.rebuild_step(1, ZONE_M).unwrap();
    v.rebuild_step(1, ZONE_M).unwrap();
    assert_eq!(rebuilt_zones(&fresh, &before), vec![0, 1]);
}

/// The rebuild as background events of the engine (the daemon's and replay's path), with
/// reads of the hot zone every millisecond: when (virtual seconds, seen at the reads'
/// completions) zones 50 (hinted), 40 (hot) and 63 (cold, last) are first found on the
/// replacement, and the reads' mean response time.
fn on_the_core(layout: &str) -> ([f64; 3], f64) {
    use super::{Request, Runner, VolumeError};
    use crate::service_model::IoKind;
    let (v, fresh, before, data) = degraded(layout);
    let reads = (0..300).map(|i| {
        Ok::<_, VolumeError>((
            i as f64 * 0.001,
            Request {
                kind: IoKind::Read,
                offset: 40 * ZONE + (i % 8) * 4096,
                len: 4096,
                data: None,
            },
        ))
    });
    let mut first = [f64::INFINITY; 3];
    let mut response = Vec::new();
    Runner::new(&v)
        .with_background(20.0, ZONE_M, 0.0)
        .run(reads, |f| {
            response.push(f.done - f.arrival);
            let valid = rebuilt_zones(&fresh, &before);
            for (i, z) in [50, 40, 63].into_iter().enumerate() {
                if valid.contains(&z) {
                    first[i] = first[i].min(f.done);
                }
            }
        })
        .unwrap();
    assert!(
        v.in_sync().iter().all(|&s| s),
        "{layout}: rebuilt on the core"
    );
    let mut back = vec![0u8; data.len()];
    v.read(0, &mut back).unwrap();
    assert!(back == data, "{layout}: every byte after the rebuild");
    let mean = response.iter().sum::<f64>() / response.len() as f64;
    eprintln!(
        "{layout}: zones 50 (hinted), 40 (hot), 63 (cold) first seen rebuilt at {first:?} s; \
         mean read response {:.3} ms",
        mean * 1e3
    );
    (first, mean)
}

#[test]
fn on_the_engine_core_the_hinted_and_hot_zones_are_rebuilt_before_the_cold_ones() {
    let ([hinted, hot, cold], _) = on_the_core("raid5-ido");
    assert!(
        hinted <= hot && hot < cold,
        "hot-first: hinted {hinted} s, hot {hot} s, cold {cold} s"
    );
    let ([hinted, hot, cold], _) = on_the_core("raid5");
    assert!(
        hot < hinted && hinted < cold,
        "MD's order: zone 40 before 50 before 63 ({hot}, {hinted}, {cold} s)"
    );
}

/// A `raid5-ido-s` volume (three array members, the surrogate pair 3 and 4) in `mode`,
/// filled with a pattern whose every sector differs; member 1 failed and replaced.
fn surrogate_volume(mode: &str) -> (Volume, Vec<Arc<MemMember>>, Vec<u8>) {
    let kind: LayoutKind = "raid5-ido-s".parse().unwrap();
    let (v, stores) = memory_volume(kind, 5, Arc::new(VirtualClock::new()), CHUNK);
    v.layout().set_option("rebuild", mode).unwrap();
    let data: Vec<u8> = (0..v.capacity())
        .map(|i| ((i / 4096) as u8).wrapping_mul(31) ^ (i as u8).wrapping_mul(13) | 1)
        .collect();
    v.write(0, &data).unwrap();
    (v, stores, data)
}

fn surrogate_bytes(stores: &[Arc<MemMember>], member: usize, at: u64, len: u64) -> Vec<u8> {
    let at = (DATA_OFFSET + at) as usize;
    lock(&stores[member].bytes)[at..at + len as usize].to_vec()
}

fn read_all(v: &Volume) -> Vec<u8> {
    let mut back = vec![0u8; v.capacity() as usize];
    v.read(0, &mut back).unwrap();
    back
}

#[test]
fn ido_redirects_writes_and_migrates_the_hot_zone_then_reclaims_everything_home() {
    let (v, stores, mut data) = surrogate_volume("ido");
    let mut buf = vec![0u8; 4096];
    for _ in 0..5 {
        v.read(40 * ZONE, &mut buf).unwrap();
    }
    v.fail_member(1, "test: pulled");
    v.replace_member(1, MemMember::new(MEMBER)).unwrap();
    // A write during the reconstruction goes to the surrogate log (both copies), not home.
    let home_before = surrogate_bytes(&stores, 0, 0, 2 * ZONE_M);
    let update = vec![0x5au8; 8192];
    v.write(1000 * 4, &update).unwrap();
    data[4000..4000 + 8192].copy_from_slice(&update);
    assert_eq!(
        surrogate_bytes(&stores, 3, 0, 8192),
        update,
        "appended at the log head"
    );
    assert_eq!(
        surrogate_bytes(&stores, 4, 0, 8192),
        update,
        "on both surrogates"
    );
    assert_eq!(
        surrogate_bytes(&stores, 0, 0, 2 * ZONE_M),
        home_before,
        "home untouched"
    );
    // The hot zone is rebuilt first and, as it is, migrated after the write: its rebuild
    // hands the stripes it read to the surrogate (no migration left for the background).
    v.rebuild_step(1, ZONE_M).unwrap();
    assert_eq!(
        v.layout_background_step().unwrap(),
        0,
        "migrated by the rebuild"
    );
    let zone = &data[(40 * ZONE) as usize..(41 * ZONE) as usize];
    assert_eq!(
        surrogate_bytes(&stores, 3, 8192, ZONE),
        zone,
        "zone 40 migrated"
    );
    assert!(
        read_all(&v) == data,
        "reads take the D Map, the migrated zone, the array"
    );
    // After the reconstruction the reclaim copies the write home and empties the D Map.
    while v.rebuild_step(1, ZONE_M).unwrap().is_some() {}
    assert!(v.layout().next_wakeup(0.0).is_some(), "reclaim pending");
    v.drain_layout_background().unwrap();
    assert_eq!(
        v.layout().next_wakeup(0.0),
        None,
        "D Map empty, migrations forgotten"
    );
    assert!(read_all(&v) == data, "every byte after the reclaim");
    assert_eq!(v.scrub(false).unwrap().mismatched_chunks, 0, "parity right");
}

#[test]
fn workout_copies_a_popular_read_request_to_the_surrogate_and_pr_leaves_it_idle() {
    let (v, stores, data) = surrogate_volume("workout");
    v.fail_member(1, "test: pulled");
    v.replace_member(1, MemMember::new(MEMBER)).unwrap();
    let (at, len) = (50 * ZONE + 4096, 12288u64);
    let mut buf = vec![0u8; len as usize];
    v.read(at, &mut buf).unwrap();
    assert!(
        v.layout_background_step().unwrap() == 0,
        "read once: not popular yet"
    );
    v.read(at, &mut buf).unwrap();
    assert_eq!(v.layout_background_step().unwrap(), len, "popular: copied");
    assert_eq!(
        surrogate_bytes(&stores, 3, 0, len),
        data[at as usize..(at + len) as usize],
        "the request's bytes on the surrogate"
    );
    assert!(
        read_all(&v) == data,
        "every byte, the copied ones from the surrogate"
    );
    while v.rebuild_step(1, ZONE_M).unwrap().is_some() {}
    v.drain_layout_background().unwrap();
    assert_eq!(v.layout().next_wakeup(0.0), None);
    assert!(read_all(&v) == data);

    let (v, stores, _) = surrogate_volume("pr");
    v.fail_member(1, "test: pulled");
    v.replace_member(1, MemMember::new(MEMBER)).unwrap();
    v.write(0, &[7u8; 4096]).unwrap();
    v.read(at, &mut buf).unwrap();
    v.read(at, &mut buf).unwrap();
    assert_eq!(v.layout_background_step().unwrap(), 0);
    assert!(
        surrogate_bytes(&stores, 3, 0, 1 << 20)
            .iter()
            .all(|&b| b == 0),
        "PR writes nothing to the surrogate"
    );
}

/// When (virtual seconds) the replacement of member 1 is in sync, rebuilt on the engine core
/// at 5-20 MB/s while a write arrives every millisecond for 0.4 s.
fn rebuild_under_writes(mode: &str) -> f64 {
    use super::{Request, Runner, VolumeError};
    use crate::service_model::IoKind;
    let (v, _stores, _) = surrogate_volume(mode);
    v.fail_member(1, "test: pulled");
    v.replace_member(1, MemMember::new(MEMBER)).unwrap();
    let writes = (0..400u64).map(|i| {
        Ok::<_, VolumeError>((
            i as f64 * 0.001,
            Request {
                kind: IoKind::Write,
                offset: (i * 7 % 64) * 4096,
                len: 4096,
                data: Some(vec![i as u8; 4096]),
            },
        ))
    });
    let mut in_sync_at = f64::INFINITY;
    Runner::new(&v)
        .with_background(20.0, ZONE_M, 0.0)
        .run(writes, |f| {
            if v.in_sync().iter().all(|&s| s) {
                in_sync_at = in_sync_at.min(f.done);
            }
        })
        .unwrap();
    in_sync_at
}

#[test]
fn writes_redirected_to_the_surrogate_do_not_hold_the_rebuild_at_its_minimum() {
    // The member's 1 MiB: about 0.05 s at 20 MB/s, 0.2 s at the 5 MB/s minimum.
    let ido = rebuild_under_writes("ido");
    let pr = rebuild_under_writes("pr");
    assert!(
        ido < 0.12 && pr > 0.15,
        "IDO's writes go to the surrogate: rebuilt at {ido} s; PR's reach the array: {pr} s"
    );
}

#[test]
fn vdf_keeps_a_read_of_the_failed_member_at_once_and_not_one_of_the_survivors() {
    let (v, stores, data) = surrogate_volume("vdf");
    v.fail_member(1, "test: pulled");
    v.replace_member(1, MemMember::new(MEMBER)).unwrap();
    // Both data chunks of three stripes, read once each: parity rotates over the three
    // members, so two of the six reads need member 1's bytes (reconstructed).
    let len = 8192u64;
    let mut buf = vec![0u8; len as usize];
    let mut kept = Vec::new();
    for stripe in 50..53u64 {
        for chunk in 0..2u64 {
            let at = stripe * ZONE + chunk * CHUNK + 4096;
            v.read(at, &mut buf).unwrap();
            match v.layout_background_step().unwrap() {
                0 => {}
                n => {
                    assert_eq!(n, len, "the request's bytes copied");
                    kept.push(at);
                }
            }
        }
    }
    assert_eq!(
        kept.len(),
        2,
        "the reads of the failed member only: {kept:?}"
    );
    assert_eq!(
        surrogate_bytes(&stores, 3, 0, len),
        data[kept[0] as usize..(kept[0] + len) as usize],
        "the first kept request's bytes on the surrogate"
    );
    v.read(kept[0], &mut buf).unwrap();
    assert_eq!(v.layout_background_step().unwrap(), 0, "kept once");
    assert!(
        read_all(&v) == data,
        "every byte, the kept ones from the surrogate"
    );
    while v.rebuild_step(1, ZONE_M).unwrap().is_some() {}
    v.drain_layout_background().unwrap();
    assert_eq!(v.layout().next_wakeup(0.0), None, "reclaimed, D Map empty");
    assert!(read_all(&v) == data);
    assert_eq!(v.scrub(false).unwrap().mismatched_chunks, 0);
}

/// The first zones a rebuild of member 1 copies after zone 40 was read five times, `idle`
/// seconds of volume ticks passed (epochs of 1 s), and zone 20 was read once.
fn first_zones_after_idle(idle: f64) -> Vec<u64> {
    let clock = Arc::new(VirtualClock::new());
    let (v, stores) = memory_volume("raid5-ido".parse().unwrap(), 3, clock.clone(), CHUNK);
    v.layout().set_option("epoch_s", "1").unwrap();
    let data = pattern(v.capacity());
    v.write(0, &data).unwrap();
    let mut buf = vec![0u8; 4096];
    v.tick();
    for _ in 0..5 {
        v.read(40 * ZONE, &mut buf).unwrap();
    }
    clock.advance_to(idle);
    v.tick();
    v.read(20 * ZONE, &mut buf).unwrap();
    let before = lock(&stores[1].bytes)[DATA_OFFSET as usize..].to_vec();
    v.fail_member(1, "test: pulled");
    let fresh = MemMember::new(MEMBER);
    v.replace_member(1, fresh.clone()).unwrap();
    let mut order = Vec::new();
    for _ in 0..2 {
        v.rebuild_step(1, ZONE_M).unwrap();
        for z in rebuilt_zones(&fresh, &before) {
            if !order.contains(&z) {
                order.push(z);
            }
        }
    }
    order
}

#[test]
fn with_epoch_s_the_volume_tick_ages_popularity_so_an_old_hot_zone_cools() {
    assert_eq!(
        first_zones_after_idle(0.5),
        vec![40, 20],
        "within one epoch"
    );
    assert_eq!(
        first_zones_after_idle(3.5),
        vec![20, 0],
        "three epochs halve 5 reads to 0: zone 40 is cold now"
    );
}

#[test]
fn a_hot_zone_is_migrated_from_its_rebuild_reads_without_reading_it_again() {
    let (v, stores, data) = surrogate_volume("ido");
    let mut buf = vec![0u8; 4096];
    for _ in 0..5 {
        v.read(40 * ZONE, &mut buf).unwrap();
    }
    v.fail_member(1, "test: pulled");
    v.replace_member(1, MemMember::new(MEMBER)).unwrap();
    // A user read sees the array degraded (as the first request after a failure does).
    v.read(0, &mut buf).unwrap();
    let read_bytes = |m: usize| v.member_ledgers(f64::MAX)[m].bytes_read;
    let before = [read_bytes(0), read_bytes(2)];
    // Zone 40 (hottest) in four rebuild steps of a quarter zone, then whatever migration
    // the background still wants.
    for _ in 0..4 {
        v.rebuild_step(1, ZONE_M / 4).unwrap();
    }
    while v.layout_background_step().unwrap() > 0 {}
    assert_eq!(
        [read_bytes(0) - before[0], read_bytes(2) - before[1]],
        [ZONE_M, ZONE_M],
        "each survivor read its zone bytes once, for the rebuild"
    );
    let zone = &data[(40 * ZONE) as usize..(41 * ZONE) as usize];
    for m in [3, 4] {
        assert_eq!(
            surrogate_bytes(&stores, m, 0, ZONE),
            zone,
            "zone 40 on surrogate {m}, in volume order"
        );
    }
    // While degraded, the zone's reads take the surrogate copy: right even where the
    // array's copy is not (the array is left alone here to tell the two apart).
    lock(&stores[0].bytes)[(DATA_OFFSET + 40 * ZONE_M) as usize] ^= 0xff;
    let mut back = vec![0u8; ZONE as usize];
    v.read(40 * ZONE, &mut back).unwrap();
    assert!(back == zone, "zone 40 read from its migrated copy");
    lock(&stores[0].bytes)[(DATA_OFFSET + 40 * ZONE_M) as usize] ^= 0xff;
    assert!(read_all(&v) == data);
    while v.rebuild_step(1, ZONE_M).unwrap().is_some() {}
    v.drain_layout_background().unwrap();
    assert_eq!(v.layout().next_wakeup(0.0), None, "migrations forgotten");
    assert!(read_all(&v) == data);
    assert_eq!(v.scrub(false).unwrap().mismatched_chunks, 0);
}

#[test]
fn a_write_home_during_a_hand_over_gives_it_up_rather_than_keep_a_stale_copy() {
    let (v, stores, mut data) = surrogate_volume("ido");
    let mut buf = vec![0u8; 4096];
    for _ in 0..5 {
        v.read(40 * ZONE, &mut buf).unwrap();
    }
    v.fail_member(1, "test: pulled");
    v.replace_member(1, MemMember::new(MEMBER)).unwrap();
    v.rebuild_step(1, ZONE_M / 2).unwrap();
    // A surrogate copy that cannot take writes sends the next write home.
    v.fail_member(4, "test: surrogate pulled");
    let update = vec![0x77u8; 4096];
    v.write(40 * ZONE, &update).unwrap();
    data[(40 * ZONE) as usize..(40 * ZONE + 4096) as usize].copy_from_slice(&update);
    v.rebuild_step(1, ZONE_M / 2).unwrap();
    assert!(
        surrogate_bytes(&stores, 3, 0, 4096) != update,
        "the surrogate holds no copy of the new bytes"
    );
    let mut back = vec![0u8; 4096];
    v.read(40 * ZONE, &mut back).unwrap();
    assert_eq!(back, update, "the zone is read from home, not a stale copy");
    assert!(read_all(&v) == data);
}
