//! Property tests of every registered layout on the engine: random request sequences, with
//! members breaking, being replaced and rebuilt in the middle. Every read must return the
//! last write; at the end every member must be consistent (mirrors equal, parity right),
//! checked from the members' bytes, not through the engine.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::tests::{memory_volume, MEMBER};
use super::{Health, Volume};
use crate::clock::VirtualClock;
use crate::layout::{LayoutKind, REGISTRY};
use crate::member::memory::MemMember;
use crate::parity::{self, Geometry, Level};
use crate::superblock::DATA_OFFSET;
use crate::sync::lock;
use crate::synth::Rng;

const CHUNK: u64 = 16384;
const SECTOR: u64 = 512;

struct Run {
    kind: LayoutKind,
    members: Vec<Arc<MemMember>>,
    volume: Volume,
    model: Vec<u8>,
    rng: Rng,
}

impl Run {
    fn new(kind: LayoutKind, members: usize, seed: u64) -> Self {
        let (volume, stores) = memory_volume(kind, members, Arc::new(VirtualClock::new()), CHUNK);
        let model = vec![0u8; volume.capacity() as usize];
        if kind == LayoutKind::QMD {
            // QMD under low utilization: the second disk of each pair sleeps, so writes go
            // through the flash buffer (a write-back or a degraded read wakes it).
            let mirrors = crate::policy::PolicySpec::Mirrors { timeout_s: 0.0 }.manager(48);
            volume.power.with(|c| c.replace_manager(mirrors));
            volume.tick();
        }
        Self {
            kind,
            members: stores,
            volume,
            model,
            rng: Rng(seed.max(1)),
        }
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng.next() % n.max(1)
    }

    /// A random sector-aligned range: mostly small, sometimes across chunks and stripes.
    fn range(&mut self) -> (u64, u64) {
        let cap = self.volume.capacity() / SECTOR;
        let max = if self.below(4) == 0 { 6 * CHUNK } else { CHUNK } / SECTOR;
        let len = 1 + self.below(max);
        let start = self.below(cap - len + 1);
        (start * SECTOR, len * SECTOR)
    }

    fn write(&mut self, step: usize) {
        let (offset, len) = self.range();
        let seed = self.rng.next() as u8;
        let data: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
            .collect();
        self.volume
            .write(offset, &data)
            .unwrap_or_else(|e| panic!("{} step {step}: write {offset}+{len}: {e}", self.kind));
        self.model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
    }

    fn read(&mut self, step: usize) {
        let (offset, len) = self.range();
        self.check_read(step, offset, len);
    }

    fn check_read(&self, step: usize, offset: u64, len: u64) {
        let mut buf = vec![0u8; len as usize];
        self.volume
            .read(offset, &mut buf)
            .unwrap_or_else(|e| panic!("{} step {step}: read {offset}+{len}: {e}", self.kind));
        assert!(
            buf == self.model[offset as usize..(offset + len) as usize],
            "{} step {step}: read {offset}+{len} is not the last write",
            self.kind
        );
    }

    fn in_sync(&self) -> Vec<bool> {
        self.volume.in_sync()
    }

    /// Break a member the layout can do without (its storage starts failing every I/O; the
    /// engine fails it on the next error it sees).
    fn break_one(&mut self) -> bool {
        let n = self.members.len();
        let m = self.below(n as u64) as usize;
        let mut after: Vec<bool> = self
            .in_sync()
            .iter()
            .zip(&self.members)
            .map(|(&s, member)| s && !member.broken.load(Ordering::SeqCst))
            .collect();
        if !after[m] {
            return false;
        }
        after[m] = false;
        if !self.volume.layout().survives(&after) {
            return false;
        }
        self.members[m].broken.store(true, Ordering::SeqCst);
        if self.below(2) == 0 {
            self.volume.fail_member(m, "test: failed by the operator");
        }
        true
    }

    /// Replace a failed member with a blank one.
    fn replace_one(&mut self) -> Option<usize> {
        let failed = (0..self.members.len()).find(|&m| {
            matches!(
                self.volume.slot(m).map(|s| s.health()),
                Some(Health::Failed { .. })
            )
        })?;
        let fresh = MemMember::new(MEMBER);
        self.volume.replace_member(failed, fresh.clone()).ok()?;
        self.members[failed] = fresh;
        Some(failed)
    }

    fn rebuild_some(&mut self, steps: usize) {
        for m in 0..self.members.len() {
            for _ in 0..steps {
                match self.volume.rebuild_step(m, 3 * CHUNK + 4096) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => panic!("{}: rebuild of member {m}: {e}", self.kind),
                }
            }
        }
    }

    fn finish(&mut self) {
        // Members still broken are failed first (a read or a write would find them anyway).
        for m in 0..self.members.len() {
            if self.members[m].broken.load(Ordering::SeqCst) {
                self.volume.fail_member(m, "test: broken");
            }
        }
        while self.replace_one().is_some() {}
        self.rebuild_some(usize::MAX);
        assert!(
            self.in_sync().iter().all(|&s| s),
            "{}: every member in sync after the rebuilds",
            self.kind
        );
        let cap = self.volume.capacity();
        for offset in (0..cap).step_by(256 * 1024) {
            self.check_read(usize::MAX, offset, (256 * 1024).min(cap - offset));
        }
        self.check_members();
        let report = self.volume.scrub(false).unwrap();
        assert_eq!(report.mismatched_chunks, 0, "{}: scrub agrees", self.kind);
    }

    /// Consistency from the members' own bytes.
    fn check_members(&self) {
        let data: Vec<Vec<u8>> = self
            .members
            .iter()
            .map(|m| lock(&m.bytes)[DATA_OFFSET as usize..].to_vec())
            .collect();
        let bytes = self.volume.layout().member_data_bytes() as usize;
        match self.kind.name() {
            "single" => {}
            "raid10" => {
                for pair in data.chunks(2) {
                    assert!(
                        pair[0][..bytes] == pair[1][..bytes],
                        "raid10: mirrors equal"
                    );
                }
            }
            "raid5" | "raid6" | "raid5-ido" | "raid6-ido" | "raid5-ido-s" | "raid6-ido-s" => {
                // The surrogate pair: everything reclaimed home, the copies equal.
                let mut data = data;
                if self.kind.name().ends_with("-s") {
                    self.volume.drain_layout_background().unwrap();
                    data = self
                        .members
                        .iter()
                        .map(|m| lock(&m.bytes)[DATA_OFFSET as usize..].to_vec())
                        .collect();
                    let pair = data.split_off(data.len() - 2);
                    assert!(
                        pair[0][..bytes] == pair[1][..bytes],
                        "{}: the surrogate copies are equal",
                        self.kind
                    );
                }
                let level = if self.kind.name().starts_with("raid5") {
                    Level::Raid5
                } else {
                    Level::Raid6
                };
                let g = Geometry::new(level, data.len(), CHUNK, bytes as u64).unwrap();
                for stripe in 0..g.stripes() {
                    let at = (stripe * CHUNK) as usize..((stripe + 1) * CHUNK) as usize;
                    let chunk = |m: usize| &data[m][at.clone()];
                    let d: Vec<&[u8]> = (0..g.data_per_stripe())
                        .map(|i| chunk(g.data_member(stripe, i).unwrap()))
                        .collect();
                    let mut p = vec![0u8; CHUNK as usize];
                    let mut q = vec![0u8; CHUNK as usize];
                    match level {
                        Level::Raid5 => parity::compute_p(&d, &mut p).unwrap(),
                        Level::Raid6 => parity::compute_pq(&d, &mut p, &mut q).unwrap(),
                    }
                    assert!(
                        p == chunk(g.p_member(stripe)),
                        "{level}: P of stripe {stripe}"
                    );
                    if let Some(qm) = g.q_member(stripe) {
                        assert!(q == chunk(qm), "raid6: Q of stripe {stripe}");
                    }
                }
            }
            "rolo-r" | "rolo-e" | "rolo-s" => {
                // As graid and rolo-p, with the home bytes found through the layout (RoLo-S's
                // zebra puts them in bands): after the destage both copies of every home
                // byte are equal.
                self.volume.drain_layout_background().unwrap();
                let layout = self.volume.layout();
                for offset in (0..self.volume.capacity()).step_by(CHUNK as usize) {
                    for (group, from, to) in layout.lock_spans(offset, CHUNK) {
                        let copy = |m: usize| {
                            let b = lock(&self.members[m].bytes);
                            b[(DATA_OFFSET + from) as usize..(DATA_OFFSET + to) as usize].to_vec()
                        };
                        assert!(
                            copy(group) == copy(group + 1),
                            "{}: home bytes {from}..{to} of pair {} equal after the destage",
                            self.kind,
                            group / 2
                        );
                    }
                }
            }
            "graid" | "rolo-p" | "qmd" => {
                // Logged mirrors are stale by design until destaged: destage everything,
                // then every mirror equals its primary in the home bytes.
                self.volume.drain_layout_background().unwrap();
                let home = (self.volume.capacity() / (data.len() as u64 / 2)) as usize;
                let data: Vec<Vec<u8>> = self
                    .members
                    .iter()
                    .map(|m| lock(&m.bytes)[DATA_OFFSET as usize..].to_vec())
                    .collect();
                for (p, pair) in data.chunks(2).enumerate() {
                    if pair.len() == 2 {
                        assert!(
                            pair[0][..home] == pair[1][..home],
                            "{}: mirror {p} equals its primary after the destage",
                            self.kind
                        );
                    }
                }
            }
            // One copy of everything: the reads checked it.
            "raid0-tracks" => {}
            // Stripes sit at equal member offsets: every offset's bytes XOR to zero.
            "raid5-tracks" => {
                for at in 0..bytes {
                    let x = data.iter().fold(0u8, |x, m| x ^ m[at]);
                    assert!(x == 0, "raid5-tracks: parity at member offset {at}");
                }
            }
            // Each mirror's rows at its own track offsets: the pair's rows side by side
            // (the layout's sync pieces, checked against the tracks in its own tests) equal.
            "raid10-tracks" => {
                let layout = self.volume.layout();
                let rows = |m: usize| -> Vec<u8> {
                    layout
                        .sync_pieces(m, 0, layout.sync_bytes())
                        .into_iter()
                        .flat_map(|(at, n)| data[m][at as usize..(at + n) as usize].to_vec())
                        .collect()
                };
                for p in 0..data.len() / 2 {
                    assert!(
                        rows(2 * p) == rows(2 * p + 1),
                        "raid10-tracks: rows of pair {p} equal"
                    );
                }
            }
            other => panic!("no consistency check for layout {other}"),
        }
    }
}

/// Member counts to try per layout.
fn shapes(kind: LayoutKind) -> Vec<usize> {
    match kind.name() {
        "single" => vec![1],
        "raid10" => vec![2, 4],
        "raid5" => vec![3, 4, 5],
        "raid6" => vec![4, 5, 6],
        "graid" => vec![3, 5],
        "rolo-p" => vec![4, 6],
        "rolo-r" | "rolo-e" | "rolo-s" => vec![4, 6],
        "raid5-ido" => vec![3, 4, 5],
        "raid6-ido" => vec![4, 5, 6],
        "qmd" => vec![3, 5],
        "raid5-ido-s" => vec![5, 6],
        "raid6-ido-s" => vec![6, 7],
        "raid0-tracks" => vec![2, 3, 4],
        "raid5-tracks" => vec![3, 4, 5],
        "raid10-tracks" => vec![2, 4],
        other => panic!("add member counts for layout {other}"),
    }
}

fn run_sequence(kind: LayoutKind, members: usize, seed: u64, steps: usize) {
    let mut run = Run::new(kind, members, seed);
    for step in 0..steps {
        match run.below(100) {
            0..=44 => run.write(step),
            45..=84 => run.read(step),
            85..=89 => {
                run.break_one();
            }
            90..=94 => {
                run.replace_one();
            }
            _ => run.rebuild_some(2),
        }
    }
    run.finish();
}

#[test]
fn every_layout_returns_the_last_write_through_failures_and_rebuilds() {
    for registration in REGISTRY {
        let kind: LayoutKind = registration.name.parse().unwrap();
        for members in shapes(kind) {
            for seed in 1..=6u64 {
                run_sequence(kind, members, seed * 7919 + members as u64, 300);
            }
        }
    }
}

#[test]
fn a_degraded_raid6_serves_every_byte_with_two_members_gone() {
    let mut run = Run::new(LayoutKind::RAID6, 5, 42);
    for step in 0..100 {
        run.write(step);
    }
    run.members[1].broken.store(true, Ordering::SeqCst);
    run.members[3].broken.store(true, Ordering::SeqCst);
    for step in 100..200 {
        run.write(step);
        run.read(step);
    }
    assert!(matches!(
        run.volume.slot(1).unwrap().health(),
        Health::Failed { .. }
    ));
    assert!(matches!(
        run.volume.slot(3).unwrap().health(),
        Health::Failed { .. }
    ));
    run.finish();
}
