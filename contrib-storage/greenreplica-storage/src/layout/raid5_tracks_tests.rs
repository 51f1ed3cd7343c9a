use super::*;

fn map(sizes: &[u64]) -> TrackMap {
    let mut b = Vec::new();
    let mut at = 0;
    for s in sizes {
        at += s;
        b.push(at);
    }
    let end = b.pop().unwrap_or(0);
    TrackMap::new(&b, end).unwrap()
}

fn three() -> Raid5Tracks {
    // Member 2's boundaries fall between member 0's and 1's: stripes are cut at each.
    Raid5Tracks::with_tracks(
        vec![
            map(&[8192; 6]),
            map(&[8192, 7168, 8192, 8192, 8192, 8192]),
            map(&[6144, 8192, 8192, 8192, 8192, 8192]),
        ],
        1 << 20,
    )
    .unwrap()
}

#[test]
fn stripes_end_at_the_first_boundary_of_any_member() {
    let l = three();
    assert_eq!(
        &l.stripe_starts()[..6],
        &[0, 6144, 8192, 14336, 15360, 16384]
    );
    for w in l.stripe_starts().windows(2) {
        for m in l.member_tracks() {
            let (_, start, end) = m.track(w[0]);
            assert!(w[0] >= start && w[1] <= end, "{w:?} crosses a track");
        }
    }
    let stripe_bytes: u64 = l.stripe_starts().windows(2).map(|w| w[1] - w[0]).sum();
    assert_eq!(l.capacity(), 2 * stripe_bytes);
}

#[test]
fn no_member_io_crosses_a_track_and_a_full_stripe_write_reads_nothing() {
    let l = three();
    let views = [MemberView::healthy(0.0); 3];
    for offset in (0..l.capacity()).step_by(1536) {
        for len in [512, 4096, 9000, 30000] {
            let len = len.min(l.capacity() - offset);
            for kind in [IoKind::Read, IoKind::Write] {
                let plan = l.plan(kind, offset, len, &views).unwrap();
                for (_, io) in plan.ios() {
                    let (_, start, end) = l.member_tracks()[io.member].track(io.member_offset);
                    assert!(io.member_offset >= start && io.member_offset + io.len <= end);
                }
            }
        }
    }
    // Stripe 1 is 2048 bytes per chunk at member offset 6144, data at 12288.
    let plan = l.plan(IoKind::Write, 12288, 4096, &views).unwrap();
    assert!(plan.reads.is_empty(), "{plan:?}");
    assert_eq!(plan.writes.len(), 3);
    assert!(plan.writes.iter().all(|io| io.member_offset == 6144));
}

#[test]
fn a_whole_stripe_read_fills_in_the_parity_read_unless_told_not_to() {
    let l = three();
    let views = [MemberView::healthy(0.0); 3];
    let plan = l.plan(IoKind::Read, 12288, 4096, &views).unwrap();
    assert_eq!(plan.reads.len(), 3, "{plan:?}");
    let members: Vec<usize> = plan.reads.iter().map(|io| io.member).collect();
    assert!(members.contains(&0) && members.contains(&1) && members.contains(&2));
    assert!(matches!(plan.reads[2].buf, Buf::Scratch(..)));
    l.set_option(FILL_PARITY_READ, "false").unwrap();
    assert!(!l.option_places_data(FILL_PARITY_READ));
    let plan = l.plan(IoKind::Read, 12288, 4096, &views).unwrap();
    assert_eq!(plan.reads.len(), 2);
    assert!(l.set_option(FILL_PARITY_READ, "maybe").is_err());
    let err = l.set_option("chunk_tracks", "2").unwrap_err();
    assert!(err.contains("chunk_tracks"), "{err}");
}

#[test]
fn a_degraded_read_reconstructs_from_the_same_offsets() {
    let l = three();
    let mut views = [MemberView::healthy(0.0); 3];
    let plan = l.plan(IoKind::Read, 0, 512, &views).unwrap();
    let m = plan.reads[0].member;
    views[m] = MemberView::failed(0.0);
    let plan = l.plan(IoKind::Read, 0, 512, &views).unwrap();
    assert_eq!(plan.reads.len(), 2);
    assert!(plan
        .reads
        .iter()
        .all(|io| io.member != m && io.member_offset == 0));
    assert!(l.survives(&[true, false, true]) && !l.survives(&[false, false, true]));
}

#[test]
fn the_default_model_builds_with_different_member_tracks() {
    let l = Raid5Tracks::new(&Shape {
        members: 4,
        member_bytes: 64 << 20,
        chunk: 65536,
        options: Default::default(),
    })
    .unwrap();
    assert!(l.capacity() > 2 * (64 << 20) && l.capacity() <= 3 * (64 << 20));
    assert!(l.member_data_bytes() <= 64 << 20);
    assert!(Raid5Tracks::check(2, 65536).is_err());
}

fn rows() -> Raid5Tracks {
    // Tracks of three sizes (as three units of one model), member 1 with a shortened track.
    Raid5Tracks::with_stripe(
        vec![
            map(&[8192; 7]),
            map(&[9216, 9216, 6144, 9216, 9216, 9216, 9216]),
            map(&[10240; 7]),
        ],
        1 << 20,
        Stripe::PerMember,
    )
    .unwrap()
}

#[test]
fn per_member_rows_sit_on_each_members_own_tracks_as_long_as_the_shortest() {
    let l = rows();
    assert_eq!(l.stripe(), Stripe::PerMember);
    assert_eq!(&l.unit_lens()[..4], &[8192, 8192, 6144, 8192]);
    assert_eq!(&l.member_stripe_starts(0)[..4], &[0, 8192, 16384, 24576]);
    assert_eq!(&l.member_stripe_starts(1)[..4], &[0, 9216, 18432, 24576]);
    assert_eq!(&l.member_stripe_starts(2)[..4], &[0, 10240, 20480, 30720]);
    assert_eq!(l.capacity(), 2 * l.unit_lens().iter().sum::<u64>());
    let views = [MemberView::healthy(0.0); 3];
    for offset in (0..l.capacity()).step_by(1536) {
        for len in [512, 4096, 9000, 30000] {
            let len = len.min(l.capacity() - offset);
            for kind in [IoKind::Read, IoKind::Write] {
                let plan = l.plan(kind, offset, len, &views).unwrap();
                for (_, io) in plan.ios() {
                    let m = io.member;
                    let (k, start, end) = l.member_tracks()[m].track(io.member_offset);
                    assert!(io.member_offset >= start && io.member_offset + io.len <= end);
                    // Only the row's unit, never the padding after it.
                    assert!(
                        io.member_offset + io.len <= start + l.unit_lens()[k],
                        "{io:?}"
                    );
                }
            }
        }
    }
    // Row 1 (units of 8192 at member offsets 8192, 9216, 10240): a whole-row write reads
    // nothing and writes each member at its own track start; a whole-row read reads each.
    let plan = l.plan(IoKind::Write, 16384, 16384, &views).unwrap();
    assert!(plan.reads.is_empty(), "{plan:?}");
    let mut at: Vec<(usize, u64)> = plan
        .writes
        .iter()
        .map(|io| (io.member, io.member_offset))
        .collect();
    at.sort_unstable();
    assert_eq!(at, [(0, 8192), (1, 9216), (2, 10240)]);
    let plan = l.plan(IoKind::Read, 16384, 16384, &views).unwrap();
    assert_eq!(plan.reads.len(), 3, "the parity member's read filled in");
}

#[test]
fn per_member_locks_hold_every_members_tracks_and_sync_sees_units_side_by_side() {
    let l = rows();
    // Row 2 (units of 6144) is bytes 32768..45056 of the volume.
    let mut spans = l.lock_spans(32768 + 100, 10);
    spans.sort_unstable();
    assert_eq!(
        spans,
        [(0, 16384, 24576), (1, 18432, 24576), (2, 20480, 30720)]
    );
    // The sync space is the units back to back: row 2 starts at 16384 there.
    assert_eq!(l.sync_bytes(), l.unit_lens().iter().sum::<u64>());
    assert_eq!(l.sync_pieces(1, 16384, 6144), [(18432, 6144)]);
    assert_eq!(
        l.sync_pieces(2, 16384 - 100, 200),
        [(10240 + 8092, 100), (20480, 100)]
    );
    // A dirty region of member offsets covers the rows any member has there.
    assert_eq!(l.sync_range(18432, 18433), (8192, 22528));
    assert_eq!(l.sync_range(0, 1), (0, 8192));
}

#[test]
fn the_stripe_option_is_read_at_construction_and_checked_after() {
    let options = LayoutOptions::from_pairs([(STRIPE, "per_member")]).unwrap();
    let l = Raid5Tracks::with_options(vec![map(&[8192; 4]); 3], 1 << 20, &options).unwrap();
    assert_eq!(l.stripe(), Stripe::PerMember);
    assert!(l.option_places_data(STRIPE));
    l.set_option(STRIPE, "per_member").unwrap();
    let err = l.set_option(STRIPE, "equal_offset").unwrap_err();
    assert!(err.contains("built with per_member"), "{err}");
    let bad = LayoutOptions::from_pairs([(STRIPE, "diagonal")]).unwrap();
    let err = Raid5Tracks::with_options(vec![map(&[8192; 4]); 3], 1 << 20, &bad).unwrap_err();
    assert!(err.to_string().contains("diagonal"), "{err}");
}

#[test]
fn a_degraded_per_member_row_reconstructs_from_each_members_own_offset() {
    let l = rows();
    let mut views = [MemberView::healthy(0.0); 3];
    // Volume byte 16384 is row 1's first data unit.
    let plan = l.plan(IoKind::Read, 16384, 512, &views).unwrap();
    let m = plan.reads[0].member;
    views[m] = MemberView::failed(0.0);
    let plan = l.plan(IoKind::Read, 16384, 512, &views).unwrap();
    let mut at: Vec<(usize, u64)> = plan
        .reads
        .iter()
        .map(|io| (io.member, io.member_offset))
        .collect();
    at.sort_unstable();
    let want: Vec<(usize, u64)> = [(0, 8192), (1, 9216), (2, 10240)]
        .into_iter()
        .filter(|&(x, _)| x != m)
        .collect();
    assert_eq!(at, want);
    // Recovering the lost member's track 1 reads the others' tracks 1; its padding is
    // never asked of anyone.
    let track = l.member_stripe_starts(m)[1];
    let plan = l.recover(m, track, 12000, &views).unwrap();
    for io in &plan.reads {
        let (k, start, _) = l.member_tracks()[io.member].track(io.member_offset);
        assert!(k == 1 || k == 2, "{io:?}");
        assert!(io.member_offset + io.len <= start + l.unit_lens()[k]);
    }
}
