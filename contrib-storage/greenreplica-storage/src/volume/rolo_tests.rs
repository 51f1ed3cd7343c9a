//! RoLo-P on the engine: rotations, destage steps and log reclaim interleaved with reads
//! and writes, a primary lost in the middle (its reads come from the log and the mirror)
//! and rebuilt from them; every read returns the last write.

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
    let (v, mut stores) =
        memory_volume(LayoutKind::ROLO_P, 6, Arc::new(VirtualClock::new()), CHUNK);
    let cap = v.capacity();
    let pool = 3 * (1 << 20) / 4; // three mirrors' log regions (a quarter of each)
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
        "rolo-p: {rotations} rotations, {written} bytes written, at most {max_logged} logged"
    );
    assert!(rotations >= 5, "the logger rotated {rotations} times");
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
    let home = (cap / 3) as usize;
    for pair in stores.chunks(2) {
        let p = lock(&pair[0].bytes)[DATA_OFFSET as usize..][..home].to_vec();
        let m = lock(&pair[1].bytes)[DATA_OFFSET as usize..][..home].to_vec();
        assert!(p == m, "each mirror equals its primary after the destage");
    }
}
