//! Two QMD volumes on one agent-level flash pool (`[[flash]]`): assembled from files, with
//! the pool's journal and each volume's metadata journal, killed at random points. Each
//! reads back its own acknowledged writes, no extent is ever held by two volumes, and a
//! full pool sends writes to both disks as a volume's own full buffer does.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::clock::VirtualClock;
use crate::config::FlashConfig;
use crate::flash_pool::{FlashPool, HEADER_AREA};
use crate::member::SystemRunner;
use crate::parity::test_rng::Rng;

const MEMBER_BYTES: u64 = 8 << 20;
const BLOCK: u64 = 8192;

fn pool_config(dir: &Path, data: u64, extent: u64) -> FlashConfig {
    FlashConfig {
        name: "fast".into(),
        kind: MemberKind::File,
        path: dir.join("pool.img"),
        size: Some(crate::config::Size::Bytes(HEADER_AREA + data)),
        profile: "test-fast".into(),
        extent_size: Some(crate::config::Size::Bytes(extent)),
    }
}

/// One pair (members 0 and 1) on files; the pool is the flash member.
fn spec(dir: &Path, name: &str, pool: &FlashConfig) -> VolumeSpec {
    VolumeSpec {
        name: name.into(),
        layout: "qmd".parse().unwrap(),
        stripe_unit: 65536,
        // The second disk sleeps as soon as it is idle: writes go through the buffer.
        policy: PolicySpec::Mirrors { timeout_s: 0.0 },
        start_stop_budget_per_day: 48,
        rebuild_mb_s: 100.0,
        bitmap_region: 1 << 20,
        integrity: IntegritySettings::default(),
        layout_options: Default::default(),
        trace: None,
        members: (0..2)
            .map(|i| MemberSpec {
                kind: MemberKind::File,
                path: dir.join(format!("{name}-m{i}.img")),
                size: Some(MEMBER_BYTES),
                profile: "test-fast".into(),
                standby_mode: None,
                inject_read_errors: Vec::new(),
                drive_seed: None,
            })
            .collect(),
    }
    .with_pool_member(pool)
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("grs-qmd-pool-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn start(
    dir: &Path,
    cfg: &FlashConfig,
    specs: &[VolumeSpec],
) -> (Arc<FlashPool>, Vec<Arc<Volume>>) {
    let pool = open_pool(cfg, dir).unwrap();
    let runner: Arc<dyn CommandRunner> = Arc::new(SystemRunner);
    let vols = specs
        .iter()
        .map(|s| {
            let v = assemble_pooled(s, &pool, Arc::new(VirtualClock::new()), dir, &runner).unwrap();
            v.tick(); // the second disk goes to sleep
            v
        })
        .collect();
    (pool, vols)
}

fn flash_extents(v: &Volume) -> Vec<u64> {
    v.layout().layout_state().unwrap()["flash_extents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_u64().unwrap())
        .collect()
}

/// Every extent a volume lists is the pool's for that volume, and none twice.
fn extents_held_once(pool: &FlashPool, vols: &[Arc<Volume>], names: &[&str], whence: &str) {
    let mut seen = BTreeSet::new();
    for (v, name) in vols.iter().zip(names) {
        let held: BTreeSet<u64> = pool.held(name).into_iter().map(u64::from).collect();
        for e in flash_extents(v) {
            assert!(
                held.contains(&e),
                "{whence}: {name} lists extent {e} the pool does not give it"
            );
            assert!(seen.insert(e), "{whence}: extent {e} held twice");
        }
        for e in &held {
            assert!(
                flash_extents(v).contains(e),
                "{whence}: the pool gives {name} extent {e} it does not list"
            );
        }
    }
}

fn block(slot: u64, version: u32) -> Vec<u8> {
    (0..BLOCK)
        .map(|j| (slot as u8).wrapping_mul(29) ^ (j as u8) ^ (version as u8) ^ (version >> 8) as u8)
        .collect()
}

/// Random writes and flushes on two volumes sharing a pool, killed between requests (with
/// unflushed writes in flight) and restarted: each volume reads its own last acknowledged
/// write or a later unacknowledged one, never older and never the other volume's bytes;
/// the pool and the volumes agree on who holds which extent.
#[test]
fn two_volumes_on_one_pool_survive_random_kills() {
    let dir = scratch("random");
    // 1.5 MiB of data in 128 KiB extents: 4 usable (the first MiB stays zero) — small
    // enough that the pool fills and extents are reclaimed and reused across volumes.
    let cfg = pool_config(&dir, 3 << 19, 128 << 10);
    let names = ["va", "vb"];
    let specs: Vec<VolumeSpec> = names.iter().map(|n| spec(&dir, n, &cfg)).collect();
    let (mut pool, mut vols) = start(&dir, &cfg, &specs);
    let slots = 96u64;
    let stride = 3 * BLOCK;
    // Per volume, per slot: the acknowledged version and the versions written since.
    let mut acked = vec![vec![0u32; slots as usize]; 2];
    let mut pending: Vec<Vec<Vec<u32>>> = vec![vec![Vec::new(); slots as usize]; 2];
    let mut rng = Rng(0x005e_ed0f_f1a5);
    let mut version = 1u32;
    let mut kills = 0;
    let mut full_fallbacks = 0;
    for step in 0..1200 {
        let v = rng.below(2);
        match rng.below(80) {
            0..=71 => {
                let slot = rng.below(slots as usize) as u64;
                let before = flash_extents(&vols[v]).len();
                vols[v].write(slot * stride, &block(slot, version)).unwrap();
                if pool.status()["free_extents"] == 0 && flash_extents(&vols[v]).len() == before {
                    full_fallbacks += 1;
                }
                pending[v][slot as usize].push(version);
                version += 1;
            }
            72..=77 => {
                vols[v].flush().unwrap();
                for (a, p) in acked[v].iter_mut().zip(&mut pending[v]) {
                    if let Some(&last) = p.last() {
                        *a = last;
                    }
                    p.clear();
                }
            }
            78 => {
                // Woken: write back, so extents empty and go back to the pool.
                vols[v].drain_layout_background().unwrap();
                vols[v].flush().unwrap();
                vols[v].tick();
            }
            _ => {
                drop(vols);
                drop(pool);
                kills += 1;
                (pool, vols) = start(&dir, &cfg, &specs);
                extents_held_once(&pool, &vols, &names, &format!("step {step}"));
                for w in 0..2 {
                    for slot in 0..slots {
                        let mut buf = vec![0u8; BLOCK as usize];
                        vols[w].read(slot * stride, &mut buf).unwrap();
                        let ok = |ver: u32| {
                            if ver == 0 {
                                buf.iter().all(|&b| b == 0)
                            } else {
                                buf == block(slot, ver)
                            }
                        };
                        let s = slot as usize;
                        let found = std::iter::once(acked[w][s])
                            .chain(pending[w][s].iter().copied())
                            .find(|&ver| ok(ver));
                        let Some(ver) = found else {
                            panic!(
                                "step {step}: {} slot {slot} reads neither its acknowledged \
                                 version {} nor a later one {:?}",
                                names[w], acked[w][s], pending[w][s]
                            );
                        };
                        // What survived is now what a flush acknowledges.
                        acked[w][s] = ver;
                        pending[w][s].clear();
                    }
                    vols[w].flush().unwrap();
                }
            }
        }
    }
    eprintln!("{kills} kills, {full_fallbacks} writes with the pool full");
    assert!(kills >= 10, "{kills} kills");
    assert!(full_fallbacks > 0, "the pool filled up at least once");
    drop(vols);
    drop(pool);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A full pool: the write goes in place to both disks (the second woken), as with a
/// volume's own full buffer, and reads back; freed extents serve the other volume.
#[test]
fn a_full_pool_sends_writes_to_both_disks() {
    let dir = scratch("full");
    // 2 MiB of data in 512 KiB extents: 2 usable.
    let cfg = pool_config(&dir, 2 << 20, 512 << 10);
    let specs: Vec<VolumeSpec> = ["va", "vb"].iter().map(|n| spec(&dir, n, &cfg)).collect();
    let (pool, vols) = start(&dir, &cfg, &specs);
    // va fills both extents (64 writes of 8 KiB per extent).
    for i in 0..128u64 {
        vols[0].write(i * BLOCK, &block(i, 1)).unwrap();
    }
    vols[0].flush().unwrap();
    assert_eq!(pool.held("va").len(), 2);
    assert_eq!(pool.status()["free_extents"], 0);
    let at = 4 << 20;
    vols[1].write(at, &block(7, 2)).unwrap();
    vols[1].flush().unwrap();
    assert!(pool.held("vb").is_empty(), "nothing for vb in a full pool");
    let member = |m: usize| {
        let bytes = std::fs::read(dir.join(format!("vb-m{m}.img"))).unwrap();
        bytes[(DATA_OFFSET + at) as usize..(DATA_OFFSET + at + BLOCK) as usize].to_vec()
    };
    assert_eq!(member(0), block(7, 2), "on the active disk");
    assert_eq!(member(1), block(7, 2), "and on the second disk");
    let mut buf = vec![0u8; BLOCK as usize];
    vols[1].read(at, &mut buf).unwrap();
    assert_eq!(buf, block(7, 2));
    // va writes back: its extents go back to the pool, vb buffers again.
    vols[0].drain_layout_background().unwrap();
    vols[0].flush().unwrap();
    vols[0].flush().unwrap();
    assert!(pool.held("va").is_empty(), "va's emptied extents released");
    vols[1].tick();
    vols[1].write(at + BLOCK, &block(8, 3)).unwrap();
    vols[1].flush().unwrap();
    assert_eq!(pool.held("vb").len(), 1, "vb buffers in a freed extent");
    drop(vols);
    drop(pool);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A volume left out of the configuration keeps its extents (its buffered writes may be
/// the only copy of a cold pair's newest data) until the operator releases them.
#[test]
fn a_volume_left_out_keeps_its_extents() {
    let dir = scratch("removed");
    let cfg = pool_config(&dir, 6 << 20, 512 << 10);
    let specs: Vec<VolumeSpec> = ["va", "vb"].iter().map(|n| spec(&dir, n, &cfg)).collect();
    let (pool, vols) = start(&dir, &cfg, &specs);
    vols[1].write(0, &block(1, 1)).unwrap();
    vols[1].flush().unwrap();
    let held = pool.held("vb");
    assert_eq!(held.len(), 1);
    drop(vols);
    drop(pool);
    // Restarted with va only.
    let (pool, vols) = start(&dir, &cfg, &specs[..1]);
    assert_eq!(pool.held("vb"), held, "kept");
    let runner: Arc<dyn CommandRunner> = Arc::new(SystemRunner);
    assert!(
        assemble_pooled(
            &specs[0],
            &pool,
            Arc::new(VirtualClock::new()),
            &dir,
            &runner
        )
        .is_err(),
        "va is attached already"
    );
    // A new volume named vb (blank disks) does not take over the old vb's extents.
    for m in 0..2 {
        let f = dir.join(format!("vb-m{m}.img"));
        std::fs::rename(&f, f.with_extension("old")).unwrap();
    }
    let e = assemble_pooled(
        &specs[1],
        &pool,
        Arc::new(VirtualClock::new()),
        &dir,
        &runner,
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("release_flash"), "{e:#}");
    assert_eq!(pool.held("vb"), held, "still kept");
    for m in 0..2 {
        let f = dir.join(format!("vb-m{m}.img"));
        std::fs::rename(f.with_extension("old"), &f).unwrap();
    }
    assert_eq!(pool.release_volume("vb").unwrap(), 1);
    assert!(pool.release_volume("va").is_err(), "assembled");
    // A new volume takes the released slot: it finds it blank (the header was cleared).
    let vc = spec(&dir, "vc", &cfg);
    let c = assemble_pooled(&vc, &pool, Arc::new(VirtualClock::new()), &dir, &runner).unwrap();
    c.tick();
    c.write(0, &block(2, 2)).unwrap();
    c.flush().unwrap();
    assert_eq!(pool.held("vc").len(), 1);
    drop(c);
    pool.detach("vc");
    // vb again: its disks are an existing volume, its pool slot is gone: rebuilding the
    // flash member would write over the other volumes' extents, so it is refused.
    let e = assemble_pooled(
        &specs[1],
        &pool,
        Arc::new(VirtualClock::new()),
        &dir,
        &runner,
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("blank or half rebuilt"), "{e:#}");
    assert_eq!(pool.held("vc").len(), 1, "vc's extent untouched");
    drop(vols);
    drop(pool);
    std::fs::remove_dir_all(dir).unwrap();
}
