use super::*;
use crate::synth::Rng;

pub(super) const SU: u64 = 4096;
pub(super) const MEMBER: u64 = 64 * SU;

/// Staging off: these tests look at each write's flash piece (the staged path has its own,
/// `qmd_staged`, and the crash runs run both).
pub(super) fn qmd(members: usize) -> Qmd {
    qmd_staging(members, 0)
}

/// With the default 1 MiB staging buffer.
pub(super) fn qmd_staged(members: usize) -> Qmd {
    qmd_staging(members, staging::DEFAULT_STAGING_BYTES)
}

pub(super) fn qmd_staging(members: usize, staging_bytes: u64) -> Qmd {
    let l = Qmd::new(&Shape {
        members,
        member_bytes: MEMBER,
        chunk: SU,
        options: Default::default(),
    })
    .unwrap();
    l.set_option("staging_bytes", &staging_bytes.to_string())
        .unwrap();
    l
}

/// Pair 0's second disk (member 1) and pair 1's (member 3) asleep: ready far in the future.
pub(super) fn asleep(members: usize) -> Vec<MemberView> {
    (0..members)
        .map(|m| {
            let ready = if m % 2 == 1 && m + 1 < members {
                1e9
            } else {
                0.0
            };
            MemberView::healthy(ready)
        })
        .collect()
}

fn targets(ios: &[MemberIo]) -> Vec<(usize, u64)> {
    ios.iter().map(|io| (io.member, io.member_offset)).collect()
}

/// Members as byte arrays, plans executed on them (QMD plans have no computations).
pub(super) struct Disks(pub(super) Vec<Vec<u8>>);

impl Disks {
    pub(super) fn new(members: usize) -> Self {
        Self(vec![vec![0u8; MEMBER as usize]; members])
    }

    pub(super) fn run(&mut self, plan: &Plan, caller: &mut [u8]) {
        assert!(plan.compute.is_empty());
        for io in &plan.reads {
            let Buf::Caller(at) = io.buf else {
                panic!("qmd reads into the caller's buffer")
            };
            let src = &self.0[io.member][io.member_offset as usize..][..io.len as usize];
            caller[at as usize..][..io.len as usize].copy_from_slice(src);
        }
        for io in &plan.writes {
            let Buf::Caller(at) = io.buf else {
                panic!("qmd writes from the caller's buffer")
            };
            self.0[io.member][io.member_offset as usize..][..io.len as usize]
                .copy_from_slice(&caller[at as usize..][..io.len as usize]);
        }
    }

    /// A write as the engine runs it: its member writes, then (in one step) its staged
    /// pieces handed to the layout and the layout's `complete`.
    pub(super) fn write(&mut self, l: &Qmd, plan: &Plan, data: &mut [u8]) {
        self.run(plan, data);
        for io in &plan.stage {
            let Buf::Caller(at) = io.buf else {
                panic!("qmd stages from the caller's buffer")
            };
            l.stage(io, &data[at as usize..][..io.len as usize]);
        }
        l.complete(plan);
    }

    /// The staged appends land (each cut to `keep` bytes at most: a kill mid-write).
    pub(super) fn append_staged(&mut self, l: &Qmd, keep: impl Fn(usize) -> usize) {
        for a in l.staged_appends() {
            let n = keep(a.bytes.len()).min(a.bytes.len());
            self.0[a.member][a.offset as usize..][..n].copy_from_slice(&a.bytes[..n]);
        }
        l.staged_appended();
    }
}

/// A volume flush on `disks`: the address blocks land on the flash member, then the root
/// records they yield are the journal's (returned, to be appended and committed).
pub(super) fn flush(l: &Qmd, disks: &mut Disks, views: &[MemberView]) -> Vec<LayoutRecord> {
    // As the engine: the staged bytes first, in the same step as the blocks.
    disks.append_staged(l, |n| n);
    for b in l.metadata_blocks(views) {
        disks.0[b.member][b.offset as usize..][..b.bytes.len()].copy_from_slice(&b.bytes);
    }
    l.metadata_blocks_written(true)
}

/// The agent starts again: the journal replayed, the address blocks read from `disks`.
pub(super) fn restart(members: usize, journal: &[LayoutRecord], disks: &Disks) -> Qmd {
    restart_staging(members, 0, journal, disks)
}

pub(super) fn restart_staging(
    members: usize,
    staging_bytes: u64,
    journal: &[LayoutRecord],
    disks: &Disks,
) -> Qmd {
    let l = qmd_staging(members, staging_bytes);
    l.replay(None, journal).unwrap();
    l.replay_blocks(&mut |m, off, len| {
        let end = off.checked_add(len).filter(|&e| e <= MEMBER)?;
        Some(disks.0[m][off as usize..end as usize].to_vec())
    })
    .unwrap();
    l
}

/// Every index entry: (pair, disk address, entry).
fn entries(l: &Qmd) -> Vec<(usize, u64, Entry)> {
    let st = lock(&l.state);
    st.index
        .iter()
        .enumerate()
        .flat_map(|(p, i)| i.iter().map(move |(h, e)| (p, h, e)))
        .collect()
}

#[test]
fn shapes_are_checked() {
    assert!(Qmd::check(4, SU).is_err());
    assert!(Qmd::check(1, SU).is_err());
    assert_eq!(Qmd::check(3, 1000).unwrap_err().key, "stripe_unit");
    assert_eq!(LayoutKind::QMD.name(), "qmd");
    let shape = Shape {
        members: 3,
        member_bytes: MEMBER,
        chunk: SU,
        options: Default::default(),
    };
    let bad_k = FlushParams {
        k: 0,
        ..FlushParams::default()
    };
    assert!(Qmd::with_params(&shape, bad_k, 0).is_err());
    assert!(Qmd::with_params(&shape, FlushParams::default(), 3000).is_err());
    let l = qmd(5);
    assert!(l.set_option("k", "0").is_err());
    assert!(l.set_option("k", "ten").is_err());
    assert!(l.set_option("fill_threshold", "1.5").is_err());
    assert!(l
        .set_option("buffer_bytes", &(MEMBER + 1).to_string())
        .is_err());
    assert!(l.set_option("extent_bytes", "1000").is_err());
    assert!(l.set_option("colour", "blue").is_err());
    l.set_option("buffer_bytes", &(MEMBER / 2).to_string())
        .unwrap();
    assert_eq!(lock(&l.state).extents.count(), 16);
    l.set_option("extent_bytes", &(8 * SU).to_string()).unwrap();
    assert_eq!(lock(&l.state).extents.count(), 4);
    l.set_option("k", "10").unwrap();
    let w = l.plan(IoKind::Write, 0, 512, &asleep(5)).unwrap();
    l.complete(&w);
    assert!(l.set_option("buffer_bytes", "65536").is_err(), "in use");
    let l = qmd(5);
    assert_eq!(l.role(4), Role::Flash);
    assert_eq!(l.capacity(), 2 * MEMBER);
    assert_eq!(lock(&l.state).extents.extent_bytes(), 4 * SU);
}

#[test]
fn a_sleeping_second_disk_gets_its_writes_through_the_buffer_and_reads_hit_in_flash() {
    let l = qmd(5);
    let views = asleep(5);
    // Volume stripe unit 1 is pair 1's home 0.
    let w = l.plan(IoKind::Write, SU, 2048, &views).unwrap();
    assert_eq!(targets(&w.writes), vec![(2, 0), (4, 0)]);
    l.complete(&w);
    // The new extent is journaled; the index entry waits for the flush's address block.
    let records = l.journal_records(&w);
    assert_eq!(
        records.iter().map(|r| r.kind).collect::<Vec<_>>(),
        vec![REC_VOLUME_INFO]
    );
    // The next write is appended to the same extent.
    let w = l.plan(IoKind::Write, 0, 1024, &views).unwrap();
    assert_eq!(targets(&w.writes), vec![(0, 0), (4, 2048)]);
    l.complete(&w);
    assert_eq!(l.buffered_bytes(), 3072);
    // The flush: one address block per changed span (pair 1's first, pair 0's first),
    // appended after the data, then one root record each.
    let blocks = l.metadata_blocks(&views);
    assert_eq!(
        blocks
            .iter()
            .map(|b| (b.member, b.offset))
            .collect::<Vec<_>>(),
        vec![(4, 3072), (4, 3072 + 512)]
    );
    assert!(
        l.journal_records(&w).is_empty(),
        "no root before the blocks are durable"
    );
    assert_eq!(
        l.metadata_blocks_written(true)
            .iter()
            .map(|r| r.kind)
            .collect::<Vec<_>>(),
        vec![REC_ROOT, REC_ROOT]
    );
    // Nothing changed since: the next flush writes nothing.
    assert!(l.metadata_blocks(&views).is_empty());
    assert!(l.metadata_blocks_written(true).is_empty());
    assert!(l.journal_records(&w).is_empty());
    // The journal grows per changed span and flush, not per write: 50 writes into one
    // span, one block and one root record.
    for i in 0..50 {
        let w = l.plan(IoKind::Write, 2 * SU + i * 64, 64, &views).unwrap();
        l.complete(&w);
    }
    assert_eq!(l.metadata_blocks(&views).len(), 1);
    let records = l.metadata_blocks_written(true);
    assert_eq!(records.iter().filter(|r| r.kind == REC_ROOT).count(), 1);
    assert!(
        records.len() <= 2,
        "a root record, and maybe a new extent's info"
    );
    // A read across buffered and unbuffered bytes: flash for the hit, the active disk else.
    let r = l.plan(IoKind::Read, SU + 1024, 2048, &views).unwrap();
    assert_eq!(targets(&r.reads), vec![(4, 1024), (2, 2048)]);
    // Losing the active disk and the flash loses buffered bytes; either alone does not.
    assert!(l.survives(&[true, true, false, true, true]));
    assert!(l.survives(&[true, true, true, true, false]));
    assert!(!l.survives(&[true, true, false, true, false]));
    assert!(l.redundant());
}

#[test]
fn both_disks_up_and_nothing_buffered_is_plain_raid10() {
    let l = qmd(3);
    let up = [MemberView::healthy(0.0); 3];
    let w = l.plan(IoKind::Write, 0, 4096, &up).unwrap();
    assert_eq!(targets(&w.writes), vec![(0, 0), (1, 0)]);
    l.complete(&w);
    assert!(l.journal_records(&w).is_empty());
    assert_eq!(l.next_wakeup(0.0), None);
}

#[test]
fn the_flush_writes_back_k_runs_per_request_in_elevator_order_and_cleans_the_index() {
    let l = qmd(3);
    let views = asleep(3);
    for home in [5, 1, 9, 3, 7] {
        let w = l.plan(IoKind::Write, home * SU, 512, &views).unwrap();
        l.complete(&w);
    }
    // Asleep and under the fill threshold: nothing to flush.
    assert_eq!(l.next_wakeup(1.0), Some(1.0));
    assert_eq!(l.background_work(&views), None);
    // The second disk is up (the policy woke it): the elevator starts at the head (0, up).
    let up = [MemberView::healthy(0.0); 3];
    // Writes during the flush still go to the buffer (Figure 4).
    let w = l.plan(IoKind::Write, 11 * SU, 512, &up).unwrap();
    assert_eq!(targets(&w.writes)[1].0, 2);
    l.complete(&w);
    // A tick takes the budget of the requests so far.
    while l.next_wakeup(1.5).is_some() && l.background_work(&views).is_some() {}
    let mut order = Vec::new();
    for tick in 0..10 {
        let now = 2.0 + tick as f64;
        let mut in_tick = 0;
        // One foreground request since the last tick: K = 2 write-backs.
        l.plan(IoKind::Read, 40 * SU, 512, &up).unwrap();
        while l.next_wakeup(now).is_some() {
            let Some((offset, len)) = l.background_work(&up) else {
                break;
            };
            let plan = l.background_plan(offset, len, &up).unwrap();
            assert_eq!(targets(&plan.writes), vec![(1, offset)]);
            assert_eq!(plan.reads[0].member, 2, "written back from flash");
            l.complete(&plan);
            order.push(offset / SU);
            in_tick += 1;
        }
        assert!(in_tick <= 2, "at most K = 2 per request");
    }
    assert_eq!(order, vec![1, 3, 5, 7, 9, 11]);
    assert_eq!(l.buffered_bytes(), 0);
    // Nothing buffered any more: in-place writes again.
    let w = l.plan(IoKind::Write, 0, 512, &up).unwrap();
    assert_eq!(targets(&w.writes), vec![(0, 0), (1, 0)]);
}

#[test]
fn reads_avoid_a_second_disks_write_back_backlog_and_the_backlog_is_bounded() {
    let l = qmd(3);
    let views = asleep(3);
    for home in 0..40 {
        let w = l.plan(IoKind::Write, home * SU, 512, &views).unwrap();
        l.complete(&w);
    }
    // The second disk woke after its sleep, 40 runs buffered, no request since the last
    // tick (an unlimited budget): its drive chooses among the oldest 4 queued commands.
    let mut up = [MemberView::healthy(0.0); 3];
    up[1].window = 4;
    let mut given = 0;
    while l.next_wakeup(1.0).is_some() {
        let Some((offset, len)) = l.background_work(&up) else {
            break;
        };
        l.complete(&l.background_plan(offset, len, &up).unwrap());
        given += 1;
    }
    assert_eq!(
        given, 16,
        "four windows in one tick, though the budget allows all 40"
    );
    // Next tick: the drive still holds 13 of them; three more fit.
    up[1].queued = 13;
    let mut next = 0;
    while l.next_wakeup(2.0).is_some() {
        let Some((offset, len)) = l.background_work(&up) else {
            break;
        };
        l.complete(&l.background_plan(offset, len, &up).unwrap());
        next += 1;
    }
    assert_eq!(next, 3);
    // A read of a written-back unit while the second disk's backlog fills its window goes
    // to the active disk, though the second looks readier (its command in service ends
    // first): queued behind the backlog it would wait for all of it.
    up[0].ready_at = 0.002;
    up[1].ready_at = 0.001;
    let r = l.plan(IoKind::Read, 50 * SU, 512, &up).unwrap();
    assert_eq!(targets(&r.reads), vec![(0, 50 * SU)]);
    // Under half the window: the readier disk serves (the read goes first in its window).
    up[1].queued = 1;
    let r = l.plan(IoKind::Read, 50 * SU, 512, &up).unwrap();
    assert_eq!(targets(&r.reads), vec![(1, 50 * SU)]);
    // A drain serves nothing else: no bound.
    up[1].queued = 100;
    l.background_all();
    let mut drained = 0;
    while let Some((offset, len)) = l.background_work(&up) {
        l.complete(&l.background_plan(offset, len, &up).unwrap());
        drained += 1;
    }
    assert_eq!(drained, 40 - 19);
    assert_eq!(l.buffered_bytes(), 0);
}

#[test]
fn a_full_buffer_forces_the_flush_and_extents_come_back_once_durable() {
    let l = qmd(3);
    let views = asleep(3);
    let extents = lock(&l.state).extents.count() as u64;
    let ext = MEMBER / extents;
    // Fill 80 % of the extents.
    let mut home = 0;
    while l.fill() < 0.8 {
        let w = l.plan(IoKind::Write, home % MEMBER, SU, &views).unwrap();
        assert_eq!(w.writes[1].member, 2);
        l.complete(&w);
        home += SU;
    }
    assert_eq!(home, (extents * 8).div_ceil(10) * ext - ext + SU);
    // Acknowledged: the engine appended each write's records (the volume info of the
    // extents taken), and the flush put the index in address blocks on flash.
    assert!(l
        .journal_records(&Plan::default())
        .iter()
        .all(|r| r.kind == REC_VOLUME_INFO));
    let mut disks = Disks::new(3);
    flush(&l, &mut disks, &views);
    l.committed();
    let blocks = lock(&l.state).address.root.len() as u64;
    assert_eq!(blocks, home / SU, "one block per span written");
    // Forced: the flush runs although the second disk sleeps (its I/O wakes it).
    let mut steps = 0;
    for tick in 0..1000 {
        l.next_wakeup(tick as f64);
        while let Some((o, n)) = l.background_work(&views) {
            let p = l.background_plan(o, n, &views).unwrap();
            l.complete(&p);
            steps += 1;
        }
        if l.buffered_bytes() == 0 {
            break;
        }
    }
    assert_eq!(steps, home / SU);
    assert!(l.fill() >= 0.8, "not freed before the records are durable");
    l.committed();
    assert!(
        l.fill() >= 0.8,
        "index changes not yet in committed address blocks"
    );
    let records = flush(&l, &mut disks, &views);
    assert!(records.iter().all(|r| r.kind == REC_ROOT));
    assert_eq!(
        records.len() as u64,
        blocks,
        "one root record per emptied span (a span is a stripe unit here)"
    );
    assert!(l.fill() >= 0.8, "the root records are not committed yet");
    l.committed();
    assert_eq!(l.fill(), 0.0, "empty extents freed");
    assert_eq!(
        l.journal_records(&Plan::default())
            .iter()
            .map(|r| r.kind)
            .collect::<Vec<_>>(),
        vec![REC_VOLUME_INFO]
    );
}

#[test]
fn the_index_comes_back_from_its_records_and_from_a_checkpoint_image() {
    let l = qmd(5);
    let mut rng = Rng(77);
    let mut records = Vec::new();
    let mut disks = Disks::new(5);
    for i in 0..400u64 {
        let views = if i % 50 < 40 {
            asleep(5)
        } else {
            vec![MemberView::healthy(0.0); 5]
        };
        let len = 512 * (1 + rng.next() % 16);
        let offset = (rng.next() % ((l.capacity() - len) / 512)) * 512;
        let w = l.plan(IoKind::Write, offset, len, &views).unwrap();
        l.complete(&w);
        records.extend(l.journal_records(&w));
        l.next_wakeup(i as f64);
        if let Some((o, n)) = l.background_work(&views) {
            let p = l.background_plan(o, n, &views).unwrap();
            l.complete(&p);
            records.extend(l.journal_records(&p));
        }
        if i % 7 == 0 {
            records.extend(flush(&l, &mut disks, &views));
        }
        l.committed();
        records.extend(l.journal_records(&Plan::default()));
    }
    records.extend(flush(&l, &mut disks, &asleep(5)));
    assert!(
        lock(&l.state).address.root.len() > 10,
        "address blocks in use"
    );
    let image = l.checkpoint_image().unwrap();
    let again = restart(5, &records, &disks);
    assert_eq!(again.checkpoint_image().unwrap(), image);
    assert_eq!(entries(&again), entries(&l), "the index from the blocks");
    let twice = qmd(5);
    twice.replay(Some(&image), &records).unwrap();
    twice
        .replay_blocks(&mut |m, off, len| Some(disks.0[m][off as usize..][..len as usize].to_vec()))
        .unwrap();
    assert_eq!(twice.checkpoint_image().unwrap(), image);
    assert_eq!(entries(&twice), entries(&l));
    // A root record naming a span or a block outside the volume is refused.
    let forged = |key: (usize, u64), off: u64| {
        blocks::root_record(
            key,
            Some(&address::RootEntry {
                generation: 1,
                crc: 0,
                place: address::Place::Flash { off, len: 512 },
            }),
        )
    };
    assert!(qmd(5).replay(None, &[forged((2, 0), 0)]).is_err());
    assert!(qmd(5).replay(None, &[forged((0, 1 << 40), 0)]).is_err());
    assert!(qmd(5).replay(None, &[forged((0, 0), MEMBER)]).is_err());
    assert!(
        qmd(5).replay(None, &[forged((0, 0), 0)]).is_err(),
        "extent not held"
    );
    let bad = |kind, payload: Vec<u8>| qmd(5).replay(None, &[LayoutRecord { kind, payload }]);
    assert!(bad(REC_BUFFERED, vec![1, 2]).is_err());
    assert!(bad(
        REC_BUFFERED,
        buffered_record(
            7,
            0,
            &Entry {
                len: 8,
                flash_off: 0,
                sole: false,
            }
        )
        .payload
    )
    .is_err());
    let beyond = Entry {
        len: 8,
        flash_off: MEMBER,
        sole: true,
    };
    assert!(bad(REC_SOLE, buffered_record(0, 0, &beyond).payload).is_err());
    assert!(bad(99, vec![]).is_err());
    // An entry in an extent the volume info does not hold.
    let orphan = Entry {
        len: 8,
        flash_off: 0,
        sole: false,
    };
    assert!(bad(REC_BUFFERED, buffered_record(0, 0, &orphan).payload).is_err());
}

/// Random writes, reads and flushes with the agent killed at random points: the index is
/// rebuilt from the journaled records (those of acknowledged writes, plus possibly some of
/// a write in flight) and every read returns the last acknowledged write.
#[test]
fn after_a_crash_reads_return_the_last_acknowledged_write() {
    crash_runs(false, 0);
}

/// The same with the staging buffer: a write's flash copy is in memory until the flush that
/// acknowledges it appends it; a kill before that loses only the unacknowledged write, and
/// a kill after the blocks (staged appends and blocks maybe torn) too.
#[test]
fn after_a_crash_with_staging_reads_return_the_last_acknowledged_write() {
    crash_runs(false, staging::DEFAULT_STAGING_BYTES);
}

/// The same with every pair cold and, a third of the time, both disks of each pair asleep:
/// writes then land in flash alone (flash-only entries), and the crash rule keeps the flash
/// copy as the newest there.
#[test]
fn after_a_crash_flash_only_writes_read_back_and_the_pairs_converge() {
    crash_runs(true, 0);
}

/// Flash-only writes bypass the staging buffer (memory would hold their only copy).
#[test]
fn after_a_crash_with_staging_flash_only_writes_read_back_and_the_pairs_converge() {
    crash_runs(true, staging::DEFAULT_STAGING_BYTES);
}

/// Every member but the flash asleep.
fn all_asleep(members: usize) -> Vec<MemberView> {
    (0..members)
        .map(|m| MemberView::healthy(if m + 1 < members { 1e9 } else { 0.0 }))
        .collect()
}

fn crash_runs(cold: bool, staging_bytes: u64) {
    let restart = |members, journal: &[LayoutRecord], disks: &Disks| {
        restart_staging(members, staging_bytes, journal, disks)
    };
    for seed in 1..=8u64 {
        let mut rng = Rng(seed * 7919);
        let members = if seed % 2 == 0 { 5 } else { 3 };
        let mut l = qmd_staging(members, staging_bytes);
        let mut staged_seen = false;
        let cap = l.capacity();
        let mut disks = Disks::new(members);
        let mut model = vec![0u8; cap as usize];
        let mut journal: Vec<LayoutRecord> = Vec::new();
        if cold {
            l.set_temperature(&[(0, cap)], "cold").unwrap();
            journal.extend(l.journal_records(&Plan::default()));
            l.committed();
        }
        let (mut crashes, mut torn_roots) = (0, 0);
        let mut buffered_seen = 0u64;
        let mut sole_seen = false;
        for step in 0..1500 {
            let views = match (step / 100) % 3 {
                2 => vec![MemberView::healthy(0.0); members],
                1 if cold => all_asleep(members),
                _ => asleep(members),
            };
            match rng.next() % 100 {
                0..=49 => {
                    let len = 512 * (1 + rng.next() % 12);
                    let offset = (rng.next() % ((cap - len) / 512)) * 512;
                    let mut data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                    let w = l.plan(IoKind::Write, offset, len, &views).unwrap();
                    staged_seen |= !w.stage.is_empty();
                    disks.write(&l, &w, &mut data);
                    let mut recs = l.journal_records(&w);
                    let crash = rng.next() % 40;
                    if crash < 2 {
                        // Killed after the data landed and before the flush that would have
                        // acknowledged it, or (crash 1) after that flush wrote its address
                        // blocks (some torn) and before the root pointing at them was
                        // journaled: the write was never acknowledged; either content may
                        // be read there.
                        if crash == 1 {
                            // The staged bytes first, maybe torn too.
                            let torn = rng.next().is_multiple_of(2);
                            disks.append_staged(&l, |n| if torn { n / 2 } else { n });
                            for b in l.metadata_blocks(&views) {
                                let keep = if rng.next().is_multiple_of(2) {
                                    100
                                } else {
                                    b.bytes.len()
                                };
                                disks.0[b.member][b.offset as usize..][..keep]
                                    .copy_from_slice(&b.bytes[..keep]);
                            }
                            torn_roots += 1;
                        }
                        journal.extend(recs);
                        l = restart(members, &journal, &disks);
                        crashes += 1;
                        // The engine resyncs the pairs the write-intent bitmap marks.
                        for (_, pair, home, n) in l.map(offset, len) {
                            let r = home as usize..(home + n) as usize;
                            let group: Vec<SyncCopy> = [2 * pair, 2 * pair + 1]
                                .iter()
                                .map(|&m| SyncCopy {
                                    member: m,
                                    bytes: Some(disks.0[m][r.clone()].to_vec()),
                                    readable: vec![true; n.div_ceil(SYNC_BLOCK) as usize],
                                })
                                .collect();
                            let verdict = l.reconcile(home, &group, n).unwrap();
                            for (m, bytes) in verdict.rewrites {
                                disks.0[m][r.clone()].copy_from_slice(&bytes);
                            }
                        }
                        journal.extend(flush(&l, &mut disks, &views));
                        l.committed();
                        let mut now = vec![0u8; len as usize];
                        let r = l.plan(IoKind::Read, offset, len, &views).unwrap();
                        disks.run(&r, &mut now);
                        let before = &model[offset as usize..(offset + len) as usize];
                        assert!(
                            (0..len as usize).all(|i| now[i] == before[i] || now[i] == data[i]),
                            "seed {seed} step {step}: after the crash each byte is the last \
                             acknowledged one or the unacknowledged write's"
                        );
                        model[offset as usize..(offset + len) as usize].copy_from_slice(&now);
                        continue;
                    }
                    // The flush that acknowledges the write.
                    recs.extend(flush(&l, &mut disks, &views));
                    journal.extend(recs);
                    l.committed();
                    journal.extend(l.journal_records(&Plan::default()));
                    model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
                }
                50..=79 => {
                    let len = 512 * (1 + rng.next() % 24);
                    let offset = (rng.next() % ((cap - len) / 512)) * 512;
                    let mut buf = vec![0u8; len as usize];
                    let r = l.plan(IoKind::Read, offset, len, &views).unwrap();
                    disks.run(&r, &mut buf);
                    assert!(
                        buf == model[offset as usize..(offset + len) as usize],
                        "seed {seed} step {step}: read {offset}+{len}"
                    );
                }
                80..=94 => {
                    l.next_wakeup(step as f64);
                    if let Some((o, n)) = l.background_work(&views) {
                        let p = l.background_plan(o, n, &views).unwrap();
                        let mut buf = vec![0u8; n as usize];
                        disks.run(&p, &mut buf);
                        l.complete(&p);
                        journal.extend(l.journal_records(&p));
                    }
                    if rng.next().is_multiple_of(2) {
                        journal.extend(flush(&l, &mut disks, &views));
                    }
                    l.committed();
                    journal.extend(l.journal_records(&Plan::default()));
                }
                _ => {
                    // Killed between requests.
                    l = restart(members, &journal, &disks);
                    crashes += 1;
                }
            }
            buffered_seen = buffered_seen.max(l.buffered_bytes());
            sole_seen |= lock(&l.state).index.iter().any(|i| i.has_sole());
            assert!(
                lock(&l.state).address.resync.iter().all(|r| r.is_empty()),
                "seed {seed} step {step}: no committed address block was ever lost"
            );
        }
        assert!(crashes > 10, "seed {seed}: {crashes} crashes");
        assert!(
            torn_roots > 2,
            "seed {seed}: {torn_roots} kills between blocks and root"
        );
        assert_eq!(sole_seen, cold, "seed {seed}: flash-only entries iff cold");
        assert!(buffered_seen > 0, "seed {seed}: the buffer was used");
        assert_eq!(
            staged_seen,
            staging_bytes > 0,
            "seed {seed}: writes staged iff staging is on"
        );
        for offset in (0..cap).step_by(8192) {
            let mut buf = vec![0u8; 8192];
            let r = l
                .plan(IoKind::Read, offset, 8192, &asleep(members))
                .unwrap();
            disks.run(&r, &mut buf);
            assert!(
                buf == model[offset as usize..][..8192],
                "seed {seed}: final read {offset}"
            );
        }
        // A drain brings every second disk up to date with its active disk.
        l.background_all();
        let up = vec![MemberView::healthy(0.0); members];
        while let Some((o, n)) = l.background_work(&up) {
            let p = l.background_plan(o, n, &up).unwrap();
            let mut buf = vec![0u8; n as usize];
            disks.run(&p, &mut buf);
            l.complete(&p);
        }
        for pair in 0..members / 2 {
            assert!(
                disks.0[2 * pair] == disks.0[2 * pair + 1],
                "seed {seed}: pair {pair} equal after the drain"
            );
        }
    }
}

/// Review finding: replayed records are hostile input — a clean range past the member or
/// overflowing, and zero-length entries, are clear errors (never a panic, never an entry
/// that silently replaces another at the same disk address).
#[test]
fn forged_clean_and_zero_length_records_are_refused() {
    let replay = |kind, payload: Vec<u8>| {
        let l = qmd(3);
        let mut records = vec![volume_info_record(&VolumeInfo {
            extents: vec![0],
            next: SU,
        })];
        records.push(LayoutRecord { kind, payload });
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l.replay(None, &records)))
    };
    let outcome = |kind, payload: Vec<u8>| match replay(kind, payload) {
        Ok(Ok(())) => "accepted",
        Ok(Err(_)) => "refused",
        Err(_) => "panicked",
    };
    assert_eq!(
        outcome(REC_CLEAN, clean_record(0, u64::MAX - 1, 4).payload),
        "refused"
    );
    assert_eq!(
        outcome(REC_CLEAN, clean_record(0, MEMBER, 8).payload),
        "refused"
    );
    assert_eq!(outcome(REC_CLEAN, clean_record(0, 0, 0).payload), "refused");
    let empty = Entry {
        len: 0,
        flash_off: 0,
        sole: false,
    };
    assert_eq!(
        outcome(REC_BUFFERED, buffered_record(0, 0, &empty).payload),
        "refused"
    );
    // A well-formed pair of records is still taken.
    let ok = Entry {
        len: 8,
        flash_off: 0,
        sole: false,
    };
    assert_eq!(
        outcome(REC_BUFFERED, buffered_record(0, 0, &ok).payload),
        "accepted"
    );
    assert_eq!(
        outcome(REC_CLEAN, clean_record(0, 0, 8).payload),
        "accepted"
    );
}

/// Review finding: a write refused half-way (a later piece has no live copy) must not leave
/// the flash slots it planned for earlier pieces behind: they would pin their extent
/// (never reclaimed) for good.
#[test]
fn a_refused_write_leaves_no_planned_flash_slot_behind() {
    let l = qmd(5);
    let mut views = asleep(5);
    // Pair 1 (members 2 and 3) lost: its piece cannot be written.
    views[2] = MemberView::failed(0.0);
    views[3] = MemberView::failed(0.0);
    // Volume stripe unit 0 is pair 0's, unit 1 pair 1's.
    assert!(l.plan(IoKind::Write, 0, 2 * SU, &views).is_err());
    assert!(lock(&l.state).planned.is_empty(), "planned slots released");
    // The engine appends the records (the volume info of the extent taken), then commits.
    l.journal_records(&Plan::default());
    l.committed();
    assert_eq!(
        l.fill(),
        0.0,
        "the extent taken for the refused write is free again"
    );
}

/// A committed address block that is torn (bad checksum) or stale (an older generation of
/// its span at the place the root names) — the flash lost a write it said was durable —
/// is detected at start; the span's entries are recovered from the active disk (it holds
/// every non-flash-only buffered run): reads go there, writes go in place to both disks,
/// the background work copies it to the second disk, and the span gets a fresh block.
#[test]
fn a_lost_address_block_is_recovered_from_the_active_disk() {
    let views = asleep(3);
    let l = qmd(3);
    let mut disks = Disks::new(3);
    let mut journal = Vec::new();
    let mut model = vec![0u8; l.capacity() as usize];
    let mut rng = Rng(5);
    let mut write = |l: &Qmd, disks: &mut Disks, offset: u64, len: u64| {
        let mut data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let w = l.plan(IoKind::Write, offset, len, &views).unwrap();
        disks.run(&w, &mut data);
        l.complete(&w);
        model[offset as usize..][..len as usize].copy_from_slice(&data);
        l.journal_records(&w)
    };
    // Span 1 twice (its first block is the stale one later), spans 2 and 5 once.
    journal.extend(write(&l, &mut disks, SU, 1024));
    journal.extend(flush(&l, &mut disks, &views));
    let first = lock(&l.state).address.root[&(0, 1)].clone();
    for (offset, len) in [(SU + 2048, 512), (2 * SU, 4096), (5 * SU + 512, 100)] {
        journal.extend(write(&l, &mut disks, offset, len));
    }
    journal.extend(flush(&l, &mut disks, &views));
    l.committed();
    let root = lock(&l.state).address.root.clone();
    let at = |key| match &root[&key].place {
        address::Place::Flash { off, len } => (*off as usize, *len as usize),
        address::Place::Inline(_) => panic!("on flash"),
    };
    // Span 1's place gets its older block (stale); span 2's block is torn.
    let (old_off, old_len) = match first.place {
        address::Place::Flash { off, len } => (off as usize, len as usize),
        address::Place::Inline(_) => panic!("on flash"),
    };
    let stale = disks.0[2][old_off..old_off + old_len].to_vec();
    let (off1, _) = at((0, 1));
    disks.0[2][off1..off1 + stale.len()].copy_from_slice(&stale);
    let (off2, _) = at((0, 2));
    disks.0[2][off2 + 40] ^= 0xff;

    let l = restart(3, &journal, &disks);
    let resync = lock(&l.state).address.resync[0].clone();
    assert_eq!(resync, vec![(SU, 2 * SU), (2 * SU, 3 * SU)]);
    assert_eq!(
        entries(&l).iter().map(|e| e.1).collect::<Vec<_>>(),
        vec![5 * SU + 512],
        "span 5's block is intact"
    );
    assert!(
        !l.survives(&[false, true, true]),
        "the second disk is stale"
    );
    let mut buf = vec![0u8; model.len()];
    let r = l.plan(IoKind::Read, 0, l.capacity(), &views).unwrap();
    disks.run(&r, &mut buf);
    assert!(buf == model, "every acknowledged byte reads back");
    // A write there goes in place to both disks, not into the buffer.
    let mut data = vec![7u8; 512];
    let w = l.plan(IoKind::Write, 2 * SU, 512, &views).unwrap();
    assert_eq!(targets(&w.writes), vec![(0, 2 * SU), (1, 2 * SU)]);
    disks.run(&w, &mut data);
    l.complete(&w);
    model[2 * SU as usize..][..512].copy_from_slice(&data);
    // The background work copies the recovered spans to the second disk first.
    assert_eq!(l.next_wakeup(0.0), Some(0.0));
    let mut copies = 0;
    while let Some((o, n)) = l.background_work(&views) {
        let p = l.background_plan(o, n, &views).unwrap();
        let mut b = vec![0u8; n as usize];
        disks.run(&p, &mut b);
        l.complete(&p);
        copies += 1;
        if lock(&l.state).address.resync[0].is_empty() {
            break;
        }
    }
    assert_eq!(copies, 2);
    assert!(disks.0[0][SU as usize..3 * SU as usize] == disks.0[1][SU as usize..3 * SU as usize]);
    // The spans get fresh blocks; the next start finds nothing lost.
    journal.extend(flush(&l, &mut disks, &views));
    l.committed();
    let l = restart(3, &journal, &disks);
    assert!(lock(&l.state).address.resync[0].is_empty());
    let r = l.plan(IoKind::Read, 0, l.capacity(), &views).unwrap();
    disks.run(&r, &mut buf);
    assert!(buf == model);
}
