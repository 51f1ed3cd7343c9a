//! Crash tests of the engine with its metadata journal, on file members of a mirror:
//!
//! * a child process (this test executable, re-run) writes, flushes, fails and replaces a
//!   member and rebuilds it, and is SIGKILLed at random moments;
//! * in-process, the members sit behind volatile write-back caches that a power loss
//!   empties (keeping a random part of what they held);
//!
//! and after every crash the volume is reassembled and checked: every write acknowledged
//! by a flush reads back, the member health and generations are what the journal and the
//! headers recorded, a rebuild resumes from the journaled watermark (not 0, not past the
//! bytes really on the member), and after resync and rebuild the mirrors are identical.
//! A test personality checks that a layout's own records come back after a crash.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::clock::VirtualClock;
use crate::journal::meta::JournaledHealth;
use crate::layout::{
    LayoutError, LayoutRecord, MemberView, Personality, Plan, Reconcile, SyncCopy,
};
use crate::member::memory::VolatileCache;
use crate::member::SystemRunner;
use crate::parity::test_rng::Rng;
use crate::service_model::IoKind;

const DIR_ENV: &str = "GR_ENGINE_CRASH_DIR";
const SEED_ENV: &str = "GR_ENGINE_CRASH_SEED";
const VERSION_ENV: &str = "GR_ENGINE_CRASH_FIRST_VERSION";
const LAYOUT_ENV: &str = "GR_ENGINE_CRASH_LAYOUT";

const BLOCK: u64 = 4096;
const BLOCKS: usize = 256;
/// Blocks spread over the volume (every seventh 4 KiB), so writes touch many bitmap regions.
const STRIDE: u64 = 7 * BLOCK;
const REBUILD_CHUNK: u64 = 64 << 10;

/// A two-member mirror, or (`raid5`, `raid5-ido`) three members with parity.
fn spec_of(dir: &Path, layout: &str) -> VolumeSpec {
    let (layout, members) = match layout {
        "raid5" => (LayoutKind::RAID5, 3),
        "rolo-p" => (LayoutKind::ROLO_P, 4),
        "rolo-r" | "rolo-e" | "rolo-s" => (layout.parse().unwrap(), 4),
        "raid5-ido" => ("raid5-ido".parse().unwrap(), 3),
        _ => (LayoutKind::RAID10, 2),
    };
    VolumeSpec {
        name: "crash".into(),
        layout,
        stripe_unit: 65536,
        layout_options: Default::default(),
        policy: PolicySpec::AlwaysOn,
        start_stop_budget_per_day: 48,
        rebuild_mb_s: 100.0,
        bitmap_region: 1 << 20,
        integrity: IntegritySettings::default(),
        trace: None,
        members: (0..members)
            .map(|i| MemberSpec {
                kind: MemberKind::File,
                path: dir.join(format!("m{i}.img")),
                size: Some(8 << 20),
                profile: "test-fast".into(),
                standby_mode: None,
                drive_seed: None,
                inject_read_errors: Vec::new(),
            })
            .collect(),
    }
}

fn spec(dir: &Path) -> VolumeSpec {
    spec_of(dir, "raid10")
}

fn runner() -> Arc<dyn CommandRunner> {
    Arc::new(SystemRunner)
}

fn offset(b: usize) -> u64 {
    b as u64 * STRIDE
}

/// Block `b` at version `v`: its number and version, then filler from both (0: zeros).
fn block(b: usize, v: u64) -> Vec<u8> {
    if v == 0 {
        return vec![0; BLOCK as usize];
    }
    let mut rng = Rng((b as u64) << 40 ^ v | 1);
    let mut out = (b as u64).to_le_bytes().to_vec();
    out.extend(v.to_le_bytes());
    out.extend(rng.bytes(BLOCK as usize - 16));
    out
}

/// Which version of its block `bytes` is, if it is one.
fn version_of(b: usize, bytes: &[u8]) -> Option<u64> {
    if bytes.iter().all(|&x| x == 0) {
        return Some(0);
    }
    let v = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    (bytes == block(b, v)).then_some(v)
}

/// One step of the workload: a few writes, maybe a flush, and membership work on member
/// 1 (fail and replace it now and then, rebuild it, journal the rebuild's progress). Each
/// event is reported once it happened ("i B V" before a write, "w B V" after it, "f" after
/// a flush returned, "failing", "replaced", "journaled W", "insync").
fn workload_step(
    v: &Volume,
    replacement: &dyn Fn() -> Arc<dyn Member>,
    rng: &mut Rng,
    version: &mut u64,
    report: &mut dyn FnMut(String),
) {
    for _ in 0..1 + rng.below(4) {
        let b = rng.below(BLOCKS);
        *version += 1;
        report(format!("i {b} {version}"));
        v.write(offset(b), &block(b, *version)).unwrap();
        report(format!("w {b} {version}"));
    }
    if rng.below(2) == 0 {
        v.flush().unwrap();
        report("f".into());
    }
    let replace = |report: &mut dyn FnMut(String)| {
        v.replace_member(1, replacement()).unwrap();
        report("replaced".into());
    };
    match v.slot(1).unwrap().health() {
        Health::Rebuilding { .. } => {
            for _ in 0..rng.below(4) {
                if v.rebuild_step(1, REBUILD_CHUNK).unwrap().is_none() {
                    report("insync".into());
                    return;
                }
            }
            if rng.below(3) == 0 {
                v.journal_rebuild_progress(1).unwrap();
                if let Health::Rebuilding { watermark } = v.slot(1).unwrap().health() {
                    report(format!("journaled {watermark}"));
                }
            }
        }
        Health::InSync if rng.below(15) == 0 => {
            report("failing".into());
            v.fail_member(1, "crash test");
            replace(report);
        }
        Health::InSync => {}
        Health::Failed { .. } => replace(report),
    }
}

/// What the checker knows of the blocks and of member 1.
#[derive(Debug)]
struct Model {
    /// Per block: the version a flush acknowledged (or the one read after the last crash).
    acked: Vec<u64>,
    /// Per block: versions issued since then (any of them may have landed).
    since: Vec<Vec<u64>>,
    /// Written since the last flush (acknowledged by the next one).
    written: BTreeMap<usize, u64>,
    /// The last membership event of member 1 in this round.
    member1: Option<String>,
    next_version: u64,
}

impl Model {
    fn new() -> Self {
        Self {
            acked: vec![0; BLOCKS],
            since: vec![Vec::new(); BLOCKS],
            written: BTreeMap::new(),
            member1: None,
            next_version: 1,
        }
    }

    fn event(&mut self, line: &str) {
        let mut words = line.split_whitespace();
        let num = |w: Option<&str>| -> u64 { w.unwrap().parse().unwrap() };
        match words.next() {
            Some("i") => {
                let (b, v) = (num(words.next()) as usize, num(words.next()));
                self.since[b].push(v);
                self.next_version = self.next_version.max(v + 1);
            }
            Some("w") => {
                let (b, v) = (num(words.next()) as usize, num(words.next()));
                self.written.insert(b, v);
            }
            Some("f") => {
                for (b, v) in std::mem::take(&mut self.written) {
                    self.acked[b] = v;
                    self.since[b].retain(|&x| x > v);
                }
            }
            Some("failing" | "replaced" | "insync" | "journaled") => {
                self.member1 = Some(line.to_string());
            }
            _ => {}
        }
    }

    fn in_flight(&self, b: usize) -> bool {
        !self.since[b].is_empty()
    }

    /// After a crash: check the reassembled volume, finish its resync and rebuild, check
    /// every block, and take what is there as the new baseline.
    fn check_after_crash(&mut self, v: &Volume, dir: &Path, round: usize) -> Option<u64> {
        let health = v.slot(1).unwrap().health();
        let ctx = format!(
            "round {round}: member 1 is {health:?} after {:?}",
            self.member1
        );
        let event = self.member1.clone().unwrap_or_default();
        let resumed = match (event.split_whitespace().next(), &health) {
            (None | Some("insync"), h) => {
                assert_eq!(*h, Health::InSync, "{ctx}");
                None
            }
            (Some("failing"), _) => None,
            (Some("replaced"), h) => {
                assert!(!matches!(h, Health::Failed { .. }), "{ctx}");
                None
            }
            (Some("journaled"), h) => {
                let journaled: u64 = event[10..].parse().unwrap();
                match h {
                    Health::InSync => None,
                    Health::Rebuilding { watermark } => {
                        assert!(
                            *watermark >= journaled,
                            "{ctx}: resumed below the journaled watermark {journaled}"
                        );
                        Some(*watermark)
                    }
                    Health::Failed { .. } => panic!("{ctx}"),
                }
            }
            (Some(other), _) => panic!("unknown event {other}"),
        };
        self.check_rebuilt_bytes(v, dir, round);
        self.check_generations(v, dir, round);
        // Finish what the crash interrupted.
        for _ in 0..10_000 {
            if v.resync_pending() == 0 {
                break;
            }
            v.tick();
        }
        assert_eq!(
            v.resync_pending(),
            0,
            "round {round}: resync did not finish"
        );
        while v.rebuild_step(1, 1 << 20).unwrap().is_some() {}
        v.flush().unwrap();
        for b in 0..BLOCKS {
            let mut buf = vec![0u8; BLOCK as usize];
            v.read(offset(b), &mut buf).unwrap();
            let got = version_of(b, &buf)
                .unwrap_or_else(|| panic!("round {round}: block {b} holds no version of itself"));
            assert!(
                got == self.acked[b] || self.since[b].contains(&got),
                "round {round}: block {b} reads version {got}; acknowledged {}, issued since {:?}",
                self.acked[b],
                self.since[b]
            );
            self.acked[b] = got;
            self.since[b].clear();
        }
        self.written.clear();
        self.member1 = None;
        let xor = members_xor(dir, v.member_count());
        assert!(
            xor.iter().all(|&x| x == 0),
            "round {round}: the members disagree after resync and rebuild (at byte {:?})",
            xor.iter().position(|&x| x != 0)
        );
        resumed
    }

    /// Below a rebuild's watermark the replacement holds what the rest of its mirror or
    /// stripe says (the members' bytes XOR to zero row by row, a mirror's as a stripe's),
    /// except where a write was in flight when the crash came.
    fn check_rebuilt_bytes(&self, v: &Volume, dir: &Path, round: usize) {
        let Health::Rebuilding { watermark } = v.slot(1).unwrap().health() else {
            return;
        };
        let n = v.member_count();
        let mut in_flight_rows = BTreeMap::new();
        for b in (0..BLOCKS).filter(|&b| self.in_flight(b)) {
            let healthy = vec![MemberView::healthy(0.0); n];
            let plan = v
                .layout()
                .plan(IoKind::Write, offset(b), BLOCK, &healthy)
                .unwrap();
            for w in &plan.writes {
                in_flight_rows.insert(w.member_offset / BLOCK, b);
            }
        }
        let xor = members_xor(dir, n);
        for i in 0..watermark / BLOCK {
            let row = &xor[(i * BLOCK) as usize..((i + 1) * BLOCK) as usize];
            assert!(
                row.iter().all(|&x| x == 0) || in_flight_rows.contains_key(&i),
                "round {round}: member 1 block {i} below the resumed watermark {watermark} \
                 disagrees with the rest and no write to it was in flight (last event {:?})",
                self.member1
            );
        }
    }

    /// The members in use carry the volume's generation; a failed one an older one.
    fn check_generations(&self, v: &Volume, dir: &Path, round: usize) {
        let generation = v.identity().unwrap().generation;
        for i in 0..v.member_count() {
            let m = FileMember::open_or_create(MemberKind::File, &dir.join(format!("m{i}.img")), 0)
                .unwrap();
            let header = superblock::read(&m).unwrap();
            match v.slot(i).unwrap().health() {
                Health::Failed { .. } => assert!(
                    header.is_none_or(|h| h.generation < generation),
                    "round {round}: failed member {i} still looks current"
                ),
                _ => assert_eq!(
                    header.map(|h| h.generation),
                    Some(generation),
                    "round {round}: member {i}"
                ),
            }
        }
    }
}

fn member_data(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()[DATA_OFFSET as usize..].to_vec()
}

/// The members' data bytes XORed together (zero where a mirror or a stripe agrees).
fn members_xor(dir: &Path, members: usize) -> Vec<u8> {
    let mut xor = member_data(&dir.join("m0.img"));
    for i in 1..members {
        for (x, y) in xor
            .iter_mut()
            .zip(member_data(&dir.join(format!("m{i}.img"))))
        {
            *x ^= y;
        }
    }
    xor
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("grs-ecrash-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The child: assemble, report "ready", run the workload until killed.
#[test]
#[ignore = "the engine process of the crash tests, which start it themselves"]
fn engine_crash_child() {
    let Some(dir) = std::env::var_os(DIR_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let seed: u64 = std::env::var(SEED_ENV).unwrap().parse().unwrap();
    let mut version: u64 = std::env::var(VERSION_ENV).unwrap().parse().unwrap();
    let s = spec_of(&dir, &std::env::var(LAYOUT_ENV).unwrap());
    let v = assemble(&s, Arc::new(VirtualClock::new()), &dir, &runner()).unwrap();
    v.set_identity_flags(true, false).unwrap();
    let mut out = std::io::stdout().lock();
    let mut report = |line: String| {
        writeln!(out, "{line}").unwrap();
        out.flush().unwrap();
    };
    report("ready".into());
    let mut rng = Rng(seed | 1);
    loop {
        let replacement = || s.members[1].open_replacement(None, &runner()).unwrap();
        workload_step(&v, &replacement, &mut rng, &mut version, &mut report);
    }
}

/// `rounds` engine processes in turn on one volume, each SIGKILLed after a random number
/// of flushes plus a random delay; after each, reassemble and check.
fn kill_rounds(layout: &str, seed: u64, rounds: usize) {
    let dir = tmp(&format!("kill-{layout}"));
    let s = spec_of(&dir, layout);
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng(seed);
    let mut model = Model::new();
    let (mut resumed, mut rounds_rebuilding) = (0, 0);
    drop(assemble(&s, Arc::new(VirtualClock::new()), &dir, &runner()).unwrap());
    for round in 0..rounds {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "assemble::crash_tests::engine_crash_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_ENV, &dir)
            .env(SEED_ENV, rng.next().to_string())
            .env(VERSION_ENV, model.next_version.to_string())
            .env(LAYOUT_ENV, layout)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let flushes = 1 + rng.below(40);
        let mut seen = 0;
        while seen < flushes {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("round {round}: the engine died on its own"))
                .unwrap();
            seen += usize::from(line == "f");
            model.event(&line);
        }
        std::thread::sleep(Duration::from_micros(rng.below(5000) as u64));
        child.kill().unwrap();
        child.wait().unwrap();
        for line in lines.map_while(Result::ok) {
            model.event(&line);
        }
        rounds_rebuilding += usize::from(
            model
                .member1
                .as_deref()
                .is_some_and(|e| e.starts_with("journaled")),
        );
        let v = assemble(&s, Arc::new(VirtualClock::new()), &dir, &runner())
            .unwrap_or_else(|e| panic!("round {round}: reassembly failed: {e:#}"));
        resumed += usize::from(
            model
                .check_after_crash(&v, &dir, round)
                .is_some_and(|w| w > 0),
        );
    }
    eprintln!("{layout}: {rounds} kills; {rounds_rebuilding} inside a journaled rebuild, {resumed} resumed past 0");
    assert!(
        resumed > 0,
        "no kill landed in a rebuild: the test proved nothing about it"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_killed_engine_keeps_acknowledged_writes_membership_and_rebuild_progress() {
    kill_rounds("raid10", 0x5eed_e001, 40);
}

#[test]
fn a_killed_raid5_engine_keeps_acknowledged_writes_membership_and_rebuild_progress() {
    kill_rounds("raid5", 0x5eed_e004, 20);
}

#[test]
fn a_killed_raid5_ido_engine_keeps_acknowledged_writes_membership_and_rebuild_progress() {
    kill_rounds("raid5-ido", 0x5eed_e017, 20);
}

#[test]
fn a_kill_between_two_header_writes_after_a_failure_keeps_the_volume() {
    // Member 1 fails: the journal's picture is committed, then the headers are written member
    // by member. Killed after member 0's header and before member 2's, member 2 is a
    // generation behind though in sync (the journal says so); RAID5 cannot lose it as well.
    let dir = tmp("header-kill");
    let s = spec_of(&dir, "raid5");
    let v = assemble(&s, Arc::new(VirtualClock::new()), &dir, &runner()).unwrap();
    v.write(0, &[7u8; 4096]).unwrap();
    v.flush().unwrap();
    let m2 = FileMember::open_or_create(MemberKind::File, &dir.join("m2.img"), 0).unwrap();
    let before = superblock::read(&m2).unwrap().unwrap();
    v.fail_member(1, "test");
    drop(v);
    superblock::write(&m2, &before).unwrap();
    let v = match assemble(&s, Arc::new(VirtualClock::new()), &dir, &runner()) {
        Ok(v) => v,
        Err(e) => panic!("reassembly refused: {e:#}"),
    };
    assert_eq!(v.slot(2).unwrap().health(), Health::InSync);
    assert!(matches!(v.slot(1).unwrap().health(), Health::Failed { .. }));
    let mut buf = vec![0u8; 4096];
    v.read(0, &mut buf).unwrap();
    assert_eq!(buf, vec![7u8; 4096]);
    drop(v);
    std::fs::remove_dir_all(dir).unwrap();
}

/// `rounds` power losses with every member behind a volatile write-back cache.
fn power_rounds(layout: &str, seed: u64, rounds: usize) {
    let dir = tmp(&format!("power-{layout}"));
    let s = spec_of(&dir, layout);
    let mut rng = Rng(seed);
    let mut model = Model::new();
    let (mut lost_writes, mut resumed) = (0, 0);
    for round in 0..rounds {
        let caches: Mutex<Vec<Arc<VolatileCache>>> = Mutex::new(
            s.members
                .iter()
                .map(|m| VolatileCache::new(m.open(&runner()).unwrap()))
                .collect(),
        );
        let stores = caches
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.clone() as Arc<dyn Member>)
            .collect();
        // A replacement drive has its write-back cache too.
        let replacement = || -> Arc<dyn Member> {
            let store = s.members[1].open_replacement(None, &runner()).unwrap();
            let cache = VolatileCache::new(store);
            caches.lock().unwrap().push(cache.clone());
            cache
        };
        let v = assemble_stores(&s, Arc::new(VirtualClock::new()), &dir, stores)
            .unwrap_or_else(|e| panic!("round {round}: reassembly failed: {e:#}"));
        if round > 0 {
            resumed += usize::from(
                model
                    .check_after_crash(&v, &dir, round)
                    .is_some_and(|w| w > 0),
            );
        }
        v.set_identity_flags(true, false).unwrap();
        let mut version = model.next_version;
        let mut events = Vec::new();
        for _ in 0..20 + rng.below(200) {
            workload_step(&v, &replacement, &mut rng, &mut version, &mut |l| {
                events.push(l)
            });
        }
        for e in &events {
            model.event(e);
        }
        for c in caches.lock().unwrap().iter() {
            lost_writes += c.power_loss(|| rng.below(2) == 0).unwrap();
        }
        drop(v);
    }
    eprintln!("{layout}: {rounds} power losses dropped {lost_writes} cached member writes; {resumed} rebuilds resumed past 0");
    assert!(
        lost_writes > 0,
        "no power loss lost anything: the test proved nothing"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_power_loss_keeps_every_write_a_flush_acknowledged() {
    power_rounds("raid10", 0x5eed_e002, 30);
}

#[test]
fn a_power_loss_under_raid5_keeps_every_write_a_flush_acknowledged() {
    power_rounds("raid5", 0x5eed_e005, 20);
}

#[test]
fn a_power_loss_under_raid5_ido_keeps_every_write_a_flush_acknowledged() {
    power_rounds("raid5-ido", 0x5eed_e117, 20);
}

/// A personality with metadata of its own: RAID10 plus an index of every write it
/// completed (as a log-structured layout keeps where its blocks went).
#[derive(Debug)]
struct IndexedMirror {
    inner: Box<dyn Personality>,
    index: Mutex<Vec<u64>>,
}

const INDEX_KIND: u16 = 7;

impl Personality for IndexedMirror {
    fn kind(&self) -> LayoutKind {
        self.inner.kind()
    }
    fn member_count(&self) -> usize {
        self.inner.member_count()
    }
    fn member_data_bytes(&self) -> u64 {
        self.inner.member_data_bytes()
    }
    fn stripe_unit(&self) -> u64 {
        self.inner.stripe_unit()
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn plan(
        &self,
        kind: IoKind,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.inner.plan(kind, offset, len, views)
    }
    fn complete(&self, plan: &Plan) {
        if let Some(w) = plan.writes.first() {
            crate::sync::lock(&self.index).push(w.member_offset);
        }
    }
    fn journal_records(&self, plan: &Plan) -> Vec<LayoutRecord> {
        plan.writes
            .first()
            .map(|w| LayoutRecord {
                kind: INDEX_KIND,
                payload: w.member_offset.to_le_bytes().to_vec(),
            })
            .into_iter()
            .collect()
    }
    fn replay(&self, image: Option<&[u8]>, records: &[LayoutRecord]) -> Result<(), String> {
        let mut index = crate::sync::lock(&self.index);
        index.clear();
        let entry = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
        index.extend(image.unwrap_or_default().chunks(8).map(entry));
        for r in records {
            if r.kind != INDEX_KIND || r.payload.len() != 8 {
                return Err(format!(
                    "unexpected record kind {} of {} bytes",
                    r.kind,
                    r.payload.len()
                ));
            }
            index.push(entry(&r.payload));
        }
        Ok(())
    }
    fn checkpoint_image(&self) -> Option<Vec<u8>> {
        Some(
            crate::sync::lock(&self.index)
                .iter()
                .flat_map(|o| o.to_le_bytes())
                .collect(),
        )
    }
    fn recover(
        &self,
        member: usize,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.inner.recover(member, offset, len, views)
    }
    fn sync_groups(&self) -> Vec<Vec<usize>> {
        self.inner.sync_groups()
    }
    fn lock_spans(&self, offset: u64, len: u64) -> Vec<(usize, u64, u64)> {
        self.inner.lock_spans(offset, len)
    }
    fn reconcile(&self, offset: u64, group: &[SyncCopy], len: u64) -> Result<Reconcile, String> {
        self.inner.reconcile(offset, group, len)
    }
    fn survives(&self, valid: &[bool]) -> bool {
        self.inner.survives(valid)
    }
}

fn indexed(s: &VolumeSpec, dir: &Path) -> (Arc<Volume>, Vec<u64>) {
    let stores: Vec<Arc<dyn Member>> = s
        .members
        .iter()
        .map(|m| m.open(&runner()).unwrap())
        .collect();
    let inner = layout::build(s.layout, 2, stores[0].size() - DATA_OFFSET, s.stripe_unit).unwrap();
    let v = assemble_layout(
        s,
        Arc::new(VirtualClock::new()),
        dir,
        stores,
        Box::new(IndexedMirror {
            inner,
            index: Mutex::new(Vec::new()),
        }),
    )
    .unwrap();
    let index = v.layout().checkpoint_image().unwrap();
    let entries = index
        .chunks(8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (v, entries)
}

#[test]
fn a_personalitys_records_come_back_after_a_crash_once_a_flush_acknowledged_them() {
    let dir = tmp("layout");
    let s = spec(&dir);
    let mut acked = Vec::new();
    let mut rng = Rng(0x5eed_e003);
    for round in 0..6 {
        let (v, index) = indexed(&s, &dir);
        assert!(
            index.len() >= acked.len() && index[..acked.len()] == acked[..],
            "round {round}: the replayed index ({} entries) lost some of the {} acknowledged",
            index.len(),
            acked.len()
        );
        acked = index;
        for i in 0..20 + rng.below(20) {
            let b = rng.below(BLOCKS);
            v.write(offset(b), &block(b, 1)).unwrap();
            let healthy = [MemberView::healthy(0.0); 2];
            let plan = v
                .layout()
                .plan(IoKind::Write, offset(b), BLOCK, &healthy)
                .unwrap();
            let entry = plan.writes[0].member_offset;
            acked.push(entry);
            if i % 7 == 3 {
                v.checkpoint_metadata().unwrap();
            }
        }
        v.flush().unwrap();
        // Written after the last flush: may be lost, need not be.
        for _ in 0..rng.below(5) {
            let b = rng.below(BLOCKS);
            v.write(offset(b), &block(b, 2)).unwrap();
        }
        drop(v); // a crash: no clean stop, nothing flushed
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_failure_the_journal_recorded_but_the_headers_missed_is_kept() {
    let dir = tmp("missed");
    let s = spec(&dir);
    let v = assemble(&s, Arc::new(VirtualClock::new()), &dir, &runner()).unwrap();
    v.write(0, &block(0, 1)).unwrap();
    let generation = v.identity().unwrap().generation;
    // The crash came after the failure was committed to the journal (as a flush does for a
    // write that skipped the member) and before the headers were written.
    let meta = v.metadata_journal().unwrap();
    meta.record_member(
        1,
        JournaledHealth::Failed {
            reason: "write error".into(),
        },
    )
    .unwrap();
    meta.commit().unwrap();
    drop(v);
    let v = assemble(&s, Arc::new(VirtualClock::new()), &dir, &runner()).unwrap();
    assert!(
        matches!(v.slot(1).unwrap().health(), Health::Failed { ref reason } if reason.contains("write error")),
        "{:?}",
        v.slot(1).unwrap().health()
    );
    assert!(v.identity().unwrap().generation > generation);
    drop(v);
    // The new generation is in the headers: without the journal the member stays stale.
    std::fs::remove_dir_all(dir.join("crash.journal")).unwrap();
    let v = assemble(&s, Arc::new(VirtualClock::new()), &dir, &runner()).unwrap();
    assert!(matches!(v.slot(1).unwrap().health(), Health::Failed { .. }));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_journal_of_another_volume_or_an_old_volume_without_one_is_not_used() {
    let dir = tmp("foreign");
    let s = spec(&dir);
    let v = assemble(&s, Arc::new(VirtualClock::new()), &dir, &runner()).unwrap();
    v.fail_member(1, "test");
    drop(v);
    // An old volume: no journal yet. The headers decide and a journal is started.
    std::fs::remove_dir_all(dir.join("crash.journal")).unwrap();
    let v = assemble(&s, Arc::new(VirtualClock::new()), &dir, &runner()).unwrap();
    assert!(matches!(v.slot(1).unwrap().health(), Health::Failed { .. }));
    let state = v.metadata_journal().unwrap().state();
    assert_eq!(state.volume_id, v.identity().unwrap().volume_id);
    assert_eq!(state.generation, v.identity().unwrap().generation);
    drop(v);
    // A new volume under the same name with the old journal still there.
    for i in 0..2 {
        std::fs::remove_file(dir.join(format!("m{i}.img"))).unwrap();
    }
    let v = assemble(&s, Arc::new(VirtualClock::new()), &dir, &runner()).unwrap();
    assert_eq!(v.slot(1).unwrap().health(), Health::InSync);
    std::fs::remove_dir_all(dir).unwrap();
}

/// RoLo-P's log index is the only record of where the newest second copy of a logged block
/// is: after every crash (no clean stop, writes after the last flush), both primaries are
/// failed, so every read comes from the on-duty logs and the mirrors through the replayed
/// index, and must return the acknowledged version (or one issued since). The primaries are
/// then rebuilt from the same index.
#[test]
fn a_rolo_log_index_comes_back_after_a_crash_and_serves_every_read_without_the_primaries() {
    rolo_crash_rounds("rolo-p");
}

/// The same for the flavours of issue 15: RoLo-R (twin log copies), RoLo-E (logged writes
/// skip their primary; every read goes through the index), RoLo-S (the zebra).
#[test]
fn every_rolo_flavour_serves_every_read_after_crashes_without_the_primaries() {
    for layout in ["rolo-r", "rolo-e", "rolo-s"] {
        rolo_crash_rounds(layout);
    }
}

fn rolo_crash_rounds(layout: &str) {
    let dir = tmp(layout);
    let s = spec_of(&dir, layout);
    let mut rng = Rng(0x5eed_e015);
    let mut model = Model::new();
    let mut version = 0;
    let mut logged_reads = 0;
    for round in 0..8 {
        let v = assemble(&s, Arc::new(VirtualClock::new()), &dir, &runner())
            .unwrap_or_else(|e| panic!("round {round}: reassembly failed: {e:#}"));
        if round > 0 {
            v.fail_member(0, "crash test: primary lost");
            v.fail_member(2, "crash test: primary lost");
            for b in 0..BLOCKS {
                let mut buf = vec![0u8; BLOCK as usize];
                v.read(offset(b), &mut buf)
                    .unwrap_or_else(|e| panic!("round {round}: block {b}: {e}"));
                let got = version_of(b, &buf).unwrap_or_else(|| {
                    panic!("round {round}: block {b} holds no version of itself")
                });
                assert!(
                    got == model.acked[b] || model.since[b].contains(&got),
                    "round {round}: block {b} reads version {got} without its primary; \
                     acknowledged {}, issued since {:?}",
                    model.acked[b],
                    model.since[b]
                );
                let healthy = vec![MemberView::healthy(0.0); 4];
                let mut lost = healthy.clone();
                lost[0] = MemberView::failed(0.0);
                lost[2] = MemberView::failed(0.0);
                let plan = v
                    .layout()
                    .plan(IoKind::Read, offset(b), BLOCK, &lost)
                    .unwrap();
                let reserved = v.layout().reserved();
                logged_reads += usize::from(plan.reads.iter().any(|io| {
                    reserved.iter().any(|r| {
                        r.member == io.member
                            && (r.start..r.start + r.len).contains(&io.member_offset)
                    })
                }));
                model.acked[b] = got;
                model.since[b].clear();
            }
            model.written.clear();
            for m in [0, 2] {
                let store = s.members[m].open_replacement(None, &runner()).unwrap();
                v.replace_member(m, store).unwrap();
                while v.rebuild_step(m, REBUILD_CHUNK).unwrap().is_some() {}
            }
            v.flush().unwrap();
        }
        for _ in 0..30 + rng.below(60) {
            let b = rng.below(BLOCKS);
            version += 1;
            model.event(&format!("i {b} {version}"));
            v.write(offset(b), &block(b, version)).unwrap();
            model.event(&format!("w {b} {version}"));
            match rng.below(10) {
                0..=2 => {
                    v.flush().unwrap();
                    model.event("f");
                }
                3 => v.tick(), // destage a little
                _ => {}
            }
        }
        drop(v); // a crash: no clean stop, nothing flushed
    }
    eprintln!("{layout}: {logged_reads} block reads served from the log after crashes");
    assert!(
        logged_reads > 0,
        "no read came from the log: the test proved nothing"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// A volume keeps the layout options it was created with (in its member headers): assembling
/// it with others that place data is refused with both named, before anything is written;
/// a tuning option may change.
#[test]
fn a_rolo_volume_refuses_other_layout_options_than_it_was_created_with() {
    let dir = tmp("rolo-options");
    let mut s = spec_of(&dir, "rolo-s");
    s.layout_options = LayoutOptions::parse_args(&["zebra_mb=1".into()]).unwrap();
    let v = assemble(&s, Arc::new(VirtualClock::new()), &dir, &runner()).unwrap();
    v.write(0, &block(0, 1)).unwrap();
    v.flush().unwrap();
    drop(v);
    let mut other = s.clone();
    other.layout_options = LayoutOptions::parse_args(&["zebra_mb=2".into()]).unwrap();
    let Err(e) = assemble(&other, Arc::new(VirtualClock::new()), &dir, &runner()) else {
        panic!("other layout options were accepted");
    };
    let e = format!("{e:#}");
    assert!(
        e.contains("layout options") && e.contains("zebra_mb"),
        "{e}"
    );
    // An option that places no data (the rotation threshold) may change between runs.
    let mut tuned = s.clone();
    tuned.layout_options =
        LayoutOptions::parse_args(&["zebra_mb=1".into(), "rotate_at=0.7".into()]).unwrap();
    drop(assemble(&tuned, Arc::new(VirtualClock::new()), &dir, &runner()).unwrap());
    let v = assemble(&s, Arc::new(VirtualClock::new()), &dir, &runner()).unwrap();
    let mut buf = vec![0u8; BLOCK as usize];
    v.read(0, &mut buf).unwrap();
    assert_eq!(
        version_of(0, &buf),
        Some(1),
        "the same options assemble it again"
    );
    drop(v);
    std::fs::remove_dir_all(dir).unwrap();
}
