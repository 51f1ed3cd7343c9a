//! Partial on-line mirrors and the temperature table's life cycle: review findings (b), the
//! table installed only once durable, `read_members` without side effects, and a crash
//! test with hot copies (reads return the last acknowledged write; every current copy equals
//! its home's newest bytes).

use super::tests::{asleep, flush, Disks, MEMBER, SU};
use super::*;
use crate::layout::LayoutOptions;
use crate::synth::Rng;

/// 16 stripe units of each disk member for hot copies.
const MIRROR: u64 = 16 * SU;

fn mirrored(members: usize) -> Qmd {
    Qmd::new(&Shape {
        members,
        member_bytes: MEMBER,
        chunk: SU,
        options: LayoutOptions::from_pairs([("mirror_bytes", MIRROR.to_string())]).unwrap(),
    })
    .unwrap()
}

/// The agent starts again: the journal replayed, the address blocks read from `disks`.
fn restart_mirrored(members: usize, journal: &[LayoutRecord], disks: &Disks) -> Qmd {
    let l = mirrored(members);
    l.replay(None, journal).unwrap();
    l.replay_blocks(&mut |m, off, len| {
        let end = off.checked_add(len).filter(|&e| e <= MEMBER)?;
        Some(disks.0[m][off as usize..end as usize].to_vec())
    })
    .unwrap();
    l
}

fn plain(members: usize) -> Qmd {
    super::tests::qmd(members)
}

/// Mark, hand the record to the journal and commit it (what the engine does).
fn mark(l: &Qmd, extents: &[(u64, u64)], t: &str, journal: &mut Vec<LayoutRecord>) {
    l.set_temperature(extents, t).unwrap();
    journal.extend(l.journal_records(&Plan::default()));
    l.committed();
}

#[test]
fn a_pair_holding_unmarked_data_does_not_sleep_whole() {
    let l = plain(5);
    let mut journal = Vec::new();
    // One cold stripe unit on pair 1; the rest of pair 1 is normal data.
    mark(&l, &[(SU, SU)], "cold", &mut journal);
    assert_eq!(l.cold_groups(), Vec::<usize>::new());
    // Every stripe unit of pair 1 cold: it may sleep whole.
    let odd: Vec<(u64, u64)> = (1..l.capacity() / SU)
        .step_by(2)
        .map(|c| (c * SU, SU))
        .collect();
    mark(&l, &odd, "cold", &mut journal);
    assert_eq!(l.cold_groups(), vec![2]);
}

/// Review finding: the table took effect before its record was durable. Killed between the
/// journal append and the commit, the restarted layout has no table, and the running one
/// must not have acted on it either.
#[test]
fn a_temperature_table_takes_effect_only_once_durable() {
    let l = plain(5);
    let cap = l.capacity();
    l.set_temperature(&[(0, cap)], "cold").unwrap();
    assert!(
        l.cold_groups().is_empty() && l.temperatures().is_empty(),
        "not in effect before its record is even handed out"
    );
    let pending = l.journal_records(&Plan::default());
    assert_eq!(pending.len(), 1);
    assert!(
        l.cold_groups().is_empty() && l.temperatures().is_empty(),
        "not in effect before the commit"
    );
    // Killed here: the durable journal does not hold the record.
    let restarted = plain(5);
    restarted.replay(None, &[]).unwrap();
    assert!(restarted.temperatures().is_empty() && restarted.cold_groups().is_empty());
    // Committed: in effect, and a restart finds it.
    l.committed();
    assert_eq!(l.cold_groups(), vec![0, 2]);
    let restarted = plain(5);
    restarted.replay(None, &pending).unwrap();
    assert_eq!(restarted.cold_groups(), vec![0, 2]);
    // A second change staged on top of the first, not yet durable: a checkpoint taken now
    // holds the first only, and the second builds on it.
    l.set_temperature(&[(0, SU)], "hot").unwrap();
    let image = l.checkpoint_image().unwrap();
    let from_image = plain(5);
    from_image.replay(Some(&image), &[]).unwrap();
    assert_eq!(from_image.temperatures(), vec![(0, cap, "cold")]);
    let second = l.journal_records(&Plan::default());
    l.committed();
    assert_eq!(l.temperatures().len(), 2);
    let all = plain(5);
    all.replay(None, &[pending, second].concat()).unwrap();
    assert_eq!(all.temperatures(), l.temperatures());
}

/// Review finding: `range_asleep` planned a read, which counted as a foreground request for
/// the flush budget and moved the elevator's head when the second disk served it.
#[test]
fn read_members_has_no_side_effect_on_the_flush() {
    let l = plain(3);
    let cap = l.capacity();
    // Buffer a run (second disk asleep), then the second disk up and readier than the active.
    let w = l.plan(IoKind::Write, 0, SU, &asleep(3)).unwrap();
    l.complete(&w);
    let up = vec![
        MemberView::healthy(0.05),
        MemberView::healthy(0.0),
        MemberView::healthy(0.0),
    ];
    let before = format!("{:?}", lock(&l.state).flush);
    let members = l.read_members(0, cap, &up).unwrap();
    assert!(members.contains(&1) && members.contains(&2), "{members:?}");
    assert_eq!(
        format!("{:?}", lock(&l.state).flush),
        before,
        "asking which members a read needs leaves the flush as it was"
    );
    // A real read does move it (the test can tell).
    l.plan(IoKind::Read, SU, 2 * SU, &up).unwrap();
    assert_ne!(format!("{:?}", lock(&l.state).flush), before);
}

#[test]
fn mirror_bytes_shapes_the_volume_and_bad_values_are_refused() {
    let l = mirrored(5);
    assert_eq!(l.capacity(), 2 * (MEMBER - MIRROR));
    assert_eq!(l.member_data_bytes(), MEMBER);
    for bad in ["4095", "x", &MEMBER.to_string()] {
        let r = Qmd::new(&Shape {
            members: 5,
            member_bytes: MEMBER,
            chunk: SU,
            options: LayoutOptions::from_pairs([("mirror_bytes", bad)]).unwrap(),
        });
        assert!(r.is_err(), "{bad}");
    }
    assert!(l.set_option("mirror_bytes", "0").is_err(), "fixed at build");
    assert!(l.set_option("mirror_bytes", &MIRROR.to_string()).is_ok());
}

/// The sleeper pair of a two-pair volume whose whole capacity is cold but for hot units on
/// both pairs.
fn hot_and_cold(l: &Qmd, journal: &mut Vec<LayoutRecord>) -> usize {
    mark(l, &[(0, l.capacity())], "cold", journal);
    mark(l, &[(4 * SU, 8 * SU)], "hot", journal);
    let st = lock(&l.state);
    assert_eq!(st.mirrors.sleepers, vec![false, true]);
    1
}

/// Views with the sleeper's two disks and the host's second disk asleep.
fn sleeping(members: usize, sleeper: usize) -> Vec<MemberView> {
    (0..members)
        .map(|m| {
            let down = m / 2 == sleeper && m + 1 < members || m == 1;
            MemberView::healthy(if down { 1e9 } else { 0.0 })
        })
        .collect()
}

fn background_step(l: &Qmd, disks: &mut Disks, views: &[MemberView]) -> Vec<LayoutRecord> {
    if let Some((o, n)) = l.background_work(views) {
        let p = l.background_plan(o, n, views).unwrap();
        let mut buf = vec![0u8; n as usize];
        disks.run(&p, &mut buf);
        l.complete(&p);
    }
    l.journal_records(&Plan::default())
}

/// Every current copy holds its home's newest bytes.
fn copies_consistent(l: &Qmd, disks: &Disks, members: usize, what: &str) {
    let up = vec![MemberView::healthy(0.0); members];
    let copies: Vec<(u64, online_mirror::HotCopy)> = lock(&l.state)
        .mirrors
        .copies
        .iter()
        .map(|(&k, &c)| (k, c))
        .collect();
    let g = l.geometry();
    for (chunk, c) in copies.into_iter().filter(|(_, c)| c.current) {
        let (pair, home) = g.home(chunk);
        let st = lock(&l.state);
        let ios = l
            .read_piece_ios(&st, pair, home, SU, 0, &up, Some(2 * c.host))
            .unwrap();
        drop(st);
        let mut newest = vec![0u8; SU as usize];
        for io in ios {
            let Buf::Caller(at) = io.buf else {
                panic!("qmd reads into the caller's buffer")
            };
            newest[at as usize..][..io.len as usize].copy_from_slice(
                &disks.0[io.member][io.member_offset as usize..][..io.len as usize],
            );
        }
        let at = g.slot_offset(c.slot) as usize;
        assert!(
            disks.0[2 * c.host][at..at + SU as usize] == newest[..],
            "{what}: the copy of unit {chunk} equals its home"
        );
    }
}

#[test]
fn hot_copies_serve_a_sleeping_pair_and_survive_crashes() {
    let members = 5;
    for seed in 1..=6u64 {
        let mut rng = Rng(seed * 104_729);
        let mut l = mirrored(members);
        let cap = l.capacity();
        let mut disks = Disks::new(members);
        let mut model = vec![0u8; cap as usize];
        let mut journal: Vec<LayoutRecord> = Vec::new();
        let sleeper = hot_and_cold(&l, &mut journal);
        let hot = 4 * SU..12 * SU;
        let (mut crashes, mut from_copy, mut slept) = (0, 0, 0);
        for step in 0..1500 {
            // Copies are written while everything is up; the sleeper sleeps once its
            // copies are current (what the policy does with `cold_groups`).
            let cold = l.cold_groups().contains(&(2 * sleeper));
            let views = if cold && (step / 50) % 3 != 0 {
                slept += 1;
                sleeping(members, sleeper)
            } else {
                vec![MemberView::healthy(0.0); members]
            };
            let hot_only = rng.next().is_multiple_of(2);
            let (lo, hi) = if hot_only {
                (hot.start, hot.end)
            } else {
                (0, cap)
            };
            match rng.next() % 100 {
                0..=39 => {
                    let len = 512 * (1 + rng.next() % 12);
                    let offset = lo + (rng.next() % ((hi - lo - len) / 512)) * 512;
                    let mut data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                    let w = l.plan(IoKind::Write, offset, len, &views).unwrap();
                    // Staged as on the engine (the default 1 MiB staging buffer is on).
                    disks.write(&l, &w, &mut data);
                    let recs = l.journal_records(&w);
                    if rng.next().is_multiple_of(30) {
                        // Killed after the data landed, before the flush that would have
                        // acknowledged it.
                        l = restart_mirrored(members, &journal, &disks);
                        crashes += 1;
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
                        journal.extend(l.journal_records(&Plan::default()));
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
                    journal.extend(recs);
                    journal.extend(flush(&l, &mut disks, &views));
                    l.committed();
                    journal.extend(l.journal_records(&Plan::default()));
                    model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
                }
                40..=74 => {
                    let len = 512 * (1 + rng.next() % 24);
                    let offset = lo + (rng.next() % ((hi - lo - len) / 512)) * 512;
                    let mut buf = vec![0u8; len as usize];
                    let r = l.plan(IoKind::Read, offset, len, &views).unwrap();
                    disks.run(&r, &mut buf);
                    assert!(
                        buf == model[offset as usize..(offset + len) as usize],
                        "seed {seed} step {step}: read {offset}+{len}"
                    );
                    let sleeper_disk = |m: usize| m / 2 == sleeper && m < 2 * (members / 2);
                    let asleep_now = views[2 * sleeper].ready_at > 1.0;
                    if asleep_now && hot_only {
                        assert!(
                            !r.reads.iter().any(|io| sleeper_disk(io.member)),
                            "seed {seed} step {step}: hot data of a sleeping pair is read \
                             from its copy or the flash"
                        );
                        from_copy += usize::from(
                            r.reads
                                .iter()
                                .any(|io| io.member == 0 && io.member_offset >= MEMBER - MIRROR),
                        );
                    }
                }
                75..=94 => {
                    l.next_wakeup(step as f64);
                    journal.extend(background_step(&l, &mut disks, &views));
                    journal.extend(flush(&l, &mut disks, &views));
                    l.committed();
                    journal.extend(l.journal_records(&Plan::default()));
                }
                _ => {
                    // Killed between requests: copies are stale until copied again.
                    l = restart_mirrored(members, &journal, &disks);
                    assert!(lock(&l.state).mirrors.copies.values().all(|c| !c.current));
                    crashes += 1;
                }
            }
            copies_consistent(&l, &disks, members, &format!("seed {seed} step {step}"));
        }
        assert!(crashes > 10, "seed {seed}: {crashes} crashes");
        assert!(slept > 100, "seed {seed}: the sleeper slept {slept} steps");
        assert!(
            from_copy > 5,
            "seed {seed}: {from_copy} reads from the copies"
        );
        let mut buf = vec![0u8; cap as usize];
        let r = l
            .plan(
                IoKind::Read,
                0,
                cap,
                &vec![MemberView::healthy(0.0); members],
            )
            .unwrap();
        disks.run(&r, &mut buf);
        assert!(buf == model, "seed {seed}: every byte as last acknowledged");
    }
}

#[test]
fn writes_and_reads_of_a_copied_unit_name_the_copys_host() {
    let l = mirrored(5);
    let mut journal = Vec::new();
    let sleeper = hot_and_cold(&l, &mut journal);
    let mut disks = Disks::new(5);
    let up = vec![MemberView::healthy(0.0); 5];
    while lock(&l.state).mirrors.next_stale().is_some() {
        background_step(&l, &mut disks, &up);
    }
    assert_eq!(l.cold_groups(), vec![2 * sleeper]);
    let views = sleeping(5, sleeper);
    // Unit 5 (pair 1, hot): its copy is on member 0; the write lands in flash and the copy.
    assert_eq!(l.write_members(5 * SU, SU, &views), Some(vec![0, 4]));
    assert_eq!(l.read_members(5 * SU, SU, &views).unwrap(), vec![0]);
    // Unit 13 (pair 1, cold): flash alone for writes, its sleeping active disk for reads.
    assert_eq!(l.write_members(13 * SU, SU, &views), Some(vec![4]));
    assert_eq!(l.read_members(13 * SU, SU, &views).unwrap(), vec![2]);
}

/// Resync never lets the second disk's unused copy region overwrite the active disk's
/// copies, also where a sync block reaches across the end of the stripe map's bytes.
#[test]
fn resync_leaves_the_copy_region_to_the_active_disk() {
    let l = mirrored(5);
    let data_end = MEMBER - MIRROR;
    let (offset, len) = (data_end - 2 * SU, 4 * SU);
    let active: Vec<u8> = (0..len).map(|i| i as u8).collect();
    let mut second = active.clone();
    for b in &mut second[2 * SU as usize..] {
        *b = 0xee;
    }
    let group = |a: Option<Vec<u8>>| {
        vec![
            SyncCopy {
                member: 0,
                bytes: a,
                readable: vec![true; len.div_ceil(SYNC_BLOCK) as usize],
            },
            SyncCopy {
                member: 1,
                bytes: Some(second.clone()),
                readable: vec![true; len.div_ceil(SYNC_BLOCK) as usize],
            },
        ]
    };
    let verdict = l
        .reconcile(offset, &group(Some(active.clone())), len)
        .unwrap();
    assert!(
        verdict.rewrites.iter().all(|(m, _)| *m != 0),
        "the active disk is never rewritten from the second's copy region"
    );
    let beyond = l
        .reconcile(data_end, &group(Some(active.clone())), 2 * SU)
        .unwrap();
    assert!(beyond.rewrites.is_empty());
    // An active disk that cannot vouch: its copies go stale.
    let mut journal = Vec::new();
    hot_and_cold(&l, &mut journal);
    let mut disks = Disks::new(5);
    let up = vec![MemberView::healthy(0.0); 5];
    while lock(&l.state).mirrors.next_stale().is_some() {
        background_step(&l, &mut disks, &up);
    }
    assert_eq!(l.cold_groups(), vec![2]);
    l.reconcile(offset, &group(None), len).unwrap();
    assert_eq!(l.cold_groups(), Vec::<usize>::new());
}
