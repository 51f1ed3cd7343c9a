//! A metadata journal on an always-on device.
//!
//! The papers keep a layout's metadata (log index, zone table, D Map, flash index roots) in
//! NVRAM; here it lives in this journal, on a device that never sleeps, and is durable
//! *before* the flush that acknowledges the data it describes. The journal does not know
//! what the records mean: callers serialize their own payloads and give each a `kind`.
//!
//! # Use
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use greenreplica_storage::journal::Journal;
//! let (journal, replay) = Journal::open(std::path::Path::new("/var/lib/gr/vol0.journal"))?;
//! // Rebuild state: the snapshot of the last checkpoint, then every record after it.
//! let _state = replay.snapshot.map(|s| s.bytes);
//! for _record in &replay.records { /* apply */ }
//! let seq = journal.append(1, b"zone 7 -> member 2")?; // buffered
//! journal.commit()?;                                  // durable (write + fdatasync)
//! journal.checkpoint(b"the whole state")?;            // records so far folded in
//! # let _ = seq; Ok(()) }
//! ```
//!
//! * [`Journal::append`] buffers a record and returns its sequence number (1, 2, … over the
//!   journal's whole life, across checkpoints).
//! * [`Journal::commit`] makes everything appended so far durable. Concurrent committers
//!   share one write and one fdatasync (group commit): whoever holds the log writes every
//!   record buffered by then, and a committer that finds its records already durable
//!   returns at once. The same pattern as the write-intent bitmap's (`volume::bitmap`),
//!   which is tied to its bit set and cannot be shared.
//! * [`Journal::checkpoint`] replaces the log by a snapshot the caller provides, which must
//!   reflect every record appended before the call (callers serialize checkpoints with
//!   their appends).
//! * [`Journal::open`] replays: the latest snapshot and the records after it, in order.
//!
//! # Files
//!
//! The journal owns a directory (created 0700 if missing; a symlink in its place is
//! refused; every file in it is opened relative to the held directory with `O_NOFOLLOW`
//! and created with `O_EXCL`):
//!
//! * `checkpoint`: header (generation g, last sequence number covered, length, CRC32C) and
//!   the snapshot; absent until the first checkpoint (generation 0);
//! * `log-<g>` (16 hex digits): header (generation, first sequence number) and the records
//!   appended since checkpoint g, each with a header checksum and a payload checksum (see
//!   [`format`] for the bytes).
//!
//! The directory is locked (`flock`) while the journal is open: a second opener, in this
//! process or another, is refused instead of interleaving records.
//!
//! # Crash safety
//!
//! A checkpoint from generation g to g+1 writes `checkpoint.tmp` and fsyncs it, creates
//! `log-<g+1>` (header only) and fsyncs it, fsyncs the directory, renames `checkpoint.tmp`
//! over `checkpoint` (the commit point) and fsyncs the directory again, then removes
//! `log-<g>`. A crash before the rename leaves the old checkpoint and the old log, complete;
//! after it, the new checkpoint and its empty log. Opening removes what an interrupted
//! checkpoint left (`checkpoint.tmp`, `log-<g±1>`), so the state on disk is always one of
//! the two, never a mix that loses records.
//!
//! Replay ends at the first record that is not valid (partial header, bad checksum, short
//! payload, wrong sequence number). If nothing valid from a later commit follows, that is a
//! torn tail — a write that never completed its fdatasync, so never acknowledged — and it
//! is cut off (logged, reported in [`Replay::torn_tail`]); the volume opens. If a valid
//! record of a *later* commit follows (each record names the first sequence number of its
//! commit batch, and a commit starts only after the previous one's fdatasync returned), the
//! damaged bytes had been durable: that is corruption, and opening fails with
//! [`JournalCorrupt`] naming the offsets, rather than silently dropping committed records.
//! Damage inside the last commit batch cannot be told from a torn write of that batch and
//! is cut off like one.
//!
//! After a failed write or fdatasync the journal refuses further appends and commits (the
//! kernel may have dropped the dirty pages: retrying could report a durability that does not
//! exist); reopening replays what is really on disk.
//!
//! # Hostile sizes
//!
//! Lengths read from disk are checked against [`JournalOptions`] and against the bytes
//! actually present before anything is allocated: a damaged 4 GiB length field allocates
//! nothing. Appends and snapshots above the limits are refused with an error.

mod files;
pub mod format;
pub mod meta;

#[cfg(test)]
mod crash_tests;
#[cfg(test)]
mod tests;

use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use thiserror::Error;

use crate::sync::lock;
use files::JournalDir;
use format::{
    crc32c, encode_record, scan_log, CheckpointHeader, LogHeader, CHECKPOINT_HEADER, LOG_HEADER,
};

const CHECKPOINT_FILE: &str = "checkpoint";
const CHECKPOINT_TMP: &str = "checkpoint.tmp";

fn log_name(generation: u64) -> String {
    format!("log-{generation:016x}")
}

/// Limits on what the journal accepts and believes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalOptions {
    /// Largest record payload.
    pub max_record_bytes: usize,
    /// Largest snapshot.
    pub max_snapshot_bytes: u64,
    /// Largest log read at open (it is read whole; checkpoint before it grows this big).
    pub max_log_bytes: u64,
}

impl Default for JournalOptions {
    fn default() -> Self {
        Self {
            max_record_bytes: 16 << 20,
            max_snapshot_bytes: 1 << 30,
            max_log_bytes: 1 << 30,
        }
    }
}

/// One replayed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub kind: u16,
    pub payload: Vec<u8>,
}

/// The snapshot of the latest checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The last record sequence number the snapshot reflects.
    pub last_seq: u64,
    pub bytes: Vec<u8>,
}

/// A torn tail cut off at open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Byte offset in the log where the valid records end.
    pub offset: u64,
    pub dropped_bytes: u64,
    pub reason: String,
}

/// What [`Journal::open`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    pub snapshot: Option<Snapshot>,
    /// The records after the snapshot, in sequence order.
    pub records: Vec<Record>,
    pub torn_tail: Option<TornTail>,
    /// Opening removed what an interrupted checkpoint left behind (its temporary file or
    /// the log of the generation that did not become current).
    pub interrupted_checkpoint: bool,
}

/// The journal's files are damaged in a way a crash cannot explain.
#[derive(Debug, Error)]
#[error("journal {path}: {detail}")]
pub struct JournalCorrupt {
    pub path: PathBuf,
    pub detail: String,
}

#[derive(Debug)]
struct PendingRecord {
    seq: u64,
    kind: u16,
    payload: Vec<u8>,
}

#[derive(Debug)]
struct Pending {
    records: Vec<PendingRecord>,
    next_seq: u64,
    durable_seq: u64,
    /// Why the journal stopped accepting work (a failed write or sync).
    broken: Option<String>,
}

#[derive(Debug)]
struct LogFile {
    file: std::fs::File,
    len: u64,
    generation: u64,
}

/// An open journal (see the module documentation).
#[derive(Debug)]
pub struct Journal {
    dir: JournalDir,
    options: JournalOptions,
    pending: Mutex<Pending>,
    /// Held while the log is written and synced, and during a checkpoint.
    log: Mutex<LogFile>,
    /// Commits that wrote and synced the log (fewer than `commit` calls when they share).
    syncs: AtomicU64,
}

impl Journal {
    /// Open (or create) the journal in directory `path` with the default limits and
    /// replay it.
    pub fn open(path: &Path) -> Result<(Journal, Replay)> {
        Self::open_with(path, JournalOptions::default())
    }

    /// Open (or create) the journal in directory `path` and replay it.
    pub fn open_with(path: &Path, options: JournalOptions) -> Result<(Journal, Replay)> {
        let dir = JournalDir::open_or_create(path)?;
        let corrupt = |detail: String| JournalCorrupt {
            path: path.to_path_buf(),
            detail,
        };
        let mut interrupted_checkpoint = dir.remove(CHECKPOINT_TMP)?;
        if interrupted_checkpoint {
            tracing::info!(journal = %path.display(), "removed the file of an unfinished checkpoint");
        }
        let snapshot = read_checkpoint(&dir, &options).map_err(|e| match e {
            CheckpointRead::Corrupt(d) => anyhow::Error::new(corrupt(d)),
            CheckpointRead::Other(e) => e,
        })?;
        let (generation, first_seq) = match &snapshot {
            Some((h, _)) => (h.generation, h.last_seq + 1),
            None => (0, 1),
        };
        for stale in [generation.checked_sub(1), generation.checked_add(1)]
            .into_iter()
            .flatten()
        {
            if dir.remove(&log_name(stale))? {
                interrupted_checkpoint = true;
                tracing::info!(journal = %path.display(), generation = stale,
                    "removed the log an interrupted checkpoint left");
            }
        }
        let name = log_name(generation);
        let fresh = LogHeader {
            generation,
            first_seq,
        };
        let (file, bytes) = match dir.open_existing(&name)? {
            Some(mut file) => {
                let len = file
                    .metadata()
                    .with_context(|| format!("cannot stat {}", dir.show(&name)))?
                    .len();
                if len > options.max_log_bytes {
                    bail!(
                        "journal log {} is {len} bytes, above the limit of {}; raise \
                         max_log_bytes or checkpoint more often",
                        dir.show(&name),
                        options.max_log_bytes
                    );
                }
                let mut bytes = Vec::with_capacity(len as usize);
                file.read_to_end(&mut bytes)
                    .with_context(|| format!("cannot read {}", dir.show(&name)))?;
                match LogHeader::decode(&bytes) {
                    Ok(h) if h == fresh => (file, bytes),
                    Ok(h) => {
                        return Err(corrupt(format!(
                            "{name} says generation {} from sequence {}, but the checkpoint \
                             expects generation {generation} from {first_seq}",
                            h.generation, h.first_seq
                        ))
                        .into())
                    }
                    // A new journal whose first log was being created when it crashed: it
                    // cannot hold anything yet (its header is synced before any append).
                    Err(why) if snapshot.is_none() && bytes.len() <= LOG_HEADER => {
                        tracing::info!(journal = %path.display(), %why, "recreating an unfinished new log");
                        create_log(&dir, fresh)?
                    }
                    Err(why) => return Err(corrupt(format!("{name}: {why}")).into()),
                }
            }
            None if snapshot.is_none() => create_log(&dir, fresh)?,
            None => {
                return Err(corrupt(format!(
                    "{name} is missing although the checkpoint names generation {generation}"
                ))
                .into())
            }
        };

        let scan =
            scan_log(&bytes, generation, first_seq, options.max_record_bytes).map_err(|d| {
                corrupt(format!(
                    "{name}: the record at byte {} is damaged ({}), but record {} at byte {}, \
                     committed after it, is intact; this is not a torn write — restore the \
                     journal from a copy or rebuild the volume's metadata",
                    d.offset, d.reason, d.later_seq, d.later_offset
                ))
            })?;
        let torn_tail = match scan.torn {
            Some(reason) => {
                let dropped = (bytes.len() - scan.valid_end) as u64;
                tracing::warn!(journal = %path.display(), log = %name, offset = scan.valid_end,
                    dropped_bytes = dropped, %reason, "cutting off a torn tail");
                file.set_len(scan.valid_end as u64)
                    .and_then(|()| file.sync_all())
                    .with_context(|| {
                        format!("cannot truncate the torn tail of {}", dir.show(&name))
                    })?;
                Some(TornTail {
                    offset: scan.valid_end as u64,
                    dropped_bytes: dropped,
                    reason,
                })
            }
            None => None,
        };
        let next_seq = scan.records.last().map_or(first_seq, |r| r.seq + 1);
        tracing::info!(journal = %path.display(), generation, records = scan.records.len(),
            snapshot_bytes = snapshot.as_ref().map_or(0, |(h, _)| h.len), "journal replayed");
        let replay = Replay {
            snapshot: snapshot.map(|(h, bytes)| Snapshot {
                last_seq: h.last_seq,
                bytes,
            }),
            records: scan
                .records
                .into_iter()
                .map(|r| Record {
                    seq: r.seq,
                    kind: r.kind,
                    payload: r.payload,
                })
                .collect(),
            torn_tail,
            interrupted_checkpoint,
        };
        let journal = Journal {
            dir,
            options,
            pending: Mutex::new(Pending {
                records: Vec::new(),
                next_seq,
                durable_seq: next_seq - 1,
                broken: None,
            }),
            log: Mutex::new(LogFile {
                file,
                len: scan.valid_end as u64,
                generation,
            }),
            syncs: AtomicU64::new(0),
        };
        Ok((journal, replay))
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Buffer a record; returns its sequence number. Not durable until [`Journal::commit`].
    pub fn append(&self, kind: u16, payload: &[u8]) -> Result<u64> {
        // The length field has 32 bits whatever the configured limit.
        let limit = self.options.max_record_bytes.min(u32::MAX as usize);
        if payload.len() > limit {
            bail!(
                "journal record of {} bytes is above the limit of {limit}",
                payload.len()
            );
        }
        let mut p = lock(&self.pending);
        self.usable(&p)?;
        let seq = p.next_seq;
        p.next_seq += 1;
        p.records.push(PendingRecord {
            seq,
            kind,
            payload: payload.to_vec(),
        });
        Ok(seq)
    }

    /// Make every record appended so far durable; returns the last durable sequence number.
    pub fn commit(&self) -> Result<u64> {
        let target = {
            let p = lock(&self.pending);
            self.usable(&p)?;
            if p.durable_seq + 1 >= p.next_seq {
                return Ok(p.durable_seq);
            }
            p.next_seq - 1
        };
        let mut log = lock(&self.log);
        self.write_pending(&mut log, target)
    }

    /// Replace the log by `snapshot`, which must reflect every record appended before the
    /// call; returns the last sequence number it covers.
    pub fn checkpoint(&self, snapshot: &[u8]) -> Result<u64> {
        self.checkpoint_until(snapshot, None)
    }

    /// The last sequence number appended (durable or not); 0 before the first.
    pub fn last_seq(&self) -> u64 {
        lock(&self.pending).next_seq - 1
    }

    /// The last sequence number known durable.
    pub fn durable_seq(&self) -> u64 {
        lock(&self.pending).durable_seq
    }

    /// Bytes in the current log (a caller checkpoints when this grows large).
    pub fn log_bytes(&self) -> u64 {
        lock(&self.log).len
    }

    /// Log writes with fdatasync since open: one per group of commits that shared it.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Checkpoints taken over the journal's life.
    pub fn generation(&self) -> u64 {
        lock(&self.log).generation
    }

    fn usable(&self, p: &Pending) -> Result<()> {
        match &p.broken {
            Some(why) => bail!(
                "journal {} stopped after a failed write ({why}); reopen it to replay what is \
                 on disk",
                self.dir.path().display()
            ),
            None => Ok(()),
        }
    }

    fn mark_broken(&self, why: &anyhow::Error) {
        tracing::error!(journal = %self.dir.path().display(), error = %format!("{why:#}"),
            "journal stopped");
        lock(&self.pending).broken = Some(format!("{why:#}"));
    }

    /// Write and fdatasync every buffered record, unless records up to `target` are durable
    /// already (another committer took them along).
    fn write_pending(&self, log: &mut LogFile, target: u64) -> Result<u64> {
        let records = {
            let mut p = lock(&self.pending);
            self.usable(&p)?;
            if p.durable_seq >= target || p.records.is_empty() {
                return Ok(p.durable_seq);
            }
            std::mem::take(&mut p.records)
        };
        let batch = records[0].seq;
        let last = records[records.len() - 1].seq;
        let mut buf = Vec::new();
        for r in &records {
            encode_record(&mut buf, log.generation, r.seq, batch, r.kind, &r.payload);
        }
        let written = log
            .file
            .write_all_at(&buf, log.len)
            .and_then(|()| log.file.sync_data())
            .with_context(|| {
                format!(
                    "cannot write records {batch}..={last} to journal {}",
                    self.dir.show(&log_name(log.generation))
                )
            });
        if let Err(e) = written {
            self.mark_broken(&e);
            // Leave no half-written records for the next append to follow (best effort:
            // replay cuts a torn tail anyway).
            let _ = log.file.set_len(log.len);
            return Err(e);
        }
        log.len += buf.len() as u64;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        lock(&self.pending).durable_seq = last;
        Ok(last)
    }

    /// The checkpoint, optionally stopping (as a crash would) after step `stop_after`:
    /// 0 snapshot file written, 1 new log created, 2 directory synced, 3 renamed,
    /// 4 switched to the new log (old log not yet removed).
    fn checkpoint_until(&self, snapshot: &[u8], stop_after: Option<u8>) -> Result<u64> {
        if snapshot.len() as u64 > self.options.max_snapshot_bytes {
            bail!(
                "journal snapshot of {} bytes is above the limit of {}",
                snapshot.len(),
                self.options.max_snapshot_bytes
            );
        }
        let mut log = lock(&self.log);
        let last_seq = self.write_pending(&mut log, u64::MAX)?;
        let old = log.generation;
        let generation = old + 1;
        let new_log = log_name(generation);
        let header = CheckpointHeader {
            generation,
            last_seq,
            len: snapshot.len() as u64,
            payload_crc: crc32c(snapshot),
        };
        let stop = |step: u8| stop_after == Some(step);

        let prepared = (|| -> Result<Option<std::fs::File>> {
            let mut f = self.dir.create_new(CHECKPOINT_TMP)?;
            f.write_all(&header.encode())
                .and_then(|()| f.write_all(snapshot))
                .and_then(|()| f.sync_all())
                .with_context(|| format!("cannot write {}", self.dir.show(CHECKPOINT_TMP)))?;
            if stop(0) {
                return Ok(None);
            }
            let (file, _) = create_log(
                &self.dir,
                LogHeader {
                    generation,
                    first_seq: last_seq + 1,
                },
            )?;
            if stop(1) {
                return Ok(None);
            }
            self.dir.sync()?;
            if stop(2) {
                return Ok(None);
            }
            self.dir.rename(CHECKPOINT_TMP, CHECKPOINT_FILE)?;
            Ok(Some(file))
        })();
        let file = match prepared {
            Ok(Some(file)) => file,
            Ok(None) => return Ok(last_seq),
            Err(e) => {
                // Nothing changed: the old checkpoint and log stay current.
                let _ = self.dir.remove(CHECKPOINT_TMP);
                let _ = self.dir.remove(&new_log);
                return Err(e);
            }
        };
        if stop(3) {
            return Ok(last_seq);
        }
        // From here the new checkpoint is current; if the rename cannot be made durable,
        // appends to the new log could vanish with it.
        if let Err(e) = self.dir.sync() {
            self.mark_broken(&e);
            return Err(e);
        }
        *log = LogFile {
            file,
            len: LOG_HEADER as u64,
            generation,
        };
        if stop(4) {
            return Ok(last_seq);
        }
        if let Err(e) = self.dir.remove(&log_name(old)) {
            tracing::warn!(error = %format!("{e:#}"), "old journal log left behind (removed at next open)");
        }
        tracing::info!(journal = %self.dir.path().display(), generation, last_seq,
            snapshot_bytes = snapshot.len(), "journal checkpointed");
        Ok(last_seq)
    }
}

/// Create a log holding only `header`, durable (file and directory entry).
fn create_log(dir: &JournalDir, header: LogHeader) -> Result<(std::fs::File, Vec<u8>)> {
    let name = log_name(header.generation);
    let mut file = dir.create_new(&name)?;
    let bytes = header.encode().to_vec();
    file.write_all(&bytes)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", dir.show(&name)))?;
    dir.sync()?;
    Ok((file, bytes))
}

enum CheckpointRead {
    Corrupt(String),
    Other(anyhow::Error),
}

impl From<anyhow::Error> for CheckpointRead {
    fn from(e: anyhow::Error) -> Self {
        CheckpointRead::Other(e)
    }
}

/// The current checkpoint, if any. It is renamed into place only once complete and synced,
/// so any damage is corruption.
fn read_checkpoint(
    dir: &JournalDir,
    options: &JournalOptions,
) -> Result<Option<(CheckpointHeader, Vec<u8>)>, CheckpointRead> {
    let Some(mut file) = dir.open_existing(CHECKPOINT_FILE)? else {
        return Ok(None);
    };
    let len = file
        .metadata()
        .with_context(|| format!("cannot stat {}", dir.show(CHECKPOINT_FILE)))?
        .len();
    let mut head = [0u8; CHECKPOINT_HEADER];
    if len < CHECKPOINT_HEADER as u64 {
        return Err(CheckpointRead::Corrupt(format!(
            "{CHECKPOINT_FILE} is {len} bytes, shorter than its header"
        )));
    }
    file.read_exact(&mut head)
        .with_context(|| format!("cannot read {}", dir.show(CHECKPOINT_FILE)))?;
    let h = CheckpointHeader::decode(&head)
        .map_err(|why| CheckpointRead::Corrupt(format!("{CHECKPOINT_FILE}: {why}")))?;
    if h.len > options.max_snapshot_bytes {
        return Err(CheckpointRead::Other(anyhow::anyhow!(
            "journal snapshot {} is {} bytes, above the limit of {}",
            dir.show(CHECKPOINT_FILE),
            h.len,
            options.max_snapshot_bytes
        )));
    }
    if h.len != len - CHECKPOINT_HEADER as u64 {
        return Err(CheckpointRead::Corrupt(format!(
            "{CHECKPOINT_FILE} announces {} snapshot bytes but holds {}",
            h.len,
            len - CHECKPOINT_HEADER as u64
        )));
    }
    // Generation 0 is the log before any checkpoint; numbers near 2^64 cannot come from
    // counting (and would overflow the next checkpoint or record).
    if h.generation == 0 || h.generation >= 1 << 62 || h.last_seq >= 1 << 62 {
        return Err(CheckpointRead::Corrupt(format!(
            "{CHECKPOINT_FILE} has an implausible generation {} or sequence number {}",
            h.generation, h.last_seq
        )));
    }
    let mut bytes = vec![0u8; h.len as usize];
    file.read_exact(&mut bytes)
        .with_context(|| format!("cannot read {}", dir.show(CHECKPOINT_FILE)))?;
    if crc32c(&bytes) != h.payload_crc {
        return Err(CheckpointRead::Corrupt(format!(
            "{CHECKPOINT_FILE}: snapshot checksum mismatch"
        )));
    }
    Ok(Some((h, bytes)))
}
