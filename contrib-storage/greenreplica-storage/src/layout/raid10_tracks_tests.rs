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

fn four() -> Raid10Tracks {
    // Pair 0: tracks of 8 KiB and 9 KiB (one shortened); pair 1: 10 KiB and 7 KiB.
    Raid10Tracks::with_tracks(
        vec![
            map(&[8192; 6]),
            map(&[9216, 6144, 9216, 9216, 9216, 9216]),
            map(&[10240; 6]),
            map(&[7168; 6]),
        ],
        1 << 20,
    )
    .unwrap()
}

#[test]
fn rows_are_each_mirrors_own_tracks_as_long_as_the_shorter() {
    let l = four();
    assert_eq!(&l.row_lens(0)[..3], &[8192, 6144, 8192]);
    assert_eq!(&l.row_lens(1)[..3], &[7168, 7168, 7168]);
    assert_eq!(&l.member_rows(1)[..3], &[0, 9216, 15360]);
    let total: u64 = l.row_lens(0).iter().chain(&l.row_lens(1)).sum();
    assert_eq!(l.capacity(), total);
    let views = [MemberView::healthy(0.0); 4];
    // Chunk 1 is pair 1's row 0 (volume bytes 8192..15360): on members 2 and 3 at 0.
    let plan = l.plan(IoKind::Write, 8192, 7168, &views).unwrap();
    let mut at: Vec<_> = plan
        .writes
        .iter()
        .map(|io| (io.member, io.member_offset, io.len))
        .collect();
    at.sort_unstable();
    assert_eq!(at, [(2, 0, 7168), (3, 0, 7168)]);
    // Chunk 2 is pair 0's row 1: member 0 at 8192, member 1 at its own 9216.
    let plan = l.plan(IoKind::Write, 15360, 6144, &views).unwrap();
    let mut at: Vec<_> = plan
        .writes
        .iter()
        .map(|io| (io.member, io.member_offset))
        .collect();
    at.sort_unstable();
    assert_eq!(at, [(0, 8192), (1, 9216)]);
    for offset in (0..l.capacity()).step_by(1536) {
        for len in [512, 4096, 9000, 30000] {
            let len = len.min(l.capacity() - offset);
            for kind in [IoKind::Read, IoKind::Write] {
                let plan = l.plan(kind, offset, len, &views).unwrap();
                let total: u64 = plan.ios().map(|(_, io)| io.len).sum();
                let copies = if kind == IoKind::Read { 1 } else { 2 };
                assert_eq!(total, copies * len);
                for (_, io) in plan.ios() {
                    let (k, start, end) = l.member_tracks()[io.member].track(io.member_offset);
                    assert!(io.member_offset >= start && io.member_offset + io.len <= end);
                    let unit = l.row_lens(io.member / 2)[k];
                    assert!(io.member_offset + io.len <= start + unit, "{io:?}");
                }
            }
        }
    }
}

#[test]
fn a_read_takes_the_other_mirror_at_its_own_offset_and_recovery_skips_padding() {
    let l = four();
    let mut views = [MemberView::healthy(0.0); 4];
    views[0] = MemberView::failed(0.0);
    let plan = l.plan(IoKind::Read, 15360 + 100, 512, &views).unwrap();
    assert_eq!(plan.reads.len(), 1);
    assert_eq!(
        (plan.reads[0].member, plan.reads[0].member_offset),
        (1, 9216 + 100)
    );
    // Member 1's track 0 is 9216 bytes, its row 8192: recovering its first 16 KiB reads
    // member 0's rows 0 and 1 (6144, member 1's shortened track) and the start of row 2,
    // never member 1's padding (8192..9216).
    let views = [MemberView::healthy(0.0); 4];
    let plan = l.recover(1, 0, 16384, &views).unwrap();
    let reads: Vec<_> = plan
        .reads
        .iter()
        .map(|io| (io.member, io.member_offset, io.len, io.buf))
        .collect();
    assert_eq!(
        reads,
        [
            (0, 0, 8192, Buf::Caller(0)),
            (0, 8192, 6144, Buf::Caller(9216)),
            (0, 16384, 16384 - 15360, Buf::Caller(15360))
        ]
    );
    assert!(l.survives(&[false, true, true, false]));
    assert!(!l.survives(&[false, false, true, true]));
}

#[test]
fn locks_hold_both_mirrors_and_sync_sees_rows_side_by_side() {
    let l = four();
    let mut spans = l.lock_spans(15360, 100);
    spans.sort_unstable();
    assert_eq!(spans, [(0, 8192, 8292), (1, 9216, 9316)]);
    assert_eq!(l.sync_pieces(1, 8192 - 10, 20), [(8182, 10), (9216, 10)]);
    assert_eq!(l.sync_pieces(0, 0, 8192 + 6144), [(0, 8192 + 6144)]);
    // Member 1's bytes 9000..9300 touch its rows 0 and 1 (sync bytes 0..14336).
    assert_eq!(l.sync_range(9000, 9300), (0, 14336));
    assert!(Raid10Tracks::check(3, 65536).is_err());
}

#[test]
fn the_default_model_builds_with_different_mirror_tracks() {
    let l = Raid10Tracks::new(&Shape {
        members: 4,
        member_bytes: 64 << 20,
        chunk: 65536,
        options: Default::default(),
    })
    .unwrap();
    assert!(l.capacity() > (64 << 20) && l.capacity() <= 2 * (64 << 20));
    assert!(l.member_data_bytes() <= 64 << 20);
    let firsts: Vec<u64> = l.member_tracks().iter().map(|m| m.start(1)).collect();
    assert!(
        firsts[0] != firsts[1] || firsts[2] != firsts[3],
        "{firsts:?}"
    );
}
