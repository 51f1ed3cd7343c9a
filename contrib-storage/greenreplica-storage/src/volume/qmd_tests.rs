//! QMD on the engine: with the second disks asleep, writes land on the active disks and the
//! flash member and the second disks stay asleep; reads return the last write (from flash
//! or the active disk); once a second disk is woken (utilization rose), the volume's ticks
//! write its buffered runs back until the pair is equal again.

use std::sync::Arc;

use super::tests::{data_of, memory_volume};
use super::Volume;
use crate::clock::{Clock, VirtualClock};
use crate::layout::LayoutKind;
use crate::policy::PolicySpec;
use crate::power_manager::WakeCause;
use crate::power_state::PowerState;
use crate::sync::lock;
use crate::synth::Rng;

const CHUNK: u64 = 16384;

#[test]
fn sleeping_second_disks_stay_asleep_through_writes_and_catch_up_when_woken() {
    let clock = Arc::new(VirtualClock::new());
    let (v, stores) = memory_volume(LayoutKind::QMD, 5, clock.clone(), CHUNK);
    // The second disks (odd members) sleep after a second idle; the flash (4) stays up.
    let mirrors = PolicySpec::Mirrors { timeout_s: 1.0 }.manager(48);
    v.power.with(|c| c.replace_manager(mirrors));
    clock.advance_to(5.0);
    v.tick();
    let asleep = |m: usize| lock(&v.slots[m].drive).state() == PowerState::Standby;
    assert!(asleep(1) && asleep(3));
    let cap = v.capacity();
    let mut model = vec![0u8; cap as usize];
    let mut rng = Rng(0x9d);
    // About 400 KB of writes: under the 80 % fill threshold of the 1 MiB flash member, so
    // nothing forces a write-back.
    for step in 0..150 {
        let len = 4096;
        let offset = (rng.next() % ((cap - len) / 4096)) * 4096;
        if step % 3 == 0 {
            let mut buf = vec![0u8; len as usize];
            v.read(offset, &mut buf).unwrap();
            assert!(
                buf == model[offset as usize..(offset + len) as usize],
                "step {step}"
            );
        } else {
            let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            v.write(offset, &data).unwrap();
            model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
        }
        clock.advance_to(5.0 + step as f64 * 0.01);
        v.tick();
    }
    assert!(
        asleep(1) && asleep(3),
        "no foreground I/O woke a second disk"
    );
    assert!(
        data_of(&stores[4]).iter().any(|&b| b != 0),
        "the flash buffer took writes"
    );
    assert!(
        data_of(&stores[0]) != data_of(&stores[1]),
        "the sleeping copy is stale"
    );
    // Utilization rose: the policy wakes the second disks; ticks flush K runs each.
    for m in [1, 3] {
        lock(&v.slots[m].drive).wake_for(clock.now(), WakeCause::Policy);
    }
    let mut t = clock.now();
    for _ in 0..20_000 {
        t += 0.05;
        clock.advance_to(t);
        v.tick();
        if data_of(&stores[0]) == data_of(&stores[1]) && data_of(&stores[2]) == data_of(&stores[3])
        {
            break;
        }
    }
    let member_bytes = v.layout().member_data_bytes() as usize;
    for pair in [0, 2] {
        assert!(
            data_of(&stores[pair])[..member_bytes] == data_of(&stores[pair + 1])[..member_bytes],
            "pair {} caught up",
            pair / 2
        );
    }
    for offset in (0..cap).step_by(64 << 10) {
        let len = (64 << 10).min(cap - offset);
        let mut buf = vec![0u8; len as usize];
        v.read(offset, &mut buf).unwrap();
        assert!(buf == model[offset as usize..(offset + len) as usize]);
    }
}

/// The utilization policy on a QMD volume: quiet epochs put the second disks to sleep
/// (writes meanwhile go through the flash buffer), a burst of reads over two epochs wakes
/// them, and the ticks then write the buffer back.
#[test]
fn utilization_epochs_sleep_and_wake_the_second_disks() {
    let clock = Arc::new(VirtualClock::new());
    let (v, stores) = memory_volume(LayoutKind::QMD, 3, clock.clone(), CHUNK);
    let spec: PolicySpec = "utilization:sleep_epochs=3,wake_epochs=2".parse().unwrap();
    v.power.with(|c| c.replace_manager(spec.manager(48)));
    let state = |m: usize| lock(&v.slots[m].drive).state();
    let mut t = 0.0;
    let step = |t: &mut f64, dt: f64| {
        *t += dt;
        clock.advance_to(*t);
        v.tick();
    };
    // Quiet: a few writes a second.
    let mut rng = Rng(3);
    let cap = v.capacity();
    for _ in 0..100 {
        let offset = (rng.next() % (cap / 4096)) * 4096;
        v.write(offset, &[7u8; 4096]).unwrap();
        step(&mut t, 0.1);
    }
    assert_eq!(state(1), PowerState::Standby, "the second disk sleeps");
    assert_eq!(state(0), PowerState::Idle, "the active disk stays up");
    assert!(
        data_of(&stores[2]).iter().any(|&b| b != 0),
        "writes were buffered"
    );
    let buffered = data_of(&stores[0]) != data_of(&stores[1]);
    assert!(buffered);
    // Busy: reads keep the active disk over 25 % of each epoch.
    let mut woke = false;
    for _ in 0..40 {
        for _ in 0..400 {
            let offset = (rng.next() % (cap / 65536)) * 65536;
            let mut buf = vec![0u8; 65536];
            v.read(offset, &mut buf).unwrap();
        }
        step(&mut t, 0.1);
        woke |= matches!(
            state(1),
            PowerState::SpinningUp | PowerState::Idle | PowerState::Active
        );
    }
    assert!(woke, "two busy epochs woke the second disk");
    for _ in 0..2000 {
        step(&mut t, 0.05);
        if data_of(&stores[0]) == data_of(&stores[1]) {
            break;
        }
    }
    assert!(
        data_of(&stores[0]) == data_of(&stores[1]),
        "flushed once awake"
    );
}

/// "Is this range asleep?": reads served by the active disk or the flash need no spin-up;
/// without the active disk they need the sleeping second disk, and the answer says so.
#[test]
fn a_range_is_asleep_only_when_its_read_needs_a_sleeping_member() {
    let clock = Arc::new(VirtualClock::new());
    let (v, _stores) = memory_volume(LayoutKind::QMD, 3, clock.clone(), CHUNK);
    let mirrors = PolicySpec::Mirrors { timeout_s: 1.0 }.manager(48);
    v.power.with(|c| c.replace_manager(mirrors));
    clock.advance_to(5.0);
    v.tick();
    v.write(0, &[5u8; 8192]).unwrap();
    // Staged (the default staging buffer): its flash copy is appended by the next flush,
    // until then the active disk serves it.
    let staged = v.range_asleep(0, 8192).unwrap();
    assert_eq!((staged.members, staged.asleep), (vec![0], vec![]));
    v.flush().unwrap();
    let buffered = v.range_asleep(0, 8192).unwrap();
    assert_eq!((buffered.members, buffered.asleep), (vec![2], vec![]));
    let plain = v.range_asleep(65536, 4096).unwrap();
    assert_eq!((plain.members, plain.asleep), (vec![0], vec![]));
    assert_eq!(plain.ready_in_s, 0.0);
    v.fail_member(0, "test: active disk lost");
    let degraded = v.range_asleep(65536, 4096).unwrap();
    assert_eq!((degraded.members, degraded.asleep), (vec![1], vec![1]));
    assert!(degraded.ready_in_s > 0.0, "{}", degraded.ready_in_s);
    // The buffered bytes still come from flash without waking anything.
    assert_eq!(v.range_asleep(0, 8192).unwrap().asleep, Vec::<usize>::new());
    assert!(v.range_asleep(v.capacity(), 1).is_err());
    assert!(v.range_asleep(u64::MAX, 2).is_err());
}

/// 32 small writes with the second disk asleep, then a flush: the flash member's write
/// requests (data and address blocks) and whether each write reads back before the flush.
fn staged_workload(staging_bytes: &str) -> (u64, Volume, Arc<VirtualClock>) {
    let clock = Arc::new(VirtualClock::new());
    let (v, stores) = memory_volume(LayoutKind::QMD, 3, clock.clone(), CHUNK);
    v.layout()
        .set_option("staging_bytes", staging_bytes)
        .unwrap();
    let mirrors = PolicySpec::Mirrors { timeout_s: 1.0 }.manager(48);
    v.power.with(|c| c.replace_manager(mirrors));
    clock.advance_to(5.0);
    v.tick();
    let flash_writes = || lock(&v.slots[2].drive).ledger_at(clock.now()).writes;
    let before = flash_writes();
    for i in 0..32u64 {
        v.write(i * 8192, &block(i)).unwrap();
    }
    if staging_bytes != "0" {
        assert_eq!(
            flash_writes(),
            before,
            "nothing on the flash before the flush"
        );
        assert!(data_of(&stores[2]).iter().all(|&b| b == 0));
    }
    for i in 0..32u64 {
        let mut buf = vec![0u8; 4096];
        v.read(i * 8192, &mut buf).unwrap();
        assert!(buf == block(i), "write {i} reads back before the flush");
    }
    v.flush().unwrap();
    let written = flash_writes() - before;
    (written, v, clock)
}

fn block(i: u64) -> Vec<u8> {
    vec![(i as u8).wrapping_mul(13) ^ 0x5a; 4096]
}

/// The staging buffer on the engine: 32 small writes reach the flash as one append at the
/// flush instead of 32 writes (the address blocks are the same either way), are read from
/// the active disk until then, and a failure of the active disk before the flush appends
/// them at once, so they are still readable.
#[test]
fn staged_writes_are_appended_once_per_flush_and_survive_the_active_disk_failing() {
    let (direct, _, _) = staged_workload("0");
    let (staged, v, _clock) = staged_workload("1048576");
    assert_eq!(
        direct - staged,
        31,
        "one append instead of 32 flash writes ({direct} with staging off, {staged} on)"
    );
    // Staged again, then the active disk fails before any flush.
    for i in 0..8u64 {
        v.write(i * 8192, &block(100 + i)).unwrap();
    }
    v.fail_member(0, "test: active disk lost");
    for i in 0..8u64 {
        let mut buf = vec![0u8; 4096];
        v.read(i * 8192, &mut buf).unwrap();
        assert!(
            buf == block(100 + i),
            "write {i} from the flash after the failure"
        );
    }
}

/// A burst between flushes: once half the staging space is taken the staged bytes are
/// appended at once, so 40 writes of 8 KiB (320 KiB, more than a 128 KiB space) reach the
/// flash as five appends of 64 KiB, not one flash write each beyond the space; every write
/// reads back before and after the flush.
#[test]
fn a_burst_between_flushes_is_appended_in_half_space_pieces() {
    let clock = Arc::new(VirtualClock::new());
    let (v, _stores) = memory_volume(LayoutKind::QMD, 3, clock.clone(), CHUNK);
    v.layout().set_option("staging_bytes", "131072").unwrap();
    let mirrors = PolicySpec::Mirrors { timeout_s: 1.0 }.manager(48);
    v.power.with(|c| c.replace_manager(mirrors));
    clock.advance_to(5.0);
    v.tick();
    let flash_writes = || lock(&v.slots[2].drive).ledger_at(clock.now()).writes;
    let before = flash_writes();
    let data = |i: u64| vec![(i as u8).wrapping_mul(7) ^ 0xc3; 8192];
    for i in 0..40u64 {
        v.write(i * 8192, &data(i)).unwrap();
        let staged = v.layout().layout_state().unwrap()["staged_bytes"]
            .as_u64()
            .unwrap();
        assert!(staged < 65536, "write {i}: {staged} bytes staged");
    }
    let appends = flash_writes() - before;
    assert_eq!(
        appends, 5,
        "flash writes for 40 writes of 8 KiB before any flush"
    );
    let check = |when: &str| {
        for i in 0..40u64 {
            let mut buf = vec![0u8; 8192];
            v.read(i * 8192, &mut buf).unwrap();
            assert!(buf == data(i), "write {i} reads back {when}");
        }
    };
    check("before the flush");
    v.flush().unwrap();
    check("after the flush");
}

/// The flash member's wakes are no disk start/stop: the volume's `disk_spin_ups` (what the
/// standby's start/stop budget spends) counts the spinning members only, while the ledger
/// total keeps every member's.
#[test]
fn disk_spin_ups_leave_out_the_flash_members_wakes() {
    use crate::drive::Drive;
    use crate::ledger::Ledger;
    use crate::profile::DriveProfile;

    let clock = Arc::new(VirtualClock::new());
    let (v, _stores) = memory_volume(LayoutKind::QMD, 5, clock.clone(), CHUNK);
    let ssd = Arc::new(DriveProfile::load("ssd").unwrap());
    let disk = Arc::new(DriveProfile::load("test-fast").unwrap());
    for (m, slot) in v.slots.iter().enumerate() {
        let (profile, spin_ups) = if m == 4 {
            (ssd.clone(), 7)
        } else {
            (disk.clone(), m as u64)
        };
        let ledger = Ledger {
            spin_ups,
            ..Ledger::default()
        };
        *lock(&slot.drive) = Drive::new(profile, 0, PolicySpec::AlwaysOn.build(48), 0.0, ledger);
    }
    let status = v.status_view();
    assert_eq!(status.ledger.spin_ups, 1 + 2 + 3 + 7);
    assert_eq!(status.disk_spin_ups, 1 + 2 + 3);
}
