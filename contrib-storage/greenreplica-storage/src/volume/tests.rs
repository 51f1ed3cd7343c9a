use super::*;
use crate::clock::VirtualClock;
use crate::layout;
use crate::layout::LayoutKind;
use crate::ledger::Ledger;
use crate::member::memory::MemMember;
use crate::policy::PolicySpec;
use crate::profile::DriveProfile;
use crate::superblock::{self, DATA_OFFSET};
use std::sync::atomic::Ordering;
use std::sync::mpsc;

pub(super) const MEMBER: usize = (DATA_OFFSET as usize) + (1 << 20);

pub(super) fn volume(kind: LayoutKind, members: &[Arc<MemMember>]) -> Volume {
    volume_with(kind, dyn_stores(members), None)
}

pub(super) fn volume_with(
    kind: LayoutKind,
    stores: Vec<Arc<dyn Member>>,
    identity: Option<Superblock>,
) -> Volume {
    volume_clocked(kind, stores, identity, Arc::new(VirtualClock::new()))
}

pub(super) fn volume_clocked(
    kind: LayoutKind,
    stores: Vec<Arc<dyn Member>>,
    identity: Option<Superblock>,
    clock: Arc<VirtualClock>,
) -> Volume {
    build(kind, stores, identity, clock, 65536)
}

/// A volume of `kind` over `members` fresh in-memory members, with chunk (stripe unit)
/// `chunk`; returns the members too, to look at their bytes.
pub(super) fn memory_volume(
    kind: LayoutKind,
    members: usize,
    clock: Arc<dyn Clock>,
    chunk: u64,
) -> (Volume, Vec<Arc<MemMember>>) {
    let stores: Vec<Arc<MemMember>> = (0..members).map(|_| MemMember::new(MEMBER)).collect();
    let volume = build(kind, dyn_stores(&stores), None, clock, chunk);
    (volume, stores)
}

pub(super) fn build(
    kind: LayoutKind,
    stores: Vec<Arc<dyn Member>>,
    identity: Option<Superblock>,
    clock: Arc<dyn Clock>,
    chunk: u64,
) -> Volume {
    let mut v = build_with_profile(kind, stores, clock, chunk, "test-fast");
    if let Some(identity) = identity {
        *lock(&v.identity) = Some(identity);
    }
    v.name = "t".into();
    v
}

/// A volume over `stores` whose drives are modelled by `profile`.
pub(super) fn build_with_profile(
    kind: LayoutKind,
    stores: Vec<Arc<dyn Member>>,
    clock: Arc<dyn Clock>,
    chunk: u64,
    profile: &str,
) -> Volume {
    let identity = None;
    let profile = Arc::new(DriveProfile::load(profile).unwrap());
    let layout = layout::build(kind, stores.len(), (MEMBER as u64) - DATA_OFFSET, chunk).unwrap();
    let slots = stores
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
    Volume::new("t", layout, slots, clock, None, identity)
}

pub(super) fn dyn_stores(members: &[Arc<MemMember>]) -> Vec<Arc<dyn Member>> {
    members
        .iter()
        .cloned()
        .map(|m| m as Arc<dyn Member>)
        .collect()
}

fn identity(members: usize) -> Superblock {
    Superblock {
        volume: "t".into(),
        volume_id: "test-volume".into(),
        layout: LayoutKind::RAID10,
        members,
        member_index: 0,
        stripe_unit: 65536,
        layout_options: Default::default(),
        member_data_bytes: (MEMBER as u64) - DATA_OFFSET,
        generation: 5,
        formatted: true,
        clean: false,
        data: superblock::MemberData::InSync,
    }
}

pub(super) fn data_of(m: &MemMember) -> Vec<u8> {
    lock(&m.bytes)[DATA_OFFSET as usize..].to_vec()
}

pub(super) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn raid10_write_lands_on_both_copies_and_reads_back() {
    let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
    let v = volume(LayoutKind::RAID10, &m);
    let data = pattern(200_000, 1);
    v.write(12345, &data).unwrap();
    v.flush().unwrap();
    let mut back = vec![0; data.len()];
    v.read(12345, &mut back).unwrap();
    assert_eq!(back, data);
    let off = DATA_OFFSET as usize + 12345;
    assert_eq!(lock(&m[0].bytes)[off..off + data.len()], data[..]);
    assert_eq!(lock(&m[1].bytes)[off..off + data.len()], data[..]);
}

#[test]
fn a_failing_member_degrades_the_volume_without_an_error() {
    let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
    let v = volume(LayoutKind::RAID10, &m);
    m[1].broken.store(true, Ordering::SeqCst);
    let data = pattern(8192, 2);
    v.write(0, &data).unwrap();
    assert!(matches!(v.slot(1).unwrap().health(), Health::Failed { .. }));
    v.flush().unwrap();
    let mut back = vec![0; data.len()];
    v.read(0, &mut back).unwrap();
    assert_eq!(back, data);
}

#[test]
fn a_read_error_falls_back_to_the_mirror() {
    let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
    let v = volume(LayoutKind::RAID10, &m);
    let data = pattern(4096, 3);
    v.write(65536, &data).unwrap();
    m[0].broken.store(true, Ordering::SeqCst);
    m[1].broken.store(false, Ordering::SeqCst);
    let mut back = vec![0; data.len()];
    v.read(65536, &mut back).unwrap();
    assert_eq!(back, data);
}

#[test]
fn losing_the_last_copy_is_an_error() {
    let m = [MemMember::new(MEMBER)];
    let v = volume(LayoutKind::SINGLE, &m);
    m[0].broken.store(true, Ordering::SeqCst);
    assert!(v.write(0, &[1; 512]).is_err());
    assert!(v.flush().is_err());
}

#[test]
fn replace_and_rebuild_copies_the_mirror() {
    let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
    let v = volume(LayoutKind::RAID10, &m);
    let data = pattern(300_000, 4);
    v.write(1000, &data).unwrap();
    assert!(
        v.replace_member(1, MemMember::new(MEMBER)).is_err(),
        "not failed yet"
    );
    v.fail_member(1, "test");
    let fresh = MemMember::new(MEMBER);
    v.replace_member(1, fresh.clone()).unwrap();
    // Written while rebuilding: must reach the replacement too.
    let late = pattern(4096, 5);
    v.write(900_000, &late).unwrap();
    while v.rebuild_step(1, 128 * 1024).unwrap().is_some() {}
    assert_eq!(v.slot(1).unwrap().health(), Health::InSync);
    let off = DATA_OFFSET as usize;
    assert_eq!(lock(&fresh.bytes)[off..], lock(&m[0].bytes)[off..]);
    m[0].broken.store(true, Ordering::SeqCst);
    let mut back = vec![0; data.len()];
    v.read(1000, &mut back).unwrap();
    assert_eq!(back, data, "served by the rebuilt member alone");
}

#[test]
fn sleep_and_wake_follow_the_policy() {
    let m = [MemMember::new(MEMBER)];
    let v = volume(LayoutKind::SINGLE, &m);
    assert!(matches!(v.sleep(Some(600.0)), SleepOutcome::Declined(r) if r.contains("always-on")));
    let (state, ready_in) = v.wake();
    assert_eq!((state, ready_in), (PowerState::Idle, 0.0));
}

#[test]
fn a_model_spin_down_is_sent_to_a_real_disk() {
    use crate::member::{BlockDevice, FileMember, MemberKind, RecordingRunner};
    let dir = std::env::temp_dir().join(format!("grs-vol-bd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let io =
        FileMember::open_or_create(MemberKind::Blockdev, &dir.join("d"), MEMBER as u64).unwrap();
    let runner = Arc::new(RecordingRunner::default());
    let disk: Arc<dyn Member> = Arc::new(BlockDevice::with_io(io, "/dev/sdz", runner.clone()));
    let profile = Arc::new(DriveProfile::load("test-fast").unwrap());
    let drive = Drive::new(
        profile,
        0,
        "idle-timeout:1".parse::<PolicySpec>().unwrap().build(48),
        0.0,
        Ledger::default(),
    );
    let clock = Arc::new(VirtualClock::new());
    let layout =
        layout::build(LayoutKind::SINGLE, 1, (MEMBER as u64) - DATA_OFFSET, 65536).unwrap();
    let v = Volume::new(
        "bd",
        layout,
        vec![MemberSlot::new(Some(disk), drive, Health::InSync)],
        clock.clone(),
        None,
        None,
    );
    v.tick();
    assert!(
        lock(&runner.calls).is_empty(),
        "still within the idle timeout"
    );
    clock.advance_to(5.0);
    v.tick();
    assert_eq!(*lock(&runner.calls), vec!["hdparm -y /dev/sdz".to_string()]);
    assert_eq!(v.power_state(), PowerState::Standby);
    v.tick();
    assert_eq!(lock(&runner.calls).len(), 1, "one spin-down, one command");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hints_are_checked_against_the_volume_size() {
    let m = [MemMember::new(MEMBER)];
    let v = volume(LayoutKind::SINGLE, &m);
    assert_eq!(v.hint(&[(0, 4096), (8192, 4096)]).unwrap(), 2);
    assert!(v.hint(&[(v.capacity(), 1)]).is_err());
}

#[test]
fn overlapping_concurrent_writes_leave_both_copies_identical() {
    let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
    let v = Arc::new(volume(LayoutKind::RAID10, &m));
    for round in 0..300u32 {
        let start = Arc::new(std::sync::Barrier::new(2));
        let writers: Vec<_> = [1u8, 2u8]
            .into_iter()
            .map(|seed| {
                let (v, start) = (v.clone(), start.clone());
                std::thread::spawn(move || {
                    let data = pattern(16384, seed.wrapping_add((round as u8).wrapping_mul(2)));
                    start.wait();
                    v.write(4096, &data).unwrap();
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        assert!(
            data_of(&m[0]) == data_of(&m[1]),
            "round {round}: the mirrors differ after two overlapping writes"
        );
    }
}

#[test]
fn a_concurrent_persist_cannot_bring_a_failed_member_back() {
    let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
    let stores = dyn_stores(&m);
    let v = Arc::new(volume_with(LayoutKind::RAID10, stores, Some(identity(2))));
    v.persist_headers().unwrap();
    // A persist stalls in its header write to member 0 ...
    let (entered_tx, entered) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    *lock(&m[0].header_pause) = Some((entered_tx, go_rx));
    let persist = {
        let v = v.clone();
        std::thread::spawn(move || v.persist_headers())
    };
    entered.recv().unwrap();
    // ... while member 1 fails (its header keeps the old generation) ...
    let fail = {
        let v = v.clone();
        std::thread::spawn(move || v.fail_member(1, "test"))
    };
    std::thread::sleep(std::time::Duration::from_millis(100));
    go.send(()).unwrap();
    let _ = persist.join().unwrap();
    fail.join().unwrap();
    eprintln!(
        "ops0 {:?} {:?} {:?}",
        lock(&m[0].ops),
        superblock::read(m[0].as_ref()),
        superblock::read(m[1].as_ref())
    );
    // ... then the survivor's header must still carry the newer generation.
    let h0 = superblock::read(m[0].as_ref()).unwrap().unwrap();
    let h1 = superblock::read(m[1].as_ref()).unwrap().unwrap();
    assert!(
        h0.generation > h1.generation,
        "member 1 would come back in sync: generations {} and {}",
        h0.generation,
        h1.generation
    );
}

#[test]
fn a_rebuild_checkpoint_flushes_the_copied_data_before_the_watermark() {
    let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
    let stores = dyn_stores(&m);
    let v = volume_with(LayoutKind::RAID10, stores, Some(identity(2)));
    v.fail_member(1, "test");
    let fresh = MemMember::new(MEMBER);
    v.replace_member(1, fresh.clone()).unwrap();
    v.rebuild_step(1, 128 * 1024).unwrap();
    lock(&fresh.ops).clear();
    v.rebuild_step(1, 128 * 1024).unwrap();
    v.persist_headers().unwrap();
    let ops = lock(&fresh.ops).clone();
    let header = ops.iter().position(|o| o == "w 0").expect("a header write");
    let last_data = ops[..header]
        .iter()
        .rposition(|o| o.starts_with("w "))
        .unwrap();
    assert!(
        ops[last_data..header].iter().any(|o| o == "f"),
        "watermark written before the data under it was flushed: {ops:?}"
    );
    assert_eq!(
        ops.last().map(String::as_str),
        Some("f"),
        "header not flushed: {ops:?}"
    );
}

#[test]
fn flush_reaches_only_members_written_since_their_last_flush() {
    let m: Vec<_> = (0..4).map(|_| MemMember::new(MEMBER)).collect();
    let v = volume(LayoutKind::RAID10, &m);
    v.write(0, &pattern(4096, 7)).unwrap(); // first stripe unit: pair 0 only
    for mm in &m {
        lock(&mm.ops).clear();
    }
    v.flush().unwrap();
    let flushes: Vec<usize> = m
        .iter()
        .map(|mm| lock(&mm.ops).iter().filter(|o| *o == "f").count())
        .collect();
    assert_eq!(flushes, vec![1, 1, 0, 0], "flushes per member");
    v.flush().unwrap();
    let again: Vec<usize> = m
        .iter()
        .map(|mm| lock(&mm.ops).iter().filter(|o| *o == "f").count())
        .collect();
    assert_eq!(again, vec![1, 1, 0, 0], "nothing written since: no flush");
}

#[test]
fn a_latent_read_error_is_served_from_the_mirror_and_rewritten() {
    use crate::member::FaultyMember;
    let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
    let faulty = Arc::new(FaultyMember::new(m[0].clone()));
    let stores: Vec<Arc<dyn Member>> = vec![faulty.clone(), m[1].clone()];
    let v = volume_with(LayoutKind::RAID10, stores, None);
    let data = pattern(65536, 9);
    v.write(0, &data).unwrap();
    v.write(65536 * 2, &data).unwrap();
    faulty.add_bad_range(DATA_OFFSET + 8192..DATA_OFFSET + 12288);
    // Member 0 is the first choice for reads (both ready at once).
    let mut back = vec![0; data.len()];
    v.read(0, &mut back).unwrap();
    assert_eq!(back, data, "the caller sees the data");
    assert_eq!(
        v.slot(0).unwrap().health(),
        Health::InSync,
        "one bad sector does not fail a disk"
    );
    assert!(faulty.failed_reads() >= 1, "the error was injected");
    assert!(
        faulty.bad_ranges().is_empty(),
        "the bad range was rewritten"
    );
    let mut direct = vec![0; 4096];
    faulty.read_at(&mut direct, DATA_OFFSET + 8192).unwrap();
    assert_eq!(direct, data[8192..12288]);
}

#[test]
fn a_member_with_too_many_read_errors_is_failed() {
    use crate::member::FaultyMember;
    let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
    let faulty = Arc::new(FaultyMember::new(m[0].clone()));
    let stores: Vec<Arc<dyn Member>> = vec![faulty.clone(), m[1].clone()];
    let v = volume_with(LayoutKind::RAID10, stores, None);
    let mut buf = vec![0; 512];
    for i in 0..=MAX_READ_ERRORS {
        faulty.add_bad_range(DATA_OFFSET + 4096 * i..DATA_OFFSET + 4096 * i + 512);
        // Reads go to whichever copy is readier: read until member 0 served one.
        for _ in 0..10 {
            if v.slot(0).unwrap().read_errors() > i {
                break;
            }
            v.read(4096 * i, &mut buf).unwrap();
        }
        assert_eq!(v.slot(0).unwrap().read_errors(), i + 1);
    }
    assert_eq!(v.slot(0).unwrap().read_errors(), MAX_READ_ERRORS + 1);
    assert!(matches!(v.slot(0).unwrap().health(), Health::Failed { .. }));
}

#[test]
fn a_rebuild_holds_up_only_the_chunk_it_copies() {
    use std::time::Duration;
    let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
    let v = Arc::new(volume(LayoutKind::RAID10, &m));
    v.write(0, &pattern(4 * 65536, 1)).unwrap();
    v.fail_member(1, "test");
    let fresh = MemMember::new(MEMBER);
    v.replace_member(1, fresh.clone()).unwrap();
    // The rebuild's read of its first chunk stalls (a slow disk, a spin-up) ...
    let (entered_tx, entered) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    *lock(&m[0].read_pause) = Some((DATA_OFFSET, entered_tx, go_rx));
    let rebuild = {
        let v = v.clone();
        std::thread::spawn(move || v.rebuild_step(1, 128 * 1024))
    };
    entered.recv().unwrap();
    // ... I/O elsewhere goes on meanwhile ...
    let (elsewhere_tx, elsewhere) = mpsc::channel();
    {
        let v = v.clone();
        std::thread::spawn(move || {
            v.write(512 * 1024, &pattern(4096, 2)).unwrap();
            let mut back = vec![0; 4096];
            v.read(256 * 1024, &mut back).unwrap();
            elsewhere_tx.send(()).unwrap();
        });
    }
    let elsewhere_done = elsewhere.recv_timeout(Duration::from_secs(5));
    // ... while a write into the chunk being copied waits for the copy.
    let (inside_tx, inside) = mpsc::channel();
    {
        let v = v.clone();
        std::thread::spawn(move || {
            v.write(4096, &pattern(4096, 3)).unwrap();
            inside_tx.send(()).unwrap();
        });
    }
    let inside_early = inside.recv_timeout(Duration::from_millis(200));
    go.send(()).unwrap();
    rebuild.join().unwrap().unwrap();
    inside.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        elsewhere_done.is_ok(),
        "I/O outside the chunk being copied waited for the rebuild"
    );
    assert!(
        inside_early.is_err(),
        "a write into the chunk being copied did not wait for it"
    );
    while v.rebuild_step(1, 128 * 1024).unwrap().is_some() {}
    assert!(
        data_of(&m[0]) == data_of(&fresh),
        "the rebuilt copy differs"
    );
}

#[test]
fn scrub_reports_differing_copies_and_repairs_them() {
    use crate::member::FaultyMember;
    let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
    let faulty = Arc::new(FaultyMember::new(m[1].clone()));
    let stores: Vec<Arc<dyn Member>> = vec![m[0].clone(), faulty.clone()];
    let v = volume_with(LayoutKind::RAID10, stores, None);
    v.write(0, &pattern(MEMBER - DATA_OFFSET as usize, 5))
        .unwrap();
    assert_eq!(v.scrub(false).unwrap().mismatched_chunks, 0);
    // Silent corruption in one chunk, a latent sector error in another.
    let off = DATA_OFFSET as usize + 300_000;
    lock(&m[1].bytes)[off..off + 10].copy_from_slice(&[0xee; 10]);
    faulty.add_bad_range(DATA_OFFSET + (1 << 20) - 4096..DATA_OFFSET + (1 << 20));
    let check = v.scrub(false).unwrap();
    assert_eq!(check.mismatched_chunks, 1, "{check:?}");
    assert_eq!(check.repaired_chunks, 0);
    assert!(
        data_of(&m[0]) != data_of(&m[1]),
        "check only: nothing rewritten"
    );
    let repair = v.scrub(true).unwrap();
    assert_eq!(repair.mismatched_chunks, 1, "{repair:?}");
    assert_eq!(repair.repaired_chunks, 1);
    assert!(
        data_of(&m[0]) == data_of(&m[1]),
        "repaired from the first copy"
    );
    assert_eq!(v.scrub(false).unwrap().mismatched_chunks, 0);
}

#[test]
fn the_periodic_scrub_repairs_a_silent_difference_when_due() {
    let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
    let clock = Arc::new(VirtualClock::new());
    let v = volume_clocked(LayoutKind::RAID10, dyn_stores(&m), None, clock.clone()).with_integrity(
        IntegritySettings {
            scrub_interval_s: Some(3600.0),
            ..IntegritySettings::default()
        },
    );
    v.write(0, &pattern(65536, 8)).unwrap();
    let off = DATA_OFFSET as usize + 100;
    lock(&m[1].bytes)[off] ^= 0xff;
    v.tick();
    clock.advance_to(1800.0);
    v.tick();
    assert!(data_of(&m[0]) != data_of(&m[1]), "not due yet");
    assert!(v.last_scrub().is_none());
    clock.advance_to(3601.0);
    for _ in 0..10 {
        v.tick();
    }
    assert!(
        data_of(&m[0]) == data_of(&m[1]),
        "repaired by the periodic scrub"
    );
    let last = v.last_scrub().expect("a finished run");
    assert_eq!(last["report"]["mismatched_chunks"], 1, "{last}");
    assert_eq!(last["report"]["repaired_chunks"], 1, "{last}");
}

#[test]
fn a_disk_spun_down_with_nothing_dirty_gets_no_flush() {
    let m = [MemMember::new(MEMBER)];
    let profile = Arc::new(DriveProfile::load("test-fast").unwrap());
    let drive = Drive::new(
        profile,
        0,
        "idle-timeout:1".parse::<PolicySpec>().unwrap().build(48),
        0.0,
        Ledger::default(),
    );
    let clock = Arc::new(VirtualClock::new());
    let layout =
        layout::build(LayoutKind::SINGLE, 1, (MEMBER as u64) - DATA_OFFSET, 65536).unwrap();
    let store: Arc<dyn Member> = m[0].clone();
    let v = Volume::new(
        "sd",
        layout,
        vec![MemberSlot::new(Some(store), drive, Health::InSync)],
        clock.clone(),
        None,
        None,
    );
    v.write(0, &pattern(4096, 1)).unwrap();
    clock.advance_to(30.0);
    v.tick();
    assert_eq!(v.power_state(), PowerState::Standby);
    let flushes_before = lock(&m[0].ops).iter().filter(|o| *o == "f").count();
    assert_eq!(
        flushes_before, 1,
        "written data flushed before the spin-down"
    );
    v.flush().unwrap();
    let flushes = lock(&m[0].ops).iter().filter(|o| *o == "f").count();
    assert_eq!(flushes, flushes_before, "a FLUSH CACHE would wake the disk");
}

#[test]
fn bad_blocks_on_both_copies_are_corrected_block_by_block() {
    use crate::member::FaultyMember;
    let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
    let f0 = Arc::new(FaultyMember::new(m[0].clone()));
    let f1 = Arc::new(FaultyMember::new(m[1].clone()));
    let stores: Vec<Arc<dyn Member>> = vec![f0.clone(), f1.clone()];
    let v = volume_with(LayoutKind::RAID10, stores, None);
    let data = pattern(65536, 6);
    v.write(0, &data).unwrap();
    // Every even block is bad on member 0, every odd one on member 1: each block has one
    // good copy, but no 8 KiB range has one.
    for block in 0..16u64 {
        let range = DATA_OFFSET + block * 4096..DATA_OFFSET + (block + 1) * 4096;
        if block % 2 == 0 {
            f0.add_bad_range(range);
        } else {
            f1.add_bad_range(range);
        }
    }
    let mut back = vec![0; data.len()];
    v.read(0, &mut back).unwrap();
    assert_eq!(back, data, "the caller sees the data");
    assert_eq!(v.slot(0).unwrap().health(), Health::InSync);
    assert_eq!(v.slot(1).unwrap().health(), Health::InSync);
    // The copy that served the read was repaired where it was bad.
    let served = if f0.bad_ranges().is_empty() { &f0 } else { &f1 };
    assert!(served.bad_ranges().is_empty());
    // Scrub repairs the other copy.
    v.scrub(true).unwrap();
    assert!(f0.bad_ranges().is_empty() && f1.bad_ranges().is_empty());
    assert!(data_of(&m[0]) == data_of(&m[1]));
}

#[test]
fn a_block_no_copy_can_read_fails_the_request_but_no_member() {
    use crate::member::FaultyMember;
    let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
    let f0 = Arc::new(FaultyMember::new(m[0].clone()));
    let f1 = Arc::new(FaultyMember::new(m[1].clone()));
    let stores: Vec<Arc<dyn Member>> = vec![f0.clone(), f1.clone()];
    let v = volume_with(LayoutKind::RAID10, stores, None);
    v.write(0, &pattern(65536, 4)).unwrap();
    f0.add_bad_range(DATA_OFFSET + 4096..DATA_OFFSET + 8192);
    f1.add_bad_range(DATA_OFFSET + 4096..DATA_OFFSET + 8192);
    let mut back = vec![0; 65536];
    assert!(v.read(0, &mut back).is_err());
    assert_eq!(v.slot(0).unwrap().health(), Health::InSync);
    assert_eq!(v.slot(1).unwrap().health(), Health::InSync);
    let mut other = vec![0; 4096];
    v.read(8192, &mut other).unwrap();
    assert_eq!(other, pattern(65536, 4)[8192..12288]);
}

#[test]
fn a_latent_error_on_the_first_mirror_does_not_stop_a_resync() {
    use crate::member::FaultyMember;
    let m = [MemMember::new(MEMBER), MemMember::new(MEMBER)];
    let f0 = Arc::new(FaultyMember::new(m[0].clone()));
    let stores: Vec<Arc<dyn Member>> = vec![f0.clone(), m[1].clone()];
    let bitmap: Arc<dyn Member> = MemMember::new(1 << 16);
    let v = volume_with(LayoutKind::RAID10, stores, None).with_write_intent(WriteIntent::new(
        bitmap,
        "t",
        65536,
        (MEMBER as u64) - DATA_OFFSET,
    ));
    let data = pattern(65536, 3);
    v.write(0, &data).unwrap();
    // The agent died between the two copies of a write (copy 1 differs) and the first copy
    // has a bad block in the same region.
    let off = DATA_OFFSET as usize + 20_000;
    lock(&m[1].bytes)[off..off + 4].copy_from_slice(&[0xaa; 4]);
    f0.add_bad_range(DATA_OFFSET + 40_960..DATA_OFFSET + 45_056);
    v.write_intent().unwrap().set_recovered([0].into());
    let mut back = vec![0; 65536];
    v.read(0, &mut back).unwrap();
    assert_eq!(back, data);
    assert_eq!(v.resync_pending(), 0);
    assert_eq!(v.slot(0).unwrap().health(), Health::InSync);
    assert!(f0.bad_ranges().is_empty(), "the bad block was rewritten");
    assert!(data_of(&m[0]) == data_of(&m[1]));
}

#[test]
fn after_an_unclean_stop_raid5_resync_recomputes_the_parity_of_the_dirty_regions() {
    use crate::parity;
    const C: usize = 16384;
    let (v, m) = memory_volume(
        LayoutKind::RAID5,
        3,
        Arc::new(VirtualClock::new()),
        C as u64,
    );
    let bitmap: Arc<dyn Member> = MemMember::new(1 << 16);
    let v = v.with_write_intent(WriteIntent::new(
        bitmap,
        "t",
        65536,
        (MEMBER as u64) - DATA_OFFSET,
    ));
    let data = pattern(256 * 1024, 5);
    v.write(0, &data).unwrap();
    // Stripe s: P on member 2 - s % 3, data after it. Stripe 0: data on 0 and 1, P on 2.
    let parity_right = |stripe: usize| {
        let chunk = |member: usize| {
            let at = DATA_OFFSET as usize + stripe * C;
            lock(&m[member].bytes)[at..at + C].to_vec()
        };
        let p = 2 - stripe % 3;
        let d: Vec<Vec<u8>> = (1..3).map(|i| chunk((p + i) % 3)).collect();
        let mut want = vec![0u8; C];
        parity::compute_p(&[&d[0], &d[1]], &mut want).unwrap();
        want == chunk(p)
    };
    assert!(parity_right(0) && parity_right(5));
    // The agent died between a data write and its parity write, in stripe 0 (region 0) and
    // in stripe 5 (region 1, 64 KiB of member space per region).
    lock(&m[2].bytes)[DATA_OFFSET as usize + 100] ^= 0xff;
    lock(&m[1].bytes)[DATA_OFFSET as usize + 5 * C + 7] ^= 0xff;
    assert!(!parity_right(0) && !parity_right(5));
    v.write_intent().unwrap().set_recovered([0, 1].into());
    // Reading stripe 0 resyncs its region first; the tick resyncs the other.
    let mut back = vec![0u8; 4096];
    v.read(0, &mut back).unwrap();
    assert_eq!(back, data[..4096]);
    assert!(parity_right(0), "region 0 resynced before the read");
    v.tick();
    assert_eq!(v.resync_pending(), 0);
    assert!(parity_right(5), "region 1 resynced in the background");
    assert_eq!(v.scrub(false).unwrap().mismatched_chunks, 0);
}

#[test]
fn raid5_scrub_finds_a_wrong_parity_and_repairs_it() {
    let (v, m) = memory_volume(LayoutKind::RAID5, 4, Arc::new(VirtualClock::new()), 16384);
    let data = pattern(512 * 1024, 8);
    v.write(0, &data).unwrap();
    lock(&m[3].bytes)[DATA_OFFSET as usize + 9] ^= 0x40;
    assert_eq!(v.scrub(false).unwrap().mismatched_chunks, 1);
    let repaired = v.scrub(true).unwrap();
    assert_eq!(
        (repaired.mismatched_chunks, repaired.repaired_chunks),
        (1, 1)
    );
    assert_eq!(v.scrub(false).unwrap().mismatched_chunks, 0);
    let mut back = vec![0u8; data.len()];
    v.read(0, &mut back).unwrap();
    assert!(back == data);
}

#[test]
fn the_status_view_keeps_the_protocol_fields() {
    let (v, _m) = memory_volume(LayoutKind::RAID5, 3, Arc::new(VirtualClock::new()), 65536);
    v.fail_member(2, "test");
    let s = v.status();
    let keys = |o: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = o.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(&s),
        [
            "bitmap_dirty_regions",
            "capacity_bytes",
            "degraded",
            "disk_spin_ups",
            "energy_joules",
            "hints",
            "last_scrub",
            "layout",
            "layout_metadata_bytes",
            "ledger",
            "members",
            "name",
            "profile",
            "resync_pending_regions",
            "state",
            "stripe_unit",
            "temperatures"
        ]
    );
    assert_eq!(
        keys(&s["members"][0]),
        [
            "awake",
            "device_power_state",
            "health",
            "index",
            "kind",
            "ledger",
            "path",
            "policy",
            "profile",
            "read_errors",
            "state"
        ]
    );
    assert_eq!(s["layout"], "raid5");
    assert_eq!(s["degraded"], true);
    assert_eq!(s["members"][2]["health"]["health"], "failed");
    assert_eq!(s["capacity_bytes"], v.capacity());
}
