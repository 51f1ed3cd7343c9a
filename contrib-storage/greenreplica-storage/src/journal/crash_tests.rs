//! Kill a real process that appends, commits and checkpoints, at random moments, and check
//! that every record it reported committed is there after reopening, in order, intact.
//!
//! The writer is this test executable itself, re-run with an environment variable that
//! makes `crash_writer_process` (ignored in ordinary runs) do the writing.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{Journal, Replay};
use crate::parity::test_rng::Rng;

const DIR_ENV: &str = "GR_JOURNAL_CRASH_DIR";
const SEED_ENV: &str = "GR_JOURNAL_CRASH_SEED";
const CHECKPOINT_ENV: &str = "GR_JOURNAL_CRASH_CHECKPOINT_EVERY";

/// Record n's payload: n, then filler that depends on n only.
fn record_payload(n: u64) -> Vec<u8> {
    let mut p = n.to_le_bytes().to_vec();
    p.extend((0..(n * 7919) % 3000).map(|i| (n ^ i) as u8));
    p
}

/// The snapshot after record n: n, then 64 KiB of filler (slow enough to be killed in).
fn snapshot_payload(n: u64) -> Vec<u8> {
    let mut p = n.to_le_bytes().to_vec();
    p.extend((0..64 * 1024u64).map(|i| (n.wrapping_mul(31) ^ i) as u8));
    p
}

fn number(bytes: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(w)
}

/// Check a replay against the writer's contract; returns the last record number present.
fn verify(replay: &Replay) -> u64 {
    let base = match &replay.snapshot {
        Some(s) => {
            let n = number(&s.bytes);
            assert_eq!(s.last_seq, n, "snapshot covers what it says");
            assert_eq!(s.bytes, snapshot_payload(n), "snapshot intact");
            n
        }
        None => 0,
    };
    for (i, r) in replay.records.iter().enumerate() {
        let n = base + 1 + i as u64;
        assert_eq!(r.seq, n, "records follow the snapshot without a gap");
        assert_eq!(r.payload, record_payload(n), "record {n} intact");
    }
    base + replay.records.len() as u64
}

/// The writer: continues numbering from what it finds, commits random batches and reports
/// each commit on stdout, sometimes checkpoints. Runs until killed.
#[test]
#[ignore = "the writer process of the crash tests, which start it themselves"]
fn crash_writer_process() {
    let Some(dir) = std::env::var_os(DIR_ENV) else {
        return;
    };
    let seed: u64 = std::env::var(SEED_ENV).unwrap().parse().unwrap();
    let every: usize = std::env::var(CHECKPOINT_ENV).unwrap().parse().unwrap();
    let mut rng = Rng(seed | 1);
    let (journal, replay) = Journal::open(Path::new(&dir)).unwrap();
    let mut n = verify(&replay);
    let mut out = std::io::stdout().lock();
    loop {
        for _ in 0..1 + rng.below(4) {
            n += 1;
            assert_eq!(journal.append(7, &record_payload(n)).unwrap(), n);
        }
        journal.commit().unwrap();
        writeln!(out, "committed {n}").unwrap();
        out.flush().unwrap();
        if every > 0 && rng.below(every) == 0 {
            assert_eq!(journal.checkpoint(&snapshot_payload(n)).unwrap(), n);
            writeln!(out, "checkpointed {n}").unwrap();
            out.flush().unwrap();
        }
    }
}

/// `rounds` writer processes in turn on one journal, each SIGKILLed after a random number
/// of commits plus a random delay; after each, reopen and verify.
fn kill_rounds(tag: &str, seed: u64, rounds: usize, checkpoint_every: usize) {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("grs-jcrash-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng(seed);
    let mut checkpoints = 0;
    let mut torn = 0;
    let mut interrupted = 0;
    for round in 0..rounds {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "journal::crash_tests::crash_writer_process",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_ENV, &dir)
            .env(SEED_ENV, rng.next().to_string())
            .env(CHECKPOINT_ENV, checkpoint_every.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let wait_for = 1 + rng.below(30);
        let mut committed = 0u64;
        let mut seen = 0;
        while seen < wait_for {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("round {round}: the writer died on its own"))
                .unwrap();
            if let Some(v) = line.strip_prefix("committed ") {
                committed = v.parse().unwrap();
                seen += 1;
            } else if line.starts_with("checkpointed ") {
                checkpoints += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(rng.below(3000) as u64));
        child.kill().unwrap();
        child.wait().unwrap();
        for line in lines.map_while(Result::ok) {
            if let Some(v) = line.strip_prefix("committed ") {
                committed = v.parse().unwrap();
            } else if line.starts_with("checkpointed ") {
                checkpoints += 1;
            }
        }
        let (journal, replay) = Journal::open(&dir)
            .unwrap_or_else(|e| panic!("round {round}: reopening failed: {e:#}"));
        torn += usize::from(replay.torn_tail.is_some());
        interrupted += usize::from(replay.interrupted_checkpoint);
        let present = verify(&replay);
        assert!(
            present >= committed,
            "round {round}: record {committed} was reported committed, only {present} present"
        );
        drop(journal);
    }
    eprintln!(
        "{tag}: {rounds} kills, {checkpoints} checkpoints completed, {interrupted} killed \
         inside a checkpoint, {torn} torn tails cut"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn killed_writers_never_lose_a_committed_record() {
    kill_rounds("append", 0x5eed_0001, 50, 0);
}

#[test]
fn killed_writers_never_lose_a_committed_record_around_checkpoints() {
    kill_rounds("checkpoint", 0x5eed_0002, 50, 3);
}
