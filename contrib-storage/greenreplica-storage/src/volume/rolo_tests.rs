//! The logged layouts on the engine: rotations, destage steps and log reclaim interleaved
//! with reads and writes (RoLo-P, RoLo-S's zebra), a primary lost in the middle (its reads
//! come from the log and the mirror) and rebuilt from them; a RoLo-R/E logger lost and
//! rebuilt from its twin; the pre-wake of the next logger; the layout options' errors. Every
//! read returns the last write.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::tests::{memory_volume, MEMBER};
use crate::clock::VirtualClock;
use crate::layout::LayoutKind;
use crate::member::memory::MemMember;
use crate::superblock::DATA_OFFSET;
use crate::sync::lock;
use crate::synth::Rng;

const CHUNK: u64 = 16384;

/// (on-duty logger, logged bytes) from the personality's checkpoint image: a duty record,
/// then one record per index entry (kind u16, length u32, payload).
fn duty_and_logged(image: &[u8]) -> (u32, u64) {
    let (mut at, mut duty, mut logged) = (0, 0, 0);
    while at < image.len() {
        let kind = u16::from_le_bytes(image[at..at + 2].try_into().unwrap());
        let n = u32::from_le_bytes(image[at + 2..at + 6].try_into().unwrap()) as usize;
        let payload = &image[at + 6..at + 6 + n];
        match kind {
            3 => duty = u32::from_le_bytes(payload[..4].try_into().unwrap()),
            1 => logged += u64::from_le_bytes(payload[12..20].try_into().unwrap()),
            other => panic!("unexpected record kind {other} in the image"),
        }
        at += 6 + n;
    }
    (duty, logged)
}

#[test]
fn rotation_destage_and_reclaim_interleaved_with_reads_return_the_last_write() {
    rotate_destage_reclaim(LayoutKind::ROLO_P);
}

/// The same over RoLo-S's zebra (home and log bands interleaved on every member).
#[test]
fn rolo_s_rotates_destages_and_reclaims_over_its_zebra() {
    rotate_destage_reclaim(LayoutKind::ROLO_S);
}

fn rotate_destage_reclaim(kind: LayoutKind) {
    let (v, mut stores) = memory_volume(kind, 6, Arc::new(VirtualClock::new()), CHUNK);
    let cap = v.capacity();
    let pool = 3 * (1 << 20) / 4; // three mirrors' log regions (a quarter of each; less with the zebra)
    let mut model = vec![0u8; cap as usize];
    let mut rng = Rng(0x5eed_0001);
    let (mut rotations, mut written, mut max_logged, mut last_duty) = (0, 0u64, 0u64, 0u32);
    let check = |v: &super::Volume, model: &[u8], offset: u64, len: u64, what: &str| {
        let mut buf = vec![0u8; len as usize];
        v.read(offset, &mut buf).unwrap();
        assert!(
            buf == model[offset as usize..(offset + len) as usize],
            "{what}: read {offset}+{len}"
        );
    };
    for step in 0..6000 {
        match rng.next() % 100 {
            0..=54 => {
                let len = 4096 * (1 + rng.next() % 8);
                let offset = (rng.next() % ((cap - len) / 4096 + 1)) * 4096;
                let seed = rng.next() as u8;
                let data: Vec<u8> = (0..len)
                    .map(|i| (i as u8).wrapping_mul(13) ^ seed)
                    .collect();
                v.write(offset, &data).unwrap();
                model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
                written += len;
            }
            55..=89 => {
                let len = 4096 * (1 + rng.next() % 8);
                let offset = (rng.next() % ((cap - len) / 4096 + 1)) * 4096;
                check(&v, &model, offset, len, &format!("step {step}"));
            }
            90..=97 => {
                v.layout_background_step().unwrap();
            }
            _ => v.tick(),
        }
        let (duty, logged) = duty_and_logged(&v.layout().checkpoint_image().unwrap());
        rotations += usize::from(duty != last_duty);
        last_duty = duty;
        max_logged = max_logged.max(logged);
        if step == 3000 {
            // Primary 0 is lost: its pair's logged bytes come from the log, the rest from
            // its (stale elsewhere) mirror.
            assert!(logged > 0, "something is logged when the primary goes");
            stores[0].broken.store(true, Ordering::SeqCst);
            v.fail_member(0, "test: primary lost");
            for offset in (0..cap).step_by(64 << 10) {
                check(
                    &v,
                    &model,
                    offset,
                    (64 << 10).min(cap - offset),
                    "primary 0 lost",
                );
            }
        }
        if step == 3500 {
            let fresh = MemMember::new(MEMBER);
            v.replace_member(0, fresh.clone()).unwrap();
            stores[0] = fresh;
            while v.rebuild_step(0, 3 * CHUNK + 4096).unwrap().is_some() {}
        }
    }
    eprintln!(
        "{kind}: {rotations} rotations, {written} bytes written, at most {max_logged} logged"
    );
    assert!(rotations >= 5, "the logger rotated {rotations} times");
    // The status tells an operator (and the root test) the duty and the rotations.
    let state = v
        .status_view()
        .layout_state
        .expect("rolo reports its state");
    assert!(
        state["rotations"].as_u64().unwrap() >= rotations as u64,
        "{kind}: status {state} against {rotations} rotations seen in the images"
    );
    assert_eq!(
        state["on_duty_logger"].as_u64().unwrap() % 2,
        1,
        "{kind}: a mirror is on duty ({state})"
    );
    assert!(
        written > 4 * pool,
        "wrote {written} bytes, more than the log pool ({pool}) holds"
    );
    assert!(
        max_logged > 0 && max_logged <= pool,
        "logged at most {max_logged} of {pool}"
    );
    for offset in (0..cap).step_by(64 << 10) {
        check(&v, &model, offset, (64 << 10).min(cap - offset), "end");
    }
    v.drain_layout_background().unwrap();
    assert_eq!(
        duty_and_logged(&v.layout().checkpoint_image().unwrap()).1,
        0,
        "all destaged"
    );
    // Home bytes found through the layout (the zebra puts them in bands).
    let layout = v.layout();
    for offset in (0..cap).step_by(CHUNK as usize) {
        for (group, from, to) in layout.lock_spans(offset, CHUNK) {
            let copy = |m: usize| {
                lock(&stores[m].bytes)[(DATA_OFFSET + from) as usize..(DATA_OFFSET + to) as usize]
                    .to_vec()
            };
            assert!(
                copy(group) == copy(group + 1),
                "{kind}: each mirror equals its primary after the destage"
            );
        }
    }
}

/// Logged bytes per canonical logger member, from the checkpoint image.
fn logged_on(image: &[u8]) -> std::collections::BTreeMap<u32, u64> {
    let (mut at, mut out) = (0, std::collections::BTreeMap::new());
    while at < image.len() {
        let kind = u16::from_le_bytes(image[at..at + 2].try_into().unwrap());
        let n = u32::from_le_bytes(image[at + 2..at + 6].try_into().unwrap()) as usize;
        let payload = &image[at + 6..at + 6 + n];
        if kind == 1 {
            let len = u64::from_le_bytes(payload[12..20].try_into().unwrap());
            let logger = u32::from_le_bytes(payload[20..24].try_into().unwrap());
            *out.entry(logger).or_insert(0) += len;
        }
        at += 6 + n;
    }
    out
}

/// RoLo-R and RoLo-E keep two log copies on the logging pair: a failed logger is served and
/// rebuilt from its twin, and then the twin can fail too and the rebuilt logger serves the
/// logged bytes alone. Rotations, destage and reclaim run all along.
#[test]
fn a_failed_logger_of_rolo_r_and_rolo_e_is_recovered_from_the_remaining_copies() {
    for kind in [LayoutKind::ROLO_R, LayoutKind::ROLO_E] {
        let (v, mut stores) = memory_volume(kind, 6, Arc::new(VirtualClock::new()), CHUNK);
        let cap = v.capacity();
        let mut model = vec![0u8; cap as usize];
        let mut rng = Rng(0x5eed_0015);
        let check_all = |v: &super::Volume, model: &[u8], what: &str| {
            for offset in (0..cap).step_by(64 << 10) {
                let len = (64 << 10).min(cap - offset);
                let mut buf = vec![0u8; len as usize];
                v.read(offset, &mut buf).unwrap();
                assert!(
                    buf == model[offset as usize..(offset + len) as usize],
                    "{kind} {what}: read {offset}+{len}"
                );
            }
        };
        let (mut logger, mut rotations, mut last) = (0usize, 0, 0u32);
        for step in 0..5000 {
            match rng.next() % 100 {
                0..=59 => {
                    let len = 4096 * (1 + rng.next() % 8);
                    let offset = (rng.next() % ((cap - len) / 4096 + 1)) * 4096;
                    let seed = rng.next() as u8;
                    let data: Vec<u8> = (0..len)
                        .map(|i| (i as u8).wrapping_mul(29) ^ seed)
                        .collect();
                    v.write(offset, &data).unwrap();
                    model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
                }
                60..=89 => {
                    let len = 4096 * (1 + rng.next() % 8);
                    let offset = (rng.next() % ((cap - len) / 4096 + 1)) * 4096;
                    let mut buf = vec![0u8; len as usize];
                    v.read(offset, &mut buf).unwrap();
                    assert!(
                        buf == model[offset as usize..(offset + len) as usize],
                        "{kind} step {step}: read {offset}+{len}"
                    );
                }
                90..=96 => {
                    v.layout_background_step().unwrap();
                }
                _ => v.tick(),
            }
            let image = v.layout().checkpoint_image().unwrap();
            let duty = u32::from_le_bytes(image[6..10].try_into().unwrap());
            rotations += usize::from(duty != last);
            last = duty;
            match step {
                1500 => {
                    // The logger holding the most logged bytes fails, is served from its
                    // twin, and is rebuilt from it.
                    let (&l, &bytes) = logged_on(&image).iter().max_by_key(|(_, b)| **b).unwrap();
                    assert!(bytes > 0);
                    logger = l as usize;
                    stores[logger].broken.store(true, Ordering::SeqCst);
                    v.fail_member(logger, "test: logger lost");
                    check_all(&v, &model, "logger lost");
                    let fresh = MemMember::new(MEMBER);
                    v.replace_member(logger, fresh.clone()).unwrap();
                    stores[logger] = fresh;
                    while v.rebuild_step(logger, 3 * CHUNK + 4096).unwrap().is_some() {}
                    // Then its twin (the logging pair's primary) fails: the logged bytes
                    // must have come back to the rebuilt logger.
                    let image = v.layout().checkpoint_image().unwrap();
                    let still = logged_on(&image).get(&(logger as u32)).copied();
                    assert!(still.unwrap_or(0) > 0, "{kind}: the logger still holds log");
                    stores[logger - 1].broken.store(true, Ordering::SeqCst);
                    v.fail_member(logger - 1, "test: twin lost");
                    check_all(&v, &model, "twin lost after the logger's rebuild");
                }
                2500 => {
                    let m = logger - 1;
                    let fresh = MemMember::new(MEMBER);
                    v.replace_member(m, fresh.clone()).unwrap();
                    stores[m] = fresh;
                    while v.rebuild_step(m, 3 * CHUNK + 4096).unwrap().is_some() {}
                }
                _ => {}
            }
        }
        eprintln!("{kind}: {rotations} rotations");
        assert!(
            rotations >= 3,
            "{kind}: the logger rotated {rotations} times"
        );
        check_all(&v, &model, "end");
        v.drain_layout_background().unwrap();
        check_all(&v, &model, "after the drain");
    }
}

/// At the pre-wake fill the next logger is woken through the power manager (a hinted
/// wake), before the rotation; the logger after it sleeps on.
#[test]
fn the_next_logger_is_woken_at_the_prewake_fill_before_the_rotation() {
    use crate::clock::Clock;
    use crate::drive::Drive;
    use crate::ledger::Ledger;
    use crate::policy::PolicySpec;
    use crate::power_manager::WakeCause;
    use crate::profile::DriveProfile;
    use crate::volume::{Health, MemberSlot, Volume};

    let clock = Arc::new(VirtualClock::new());
    let profile = Arc::new(DriveProfile::load("test-fast").unwrap());
    let spec: PolicySpec = "mirrors:20".parse().unwrap();
    let member_bytes = MEMBER as u64 - DATA_OFFSET;
    let layout = crate::layout::build(LayoutKind::ROLO_P, 6, member_bytes, CHUNK).unwrap();
    let slots = (0..6)
        .map(|_| {
            let drive = Drive::new(profile.clone(), 0, spec.build(48), 0.0, Ledger::default());
            let store: Arc<dyn crate::member::Member> = MemMember::new(MEMBER);
            MemberSlot::new(Some(store), drive, Health::InSync)
        })
        .collect();
    let v = Volume::new("prewake", layout, slots, clock.clone(), None, None);
    let asleep = |m: usize| v.member_power()[m].awake.is_none();
    clock.advance_to(100.0);
    v.tick();
    assert!(asleep(3) && asleep(5), "off-duty mirrors sleep");
    assert!(!asleep(1), "the on-duty logger is pinned up");
    // Pairs 1 and 2 (volume chunks 1 and 2 of each row of three) log to member 1: write
    // 75 % of its log region (the pre-wake fill is 70 %, the rotation 80 %).
    let log_len = member_bytes - member_bytes * 3 / 4 / CHUNK * CHUNK;
    let data = vec![7u8; CHUNK as usize];
    let mut logged = 0;
    let mut row = 0;
    while logged < log_len * 3 / 4 {
        for pair in [1, 2] {
            v.write((3 * row + pair) * CHUNK, &data).unwrap();
            logged += CHUNK;
        }
        row += 1;
        clock.advance_to(clock.now() + 0.01);
    }
    let duty = |v: &Volume| {
        let image = v.layout().checkpoint_image().unwrap();
        u32::from_le_bytes(image[6..10].try_into().unwrap())
    };
    assert_eq!(duty(&v), 0, "no rotation yet");
    v.tick();
    let woken = v.member_power()[3].awake;
    assert!(
        matches!(woken, Some(a) if a.cause == WakeCause::Hint),
        "the next logger (member 3) is woken ahead of its duty: {woken:?}"
    );
    assert!(asleep(5), "the logger after it sleeps on");
    assert_eq!(duty(&v), 0, "still before the rotation");
}

/// `[volume.layout_options]`: validated with the key to blame; refused by layouts without a
/// log.
#[test]
fn layout_options_are_checked_with_the_key_to_blame() {
    let config = |layout: &str, options: &str| {
        let n = if layout == "graid" { 5 } else { 4 };
        let members: String = (0..n)
            .map(|i| {
                format!(
                    "[[volume.member]]\nkind = \"emulated-hdd\"\npath = \"/var/lib/grs/m{i}.img\"\n\
                     size = \"64MiB\"\nprofile = \"test-fast\"\n"
                )
            })
            .collect();
        format!(
            "[[volume]]\nname = \"data\"\nlayout = \"{layout}\"\n\n[volume.layout_options]\n\
             {options}\n\n[volume.export]\nmount_point = \"/srv/data\"\nowner = \"postgres\"\n\n\
             {members}"
        )
    };
    let parse = |layout: &str, options: &str| {
        crate::config::Config::parse(&config(layout, options), "test.toml")
            .map(|c| c.volumes[0].layout_options.clone())
            .map_err(|e| e.to_string())
    };
    let ok = parse(
        "rolo-s",
        "log_share = 0.2\nrotate_at = 0.9\nprewake_at = 0.85\nzebra_mb = 32",
    )
    .unwrap();
    assert_eq!(
        (ok.f64("log_share").unwrap(), ok.u64("zebra_mb").unwrap()),
        (Some(0.2), Some(32))
    );
    for (layout, options, key) in [
        ("rolo-p", "log_share = 0.9", "layout_options.log_share"),
        ("rolo-r", "rotate_at = 1.5", "layout_options.rotate_at"),
        (
            "rolo-e",
            "rotate_at = 0.8\nprewake_at = 0.8",
            "layout_options.prewake_at",
        ),
        ("rolo-s", "zebra_mb = 0", "layout_options.zebra_mb"),
        ("raid10", "rotate_at = 0.8", "layout_options"),
        ("rolo-p", "rotat_at = 0.8", "rotat_at"),
    ] {
        let e = parse(layout, options).unwrap_err();
        assert!(e.contains(key), "{layout} {options}: {e}");
    }
    // GRAID takes only rotate_at (its log is a whole member).
    let e = parse("graid", "log_share = 0.3").unwrap_err();
    assert!(e.contains("layout_options.log_share"), "{e}");
    assert_eq!(
        parse("graid", "rotate_at = 0.6")
            .unwrap()
            .f64("rotate_at")
            .unwrap(),
        Some(0.6)
    );
}
