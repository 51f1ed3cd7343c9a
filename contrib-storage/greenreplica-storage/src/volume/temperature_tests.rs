//! Partial on-line mirrors on the engine: a QMD volume of two pairs whose second pair holds
//! only cold ranges sleeps whole (both disks) under the utilization policy through a
//! workload on the hot ranges of the first pair; every byte reads back as written.

use std::sync::Arc;

use super::tests::{data_of, dyn_stores, memory_volume, MEMBER};
use super::{Health, MemberSlot, Volume};
use crate::clock::VirtualClock;
use crate::drive::Drive;
use crate::layout::LayoutKind;
use crate::layout::{self, LayoutOptions};
use crate::ledger::Ledger;
use crate::member::memory::MemMember;
use crate::policy::PolicySpec;
use crate::power_state::PowerState;
use crate::profile::DriveProfile;
use crate::superblock::DATA_OFFSET;
use crate::sync::lock;
use crate::synth::Rng;

const CHUNK: u64 = 16384;

#[test]
fn a_cold_pair_sleeps_whole_through_a_workload_on_the_hot_pair() {
    let clock = Arc::new(VirtualClock::new());
    let (v, stores) = memory_volume(LayoutKind::QMD, 5, clock.clone(), CHUNK);
    let spec: PolicySpec = "utilization:sleep_epochs=3,wake_epochs=2".parse().unwrap();
    v.power.with(|c| c.replace_manager(spec.manager(48)));
    let cap = v.capacity();
    let chunks = cap / CHUNK;
    // Chunk c sits on pair c % 2: even chunks hot (pair 0), odd ones cold (pair 1).
    let mut model = vec![0u8; cap as usize];
    let mut rng = Rng(0x16b);
    for c in 0..chunks {
        let data: Vec<u8> = (0..CHUNK).map(|_| rng.next() as u8).collect();
        v.write(c * CHUNK, &data).unwrap();
        model[(c * CHUNK) as usize..((c + 1) * CHUNK) as usize].copy_from_slice(&data);
    }
    let hot: Vec<(u64, u64)> = (0..chunks).step_by(2).map(|c| (c * CHUNK, CHUNK)).collect();
    let cold: Vec<(u64, u64)> = (1..chunks).step_by(2).map(|c| (c * CHUNK, CHUNK)).collect();
    assert_eq!(v.set_temperature(&cold, "cold").unwrap(), cold.len());
    v.set_temperature(&hot, "hot").unwrap();
    assert_eq!(
        v.layout().cold_groups(),
        vec![2],
        "pair 1 holds only cold data"
    );
    let state = |m: usize| lock(&v.slots[m].drive).state();
    let asleep = |m: usize| matches!(state(m), PowerState::Standby | PowerState::SpinningDown);
    let mut t = 0.0;
    let mut both_asleep_at = None;
    let mut woke_after_sleeping = false;
    // 60 s of a light workload (a few 4 KiB requests a second) on the hot chunks only.
    for step in 0..600 {
        let c = 2 * (rng.next() % chunks.div_ceil(2));
        let offset = c * CHUNK + (rng.next() % (CHUNK / 4096)) * 4096;
        if step % 2 == 0 {
            let data: Vec<u8> = (0..4096).map(|_| rng.next() as u8).collect();
            v.write(offset, &data).unwrap();
            model[offset as usize..offset as usize + 4096].copy_from_slice(&data);
        } else {
            let mut buf = vec![0u8; 4096];
            v.read(offset, &mut buf).unwrap();
            assert!(
                buf == model[offset as usize..offset as usize + 4096],
                "step {step}"
            );
        }
        t += 0.1;
        clock.advance_to(t);
        v.tick();
        if asleep(2) && asleep(3) {
            both_asleep_at.get_or_insert(step);
        } else if both_asleep_at.is_some() {
            woke_after_sleeping = true;
        }
    }
    let slept = both_asleep_at.expect("the cold pair's two disks went to sleep");
    assert!(slept < 300, "asleep after {slept} steps");
    assert!(
        !woke_after_sleeping,
        "the hot workload never woke the cold pair"
    );
    assert!(!asleep(0), "the hot pair's active disk kept spinning");
    assert!(
        data_of(&stores[2]) == data_of(&stores[3]),
        "the cold pair's copies are equal"
    );
    let cold_range = v.range_asleep(CHUNK, CHUNK).unwrap();
    assert_eq!(
        (cold_range.members, cold_range.asleep),
        (vec![2], vec![2]),
        "a cold range answers asleep"
    );
    assert!(cold_range.ready_in_s > 0.0);
    assert!(
        v.range_asleep(0, CHUNK).unwrap().asleep.is_empty(),
        "a hot range is up"
    );
    // Reading cold data wakes the cold pair and returns what was written.
    let mut buf = vec![0u8; cap as usize];
    v.read(0, &mut buf).unwrap();
    assert!(buf == model, "every byte as written");
    assert!(
        !asleep(2),
        "a read of cold data woke the cold pair's active disk"
    );
}

#[test]
fn set_temperature_refuses_hostile_input_and_other_layouts() {
    let clock = Arc::new(VirtualClock::new());
    let (v, _stores) = memory_volume(LayoutKind::QMD, 3, clock.clone(), CHUNK);
    let cap = v.capacity();
    assert!(
        v.set_temperature(&[(cap, 1)], "cold").is_err(),
        "beyond the end"
    );
    assert!(
        v.set_temperature(&[(u64::MAX, 2)], "cold").is_err(),
        "overflow"
    );
    let err = v.set_temperature(&[(0, 4096)], "warm").unwrap_err();
    assert!(err.to_string().contains("hot, cold or normal"), "{err}");
    let many: Vec<(u64, u64)> = (0..20_000).map(|i| (i, 1)).collect();
    assert!(
        v.set_temperature(&many, "cold").is_err(),
        "too many extents"
    );
    let spread: Vec<(u64, u64)> = (0..5000).map(|i| (i * 4, 1)).collect();
    let err = v.set_temperature(&spread, "cold").unwrap_err();
    assert!(err.to_string().contains("more than 4096 ranges"), "{err}");
    assert!(
        v.temperatures().is_empty(),
        "a refused change leaves nothing marked"
    );
    v.set_temperature(&[(0, 4096)], "cold").unwrap();
    assert_eq!(v.temperatures(), vec![(0, 4096, "cold")]);
    let (raid10, _) = memory_volume(LayoutKind::RAID10, 4, clock, CHUNK);
    let err = raid10.set_temperature(&[(0, 4096)], "cold").unwrap_err();
    assert!(
        err.to_string().contains("keeps no hot or cold ranges"),
        "{err}"
    );
}

/// Issue 16 item 5: a write to a cold pair sleeping whole lands only in the flash buffer
/// (no disk wakes); reads of it hit in flash; a drain writes it back to both disks.
#[test]
fn writes_to_a_sleeping_cold_pair_land_only_in_flash() {
    let clock = Arc::new(VirtualClock::new());
    let (v, stores) = memory_volume(LayoutKind::QMD, 5, clock.clone(), CHUNK);
    let spec: PolicySpec = "utilization:sleep_epochs=3,wake_epochs=2".parse().unwrap();
    v.power.with(|c| c.replace_manager(spec.manager(48)));
    let cap = v.capacity();
    let chunks = cap / CHUNK;
    let mut model = vec![0u8; cap as usize];
    let mut rng = Rng(0x16c);
    let cold: Vec<(u64, u64)> = (1..chunks).step_by(2).map(|c| (c * CHUNK, CHUNK)).collect();
    v.set_temperature(&cold, "cold").unwrap();
    let state = |m: usize| lock(&v.slots[m].drive).state();
    let asleep = |m: usize| matches!(state(m), PowerState::Standby | PowerState::SpinningDown);
    let mut t = 0.0;
    while !(asleep(2) && asleep(3)) {
        assert!(t < 60.0, "the cold pair sleeps whole within a minute");
        t += 0.1;
        clock.advance_to(t);
        v.tick();
    }
    // 10 s of writes (a batch's write-back) to cold chunks only, a few a second; less than
    // the fill threshold of the flash (past it the write-back wakes the pair).
    for step in 0..100 {
        let c = 2 * (rng.next() % (chunks / 2)) + 1;
        let offset = c * CHUNK + (rng.next() % (CHUNK / 4096)) * 4096;
        let data: Vec<u8> = (0..4096).map(|_| rng.next() as u8).collect();
        v.write(offset, &data).unwrap();
        model[offset as usize..offset as usize + 4096].copy_from_slice(&data);
        let mut buf = vec![0u8; 4096];
        v.read(offset, &mut buf).unwrap();
        assert!(buf == data, "step {step}: the write reads back from flash");
        t += 0.1;
        clock.advance_to(t);
        v.tick();
        assert!(
            asleep(2) && asleep(3),
            "step {step}: the cold pair slept through the writes"
        );
    }
    v.flush().unwrap();
    assert!(
        data_of(&stores[2]) == data_of(&stores[3]),
        "both disks are stale alike (the flash holds the newest copy)"
    );
    // Waking the pair and flushing writes the buffered runs back to both disks.
    v.drain_layout_background().unwrap();
    v.flush().unwrap();
    assert!(
        data_of(&stores[2]) == data_of(&stores[3]),
        "the pair is equal after the write-back"
    );
    let mut buf = vec![0u8; cap as usize];
    v.read(0, &mut buf).unwrap();
    assert!(buf == model, "every byte as written");
}

/// Issue 16 item 5, the power side: the scheduler's wake before a write-only window
/// (`wake` with `writes_only`) leaves a cold pair asleep whole (its writes land in flash),
/// `range_asleep` answers that reading them back needs only the flash, and a wake for
/// reading cold data not in flash still spins up the pair's active disk.
#[test]
fn a_write_only_wake_leaves_a_sleeping_cold_pair_asleep() {
    let clock = Arc::new(VirtualClock::new());
    let (v, _stores) = memory_volume(LayoutKind::QMD, 5, clock.clone(), CHUNK);
    let spec: PolicySpec = "utilization:sleep_epochs=3,wake_epochs=2".parse().unwrap();
    v.power.with(|c| c.replace_manager(spec.manager(48)));
    let cap = v.capacity();
    // Every chunk of pair 1 (the odd ones) cold, chunk 0 (pair 0) hot: a pair sleeps whole
    // only when it holds no unmarked data.
    let cold: Vec<(u64, u64)> = (1..cap / CHUNK)
        .step_by(2)
        .map(|c| (c * CHUNK, CHUNK))
        .collect();
    v.set_temperature(&cold, "cold").unwrap();
    v.set_temperature(&[(0, CHUNK)], "hot").unwrap();
    let state = |m: usize| lock(&v.slots[m].drive).state();
    let asleep = |m: usize| matches!(state(m), PowerState::Standby | PowerState::SpinningDown);
    let mut t = 0.0;
    while !(asleep(2) && asleep(3) && asleep(1)) {
        assert!(
            t < 60.0,
            "the cold pair sleeps whole and the hot one's second disk"
        );
        t += 0.1;
        clock.advance_to(t);
        v.tick();
    }
    assert!(v.wake_for_writes(&[(cap, 1)]).is_err(), "beyond the end");
    assert!(v.wake_for_writes(&[(u64::MAX, 2)]).is_err(), "overflow");
    v.wake_for_writes(&[(CHUNK, CHUNK)]).unwrap();
    assert!(
        asleep(2) && asleep(3),
        "a write-only window on cold data leaves the cold pair asleep"
    );
    let data = vec![0x5a; 8192];
    v.write(CHUNK + 4096, &data).unwrap();
    assert!(asleep(2) && asleep(3), "the write landed in flash alone");
    let written = v.range_asleep(CHUNK + 4096, 8192).unwrap();
    assert_eq!(
        (written.members, written.asleep),
        (vec![4], vec![]),
        "reading the flash-only bytes needs only the flash"
    );
    let mut buf = vec![0u8; 8192];
    v.read(CHUNK + 4096, &mut buf).unwrap();
    assert!(buf == data && asleep(2), "served from flash");
    assert_eq!(
        v.range_asleep(CHUNK + 12288, 4096).unwrap().asleep,
        vec![2],
        "unbuffered cold bytes still need the sleeping active disk"
    );
    // A write-only window on a pair that is not cold wakes as before (its active disk).
    v.wake_for_writes(&[(0, CHUNK)]).unwrap();
    assert!(!asleep(0), "the hot pair's active disk is up");
    // Reading cold data not in flash wakes the cold pair's active disk.
    v.wake_for(&[(CHUNK + 12288, 4096)]).unwrap();
    assert!(
        !asleep(2),
        "a read wake spins up the cold pair's active disk"
    );
}

/// A QMD volume of two pairs whose disks keep `mirror` bytes each for hot copies.
fn mirrored_volume(clock: Arc<VirtualClock>, mirror: u64) -> (Volume, Vec<Arc<MemMember>>) {
    let stores: Vec<Arc<MemMember>> = (0..5).map(|_| MemMember::new(MEMBER)).collect();
    let options = LayoutOptions::from_pairs([("mirror_bytes", mirror.to_string())]).unwrap();
    let layout = layout::build_with(
        LayoutKind::QMD,
        5,
        MEMBER as u64 - DATA_OFFSET,
        CHUNK,
        &options,
    )
    .unwrap();
    let profile = Arc::new(DriveProfile::load("test-fast").unwrap());
    let slots = dyn_stores(&stores)
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
    (Volume::new("t", layout, slots, clock, None, None), stores)
}

/// Partial on-line mirrors (review findings (a) and (c)): with small stripe units a hot
/// range lands on both pairs; the whole volume is marked (cold, then hot ranges), so one
/// pair stays up and holds a copy of the other's hot stripe units, and the other sleeps
/// whole through a read and write workload on the hot ranges; every byte reads back.
#[test]
fn hot_copies_let_a_pair_sleep_whole_under_hot_data_on_every_pair() {
    let clock = Arc::new(VirtualClock::new());
    let (v, _stores) = mirrored_volume(clock.clone(), 16 * CHUNK);
    let spec: PolicySpec = "utilization:sleep_epochs=3,wake_epochs=2".parse().unwrap();
    v.power.with(|c| c.replace_manager(spec.manager(48)));
    let cap = v.capacity();
    let mut model = vec![0u8; cap as usize];
    let mut rng = Rng(0x16d);
    let data: Vec<u8> = (0..cap).map(|_| rng.next() as u8).collect();
    v.write(0, &data).unwrap();
    model.copy_from_slice(&data);
    // Hot: stripe units 4..12 (four on each pair); the rest cold.
    let hot = 4 * CHUNK..12 * CHUNK;
    v.set_temperature(&[(0, cap)], "cold").unwrap();
    v.set_temperature(&[(hot.start, hot.end - hot.start)], "hot")
        .unwrap();
    assert_eq!(v.layout().cold_groups(), Vec::<usize>::new(), "no copy yet");
    let state = |m: usize| lock(&v.slots[m].drive).state();
    let asleep = |m: usize| matches!(state(m), PowerState::Standby | PowerState::SpinningDown);
    let mut t = 0.0;
    let mut both_asleep_at = None;
    let mut woke_after_sleeping = false;
    for step in 0..900 {
        let mut offset = hot.start + rng.next() % ((hot.end - hot.start) / 4096) * 4096;
        if step % 2 == 0 {
            // The last 4 KiB of each stripe unit is only read (it stays on the copy).
            if offset % CHUNK == CHUNK - 4096 {
                offset -= 4096;
            }
            let data: Vec<u8> = (0..4096).map(|_| rng.next() as u8).collect();
            v.write(offset, &data).unwrap();
            model[offset as usize..offset as usize + 4096].copy_from_slice(&data);
        } else {
            let mut buf = vec![0u8; 4096];
            v.read(offset, &mut buf).unwrap();
            assert!(
                buf == model[offset as usize..offset as usize + 4096],
                "step {step}"
            );
        }
        t += 0.1;
        clock.advance_to(t);
        v.tick();
        if asleep(2) && asleep(3) {
            both_asleep_at.get_or_insert(step);
        } else if both_asleep_at.is_some() {
            woke_after_sleeping = true;
        }
    }
    assert_eq!(v.layout().cold_groups(), vec![2], "pair 1 sleeps whole");
    let state_json = v.layout().layout_state().unwrap();
    assert_eq!(state_json["hot_copies"], 4);
    assert_eq!(state_json["hot_copies_current"], 4);
    let slept = both_asleep_at.expect("pair 1's two disks went to sleep");
    assert!(slept < 450, "asleep after {slept} steps");
    assert!(!woke_after_sleeping, "the hot workload never woke pair 1");
    assert!(!asleep(0), "the staying pair's active disk kept spinning");
    // Pair 1's hot stripe units are read from their copies on member 0 (or from flash
    // where the workload's writes are buffered): nothing asleep.
    for unit in [5, 7, 9, 11] {
        let hot_range = v.range_asleep(unit * CHUNK, CHUNK).unwrap();
        assert!(
            hot_range.asleep.is_empty() && hot_range.members.iter().all(|m| [0, 4].contains(m)),
            "unit {unit}: {hot_range:?}"
        );
    }
    // Bytes not written since they were marked are read from the copy alone.
    for unit in [5, 7, 9, 11] {
        let quiet = v.range_asleep(unit * CHUNK + CHUNK - 4096, 4096).unwrap();
        assert_eq!(quiet.members, vec![0], "unit {unit}");
    }
    // Pair 1's cold stripe unit 13 needs its sleeping active disk.
    assert_eq!(v.range_asleep(13 * CHUNK, CHUNK).unwrap().asleep, vec![2]);
    let mut buf = vec![0u8; cap as usize];
    v.read(0, &mut buf).unwrap();
    assert!(buf == model, "every byte as written");
    v.drain_layout_background().unwrap();
    v.read(0, &mut buf).unwrap();
    assert!(buf == model, "every byte as written after the write-back");
}
