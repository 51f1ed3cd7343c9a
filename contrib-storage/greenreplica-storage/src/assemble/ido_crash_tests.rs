//! IDO's zone table survives an agent crash (issue 17): what reads taught it before the last
//! acknowledged write (deltas), an epoch's halving and a hint (whole-table records), and a
//! checkpoint in between all come back on reassembly, and the rebuild order with them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::clock::VirtualClock;
use crate::layout::zone_table::{zone_bytes_for, EPOCH_READS};
use crate::member::SystemRunner;

fn runner() -> Arc<dyn CommandRunner> {
    Arc::new(SystemRunner)
}

fn spec(dir: &Path) -> VolumeSpec {
    VolumeSpec {
        name: "ido".into(),
        layout: "raid5-ido".parse().unwrap(),
        stripe_unit: 65536,
        policy: PolicySpec::AlwaysOn,
        start_stop_budget_per_day: 48,
        rebuild_mb_s: 100.0,
        bitmap_region: 1 << 20,
        integrity: IntegritySettings::default(),
        layout_options: Vec::new(),
        trace: None,
        members: (0..3)
            .map(|i| MemberSpec {
                kind: MemberKind::File,
                path: dir.join(format!("m{i}.img")),
                size: Some(8 << 20),
                profile: "test-fast".into(),
                standby_mode: None,
                inject_read_errors: Vec::new(),
            })
            .collect(),
    }
}

fn tmp() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("grs-ido-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn open(s: &VolumeSpec, dir: &Path) -> Arc<Volume> {
    assemble(s, Arc::new(VirtualClock::new()), dir, &runner()).unwrap()
}

fn table(v: &Volume) -> Vec<u8> {
    v.layout().checkpoint_image().unwrap()
}

fn read(v: &Volume, offset: u64, times: usize) {
    let mut buf = vec![0u8; 4096];
    for _ in 0..times {
        v.read(offset, &mut buf).unwrap();
    }
}

#[test]
fn the_zone_table_comes_back_after_a_crash_and_orders_the_rebuild() {
    let dir = tmp();
    let s = spec(&dir);
    let v = open(&s, &dir);
    // 8 MiB members, 64 KiB chunks: zones of whole 128 KiB stripes, at least 64 of them.
    let zone = zone_bytes_for(v.capacity(), 2 * 65536);
    assert!(v.capacity() / zone >= 64, "{zone}");
    read(&v, 10 * zone, 5);
    read(&v, 3 * zone, 2);
    v.write(0, &[7u8; 4096]).unwrap();
    v.checkpoint_metadata().unwrap();
    read(&v, 3 * zone, 4);
    v.hint(&[(30 * zone, 4096)]).unwrap();
    v.write(4096, &[8u8; 4096]).unwrap();
    read(&v, 12 * zone, 1);
    v.write(8192, &[9u8; 4096]).unwrap();
    v.flush().unwrap();
    let acked = table(&v);
    // Not acknowledged by a write and a flush: may be lost.
    read(&v, 60 * zone, 3);
    drop(v);

    let v = open(&s, &dir);
    assert_eq!(table(&v), acked, "the zone table after the first crash");
    // An epoch ends (every popularity halved): the whole table is journaled.
    read(&v, 10 * zone, EPOCH_READS as usize);
    v.write(0, &[1u8; 4096]).unwrap();
    v.flush().unwrap();
    let acked = table(&v);
    drop(v);

    let v = open(&s, &dir);
    assert_eq!(table(&v), acked, "the zone table after the second crash");
    v.fail_member(1, "test: pulled");
    v.replace_member(1, s.members[1].open_replacement(None, &runner()).unwrap())
        .unwrap();
    let member_zone = zone / 2;
    let order: Vec<u64> = (0..4)
        .map(|_| {
            let (offset, len) = v.layout().rebuild_next(1, 0, member_zone);
            v.layout().rebuilt(1, offset, len, 0);
            offset / member_zone
        })
        .collect();
    assert_eq!(
        order,
        vec![30, 10, 3, 0],
        "hinted, then hottest first (zone 12 aged to 0: cold), from the table replayed after the crash"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
