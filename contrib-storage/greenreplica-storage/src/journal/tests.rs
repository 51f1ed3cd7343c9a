use std::path::PathBuf;
use std::sync::Arc;

use super::format::{crc32c, RECORD_HEADER};
use super::*;
use crate::sync::lock;

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("grs-journal-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn payload(n: u64) -> Vec<u8> {
    let mut p = n.to_le_bytes().to_vec();
    p.extend((0..(n * 37) % 200).map(|i| (n + i) as u8));
    p
}

fn seqs(r: &Replay) -> Vec<u64> {
    r.records.iter().map(|r| r.seq).collect()
}

/// A journal with `n` records, each committed on its own (its own batch).
fn journal_with(tag: &str, n: u64) -> PathBuf {
    let dir = scratch(tag);
    let (j, _) = Journal::open(&dir).unwrap();
    for i in 1..=n {
        assert_eq!(j.append(i as u16, &payload(i)).unwrap(), i);
        assert_eq!(j.commit().unwrap(), i);
    }
    dir
}

/// The files in a journal directory, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn log0(dir: &Path) -> PathBuf {
    dir.join(log_name(0))
}

#[test]
fn records_come_back_in_order_with_kind_and_payload() {
    let dir = scratch("basic");
    let (j, r) = Journal::open(&dir).unwrap();
    assert_eq!(r.snapshot, None);
    assert!(r.records.is_empty());
    assert_eq!((j.last_seq(), j.durable_seq()), (0, 0));
    let a = j.append(1, b"alpha").unwrap();
    let b = j.append(2, b"").unwrap();
    assert_eq!((a, b), (1, 2));
    assert_eq!(j.durable_seq(), 0, "append alone is not durable");
    assert_eq!(j.commit().unwrap(), 2);
    assert_eq!(j.commit().unwrap(), 2, "nothing new to commit");
    j.append(3, &payload(3)).unwrap();
    drop(j); // record 3 was never committed: it may or may not survive; here it was not written
    let (j, r) = Journal::open(&dir).unwrap();
    assert_eq!(
        r.records,
        vec![
            Record {
                seq: 1,
                kind: 1,
                payload: b"alpha".to_vec()
            },
            Record {
                seq: 2,
                kind: 2,
                payload: vec![]
            }
        ]
    );
    assert_eq!(r.torn_tail, None);
    assert_eq!(j.append(9, b"next").unwrap(), 3, "numbering continues");
    j.commit().unwrap();
    drop(j);
    let (_, r) = Journal::open(&dir).unwrap();
    assert_eq!(seqs(&r), vec![1, 2, 3]);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Cut the log at every byte of its last record: replay keeps the records before it, cuts
/// the rest off, and the journal carries on from there.
#[test]
fn a_torn_tail_at_every_offset_of_the_last_record_is_cut_off() {
    let dir = journal_with("torn-src", 4);
    let full = std::fs::read(log0(&dir)).unwrap();
    let last_len = RECORD_HEADER + payload(4).len();
    let last_start = full.len() - last_len;
    let case = scratch("torn");
    for keep in 0..last_len {
        let _ = std::fs::remove_dir_all(&case);
        std::fs::create_dir_all(&case).unwrap();
        std::fs::write(log0(&case), &full[..last_start + keep]).unwrap();
        let (j, r) = Journal::open(&case).unwrap();
        assert_eq!(seqs(&r), vec![1, 2, 3], "cut at {keep}");
        let torn = r.torn_tail.as_ref().map(|t| (t.offset, t.dropped_bytes));
        if keep == 0 {
            assert_eq!(torn, None, "a clean end");
        } else {
            assert_eq!(
                torn,
                Some((last_start as u64, keep as u64)),
                "cut at {keep}"
            );
        }
        assert_eq!(
            std::fs::metadata(log0(&case)).unwrap().len(),
            last_start as u64,
            "tail truncated away"
        );
        assert_eq!(j.append(4, &payload(4)).unwrap(), 4);
        j.commit().unwrap();
        drop(j);
        assert_eq!(
            std::fs::read(log0(&case)).unwrap(),
            full,
            "rewritten identically"
        );
    }
    std::fs::remove_dir_all(case).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

/// Flip each byte of a record in the middle: records committed after it prove it was
/// durable, so opening fails and says so. Flip a byte of the last record: a torn tail.
#[test]
fn a_damaged_record_in_the_middle_is_an_error_and_at_the_end_a_torn_tail() {
    let dir = journal_with("flip-src", 5);
    let full = std::fs::read(log0(&dir)).unwrap();
    let record_at = |n: u64| -> usize {
        LOG_HEADER
            + (1..n)
                .map(|i| RECORD_HEADER + payload(i).len())
                .sum::<usize>()
    };
    let case = scratch("flip");
    let (mid, mid_end) = (record_at(3), record_at(4));
    for at in mid..mid_end {
        let _ = std::fs::remove_dir_all(&case);
        std::fs::create_dir_all(&case).unwrap();
        let mut bytes = full.clone();
        bytes[at] ^= 0x10;
        std::fs::write(log0(&case), &bytes).unwrap();
        let err = Journal::open(&case).unwrap_err();
        let corrupt = err
            .downcast_ref::<JournalCorrupt>()
            .unwrap_or_else(|| panic!("byte {at}: {err:#}"));
        assert!(
            corrupt
                .detail
                .contains(&format!("record at byte {mid} is damaged"))
                && corrupt.detail.contains("not a torn write"),
            "{}",
            corrupt.detail
        );
        assert_eq!(
            std::fs::read(log0(&case)).unwrap(),
            bytes,
            "a corrupt log is left untouched"
        );
    }
    for at in record_at(5)..full.len() {
        let _ = std::fs::remove_dir_all(&case);
        std::fs::create_dir_all(&case).unwrap();
        let mut bytes = full.clone();
        bytes[at] ^= 0x01;
        std::fs::write(log0(&case), &bytes).unwrap();
        let (_, r) = Journal::open(&case).unwrap();
        assert_eq!(seqs(&r), vec![1, 2, 3, 4], "byte {at}");
        assert!(r.torn_tail.is_some());
    }
    std::fs::remove_dir_all(case).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

/// Records of one commit are one batch: damage inside the last batch cannot be told from
/// its torn write, so the batch is cut off from the damaged record on.
#[test]
fn damage_inside_the_last_commit_batch_counts_as_torn() {
    let dir = scratch("batch");
    let (j, _) = Journal::open(&dir).unwrap();
    j.append(1, &payload(1)).unwrap();
    j.commit().unwrap();
    for n in 2..=4 {
        j.append(1, &payload(n)).unwrap();
    }
    j.commit().unwrap();
    drop(j);
    let mut bytes = std::fs::read(log0(&dir)).unwrap();
    let second = LOG_HEADER + RECORD_HEADER + payload(1).len();
    bytes[second + 20] ^= 0xff; // the seq field of record 2
    std::fs::write(log0(&dir), &bytes).unwrap();
    let (_, r) = Journal::open(&dir).unwrap();
    assert_eq!(seqs(&r), vec![1]);
    assert_eq!(r.torn_tail.unwrap().offset, second as u64);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_forged_huge_length_is_neither_believed_nor_allocated() {
    let dir = journal_with("huge", 3);
    let mut bytes = std::fs::read(log0(&dir)).unwrap();
    let third = bytes.len() - RECORD_HEADER - payload(3).len();
    // A 4 GiB length with a matching header checksum (as a bug, not a tear, might write).
    bytes[third + 8..third + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    let crc = format::crc32c_continue(crc32c(&bytes[third..third + 36]), &0u64.to_le_bytes());
    bytes[third + 36..third + 40].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(log0(&dir), &bytes).unwrap();
    let (_, r) = Journal::open(&dir).unwrap();
    assert_eq!(seqs(&r), vec![1, 2]);
    assert!(
        r.torn_tail.unwrap().reason.contains("exceeds the limit"),
        "refused by the limit before reading"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn replay_after_a_checkpoint_gives_the_snapshot_and_the_records_after_it() {
    let dir = journal_with("ckpt", 3);
    let (j, r) = Journal::open(&dir).unwrap();
    assert_eq!(seqs(&r), vec![1, 2, 3]);
    j.append(1, &payload(4)).unwrap(); // folded into the snapshot without a commit
    assert_eq!(j.checkpoint(b"state after 4").unwrap(), 4);
    assert_eq!(j.generation(), 1);
    j.append(1, &payload(5)).unwrap();
    j.commit().unwrap();
    drop(j);
    assert_eq!(names(&dir), vec!["checkpoint".to_string(), log_name(1)]);
    let (j, r) = Journal::open(&dir).unwrap();
    assert_eq!(
        r.snapshot,
        Some(Snapshot {
            last_seq: 4,
            bytes: b"state after 4".to_vec()
        })
    );
    assert_eq!(seqs(&r), vec![5]);
    assert_eq!(r.records[0].payload, payload(5));
    // A second checkpoint with nothing new, then more records.
    assert_eq!(j.checkpoint(b"").unwrap(), 5);
    j.append(2, b"six").unwrap();
    j.commit().unwrap();
    drop(j);
    let (_, r) = Journal::open(&dir).unwrap();
    assert_eq!(r.snapshot.as_ref().unwrap().last_seq, 5);
    assert_eq!(seqs(&r), vec![6]);
    assert_eq!(names(&dir), vec!["checkpoint".to_string(), log_name(2)]);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Stop a checkpoint after each of its steps as a crash would: reopening gives either the
/// old snapshot and every old record, or the new snapshot, and nothing stale stays behind.
#[test]
fn a_checkpoint_interrupted_after_any_step_loses_nothing() {
    for step in 0..=4u8 {
        let dir = journal_with(&format!("ckpt-step{step}"), 2);
        {
            let (j, _) = Journal::open(&dir).unwrap();
            j.checkpoint(b"first").unwrap();
            j.append(1, &payload(3)).unwrap();
            j.commit().unwrap();
            j.append(1, &payload(4)).unwrap();
            assert_eq!(j.checkpoint_until(b"second", Some(step)).unwrap(), 4);
        }
        let (j, r) = Journal::open(&dir).unwrap();
        let snap = r.snapshot.clone().unwrap();
        if step < 3 {
            assert_eq!((snap.bytes.as_slice(), snap.last_seq), (&b"first"[..], 2));
            assert_eq!(seqs(&r), vec![3, 4], "step {step}: the old log, whole");
        } else {
            assert_eq!((snap.bytes.as_slice(), snap.last_seq), (&b"second"[..], 4));
            assert!(r.records.is_empty(), "step {step}");
        }
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let current = if step < 3 { 1 } else { 2 };
        assert_eq!(
            names,
            vec!["checkpoint".to_string(), log_name(current)],
            "step {step}"
        );
        assert_eq!(j.append(1, &payload(5)).unwrap(), 5);
        j.commit().unwrap();
        j.checkpoint(b"third").unwrap();
        drop(j);
        let (_, r) = Journal::open(&dir).unwrap();
        assert_eq!(r.snapshot.unwrap().last_seq, 5);
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn damaged_checkpoints_and_missing_logs_are_errors() {
    let dir = journal_with("bad-ckpt", 1);
    let (j, _) = Journal::open(&dir).unwrap();
    j.checkpoint(b"snapshot bytes").unwrap();
    drop(j);
    let ckpt = dir.join("checkpoint");
    let good = std::fs::read(&ckpt).unwrap();
    let mut flipped = good.clone();
    *flipped.last_mut().unwrap() ^= 1;
    std::fs::write(&ckpt, &flipped).unwrap();
    let err = Journal::open(&dir).unwrap_err();
    assert!(
        format!("{err:#}").contains("snapshot checksum mismatch"),
        "{err:#}"
    );
    std::fs::write(&ckpt, &good[..good.len() - 1]).unwrap();
    assert!(Journal::open(&dir).is_err(), "short snapshot");
    // A forged 2^60-byte snapshot length is refused before allocating.
    let mut forged = good.clone();
    forged[24..32].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let crc = crc32c(&forged[..44]);
    forged[44..48].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&ckpt, &forged).unwrap();
    let err = Journal::open(&dir).unwrap_err();
    assert!(format!("{err:#}").contains("above the limit"), "{err:#}");
    std::fs::write(&ckpt, &good).unwrap();
    std::fs::remove_file(dir.join(log_name(1))).unwrap();
    let err = Journal::open(&dir).unwrap_err();
    assert!(format!("{err:#}").contains("is missing"), "{err:#}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn symlinks_oversized_records_and_snapshots_are_refused() {
    let base = scratch("hostile");
    std::fs::create_dir_all(base.join("real")).unwrap();
    std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
    let err = Journal::open(&base.join("link")).unwrap_err();
    assert!(format!("{err:#}").contains("symlink"), "{err:#}");
    // A symlink planted as the log.
    std::fs::create_dir_all(base.join("j")).unwrap();
    std::fs::write(base.join("target"), b"x").unwrap();
    std::os::unix::fs::symlink(base.join("target"), base.join("j").join(log_name(0))).unwrap();
    let err = Journal::open(&base.join("j")).unwrap_err();
    assert!(format!("{err:#}").contains("not a regular file"), "{err:#}");
    let options = JournalOptions {
        max_record_bytes: 100,
        max_snapshot_bytes: 100,
        max_log_bytes: 1 << 20,
    };
    let (j, _) = Journal::open_with(&base.join("k"), options).unwrap();
    let err = Journal::open(&base.join("k")).unwrap_err();
    assert!(format!("{err:#}").contains("in use"), "one writer: {err:#}");
    assert!(j.append(1, &[0u8; 101]).is_err());
    assert_eq!(j.append(1, &[0u8; 100]).unwrap(), 1);
    assert!(j.checkpoint(&[0u8; 101]).is_err());
    j.commit().unwrap();
    drop(j);
    let tiny = JournalOptions {
        max_log_bytes: 64,
        ..options
    };
    let err = Journal::open_with(&base.join("k"), tiny).unwrap_err();
    assert!(format!("{err:#}").contains("above the limit"), "{err:#}");
    std::fs::remove_dir_all(base).unwrap();
}

/// Many threads append and commit at once: every commit returns only once its records are
/// durable, commits share fdatasyncs, and replay sees every record once, in order.
#[test]
fn concurrent_committers_share_commits_and_lose_nothing() {
    let dir = scratch("group");
    let (j, _) = Journal::open(&dir).unwrap();
    let j = Arc::new(j);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let j = Arc::clone(&j);
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for i in 0..50u64 {
                    let seq = j.append(t, &(t as u64 * 1000 + i).to_le_bytes()).unwrap();
                    assert!(j.commit().unwrap() >= seq);
                    assert!(j.durable_seq() >= seq);
                    mine.push(seq);
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, (1..=200).collect::<Vec<_>>());
    drop(j);
    let (_, r) = Journal::open(&dir).unwrap();
    assert_eq!(seqs(&r), (1..=200).collect::<Vec<_>>());
    for rec in &r.records {
        let v = u64::from_le_bytes(rec.payload[..8].try_into().unwrap());
        assert_eq!(v / 1000, rec.kind as u64, "payload kept with its kind");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// Random sequences of append, commit, checkpoint, reopen and torn last commits against a
/// model of what must survive: after every reopen, replay equals the model exactly.
#[test]
fn property_random_operations_replay_as_the_model_says() {
    use crate::parity::test_rng::Rng;

    #[derive(Default)]
    struct Model {
        snapshot: Option<Snapshot>,
        /// Committed records after the snapshot.
        durable: Vec<Record>,
        /// Appended, not committed.
        pending: Vec<Record>,
        /// How many of `durable`'s last records were the last commit (tearable).
        last_batch: usize,
    }

    let dir = scratch("model");
    let mut rng = Rng(0x0dd_ba11_cafe);
    let mut model = Model::default();
    let (mut j, _) = Journal::open(&dir).unwrap();
    let (mut reopens, mut tears, mut checkpoints) = (0, 0, 0);
    for step in 0..3000 {
        match rng.below(20) {
            0..=9 => {
                let kind = rng.below(5) as u16;
                let len = if rng.below(10) == 0 {
                    rng.below(5000)
                } else {
                    rng.below(60)
                };
                let payload = rng.bytes(len);
                let seq = j.append(kind, &payload).unwrap();
                model.pending.push(Record { seq, kind, payload });
            }
            10..=13 => {
                let durable = j.commit().unwrap();
                if !model.pending.is_empty() {
                    model.last_batch = model.pending.len();
                    model.durable.append(&mut model.pending);
                }
                assert_eq!(
                    durable,
                    model.durable.last().map_or(j.durable_seq(), |r| r.seq)
                );
            }
            14 => {
                let len = rng.below(300);
                let bytes = rng.bytes(len);
                let last_seq = j.checkpoint(&bytes).unwrap();
                let expected = model
                    .pending
                    .last()
                    .or(model.durable.last())
                    .map(|r| r.seq)
                    .or(model.snapshot.as_ref().map(|s| s.last_seq))
                    .unwrap_or(0);
                assert_eq!(last_seq, expected, "step {step}");
                model.snapshot = Some(Snapshot { last_seq, bytes });
                model.durable.clear();
                model.pending.clear();
                model.last_batch = 0;
                checkpoints += 1;
            }
            15..=17 => {
                // A crash: the uncommitted records go.
                drop(j);
                model.pending.clear();
                let (nj, replay) = Journal::open(&dir).unwrap();
                j = nj;
                reopens += 1;
                assert_eq!(replay.snapshot, model.snapshot, "step {step}");
                assert_eq!(replay.records, model.durable, "step {step}");
                assert_eq!(replay.torn_tail, None);
            }
            _ if model.last_batch > 0 => {
                // A crash in the middle of the last commit's write: cut part of its bytes.
                drop(j);
                model.pending.clear();
                let log = dir.join(log_name(j_generation(&dir)));
                let batch = &model.durable[model.durable.len() - model.last_batch..];
                let batch_bytes: usize =
                    batch.iter().map(|r| RECORD_HEADER + r.payload.len()).sum();
                let cut = 1 + rng.below(batch_bytes);
                let len = std::fs::metadata(&log).unwrap().len();
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&log)
                    .unwrap()
                    .set_len(len - cut as u64)
                    .unwrap();
                // Records that still end within the file survive.
                let mut keep_bytes = batch_bytes - cut;
                let mut kept = 0;
                for r in batch {
                    let size = RECORD_HEADER + r.payload.len();
                    if size > keep_bytes {
                        break;
                    }
                    keep_bytes -= size;
                    kept += 1;
                }
                let drop_from = model.durable.len() - model.last_batch + kept;
                model.durable.truncate(drop_from);
                model.last_batch = 0;
                let (nj, replay) = Journal::open(&dir).unwrap();
                j = nj;
                tears += 1;
                assert_eq!(replay.records, model.durable, "step {step}");
                assert_eq!(replay.torn_tail.is_some(), keep_bytes > 0, "step {step}");
            }
            _ => {}
        }
    }
    assert!(
        reopens > 50 && tears > 20 && checkpoints > 50,
        "{reopens} {tears} {checkpoints}"
    );
    drop(j);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The generation of the current log, from the checkpoint file (0 without one).
fn j_generation(dir: &Path) -> u64 {
    match std::fs::read(dir.join(CHECKPOINT_FILE)) {
        Ok(b) => u64::from_le_bytes(b[8..16].try_into().unwrap()),
        Err(_) => 0,
    }
}

/// After a failed write the journal refuses work (the kernel may have dropped the pages, so
/// a retry could claim a durability that does not exist); reopening replays what is on disk.
#[test]
fn a_failed_write_stops_the_journal_until_it_is_reopened() {
    let dir = journal_with("broken", 2);
    let (j, _) = Journal::open(&dir).unwrap();
    // Swap the log for a read-only descriptor of the same file: the next write fails.
    lock(&j.log).file = std::fs::File::open(log0(&dir)).unwrap();
    j.append(1, &payload(3)).unwrap();
    let err = j.commit().unwrap_err();
    assert!(
        format!("{err:#}").contains("cannot write records 3..=3"),
        "{err:#}"
    );
    let err = j.append(1, &payload(4)).unwrap_err();
    assert!(format!("{err:#}").contains("reopen it"), "{err:#}");
    assert!(j.commit().is_err());
    assert!(j.checkpoint(b"x").is_err());
    assert_eq!(j.durable_seq(), 2);
    drop(j);
    let (j, r) = Journal::open(&dir).unwrap();
    assert_eq!(seqs(&r), vec![1, 2]);
    assert_eq!(j.append(1, &payload(3)).unwrap(), 3);
    j.commit().unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

/// Committers queued behind a write in progress share the next one: with the log held,
/// three threads append and call commit; once it is released, one write and one fdatasync
/// make all three durable.
#[test]
fn committers_queued_behind_a_write_share_one_fdatasync() {
    let dir = scratch("share");
    let (j, _) = Journal::open(&dir).unwrap();
    let j = Arc::new(j);
    let appended = Arc::new(std::sync::Barrier::new(4));
    let held = lock(&j.log);
    let threads: Vec<_> = (0..3u16)
        .map(|t| {
            let (j, appended) = (Arc::clone(&j), Arc::clone(&appended));
            std::thread::spawn(move || {
                let seq = j.append(t, &payload(t as u64)).unwrap();
                appended.wait();
                assert!(j.commit().unwrap() >= seq);
            })
        })
        .collect();
    appended.wait();
    drop(held);
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!((j.durable_seq(), j.syncs()), (3, 1));
    std::fs::remove_dir_all(dir).unwrap();
}
