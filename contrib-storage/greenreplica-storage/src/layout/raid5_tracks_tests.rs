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
