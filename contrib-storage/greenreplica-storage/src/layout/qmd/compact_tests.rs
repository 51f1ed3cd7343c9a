//! Compaction (`compact.rs`): old extents pinned by a sleeping pair's few runs and by
//! unchanged spans' address blocks are reclaimed; kills between the compaction's blocks and
//! its root, and between the root's commit and the release, lose nothing and leak no extent.

use std::collections::BTreeSet;

use super::tests::{asleep, flush, qmd_staging, restart_staging, Disks, SU};
use super::*;
use crate::synth::Rng;

/// A QMD layout on byte arrays with its journal (what was appended, in order) and the
/// acknowledged contents of the volume.
struct Rig {
    members: usize,
    /// `staging_bytes` of the layout (0: off).
    staging: u64,
    l: Qmd,
    disks: Disks,
    journal: Vec<LayoutRecord>,
    model: Vec<u8>,
    rng: Rng,
    /// Blocks and runs compacted by the layouts before the last restart.
    moved: (u64, u64),
    /// Writes landed and not yet acknowledged (the next flush does): their bytes.
    pending: Vec<(u64, Vec<u8>)>,
}

impl Rig {
    fn new(members: usize, compact_live: &str, seed: u64) -> Self {
        Self::staged(members, compact_live, seed, 0)
    }

    fn staged(members: usize, compact_live: &str, seed: u64, staging: u64) -> Self {
        let l = qmd_staging(members, staging);
        l.set_option("compact_live", compact_live).unwrap();
        let model = vec![0u8; l.capacity() as usize];
        Self {
            members,
            staging,
            l,
            disks: Disks::new(members),
            journal: Vec::new(),
            model,
            rng: Rng(seed),
            moved: (0, 0),
            pending: Vec::new(),
        }
    }

    /// A write whose data lands (not yet acknowledged: the next `flush` does that).
    fn write(&mut self, offset: u64, len: u64, views: &[MemberView]) -> Vec<u8> {
        let mut data: Vec<u8> = (0..len).map(|_| self.rng.next() as u8).collect();
        let w = self.l.plan(IoKind::Write, offset, len, views).unwrap();
        self.disks.write(&self.l, &w, &mut data);
        self.journal.extend(self.l.journal_records(&w));
        data
    }

    fn write_acked(&mut self, offset: u64, len: u64, views: &[MemberView]) {
        let data = self.write(offset, len, views);
        self.flush(views);
        self.model[offset as usize..][..len as usize].copy_from_slice(&data);
    }

    /// A write left for the next flush to acknowledge (its flash copy may stay staged).
    fn write_pending(&mut self, offset: u64, len: u64, views: &[MemberView]) {
        let data = self.write(offset, len, views);
        self.pending.push((offset, data));
    }

    /// A volume flush: blocks durable, root appended and committed, then the release.
    fn flush(&mut self, views: &[MemberView]) {
        for (offset, data) in std::mem::take(&mut self.pending) {
            self.model[offset as usize..][..data.len()].copy_from_slice(&data);
        }
        self.journal.extend(flush(&self.l, &mut self.disks, views));
        self.l.committed();
        self.journal
            .extend(self.l.journal_records(&Plan::default()));
    }

    /// Up to `steps` background steps (write-back, relocation); the steps taken.
    fn background(&mut self, views: &[MemberView], now: f64, steps: usize) -> usize {
        let mut taken = 0;
        while taken < steps && self.l.next_wakeup(now).is_some() {
            let Some((o, n)) = self.l.background_work(views) else {
                break;
            };
            let p = self.l.background_plan(o, n, views).unwrap();
            let mut buf = vec![0u8; n as usize];
            self.disks.write(&self.l, &p, &mut buf);
            self.journal.extend(self.l.journal_records(&p));
            taken += 1;
        }
        taken
    }

    fn restart(&mut self) {
        let (options, blocks, runs) = {
            let c = &lock(&self.l.state).compaction;
            (c.live_share, c.blocks_moved, c.runs_moved)
        };
        self.moved.0 += blocks;
        self.moved.1 += runs;
        self.l = restart_staging(self.members, self.staging, &self.journal, &self.disks);
        self.l
            .set_option("compact_live", &options.to_string())
            .unwrap();
    }

    fn assert_reads(&mut self, views: &[MemberView], what: &str) {
        let cap = self.l.capacity();
        let mut buf = vec![0u8; cap as usize];
        let r = self.l.plan(IoKind::Read, 0, cap, views).unwrap();
        self.disks.run(&r, &mut buf);
        assert!(
            buf == self.model,
            "{what}: every acknowledged byte reads back"
        );
    }

    fn held(&self) -> usize {
        lock(&self.l.state).extents.info.extents.len()
    }
}

/// The extents the volume holds (volume info and bitmap) are exactly those the index and
/// the root point into (call when nothing is planned and the last commit was released).
fn assert_no_leak(l: &Qmd, what: &str) {
    let st = lock(&l.state);
    let mut referenced: BTreeSet<usize> = st
        .index
        .iter()
        .flat_map(|i| i.iter().map(|(_, e)| e.flash_off))
        .map(|off| st.extents.extent_of(off))
        .collect();
    referenced.extend(st.address.root.values().filter_map(|e| match e.place {
        address::Place::Flash { off, .. } => Some(st.extents.extent_of(off)),
        address::Place::Inline(_) => None,
    }));
    let held: BTreeSet<usize> = st
        .extents
        .info
        .extents
        .iter()
        .map(|&e| e as usize)
        .collect();
    assert_eq!(
        held, referenced,
        "{what}: held extents are the referenced ones"
    );
    for e in 0..st.extents.count() {
        assert_eq!(
            st.extents.is_used(e),
            held.contains(&e),
            "{what}: bitmap bit {e}"
        );
    }
}

/// Pair 1's second disk up (its write-back runs), pair 0's asleep.
fn pair1_up() -> Vec<MemberView> {
    let mut v = asleep(5);
    v[3] = MemberView::healthy(0.0);
    v
}

/// Writes to many spans of both pairs, pair 1 written back, then writes to one span of
/// pair 0 only: the extents held are those its live runs and blocks need, not every
/// extent a small run of pair 0 or an unchanged span's block happened to land in.
/// Returns the extents held at the end and the extents the live bytes need at least.
fn many_spans_then_one(compact_live: &str) -> (usize, usize, Rig) {
    let mut rig = Rig::new(5, compact_live, 11);
    let sleep = asleep(5);
    for i in 0..30 {
        let small = rig.l.volume_offset(0, i * SU);
        rig.write_acked(small, 512, &sleep);
        let large = rig.l.volume_offset(1, i * SU);
        rig.write_acked(large, 3584, &sleep);
    }
    assert!(rig.held() >= 9, "the writes filled {} extents", rig.held());
    let up = pair1_up();
    for t in 0..2000 {
        rig.background(&up, t as f64, 2);
        rig.flush(&up);
        if lock(&rig.l.state).index[1].is_empty() {
            break;
        }
    }
    assert!(
        lock(&rig.l.state).index[1].is_empty(),
        "pair 1 written back"
    );
    let one = rig.l.volume_offset(0, 63 * SU);
    for t in 0..120 {
        rig.write_acked(one, 2048, &sleep);
        rig.background(&sleep, 3000.0 + t as f64, 4);
        rig.flush(&sleep);
    }
    rig.flush(&sleep);
    rig.assert_reads(&sleep, "after the writes to one span");
    assert_no_leak(&rig.l, "after the writes to one span");
    let st = lock(&rig.l.state);
    let live: u64 = (0..st.extents.count()).map(|e| st.extents.live_of(e)).sum();
    let needed = live.div_ceil(st.extents.extent_bytes()) as usize;
    drop(st);
    (rig.held(), needed, rig)
}

#[test]
fn old_extents_are_reclaimed_after_a_write_back_and_writes_to_one_span() {
    let (held, needed, mut rig) = many_spans_then_one("0.25");
    assert!(
        held <= needed + 2,
        "{held} extents held for {needed} extents of live runs and blocks"
    );
    let c = lock(&rig.l.state).compaction.clone();
    assert!(c.runs_moved >= 30 && c.blocks_moved > 0, "{c:?}");
    // The next start finds the moved runs and blocks.
    rig.restart();
    rig.assert_reads(&asleep(5), "after a restart");
    rig.flush(&asleep(5));
    assert_no_leak(&rig.l, "after a restart");
    assert!(rig.held() <= needed + 2);
    // Without compaction the old extents stay pinned (the flaw this fixes).
    let (held_off, needed_off, _) = many_spans_then_one("0");
    assert!(
        held_off >= needed_off + 6,
        "without compaction {held_off} extents held for {needed_off}"
    );
}

/// Span 0 of pair 0 keeps one run in an extent that later writes (written back since)
/// filled; its block was rewritten when the span lost another run, into an extent that is
/// otherwise empty now: the block alone pins that extent until compaction moves it.
fn block_pinned_extent(rig: &mut Rig) -> usize {
    let sleep = asleep(3);
    let up = vec![MemberView::healthy(0.0); 3];
    // Span 0: runs at 0 and at 2048.
    rig.write_acked(0, 512, &sleep);
    rig.write_acked(2048, 512, &sleep);
    // Spans 2.. fill the first extents (written back below).
    for i in 2..12 {
        rig.write_acked(i * SU, SU - 1024, &sleep);
    }
    // One write-back step (the run at 2048: the head is at 1024 going up), then the second
    // disk sleeps again: span 0's block is written afresh in the extent being filled.
    lock(&rig.l.state).flush.heads[0] = index::Head {
        pos: 1024,
        up: true,
    };
    assert_eq!(rig.background(&up, 0.0, 1), 1);
    rig.flush(&sleep);
    let block_extent = {
        let st = lock(&rig.l.state);
        match st.address.root[&(0, 0)].place {
            address::Place::Flash { off, .. } => st.extents.extent_of(off),
            address::Place::Inline(_) => panic!("on flash"),
        }
    };
    // More writes (past that extent, so it is no longer the one being filled), then
    // everything but span 0's run at 0 is written back (the elevator turns round last).
    for i in 13..21 {
        rig.write_acked(i * SU, SU - 1024, &sleep);
    }
    let mut t = 1.0;
    while lock(&rig.l.state).index[0].len() > 1 {
        rig.background(&up, t, 1);
        rig.flush(&sleep);
        t += 1.0;
    }
    block_extent
}

#[test]
fn kills_during_block_compaction_lose_nothing_and_leak_no_extent() {
    let sleep = asleep(3);
    for kill in ["after the blocks", "after the root commit"] {
        let mut rig = Rig::new(3, "0", 3);
        let pinned = block_pinned_extent(&mut rig);
        {
            let st = lock(&rig.l.state);
            let blocks: u64 = st
                .address
                .root
                .values()
                .filter_map(|e| match e.place {
                    address::Place::Flash { off, len } => {
                        (st.extents.extent_of(off) == pinned).then_some(len)
                    }
                    address::Place::Inline(_) => None,
                })
                .sum();
            assert!(blocks > 0);
            assert_eq!(
                st.extents.live_of(pinned),
                blocks,
                "only blocks live in extent {pinned}"
            );
        }
        rig.flush(&sleep);
        assert!(
            lock(&rig.l.state).extents.is_used(pinned),
            "pinned without compaction"
        );
        // Compaction on: the commit re-dirties the block's span.
        rig.l.set_option("compact_live", "0.25").unwrap();
        rig.l.committed();
        assert!(!lock(&rig.l.state).address.dirty.is_empty());
        let blocks = rig.l.metadata_blocks(&sleep);
        assert!(!blocks.is_empty(), "the compaction writes a block");
        for b in &blocks {
            rig.disks.0[b.member][b.offset as usize..][..b.bytes.len()].copy_from_slice(&b.bytes);
        }
        if kill == "after the root commit" {
            rig.journal.extend(rig.l.metadata_blocks_written(true));
            rig.journal.extend(rig.l.journal_records(&Plan::default()));
            // Killed before `committed` released the old block and its extent.
        }
        rig.restart();
        assert!(
            lock(&rig.l.state)
                .address
                .resync
                .iter()
                .all(|r| r.is_empty()),
            "{kill}: no block lost"
        );
        rig.assert_reads(&sleep, kill);
        rig.flush(&sleep);
        // The compaction runs again if the kill undid it, and completes.
        rig.flush(&sleep);
        rig.assert_reads(&sleep, kill);
        assert_no_leak(&rig.l, kill);
        let st = lock(&rig.l.state);
        let still = st.address.root.values().any(|e| match e.place {
            address::Place::Flash { off, .. } => st.extents.extent_of(off) == pinned,
            address::Place::Inline(_) => false,
        });
        assert!(!still, "{kill}: no block left in extent {pinned}");
    }
}

/// Random writes, reads, write-backs and flushes with both pairs' second disks asleep for
/// long stretches and compaction eager; the agent killed between requests, after a
/// flush's blocks (some torn) before its root, and after the root before the release.
#[test]
fn compaction_under_random_writes_flushes_and_kills() {
    // Seeds 7 to 10 stage small writes (their flash copies appended by the flush).
    for seed in 1..=10u64 {
        let members = if seed % 2 == 0 { 5 } else { 3 };
        let staging = if seed > 6 { 64 << 10 } else { 0 };
        let mut rig = Rig::staged(members, "0.5", seed * 104_729, staging);
        let cap = rig.l.capacity();
        let mut kills = 0;
        for step in 0..1200 {
            let views = if (step / 100) % 2 == 1 {
                vec![MemberView::healthy(0.0); members]
            } else {
                asleep(members)
            };
            let roll = rig.rng.next() % 100;
            match roll {
                0..=54 => {
                    // Mostly a small hot area, sometimes anywhere: old extents keep a few runs.
                    let len = 512 * (1 + rig.rng.next() % 8);
                    let area = if rig.rng.next().is_multiple_of(4) {
                        cap
                    } else {
                        cap / 8
                    };
                    let offset = (rig.rng.next() % ((area - len) / 512)) * 512;
                    // With staging, some writes wait for a later flush: their flash
                    // copies stay staged meanwhile, which nothing may read or move.
                    if rig.staging > 0 && rig.rng.next().is_multiple_of(2) {
                        rig.write_pending(offset, len, &views);
                    } else {
                        rig.write_acked(offset, len, &views);
                    }
                }
                55..=69 => {
                    rig.background(&views, step as f64, 4);
                    // A commit may come without new blocks (another record's flush): what
                    // moved is not released before its blocks' root is committed.
                    if rig.rng.next().is_multiple_of(2) {
                        rig.flush(&views);
                    } else {
                        rig.l.committed();
                        rig.journal.extend(rig.l.journal_records(&Plan::default()));
                    }
                }
                70..=79 => {
                    let len = 512 * (1 + rig.rng.next() % 16);
                    let offset = (rig.rng.next() % ((cap - len) / 512)) * 512;
                    let mut buf = vec![0u8; len as usize];
                    let r = rig.l.plan(IoKind::Read, offset, len, &views).unwrap();
                    rig.disks.run(&r, &mut buf);
                    // A read sees every write that landed, acknowledged or not yet.
                    let mut seen = rig.model.clone();
                    for (o, data) in &rig.pending {
                        seen[*o as usize..][..data.len()].copy_from_slice(data);
                    }
                    assert!(
                        buf == seen[offset as usize..][..len as usize],
                        "seed {seed} step {step}: read {offset}+{len}"
                    );
                }
                _ => {
                    // A kill: between requests, after a flush's blocks (torn or whole), or
                    // after its root was committed and before the release. Writes still
                    // pending are acknowledged first (the model knows only acknowledged data).
                    if !rig.pending.is_empty() {
                        rig.flush(&views);
                    }
                    let point = rig.rng.next() % 3;
                    if point >= 1 {
                        rig.background(&views, step as f64, 2);
                        // As the engine: the staged bytes land first (torn too, before the
                        // root), then the blocks.
                        let tear = point == 1 && rig.rng.next().is_multiple_of(2);
                        rig.disks
                            .append_staged(&rig.l, |n| if tear { n / 2 } else { n });
                        for b in rig.l.metadata_blocks(&views) {
                            // Blocks whose root is committed are whole (the flush made
                            // them durable first); before the root some may be torn.
                            let torn = point == 1 && rig.rng.next().is_multiple_of(2);
                            let keep = if torn { 100 } else { b.bytes.len() };
                            rig.disks.0[b.member][b.offset as usize..][..keep]
                                .copy_from_slice(&b.bytes[..keep]);
                        }
                    }
                    if point == 2 {
                        rig.journal.extend(rig.l.metadata_blocks_written(true));
                    }
                    rig.restart();
                    kills += 1;
                    assert!(
                        lock(&rig.l.state)
                            .address
                            .resync
                            .iter()
                            .all(|r| r.is_empty()),
                        "seed {seed} step {step}: a committed block was lost"
                    );
                    rig.assert_reads(&views, &format!("seed {seed} step {step} kill {point}"));
                    rig.flush(&views);
                    assert_no_leak(&rig.l, &format!("seed {seed} step {step} kill {point}"));
                }
            }
        }
        assert!(kills > 20, "seed {seed}: {kills} kills");
        rig.flush(&asleep(members));
        rig.restart();
        assert!(
            rig.moved.0 > 0 && rig.moved.1 > 0,
            "seed {seed}: compaction ran (blocks, runs moved: {:?})",
            rig.moved
        );
        rig.assert_reads(&asleep(members), &format!("seed {seed} end"));
    }
}
