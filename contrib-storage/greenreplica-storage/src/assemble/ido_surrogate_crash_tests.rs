//! IDO's surrogate set through failures, rebuilds and agent crashes (issue 17): random writes
//! and reads on a `raid5-ido-s` volume of file members, an array member failed in the middle
//! and rebuilt hot-first while writes are redirected to the surrogate, zones migrated, the
//! reclaim copying home, and the agent killed (the volume dropped and reassembled from its
//! members and journal) at random points. Every read returns the last write acknowledged by
//! a flush; at the end the D Map is empty, the surrogate copies equal and the parity right.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::clock::VirtualClock;
use crate::member::SystemRunner;
use crate::synth::Rng;
use crate::volume::Health;

const SECTOR: u64 = 4096;

fn runner() -> Arc<dyn CommandRunner> {
    Arc::new(SystemRunner)
}

fn spec(dir: &Path, mode: &str) -> VolumeSpec {
    VolumeSpec {
        name: "idos".into(),
        layout: "raid5-ido-s".parse().unwrap(),
        stripe_unit: 16384,
        policy: PolicySpec::AlwaysOn,
        start_stop_budget_per_day: 48,
        rebuild_mb_s: 100.0,
        bitmap_region: 1 << 20,
        integrity: IntegritySettings::default(),
        layout_options: LayoutOptions::from_pairs([("rebuild", mode)]).unwrap(),
        trace: None,
        members: (0..5)
            .map(|i| MemberSpec {
                kind: MemberKind::File,
                path: dir.join(format!("m{i}.img")),
                size: Some(4 << 20),
                profile: "test-fast".into(),
                standby_mode: None,
                inject_read_errors: Vec::new(),
                drive_seed: None,
            })
            .collect(),
    }
}

fn tmp(seed: u64) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("grs-ido-sur-crash-{}-{seed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn open(s: &VolumeSpec, dir: &Path) -> Arc<Volume> {
    assemble(s, Arc::new(VirtualClock::new()), dir, &runner()).unwrap()
}

struct Run {
    spec: VolumeSpec,
    dir: PathBuf,
    v: Option<Arc<Volume>>,
    rng: Rng,
    /// The volume's bytes as last written, and per sector whether a write since the last
    /// flush touched it (a crash may keep or lose such a write).
    model: Vec<u8>,
    dirty: Vec<bool>,
    redirected_seen: bool,
}

impl Run {
    fn v(&self) -> &Volume {
        self.v
            .as_deref()
            .expect("the volume is open between crashes")
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng.next() % n.max(1)
    }

    fn range(&mut self) -> (u64, u64) {
        let sectors = self.v().capacity() / SECTOR;
        let len = 1 + self.below(12);
        let start = self.below(sectors - len + 1);
        (start * SECTOR, len * SECTOR)
    }

    fn write(&mut self, offset: u64, len: u64) {
        let seed = self.rng.next() as u8;
        let data: Vec<u8> = (0..len)
            // Each sector differs (a copy landing a sector off shows), never zero.
            .map(|i| {
                let sector = ((offset + i) / SECTOR) as u8;
                (i as u8).wrapping_mul(13) ^ sector.wrapping_mul(31) ^ seed | 1
            })
            .collect();
        self.v().write(offset, &data).unwrap();
        self.model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
        for s in offset / SECTOR..(offset + len) / SECTOR {
            self.dirty[s as usize] = true;
        }
    }

    fn check(&self, what: &str, offset: u64, len: u64) {
        let mut buf = vec![0u8; len as usize];
        self.v().read(offset, &mut buf).unwrap();
        for s in 0..len / SECTOR {
            let at = (offset + s * SECTOR) as usize;
            if self.dirty[at / SECTOR as usize] {
                continue;
            }
            let got = &buf[(s * SECTOR) as usize..((s + 1) * SECTOR) as usize];
            assert!(
                got == &self.model[at..at + SECTOR as usize],
                "{what}: sector at {at} is not the last acknowledged write"
            );
        }
    }

    fn flush(&mut self) {
        self.v().flush().unwrap();
        self.dirty.fill(false);
    }

    /// Kill the agent: drop the volume without a flush and assemble it again. Sectors written
    /// since the last flush may hold either copy: they are written again, so the model is
    /// exact from here on.
    fn crash(&mut self, step: usize) {
        let dir = self.dir.clone();
        let spec = self.spec.clone();
        drop(self.v.take());
        self.v = Some(open(&spec, &dir));
        let cap = self.v().capacity();
        self.check(&format!("step {step}: after the crash"), 0, cap);
        let dirty: Vec<u64> = (0..self.dirty.len() as u64)
            .filter(|&s| self.dirty[s as usize])
            .collect();
        for s in dirty {
            let at = (s * SECTOR) as usize;
            let data = self.model[at..at + SECTOR as usize].to_vec();
            self.v().write(s * SECTOR, &data).unwrap();
        }
        self.flush();
    }

    fn failed_or_rebuilding(&self) -> Vec<usize> {
        (0..5)
            .filter(|&m| !matches!(self.v().slot(m).map(|s| s.health()), Some(Health::InSync)))
            .collect()
    }

    fn fail_and_replace(&mut self) {
        if !self.failed_or_rebuilding().is_empty() {
            return;
        }
        let m = self.below(3) as usize;
        self.v().fail_member(m, "test: pulled");
        let fresh = self.spec.members[m]
            .open_replacement(None, &runner())
            .unwrap();
        self.v().replace_member(m, fresh).unwrap();
    }

    fn rebuild_some(&mut self, steps: usize) {
        for m in self.failed_or_rebuilding() {
            for _ in 0..steps {
                if self.v().rebuild_step(m, 16384).unwrap().is_none() {
                    break;
                }
            }
        }
    }

    fn background(&mut self, steps: usize) {
        for _ in 0..steps {
            if self.v().layout_background_step().unwrap() == 0 {
                break;
            }
        }
    }
}

fn run_sequence(mode: &str, seed: u64, steps: usize) {
    let dir = tmp(seed);
    let spec = spec(&dir, mode);
    let v = open(&spec, &dir);
    let cap = v.capacity() as usize;
    let mut run = Run {
        spec,
        dir,
        v: Some(v),
        rng: Rng(seed),
        model: vec![0u8; cap],
        dirty: vec![false; cap / SECTOR as usize],
        redirected_seen: false,
    };
    let mut hot: Vec<(u64, u64)> = Vec::new();
    for step in 0..steps {
        match run.below(100) {
            0..=39 => {
                let (o, l) = run.range();
                run.write(o, l);
            }
            40..=64 => {
                // Half the reads repeat one of a few ranges: they get hot (IDO's zones,
                // WorkOut's popular requests).
                let (o, l) = if run.below(2) == 0 && !hot.is_empty() {
                    hot[run.below(hot.len() as u64) as usize]
                } else {
                    let r = run.range();
                    if hot.len() < 6 {
                        hot.push(r);
                    }
                    r
                };
                run.check(&format!("step {step}"), o, l);
            }
            65..=72 => run.flush(),
            73..=76 => run.fail_and_replace(),
            77..=86 => run.rebuild_some(3),
            87..=93 => run.background(2),
            94..=95 => run.v().checkpoint_metadata().unwrap(),
            _ => run.crash(step),
        }
        if run.v().layout().next_wakeup(0.0).is_some() {
            run.redirected_seen = true;
        }
    }
    run.flush();
    while !run.failed_or_rebuilding().is_empty() {
        run.rebuild_some(usize::MAX);
    }
    run.v().drain_layout_background().unwrap();
    assert_eq!(
        run.v().layout().next_wakeup(0.0),
        None,
        "{mode} seed {seed}: the reclaim emptied the D Map and forgot the migrated zones"
    );
    run.check("the end", 0, cap as u64);
    // The reclaim's records are durable with the next flush (a crash before it finds the
    // D Map again, and the redirected copies with it).
    run.flush();
    run.crash(steps);
    assert_eq!(
        run.v().layout().next_wakeup(0.0),
        None,
        "seed {seed}: still empty after a crash"
    );
    let report = run.v().scrub(false).unwrap();
    assert_eq!(
        report.mismatched_chunks, 0,
        "seed {seed}: parity and surrogate copies agree"
    );
    assert!(run.redirected_seen, "seed {seed}: the surrogate was used");
    std::fs::remove_dir_all(&run.dir).unwrap();
}

#[test]
fn redirected_writes_migrations_and_reclaim_survive_failures_and_crashes() {
    for seed in 1..=8u64 {
        run_sequence("ido", seed * 104_729, 400);
    }
}

#[test]
fn workout_s_popular_reads_and_redirected_writes_survive_failures_and_crashes() {
    for seed in 1..=6u64 {
        run_sequence("workout", seed * 7_927, 400);
    }
}

#[test]
fn vdf_s_kept_victim_reads_and_redirected_writes_survive_failures_and_crashes() {
    for seed in 1..=6u64 {
        run_sequence("vdf", seed * 6_151, 400);
    }
}

/// A surrogate record damaged or forged on disk (a zone beyond the table, a D Map entry past
/// the volume's end) fails the assembly with an error that names it; the good journal
/// assembles again once the record is gone.
#[test]
fn a_forged_surrogate_record_in_the_journal_fails_the_assembly_by_name() {
    let forged: [(u16, [u64; 3], &str); 2] = [
        (0x1705, [1 << 40, 0, 0], "zone"),
        (0x1703, [u64::MAX - 10, 100, 0], "outside the volume"),
    ];
    for (i, (kind, values, want)) in forged.into_iter().enumerate() {
        let dir = tmp(900 + i as u64);
        let s = spec(&dir, "ido");
        let v = open(&s, &dir);
        v.write(0, &[9u8; 4096]).unwrap();
        v.flush().unwrap();
        drop(v);
        let journal = dir.join("idos.journal");
        // The journal is a directory of files: kept to put back afterwards.
        let saved: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&journal)
            .unwrap()
            .map(|e| {
                let path = e.unwrap().path();
                let bytes = std::fs::read(&path).unwrap();
                (path, bytes)
            })
            .collect();
        {
            let (meta, _) = crate::journal::meta::MetaJournal::open(&journal).unwrap();
            let words = if kind == 0x1705 {
                &values[..2]
            } else {
                &values[..]
            };
            let payload: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            meta.record_layout(kind, &payload).unwrap();
            meta.commit().unwrap();
        }
        let err = assemble(&s, Arc::new(VirtualClock::new()), &dir, &runner())
            .map(|_| ())
            .expect_err("a forged surrogate record assembles");
        let text = format!("{err:#}");
        assert!(
            text.contains(want) && text.contains(&format!("{kind:#x}")),
            "{kind:#x}: {text}"
        );
        std::fs::remove_dir_all(&journal).unwrap();
        std::fs::create_dir_all(&journal).unwrap();
        for (path, bytes) in saved {
            std::fs::write(path, bytes).unwrap();
        }
        let v = open(&s, &dir);
        let mut back = vec![0u8; 4096];
        v.read(0, &mut back).unwrap();
        assert_eq!(back, vec![9u8; 4096], "the good journal assembles again");
        drop(v);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
