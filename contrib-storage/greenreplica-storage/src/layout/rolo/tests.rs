//! Unit tests of the logged layouts' planning, index and flavours.

use super::*;

const SU: u64 = 65536;

fn layout(flavour: Flavour, members: usize) -> Rolo {
    Rolo::new(
        flavour,
        &Shape {
            members,
            member_bytes: 64 * SU,
            chunk: SU,
            options: crate::layout::LayoutOptions::default(),
        },
    )
    .unwrap()
}

fn targets(ios: &[MemberIo]) -> Vec<(usize, u64)> {
    ios.iter().map(|io| (io.member, io.member_offset)).collect()
}

#[test]
fn rolo_p_logs_off_duty_pairs_and_writes_the_on_duty_pair_in_place() {
    let l = layout(Flavour::RoloP, 4);
    let healthy = [MemberView::healthy(0.0); 4];
    assert_eq!(
        (l.geo.data_bytes, l.geo.log(0), l.geo.log_len),
        (48 * SU, 48 * SU, 16 * SU)
    );
    assert_eq!(l.capacity(), 96 * SU);
    // Logger 1 (pair 0's mirror) is on duty: pair 1's write goes to primary 2 and the log.
    let w = l.plan(IoKind::Write, SU, 4096, &healthy).unwrap();
    assert_eq!(targets(&w.writes), vec![(2, 0), (1, 48 * SU)]);
    l.complete(&w);
    // Pair 0's own write lands in place on both copies.
    let w0 = l.plan(IoKind::Write, 0, 4096, &healthy).unwrap();
    assert_eq!(targets(&w0.writes), vec![(0, 0), (1, 0)]);
    // Reads go to the primary; without it, logged bytes come from the log.
    let r = l.plan(IoKind::Read, SU, 8192, &healthy).unwrap();
    assert_eq!(targets(&r.reads), vec![(2, 0)]);
    let mut lost = healthy;
    lost[2] = MemberView::failed(0.0);
    let r = l.plan(IoKind::Read, SU, 8192, &lost).unwrap();
    assert_eq!(targets(&r.reads), vec![(1, 48 * SU), (3, 4096)]);
    // Losing the primary and the logger of its logged bytes loses them.
    assert!(l.survives(&[true, true, false, true]));
    assert!(!l.survives(&[true, false, false, true]));
    assert!(l.redundant());
}

#[test]
fn graid_logs_to_its_log_member_and_destages_every_pair_at_80_percent() {
    let l = layout(Flavour::Graid, 5);
    let healthy = [MemberView::healthy(0.0); 5];
    assert_eq!(l.role(4), Role::Log);
    let mut home = 0;
    while !lock(&l.state).destaging.iter().any(|&d| d) {
        let w = l.plan(IoKind::Write, home, SU, &healthy).unwrap();
        assert_eq!(
            w.writes[1].member, 4,
            "the log member takes the second copy"
        );
        l.complete(&w);
        home += SU;
    }
    assert_eq!(
        home,
        52 * SU,
        "80 % of 64 stripe units, rounded up to a whole write"
    );
    let mut steps = 0;
    while let Some((offset, len)) = l.background_work(&healthy) {
        let plan = l.background_plan(offset, len, &healthy).unwrap();
        assert_eq!(
            plan.reads[0].member + 1,
            plan.writes[0].member,
            "primary to mirror"
        );
        l.complete(&plan);
        steps += 1;
    }
    assert_eq!((steps, l.logged_bytes()), (52, 0));
    l.committed();
    assert_ne!(
        lock(&l.state).heads[0],
        0,
        "not before its records went to the journal"
    );
    assert!(!l.journal_records(&Plan::default()).is_empty());
    l.committed();
    assert_eq!(
        lock(&l.state).heads[0],
        0,
        "the empty log is reused from its start"
    );
}

#[test]
fn the_index_comes_back_from_its_records_and_from_a_checkpoint_image() {
    let l = layout(Flavour::RoloP, 6);
    let healthy = [MemberView::healthy(0.0); 6];
    let mut records = Vec::new();
    for i in 0..200u64 {
        let w = l
            .plan(IoKind::Write, (i * 37 % 150) * 8192, 12288, &healthy)
            .unwrap();
        l.complete(&w);
        records.extend(l.journal_records(&w));
        if i % 9 == 0 {
            if let Some((o, n)) = l.background_work(&healthy) {
                let p = l.background_plan(o, n, &healthy).unwrap();
                l.complete(&p);
                records.extend(l.journal_records(&p));
            }
        }
    }
    let image = l.checkpoint_image().unwrap();
    let from_records = layout(Flavour::RoloP, 6);
    from_records.replay(None, &records).unwrap();
    assert_eq!(from_records.checkpoint_image().unwrap(), image);
    // A checkpoint that already reflects the records, then the records again.
    let twice = layout(Flavour::RoloP, 6);
    twice.replay(Some(&image), &records).unwrap();
    assert_eq!(twice.checkpoint_image().unwrap(), image);
    assert!(layout(Flavour::RoloP, 6)
        .replay(
            None,
            &[LayoutRecord {
                kind: REC_LOGGED,
                payload: vec![1, 2]
            }]
        )
        .is_err());
}

#[test]
fn shapes_are_checked() {
    assert!(Rolo::check_graid(4, SU).is_err());
    assert!(Rolo::check_rolo(3, SU).is_err());
    assert_eq!(Rolo::check_rolo(4, 1000).unwrap_err().key, "stripe_unit");
}

/// A write in place to the primary alone (its mirror failed, its pair on duty) supersedes
/// an older logged copy: once the mirror is rebuilt from the primary and the primary is
/// lost, reads must come from the mirror, not from the stale log.
#[test]
fn an_in_place_write_to_the_primary_alone_retires_the_older_log_copy() {
    let l = layout(Flavour::RoloP, 4);
    let healthy = [MemberView::healthy(0.0); 4];
    let w = l.plan(IoKind::Write, SU, 4096, &healthy).unwrap();
    assert_eq!(targets(&w.writes), vec![(2, 0), (1, 48 * SU)]);
    l.complete(&w);
    // Pair 1 comes on duty while its mirror is failed: the next write lands on 2 alone.
    lock(&l.state).on_duty = 1;
    let mut no_mirror = healthy;
    no_mirror[3] = MemberView::failed(0.0);
    let w = l.plan(IoKind::Write, SU, 4096, &no_mirror).unwrap();
    assert_eq!(targets(&w.writes), vec![(2, 0)]);
    l.complete(&w);
    // The mirror is rebuilt from the primary, then the primary is lost.
    let mut no_primary = healthy;
    no_primary[2] = MemberView::failed(0.0);
    let r = l.plan(IoKind::Read, SU, 4096, &no_primary).unwrap();
    assert_eq!(
        targets(&r.reads),
        vec![(3, 0)],
        "the newest copy is the mirror's"
    );
}

/// Writes of the new on-duty pair that the previous logger takes while the new logger spins
/// up must leave that log during the pair's duty, even after its destage had caught up:
/// else the previous log is never empty when its turn comes back, every log fills, and writes
/// fall back in place to sleeping mirrors.
#[test]
fn writes_bridged_after_the_destage_caught_up_still_go_home_during_the_duty() {
    let l = layout(Flavour::RoloP, 4);
    let healthy = [MemberView::healthy(0.0); 4];
    // Pair 1 (odd volume chunks) logs to member 1 until the duty rotates to member 3.
    let mut row = 0;
    while lock(&l.state).on_duty == 0 {
        let w = l
            .plan(IoKind::Write, (2 * row + 1) * SU, SU, &healthy)
            .unwrap();
        l.complete(&w);
        row += 1;
    }
    // Member 3 still spins up: pair 1's writes go to the previous logger.
    let mut spinning = healthy;
    spinning[3].ready_at = 9.6;
    let bridged = |l: &Rolo| {
        let w = l.plan(IoKind::Write, SU, 4096, &spinning).unwrap();
        let head = lock(&l.state).heads[0];
        assert_eq!(targets(&w.writes), vec![(2, 0), (1, 48 * SU + head - 4096)]);
        l.complete(&w);
    };
    bridged(&l);
    while let Some((o, n)) = l.background_work(&healthy) {
        let plan = l.background_plan(o, n, &healthy).unwrap();
        l.complete(&plan);
    }
    bridged(&l);
    let (o, n) = l
        .background_work(&healthy)
        .expect("the write bridged after the destage caught up goes home too");
    let plan = l.background_plan(o, n, &healthy).unwrap();
    l.complete(&plan);
    assert_eq!(lock(&l.state).live[0], 0, "the previous log is empty again");
    l.journal_records(&Plan::default());
    l.committed();
    assert_eq!(lock(&l.state).heads[0], 0, "and reused from its start");
}

#[test]
fn with_every_log_past_the_threshold_the_duty_does_not_rotate_on_every_write() {
    // No destage runs, so no log is reclaimed: both logs end past rotate_at. Without
    // hysteresis the duty moved to the other logger whenever it was a byte less full,
    // once per write (5,458 rotations in a 100-s root run).
    let l = layout(Flavour::RoloP, 4);
    let healthy = [MemberView::healthy(0.0); 4];
    for i in 0..1000u64 {
        let home = (i % 2) * SU + (i / 2 % 16) * 4096;
        let w = l.plan(IoKind::Write, home, 4096, &healthy).unwrap();
        l.complete(&w);
    }
    let st = lock(&l.state);
    assert!(
        st.heads.iter().all(|&h| h >= l.threshold),
        "the scenario fills both logs past the threshold: {:?}",
        st.heads
    );
    assert!(
        st.rotations <= 2 * l.loggers.len() as u64 + 1,
        "{} rotations for {} loggers",
        st.rotations,
        l.loggers.len()
    );
}
