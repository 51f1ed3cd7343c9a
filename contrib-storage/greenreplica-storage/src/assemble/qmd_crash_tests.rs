//! QMD's index survives an agent crash (issue 16): with the second disk asleep, writes go to
//! the active disk and the flash member; what a flush acknowledged comes back on
//! reassembly (from the metadata journal and a checkpoint in between), every read returns
//! it, and the buffered runs are written back to the second disk once it is woken.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::clock::VirtualClock;
use crate::member::SystemRunner;
use crate::power_state::PowerState;
use crate::superblock::DATA_OFFSET;

const MEMBER_BYTES: u64 = 8 << 20;

pub(super) fn spec(dir: &Path) -> VolumeSpec {
    VolumeSpec {
        name: "qmd".into(),
        layout: "qmd".parse().unwrap(),
        stripe_unit: 65536,
        // The second disk (member 1) sleeps as soon as it is idle; the flash (2) never.
        policy: PolicySpec::Mirrors { timeout_s: 0.0 },
        start_stop_budget_per_day: 48,
        rebuild_mb_s: 100.0,
        bitmap_region: 1 << 20,
        integrity: IntegritySettings::default(),
        layout_options: Default::default(),
        trace: None,
        members: (0..3)
            .map(|i| MemberSpec {
                kind: MemberKind::File,
                path: dir.join(format!("m{i}.img")),
                size: Some(MEMBER_BYTES),
                profile: "test-fast".into(),
                standby_mode: None,
                inject_read_errors: Vec::new(),
                drive_seed: None,
            })
            .collect(),
    }
}

fn tmp() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("grs-qmd-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub(super) fn open(s: &VolumeSpec, dir: &Path) -> Arc<Volume> {
    let runner: Arc<dyn CommandRunner> = Arc::new(SystemRunner);
    assemble(s, Arc::new(VirtualClock::new()), dir, &runner).unwrap()
}

fn index(v: &Volume) -> Vec<u8> {
    v.layout().checkpoint_image().unwrap()
}

pub(super) fn data(dir: &Path, member: usize) -> Vec<u8> {
    std::fs::read(dir.join(format!("m{member}.img"))).unwrap()[DATA_OFFSET as usize..].to_vec()
}

pub(super) fn block(i: u64, version: u8) -> Vec<u8> {
    (0..8192u64)
        .map(|j| (i as u8).wrapping_mul(31) ^ (j as u8) ^ version)
        .collect()
}

/// Every byte reads as `model` (the acknowledged writes, `whence`); after a drain of the
/// layout's background work and a flush the pair's two disks are equal.
fn reads_back_then_drains_equal(v: &Volume, dir: &Path, model: &[u8], whence: &str) {
    let mut buf = vec![0u8; model.len()];
    v.read(0, &mut buf).unwrap();
    assert!(
        buf == model,
        "reads return the acknowledged writes {whence}"
    );
    v.drain_layout_background().unwrap();
    v.flush().unwrap();
    assert_eq!(data(dir, 0), data(dir, 1), "the pair is equal");
}

#[test]
fn the_flash_index_comes_back_after_a_crash_and_serves_the_acknowledged_writes() {
    let dir = tmp();
    let s = spec(&dir);
    let v = open(&s, &dir);
    v.tick(); // the second disk goes to sleep
    let mut model = vec![0u8; v.capacity() as usize];
    let mut put = |v: &Volume, i: u64, version: u8| {
        let b = block(i, version);
        let at = (i * 24_576) as usize;
        v.write(at as u64, &b).unwrap();
        model[at..at + b.len()].copy_from_slice(&b);
    };
    for i in 0..40 {
        put(&v, i, 1);
    }
    v.flush().unwrap();
    v.checkpoint_metadata().unwrap();
    for i in (0..40).step_by(3) {
        put(&v, i, 2);
    }
    v.flush().unwrap();
    let acked = index(&v);
    let state = v.layout().layout_state().unwrap();
    assert!(
        state["buffered_bytes"].as_u64().unwrap() >= 40 * 8192
            && state["address_blocks"].as_u64().unwrap() > 0,
        "the writes were buffered, their index in address blocks: {state}"
    );
    assert!(
        data(&dir, 0) != data(&dir, 1),
        "the sleeping second disk is stale"
    );
    // Killed (no clean shutdown); writes in flight at a crash are the layout unit tests'.
    drop(v);

    let v = open(&s, &dir);
    assert_eq!(
        index(&v),
        acked,
        "the address root as the last flush acknowledged it"
    );
    assert_eq!(
        v.layout().layout_state().unwrap(),
        state,
        "the index rebuilt from the address blocks on flash"
    );
    v.tick();
    for offset in (0..v.capacity()).step_by(1 << 20) {
        let len = (1u64 << 20).min(v.capacity() - offset) as usize;
        let mut buf = vec![0u8; len];
        v.read(offset, &mut buf).unwrap();
        assert!(
            buf == model[offset as usize..offset as usize + len],
            "read {offset}"
        );
    }
    // Woken (utilization rose): the buffered runs go back to the second disk.
    v.drain_layout_background().unwrap();
    v.flush().unwrap();
    assert_eq!(
        data(&dir, 0),
        data(&dir, 1),
        "the pair is equal after the write-back"
    );
    drop(v);
    let v = open(&s, &dir);
    let mut buf = vec![0u8; model.len()];
    v.read(0, &mut buf).unwrap();
    assert!(
        buf == model,
        "every byte after the write-back and another restart"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// Partial on-line mirrors: the hot and cold ranges set through the engine are journaled
/// and committed before the answer, so an agent killed right after (and after a checkpoint
/// and a further change) comes back with the same table.
#[test]
fn temperatures_come_back_after_a_crash() {
    // Its own directory: tmp() is the other test's, which runs in parallel.
    let dir = std::env::temp_dir().join(format!("grs-qmd-temperature-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let s = spec(&dir);
    let v = open(&s, &dir);
    v.set_temperature(&[(0, 1 << 20)], "cold").unwrap();
    v.set_temperature(&[(65536, 65536)], "hot").unwrap();
    let first = v.temperatures();
    assert_eq!(
        first,
        vec![
            (0, 65536, "cold"),
            (65536, 65536, "hot"),
            (131072, (1 << 20) - 131072, "cold")
        ]
    );
    drop(v); // killed: no flush, no shutdown after the answer
    let v = open(&s, &dir);
    assert_eq!(v.temperatures(), first, "the journaled table");
    v.checkpoint_metadata().unwrap();
    v.set_temperature(&[(0, 65536)], "normal").unwrap();
    let second = v.temperatures();
    drop(v);
    let v = open(&s, &dir);
    assert_eq!(
        v.temperatures(),
        second,
        "the checkpoint image, then the change after it"
    );
    drop(v);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Issue 16 item 5: with the pair cold and both its disks asleep (the utilization policy),
/// writes land in flash alone. Their flash-only entries come back after a kill, reads
/// return them although both disks are stale, and the write-back puts them on both disks.
#[test]
fn flash_only_writes_come_back_after_a_crash_and_reach_both_disks() {
    let dir = std::env::temp_dir().join(format!("grs-qmd-sole-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut s = spec(&dir);
    s.policy = "utilization:sleep_epochs=2,wake_epochs=2".parse().unwrap();
    let runner: Arc<dyn CommandRunner> = Arc::new(SystemRunner);
    let clock = Arc::new(VirtualClock::new());
    let v = assemble(&s, clock.clone(), &dir, &runner).unwrap();
    let mut model = vec![0u8; v.capacity() as usize];
    for i in 0..40 {
        let b = block(i, 1);
        let at = (i * 24_576) as usize;
        v.write(at as u64, &b).unwrap();
        model[at..at + b.len()].copy_from_slice(&b);
    }
    v.set_temperature(&[(0, v.capacity())], "cold").unwrap();
    let asleep = |v: &Volume, m: usize| {
        matches!(
            v.status_view().members[m].state,
            PowerState::Standby | PowerState::SpinningDown
        )
    };
    let mut t = 0.0;
    while !(asleep(&v, 0) && asleep(&v, 1)) {
        assert!(t < 120.0, "the cold pair sleeps whole");
        t += 0.5;
        clock.advance_to(t);
        v.tick();
    }
    v.flush().unwrap();
    let (disk0, disk1) = (data(&dir, 0), data(&dir, 1));
    for i in (0..40).step_by(3) {
        let b = block(i, 2);
        let at = (i * 24_576) as usize;
        v.write(at as u64, &b).unwrap();
        model[at..at + b.len()].copy_from_slice(&b);
    }
    v.flush().unwrap();
    assert!(
        asleep(&v, 0) && asleep(&v, 1),
        "no disk woke for the writes"
    );
    assert!(
        data(&dir, 0) == disk0 && data(&dir, 1) == disk1,
        "the writes reached neither disk"
    );
    let acked = index(&v);
    drop(v); // killed

    let v = open(&s, &dir);
    assert_eq!(index(&v), acked, "the flash-only entries came back");
    reads_back_then_drains_equal(&v, &dir, &model, "from flash");
    assert!(
        data(&dir, 0)[..model.len()] == model[..],
        "both disks hold the newest data after the write-back"
    );
    drop(v);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The flash lost its address blocks (every block on the flash file corrupted after the
/// flush that acknowledged them): assembly detects it from the checksums, the active disk
/// is taken as current over those spans (it holds every normal buffered run), reads return
/// the acknowledged data, the background work copies it to the second disk, and the next
/// start finds nothing to recover.
#[test]
fn lost_address_blocks_are_recovered_from_the_active_disk() {
    let dir = std::env::temp_dir().join(format!("grs-qmd-lost-blocks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let s = spec(&dir);
    let v = open(&s, &dir);
    v.tick(); // the second disk goes to sleep
    let mut model = vec![0u8; v.capacity() as usize];
    for i in 0..40 {
        let b = block(i, 1);
        let at = (i * 24_576) as usize;
        v.write(at as u64, &b).unwrap();
        model[at..at + b.len()].copy_from_slice(&b);
    }
    v.flush().unwrap();
    let blocks = v.layout().layout_state().unwrap()["address_blocks"]
        .as_u64()
        .unwrap();
    assert!(blocks > 0);
    drop(v);
    // Every address block on the flash file loses a byte of its entries.
    let flash = dir.join("m2.img");
    let mut bytes = std::fs::read(&flash).unwrap();
    let magic = 0x4244_4d51u32.to_le_bytes();
    let mut torn = 0;
    for at in (DATA_OFFSET as usize..bytes.len() - 64).step_by(512) {
        if bytes[at..at + 4] == magic {
            bytes[at + 40] ^= 0xff;
            torn += 1;
        }
    }
    assert!(torn as u64 >= blocks, "{torn} blocks found for {blocks}");
    std::fs::write(&flash, &bytes).unwrap();

    let v = open(&s, &dir);
    let state = v.layout().layout_state().unwrap();
    assert_eq!(state["buffered_bytes"], 0, "{state}");
    assert!(state["recovering_bytes"].as_u64().unwrap() > 0, "{state}");
    reads_back_then_drains_equal(&v, &dir, &model, "from the active disk");
    let mut buf = vec![0u8; model.len()];
    assert_eq!(v.layout().layout_state().unwrap()["recovering_bytes"], 0);
    drop(v);
    let v = open(&s, &dir);
    assert_eq!(v.layout().layout_state().unwrap()["recovering_bytes"], 0);
    v.read(0, &mut buf).unwrap();
    assert!(buf == model);
    drop(v);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Partial on-line mirrors assembled from files: `mirror_bytes` is kept in the member
/// headers (a different value is refused on reassembly); the hot copies are written in the
/// background and kept current by writes; after a kill they are stale (none is trusted),
/// every read returns the acknowledged bytes, and the copy jobs make them current again.
#[test]
fn hot_copies_are_stale_after_a_crash_and_the_data_is_as_acknowledged() {
    let dir = std::env::temp_dir().join(format!("grs-qmd-mirror-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut s = spec(&dir);
    s.policy = PolicySpec::AlwaysOn;
    s.members = (0..5)
        .map(|i| MemberSpec {
            path: dir.join(format!("m{i}.img")),
            ..s.members[0].clone()
        })
        .collect();
    s.layout_options =
        crate::layout::LayoutOptions::from_pairs([("mirror_bytes", (1u64 << 20).to_string())])
            .unwrap();
    let v = open(&s, &dir);
    let cap = v.capacity();
    let mut model = vec![0u8; cap as usize];
    for i in 0..cap / 24_576 {
        let b = block(i, 1);
        let at = (i * 24_576) as usize;
        v.write(at as u64, &b).unwrap();
        model[at..at + b.len()].copy_from_slice(&b);
    }
    v.set_temperature(&[(0, cap)], "cold").unwrap();
    v.set_temperature(&[(4 * 65536, 8 * 65536)], "hot").unwrap();
    v.drain_layout_background().unwrap();
    let copies = |v: &Volume| {
        let st = v.layout().layout_state().unwrap();
        (st["hot_copies"].as_u64(), st["hot_copies_current"].as_u64())
    };
    assert_eq!(copies(&v), (Some(4), Some(4)), "pair 1's hot units copied");
    // Writes over hot units keep their copies current; acknowledged by the flush.
    for i in 0..8u64 {
        let b = block(i, 2);
        let at = 4 * 65536 + i * 65536 + 4096;
        v.write(at, &b).unwrap();
        model[at as usize..at as usize + b.len()].copy_from_slice(&b);
    }
    v.flush().unwrap();
    assert_eq!(copies(&v), (Some(4), Some(4)));
    drop(v); // killed

    let mut other = s.clone();
    other.layout_options =
        crate::layout::LayoutOptions::from_pairs([("mirror_bytes", "0")]).unwrap();
    let runner: Arc<dyn CommandRunner> = Arc::new(SystemRunner);
    assert!(
        assemble(&other, Arc::new(VirtualClock::new()), &dir, &runner).is_err(),
        "another mirror_bytes than the headers' is refused"
    );
    let v = open(&s, &dir);
    assert_eq!(
        copies(&v),
        (Some(4), Some(0)),
        "after a restart no copy is trusted"
    );
    assert_eq!(v.layout().cold_groups(), Vec::<usize>::new());
    let mut buf = vec![0u8; cap as usize];
    v.read(0, &mut buf).unwrap();
    assert!(buf == model, "every byte as acknowledged");
    v.drain_layout_background().unwrap();
    assert_eq!(copies(&v), (Some(4), Some(4)), "copied again");
    assert_eq!(v.layout().cold_groups(), vec![2]);
    v.read(0, &mut buf).unwrap();
    assert!(buf == model, "every byte as acknowledged, copies current");
    drop(v);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Compaction on the engine, with the metadata journal: cold writes interleaved with
/// overwrites of a few hot places leave every extent holding a few live runs; the volume's
/// ticks move them (and the blocks) into the extent being filled and its flushes commit the
/// new root, so the old extents are reclaimed while the second disk sleeps. Killed after
/// runs moved and before the flush that names their new places: every read is as
/// acknowledged, and after the restart's write-back no extent is left held.
#[test]
fn compaction_reclaims_extents_pinned_by_a_few_runs_across_kills() {
    let dir = tmp();
    let mut s = spec(&dir);
    // Disks slow to spin up: the sleeping second disk is never taken as up (no write-back).
    for m in &mut s.members[..2] {
        m.profile = "ultrastar-15k600".into();
    }
    let v = open(&s, &dir);
    v.tick(); // the second disk goes to sleep
    let mut model = vec![0u8; v.capacity() as usize];
    let mut put = |v: &Volume, at: u64, b: Vec<u8>| {
        v.write(at, &b).unwrap();
        model[at as usize..at as usize + b.len()].copy_from_slice(&b);
    };
    let mut rounds = |v: &Volume, from: u64, to: u64| {
        for round in from..to {
            put(v, (1 << 20) + round * 24_576, block(round, 1));
            for hot in 0..8u64 {
                put(v, (hot % 4) * 8192, block(hot, round as u8));
            }
            v.flush().unwrap();
        }
    };
    let held = |v: &Volume| {
        let st = v.layout().layout_state().unwrap();
        let n = |k: &str| st[k].as_u64().unwrap();
        (n("extents_held"), n("buffered_bytes"), n("compacted_runs"))
    };
    rounds(&v, 0, 40);
    let (before, buffered, _) = held(&v);
    assert!(
        before >= 4,
        "the writes spread over {before} extents ({buffered} bytes live)"
    );
    for _ in 0..6 {
        v.tick();
        v.flush().unwrap();
    }
    let (after, buffered, moved) = held(&v);
    let needed = buffered.div_ceil(MEMBER_BYTES / 16);
    assert!(
        buffered >= 44 * 8192 && moved > 0,
        "still buffered ({buffered} bytes), {moved} runs moved"
    );
    assert!(
        after <= needed + 1,
        "{after} extents held for {buffered} live bytes (before: {before})"
    );
    // More of the same; the ticks move runs; killed before a flush commits their places.
    rounds(&v, 40, 60);
    for _ in 0..4 {
        v.tick();
    }
    assert!(held(&v).2 > moved, "runs moved on the ticks");
    drop(v);
    let v = open(&s, &dir);
    reads_back_then_drains_equal(&v, &dir, &model, "after a kill mid-compaction");
    v.flush().unwrap();
    assert_eq!(held(&v).0, 0, "no extent left held after the write-back");
    std::fs::remove_dir_all(dir).unwrap();
}
