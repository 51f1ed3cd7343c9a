//! QMD's staging buffer across an agent crash (issue 16 item 1), assembled from files with a
//! metadata journal: staged writes are on the active disk and in memory until the flush
//! appends them to the flash file and commits the root that points at them. A kill before
//! that flush loses only the writes it had not acknowledged; what it acknowledged comes back
//! from the flash.

use super::qmd_crash_tests::{block, data, open, spec};

fn tmp() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("grs-qmd-staging-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const PLACES: u64 = 40;

/// A second version unlike any `block` (those vary byte by byte; this one does not).
fn unacked(i: u64) -> Vec<u8> {
    vec![0xf0 | i as u8; 8192]
}

fn at(i: u64) -> u64 {
    i * 24_576
}

#[test]
fn a_kill_before_the_flush_loses_only_unacknowledged_staged_writes() {
    let dir = tmp();
    let s = spec(&dir);
    let v = open(&s, &dir);
    v.tick(); // the second disk goes to sleep
    for i in 0..PLACES {
        v.write(at(i), &block(i, 1)).unwrap();
    }
    let state = v.layout().layout_state().unwrap();
    assert_eq!(
        state["staged_bytes"].as_u64(),
        Some(PLACES * 8192),
        "the writes are staged: {state}"
    );
    assert!(
        data(&dir, 2).iter().all(|&b| b == 0),
        "nothing on the flash file before the flush"
    );
    for i in 0..PLACES {
        let mut buf = vec![0u8; 8192];
        v.read(at(i), &mut buf).unwrap();
        assert!(buf == block(i, 1), "staged write {i} reads back");
    }
    v.flush().unwrap(); // acknowledges version 1: appended, blocks, root committed
    assert_eq!(v.layout().layout_state().unwrap()["staged_bytes"], 0);
    assert!(
        data(&dir, 2).iter().any(|&b| b != 0),
        "the flush appended them"
    );
    // Version 2 of the first ten places: staged, never flushed.
    for i in 0..10 {
        v.write(at(i), &unacked(i)).unwrap();
    }
    drop(v); // killed
             // On the flash file: every acknowledged write (appended by the flush), none of the
             // unacknowledged ones (they were only staged in memory).
    let flash = data(&dir, 2);
    let on_flash = |b: &[u8]| {
        flash.chunks(512).enumerate().any(|(k, _)| {
            flash
                .get(k * 512..k * 512 + b.len())
                .is_some_and(|w| w == b)
        })
    };
    for i in 0..PLACES {
        assert!(
            on_flash(&block(i, 1)),
            "acknowledged write {i} is on the flash"
        );
    }
    for i in 0..10 {
        assert!(!on_flash(&unacked(i)), "unacknowledged write {i} is not");
    }

    let v = open(&s, &dir);
    v.tick(); // resync of the regions written since the last flush
    let mut seen = Vec::new();
    for i in 0..PLACES {
        let mut buf = vec![0u8; 8192];
        v.read(at(i), &mut buf).unwrap();
        if i < 10 {
            let (old, new) = (block(i, 1), unacked(i));
            assert!(
                (0..buf.len()).all(|j| buf[j] == old[j] || buf[j] == new[j]),
                "place {i}: the acknowledged or the unacknowledged write"
            );
        } else {
            assert!(buf == block(i, 1), "acknowledged place {i} is back");
        }
        seen.push(buf);
    }
    v.drain_layout_background().unwrap();
    v.flush().unwrap();
    assert_eq!(
        data(&dir, 0),
        data(&dir, 1),
        "the pair is equal after the drain"
    );
    for (i, expected) in seen.iter().enumerate() {
        let mut buf = vec![0u8; 8192];
        v.read(at(i as u64), &mut buf).unwrap();
        assert!(&buf == expected, "place {i} after the write-back");
    }
    std::fs::remove_dir_all(dir).unwrap();
}
