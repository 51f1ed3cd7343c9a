//! The staging buffer on the layout (issue 16 item 1): staged runs are read from the active
//! disk until their append, from the flash after it, never from stale flash bytes; adjacent
//! writes become one append; a write that does not fit goes to flash at once.

use super::tests::{asleep, flush, qmd, qmd_staged, qmd_staging, Disks, MEMBER, SU};
use super::*;
use crate::layout::MemberView;

fn pattern(i: u64, len: u64) -> Vec<u8> {
    (0..len)
        .map(|j| (i as u8).wrapping_mul(37) ^ j as u8)
        .collect()
}

fn read(l: &Qmd, disks: &mut Disks, offset: u64, len: u64) -> (Vec<u8>, Vec<usize>) {
    let r = l.plan(IoKind::Read, offset, len, &asleep(3)).unwrap();
    let mut buf = vec![0u8; len as usize];
    disks.run(&r, &mut buf);
    (buf, r.reads.iter().map(|io| io.member).collect())
}

#[test]
fn staged_runs_are_read_from_the_active_disk_until_appended_then_from_flash() {
    let l = qmd_staged(3);
    let views = asleep(3);
    let mut disks = Disks::new(3);
    // Old bytes where the writes' flash slots are: a read of them would be stale.
    disks.0[2].fill(0xEE);
    let mut journal = Vec::new();
    let places: Vec<u64> = (0..8).map(|i| i * 3 * SU).collect();
    for (i, &at) in places.iter().enumerate() {
        let mut data = pattern(i as u64, 2048);
        let w = l.plan(IoKind::Write, at, 2048, &views).unwrap();
        assert_eq!(w.stage.len(), 1, "write {i} stages its flash piece");
        assert!(
            w.writes.iter().all(|io| io.member == 0),
            "write {i}: only the active disk now"
        );
        disks.write(&l, &w, &mut data);
        journal.extend(l.journal_records(&w));
    }
    for (i, &at) in places.iter().enumerate() {
        let (buf, members) = read(&l, &mut disks, at, 2048);
        assert_eq!(
            members,
            vec![0],
            "staged run {i} comes from the active disk"
        );
        assert!(buf == pattern(i as u64, 2048), "staged run {i} reads back");
    }
    // The flush: the eight adjacent slots are one append.
    let appends = l.staged_appends();
    assert_eq!(appends.len(), 1, "one append for eight writes");
    assert_eq!((appends[0].member, appends[0].bytes.len()), (2, 8 * 2048));
    // In flight (written, not yet confirmed): still not read from flash.
    assert_eq!(read(&l, &mut disks, 0, 2048).1, vec![0]);
    for a in &appends {
        disks.0[a.member][a.offset as usize..][..a.bytes.len()].copy_from_slice(&a.bytes);
    }
    l.staged_appended();
    journal.extend(flush(&l, &mut disks, &views));
    l.committed();
    assert_eq!(l.layout_state().unwrap()["staged_bytes"], 0);
    for (i, &at) in places.iter().enumerate() {
        let (buf, members) = read(&l, &mut disks, at, 2048);
        assert_eq!(members, vec![2], "run {i} hits in flash once appended");
        assert!(buf == pattern(i as u64, 2048), "run {i} from flash");
    }
    // Acknowledged: a restart finds them in flash (the active disk zeroed to be sure).
    disks.0[0].fill(0);
    let again = qmd_staged(3);
    again.replay(None, &journal).unwrap();
    again
        .replay_blocks(&mut |m, off, len| {
            let end = off.checked_add(len).filter(|&e| e <= MEMBER)?;
            Some(disks.0[m][off as usize..end as usize].to_vec())
        })
        .unwrap();
    for (i, &at) in places.iter().enumerate() {
        assert!(
            read(&again, &mut disks, at, 2048).0 == pattern(i as u64, 2048),
            "run {i} after a restart"
        );
    }
}

#[test]
fn a_write_that_does_not_fit_the_space_left_goes_to_flash_at_once() {
    let l = qmd_staging(3, 2 * SU);
    let views = asleep(3);
    let mut disks = Disks::new(3);
    let mut plans = Vec::new();
    for i in 0..3u64 {
        let mut data = pattern(i, SU);
        let w = l.plan(IoKind::Write, i * 2 * SU, SU, &views).unwrap();
        disks.write(&l, &w, &mut data);
        plans.push(w);
    }
    assert_eq!(plans[0].stage.len() + plans[1].stage.len(), 2);
    assert!(plans[2].stage.is_empty(), "the space is full");
    assert!(
        plans[2].writes.iter().any(|io| io.member == 2),
        "so its flash piece is written now"
    );
    assert_eq!(read(&l, &mut disks, 4 * SU, SU).1, vec![2]);
    flush(&l, &mut disks, &views);
    for i in 0..3u64 {
        let (buf, members) = read(&l, &mut disks, i * 2 * SU, SU);
        assert_eq!(
            (buf == pattern(i, SU), members),
            (true, vec![2]),
            "write {i}"
        );
    }
    // Off: nothing stages.
    let off = qmd(3);
    let w = off.plan(IoKind::Write, 0, SU, &views).unwrap();
    assert!(w.stage.is_empty() && w.writes.iter().any(|io| io.member == 2));
    assert!(off.set_option("staging_bytes", "x").is_err());
    assert!(!off.option_places_data("staging_bytes"));
}

/// A write refused or failed on the engine gives its staging space back.
#[test]
fn an_abandoned_staged_write_frees_its_space() {
    let l = qmd_staging(3, SU);
    let views = asleep(3);
    let w = l.plan(IoKind::Write, 0, SU, &views).unwrap();
    assert_eq!(w.stage.len(), 1);
    l.abandon(&w);
    assert_eq!(l.layout_state().unwrap()["staged_bytes"], 0);
    let again = l.plan(IoKind::Write, 0, SU, &views).unwrap();
    assert_eq!(again.stage.len(), 1, "the space came back");
}

/// An extent whose staged bytes are not yet appended is not reused, even once nothing in
/// the index points into it: a later write placed there would be overwritten by the stale
/// append.
#[test]
fn an_extent_with_staged_bytes_is_not_reused() {
    let l = qmd_staged(3);
    let views = asleep(3);
    let up = vec![MemberView::healthy(0.0); 3];
    let mut disks = Disks::new(3);
    let mut x = pattern(1, SU);
    let w = l.plan(IoKind::Write, 0, SU, &views).unwrap();
    assert_eq!(w.stage.len(), 1);
    let x_slot = w.stage[0].member_offset;
    disks.write(&l, &w, &mut x);
    // The second disk wakes and the run is written back (from the active disk): the index
    // is empty, its extent has nothing live.
    l.background_all();
    while let Some((o, n)) = l.background_work(&up) {
        let p = l.background_plan(o, n, &up).unwrap();
        let mut buf = vec![0u8; n as usize];
        disks.run(&p, &mut buf);
        l.complete(&p);
    }
    assert_eq!(l.buffered_bytes(), 0);
    // The blocks (not the staged bytes) written and committed: reclaim may run.
    for b in l.metadata_blocks(&views) {
        disks.0[b.member][b.offset as usize..][..b.bytes.len()].copy_from_slice(&b.bytes);
    }
    l.metadata_blocks_written(true);
    l.journal_records(&Plan::default());
    l.committed();
    // A new write with the second disk asleep again: not in the staged run's slot.
    let mut y = pattern(2, SU);
    let w = l.plan(IoKind::Write, 4 * SU, SU, &views).unwrap();
    let y_slot = w
        .stage
        .iter()
        .chain(&w.writes)
        .find(|io| io.member == 2)
        .map(|io| io.member_offset)
        .unwrap();
    assert_ne!(
        y_slot, x_slot,
        "the staged run's flash slot is not handed out again"
    );
    disks.write(&l, &w, &mut y);
    flush(&l, &mut disks, &views);
    let (buf, members) = read(&l, &mut disks, 4 * SU, SU);
    assert_eq!(members, vec![2]);
    assert!(
        buf == y,
        "the new write's flash copy is intact after the append"
    );
}
