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
