//! A track-aligned volume assembled from files: its members' boundary lists are stored at
//! creation (from each member's drive model unit), read back at reassembly, and a corrupt
//! list refuses the volume with the reason.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::clock::VirtualClock;
use crate::member::SystemRunner;
use crate::tracks::map::TrackMap;
use crate::tracks::stored;

fn spec(dir: &Path) -> VolumeSpec {
    VolumeSpec {
        name: "t".into(),
        layout: "raid0-tracks".parse().unwrap(),
        stripe_unit: 65536,
        policy: PolicySpec::AlwaysOn,
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
                size: Some(16 << 20),
                profile: "maxtor-atlas-10k-v".into(),
                standby_mode: None,
                drive_seed: Some(i + 1),
                inject_read_errors: Vec::new(),
            })
            .collect(),
    }
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("grs-asm-tracks-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn open(spec: &VolumeSpec, dir: &Path) -> Result<Arc<Volume>> {
    let runner: Arc<dyn CommandRunner> = Arc::new(SystemRunner);
    assemble(spec, Arc::new(VirtualClock::new()), dir, &runner)
}

fn stored_list(path: &Path) -> Option<TrackMap> {
    let m = FileMember::open_or_create(MemberKind::File, path, 16 << 20).unwrap();
    stored::load(&m).unwrap().map(|(map, _)| map)
}

#[test]
fn boundary_lists_are_stored_at_creation_and_read_back_at_assembly() {
    let dir = tmp("lists");
    let s = spec(&dir);
    let v = open(&s, &dir).unwrap();
    let cap = v.capacity();
    let data: Vec<u8> = (0..cap).map(|i| (i % 251) as u8).collect();
    v.write(0, &data).unwrap();
    drop(v);
    // Each member keeps its own unit's tracks: the lists differ between members.
    let lists: Vec<TrackMap> = s
        .members
        .iter()
        .map(|m| stored_list(&m.path).expect("a stored list"))
        .collect();
    assert!(lists.windows(2).any(|w| w[0].start(1) != w[1].start(1)));
    for (m, list) in s.members.iter().zip(&lists) {
        let mut p = DriveProfile::load(&m.profile).unwrap();
        p.unit = m.drive_seed;
        let model = TrackMap::from_model(&p, (16 << 20) / 512).unwrap();
        assert_eq!(list.start(1), model.start(1));
    }
    let v = open(&s, &dir).unwrap();
    assert_eq!(v.capacity(), cap);
    let mut back = vec![0u8; cap as usize];
    v.read(0, &mut back).unwrap();
    assert!(back == data, "data read back through the stored lists");
    drop(v);

    // A changed drive seed does not change a stored list: it was found once and is kept.
    let mut other = s.clone();
    other.members[1].drive_seed = Some(40);
    let v = open(&other, &dir).unwrap();
    assert_eq!(v.capacity(), cap);
    drop(v);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_corrupt_boundary_list_refuses_the_volume_with_the_reason() {
    let dir = tmp("corrupt");
    let s = spec(&dir);
    drop(open(&s, &dir).unwrap());
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&s.members[2].path)
        .unwrap();
    let mut byte = [0u8; 1];
    let at = stored::STORED_AT + 40;
    f.read_exact_at(&mut byte, at).unwrap();
    f.write_all_at(&[byte[0] ^ 0x10], at).unwrap();
    drop(f);
    let err = format!("{:#}", open(&s, &dir).unwrap_err());
    assert!(
        err.contains("member 2") && err.contains("checksum"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

fn raid5_spec(dir: &Path) -> VolumeSpec {
    let mut s = spec(dir);
    s.layout = "raid5-tracks".parse().unwrap();
    s
}

#[test]
fn a_track_aligned_raid5_keeps_its_lists_and_serves_every_byte_after_losing_a_member() {
    let dir = tmp("raid5");
    let s = raid5_spec(&dir);
    let v = open(&s, &dir).unwrap();
    let cap = v.capacity();
    let data: Vec<u8> = (0..cap).map(|i| (i % 241) as u8).collect();
    v.write(0, &data).unwrap();
    drop(v);
    for m in &s.members {
        assert!(
            stored_list(&m.path).is_some(),
            "{} keeps its list",
            m.path.display()
        );
    }
    // Reassembled from the stored lists, member 1 is lost: every byte comes from parity,
    // then a blank replacement is rebuilt and the scrub finds parity right.
    let v = open(&s, &dir).unwrap();
    assert_eq!(v.capacity(), cap);
    v.fail_member(1, "test: lost");
    let mut back = vec![0u8; cap as usize];
    v.read(0, &mut back).unwrap();
    assert!(back == data, "every byte through the other members");
    let fresh = dir.join("fresh.img");
    let store = FileMember::open_or_create(MemberKind::File, &fresh, 16 << 20).unwrap();
    v.replace_member(1, Arc::new(store)).unwrap();
    while v.rebuild_step(1, 1 << 20).unwrap().is_some() {}
    v.fail_member(0, "test: lost after the rebuild");
    v.read(0, &mut back).unwrap();
    assert!(back == data, "every byte through the rebuilt member");
    assert_eq!(v.scrub(false).unwrap().mismatched_chunks, 0);
    drop(v);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_track_aligned_raid5_refuses_an_unknown_layout_option_by_name() {
    let dir = tmp("raid5-opt");
    let mut s = raid5_spec(&dir);
    s.layout_options = LayoutOptions::from_pairs([("fill_parity_reads", "true")]).unwrap();
    let err = format!("{:#}", open(&s, &dir).unwrap_err());
    assert!(err.contains("fill_parity_reads"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Per-member rows through assembly and a crash: the volume stops uncleanly with writes
/// marked in its write-intent bitmap, and one member's track-1 unit is torn (its bytes
/// changed as if its write never landed). At reassembly the resync rebuilds parity of the
/// dirty rows from units side by side at each member's own track offsets: every row XORs to
/// zero again, and the scrub agrees.
#[test]
fn a_per_member_raid5_resyncs_its_dirty_rows_after_a_crash() {
    let dir = tmp("raid5-rows");
    let mut s = raid5_spec(&dir);
    s.layout_options = LayoutOptions::from_pairs([("stripe", "per_member")]).unwrap();
    let v = open(&s, &dir).unwrap();
    let cap = v.capacity();
    let data: Vec<u8> = (0..cap).map(|i| (i % 239) as u8).collect();
    v.write(0, &data).unwrap();
    v.flush().unwrap();
    v.write(0, &data[..(4 << 20) as usize]).unwrap();
    // A crash: the volume is gone without its clean stop (its bits stay set).
    drop(v);
    let maps: Vec<TrackMap> = s
        .members
        .iter()
        .map(|m| stored_list(&m.path).unwrap().scaled(512).unwrap())
        .collect();
    let rows =
        crate::layout::Raid5Tracks::with_options(maps, (16 << 20) - DATA_OFFSET, &s.layout_options)
            .unwrap();
    let unit = |m: usize, r: usize| {
        (
            DATA_OFFSET + rows.member_stripe_starts(m)[r],
            rows.unit_lens()[r] as usize,
        )
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&s.members[2].path)
        .unwrap();
    let (at, len) = unit(2, 1);
    f.write_all_at(&vec![0x5a; len], at).unwrap();
    drop(f);
    let v = open(&s, &dir).unwrap();
    assert!(v.resync_pending() > 0, "the crash left dirty regions");
    while v.resync_pending() > 0 {
        v.tick();
    }
    let files: Vec<std::fs::File> = s
        .members
        .iter()
        .map(|m| std::fs::File::open(&m.path).unwrap())
        .collect();
    for r in 0..rows.unit_lens().len() {
        let mut x = vec![0u8; rows.unit_lens()[r] as usize];
        for (m, f) in files.iter().enumerate() {
            let (at, len) = unit(m, r);
            let mut b = vec![0u8; len];
            f.read_exact_at(&mut b, at).unwrap();
            x.iter_mut().zip(&b).for_each(|(a, b)| *a ^= b);
        }
        assert!(
            x.iter().all(|&b| b == 0),
            "row {r}: parity after the resync"
        );
    }
    assert_eq!(v.scrub(false).unwrap().mismatched_chunks, 0);
    drop(v);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Track-aligned RAID10 through assembly and a crash: one mirror's row is torn while the
/// region is dirty; the resync compares the pair's rows at each mirror's own offsets and
/// copies the first mirror's over, so every byte reads back and the rows are equal again.
#[test]
fn a_track_aligned_raid10_resyncs_a_torn_mirror_after_a_crash() {
    let dir = tmp("raid10");
    let mut s = spec(&dir);
    s.layout = "raid10-tracks".parse().unwrap();
    s.members.truncate(2);
    // Units 1 and 4 of the model: mirrors whose tracks differ.
    s.members[1].drive_seed = Some(4);
    let v = open(&s, &dir).unwrap();
    let cap = v.capacity();
    let data: Vec<u8> = (0..cap).map(|i| (i % 233) as u8).collect();
    v.write(0, &data).unwrap();
    drop(v);
    let maps: Vec<TrackMap> = s
        .members
        .iter()
        .map(|m| stored_list(&m.path).unwrap().scaled(512).unwrap())
        .collect();
    let l = crate::layout::Raid10Tracks::with_tracks(maps, (16 << 20) - DATA_OFFSET).unwrap();
    assert_ne!(
        l.member_rows(0)[1],
        l.member_rows(1)[1],
        "mirrors' tracks differ"
    );
    let row = |m: usize, k: usize| (DATA_OFFSET + l.member_rows(m)[k], l.row_lens(0)[k] as usize);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&s.members[1].path)
        .unwrap();
    let (at, len) = row(1, 1);
    f.write_all_at(&vec![0xa5; len], at).unwrap();
    drop(f);
    let v = open(&s, &dir).unwrap();
    assert!(v.resync_pending() > 0, "the crash left dirty regions");
    while v.resync_pending() > 0 {
        v.tick();
    }
    v.fail_member(0, "test: read through the resynced mirror");
    let mut back = vec![0u8; cap as usize];
    v.read(0, &mut back).unwrap();
    assert!(back == data, "every byte through the resynced mirror");
    drop(v);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A replacement of another unit (other tracks) keeps the list its data was placed by: it is
/// stored on it at `replace_member`, so the volume is reassembled with the same layout and
/// every byte reads back (without it the replacement's own model gave other tracks).
#[test]
fn a_replacement_keeps_the_boundary_list_its_data_was_placed_by() {
    let dir = tmp("replace-list");
    let mut s = raid5_spec(&dir);
    s.layout_options = LayoutOptions::from_pairs([("stripe", "per_member")]).unwrap();
    let v = open(&s, &dir).unwrap();
    let cap = v.capacity();
    let data: Vec<u8> = (0..cap).map(|i| (i % 229) as u8).collect();
    v.write(0, &data).unwrap();
    v.fail_member(1, "test: lost");
    let fresh = dir.join("fresh.img");
    let store = FileMember::open_or_create(MemberKind::File, &fresh, 16 << 20).unwrap();
    v.replace_member(1, Arc::new(store)).unwrap();
    while v.rebuild_step(1, 1 << 20).unwrap().is_some() {}
    drop(v);
    s.members[1].path = fresh;
    // Member 1 was unit 2 (599,040-byte first track); unit 3's is 559,104 bytes.
    s.members[1].drive_seed = Some(3);
    let v = open(&s, &dir).unwrap();
    assert_eq!(v.capacity(), cap);
    let mut back = vec![0u8; cap as usize];
    v.read(0, &mut back).unwrap();
    assert!(back == data, "every byte where the layout placed it");
    drop(v);
    std::fs::remove_dir_all(dir).unwrap();
}
