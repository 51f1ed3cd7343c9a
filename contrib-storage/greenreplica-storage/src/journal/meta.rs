//! The volume's metadata journal: what the engine must remember across a crash that is not
//! data. The engine's records (member health with the generation, a rebuild's progress)
//! and the personality's own records (its index, root or table) share one [`Journal`] in the
//! agent's state directory, beside the write-intent bitmap.
//!
//! Every record is applied to an [`EngineState`] when it is appended, and the same function
//! applies it again on replay, so the state after a restart is the state the journal made
//! durable. A checkpoint writes that state (with the personality's image) and empties the
//! log.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::{Journal, Record, Replay};
use crate::sync::lock;
use std::sync::Mutex;

/// Engine record: the whole membership picture (written before the member headers).
const KIND_PICTURE: u16 = 1;
/// Engine record: one member's health changed (before the change is visible to I/O).
const KIND_MEMBER: u16 = 2;
/// Engine record: a rebuild's progress, after the rebuilt bytes were flushed.
const KIND_PROGRESS: u16 = 3;
/// Kinds from here up carry a personality's records (its own kind added).
pub const LAYOUT_KIND_BASE: u16 = 0x8000;

/// A member's health as the journal records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum JournaledHealth {
    InSync,
    Rebuilding { watermark: u64 },
    Failed { reason: String },
}

/// What the journal knows: the membership picture and the personality's metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineState {
    /// The volume the journal belongs to (a journal of another volume is not used).
    pub volume_id: String,
    /// The membership generation of the last picture (0: none recorded yet).
    pub generation: u64,
    pub members: Vec<JournaledHealth>,
    /// The personality's checkpoint image.
    pub layout_image: Option<Vec<u8>>,
    /// The personality's records since its image, in order.
    pub layout_records: Vec<(u16, Vec<u8>)>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Picture {
    volume_id: String,
    generation: u64,
    members: Vec<JournaledHealth>,
}

#[derive(Debug, Serialize, Deserialize)]
struct MemberChange {
    member: usize,
    health: JournaledHealth,
}

#[derive(Debug, Serialize, Deserialize)]
struct Progress {
    member: usize,
    watermark: u64,
}

impl EngineState {
    /// Apply one record (on append and on replay alike).
    fn apply(&mut self, kind: u16, payload: &[u8]) -> Result<()> {
        match kind {
            KIND_PICTURE => {
                let p: Picture = serde_json::from_slice(payload).context("membership record")?;
                self.volume_id = p.volume_id;
                self.generation = p.generation;
                self.members = p.members;
            }
            KIND_MEMBER => {
                let c: MemberChange =
                    serde_json::from_slice(payload).context("member health record")?;
                if let Some(slot) = self.members.get_mut(c.member) {
                    *slot = c.health;
                }
            }
            KIND_PROGRESS => {
                let p: Progress =
                    serde_json::from_slice(payload).context("rebuild progress record")?;
                // Progress belongs to the rebuild the picture names; a later picture that
                // says otherwise (failed again, in sync) wins.
                if let Some(JournaledHealth::Rebuilding { watermark }) =
                    self.members.get_mut(p.member)
                {
                    *watermark = (*watermark).max(p.watermark);
                }
            }
            k if k >= LAYOUT_KIND_BASE => {
                self.layout_records
                    .push((k - LAYOUT_KIND_BASE, payload.to_vec()));
            }
            k => bail!("unknown metadata journal record kind {k}"),
        }
        Ok(())
    }

    /// The state a replay describes: the checkpoint's, then each record after it.
    pub fn replayed(replay: &Replay) -> Result<EngineState> {
        let mut state = match &replay.snapshot {
            Some(s) => serde_json::from_slice(&s.bytes).context("metadata journal checkpoint")?,
            None => EngineState::default(),
        };
        for Record { seq, kind, payload } in &replay.records {
            state
                .apply(*kind, payload)
                .with_context(|| format!("metadata journal record {seq}"))?;
        }
        Ok(state)
    }
}

/// The open metadata journal of a volume.
#[derive(Debug)]
pub struct MetaJournal {
    journal: Journal,
    /// Held across apply + append, and across a checkpoint, so a checkpoint's state reflects
    /// exactly the records appended before it.
    state: Mutex<EngineState>,
    checkpoint_bytes: u64,
}

/// Checkpoint once the log holds this much.
const DEFAULT_CHECKPOINT_BYTES: u64 = 4 << 20;

impl MetaJournal {
    /// Open (or create) the journal in directory `path`; returns it with the state it
    /// replayed.
    pub fn open(path: &Path) -> Result<(MetaJournal, EngineState)> {
        let (journal, replay) = Journal::open(path)?;
        if let Some(t) = &replay.torn_tail {
            tracing::warn!(journal = %path.display(), offset = t.offset, dropped = t.dropped_bytes,
                "metadata journal: cut off a torn tail (a commit that never completed)");
        }
        let state = EngineState::replayed(&replay)
            .with_context(|| format!("metadata journal {}", path.display()))?;
        Ok((
            MetaJournal {
                journal,
                state: Mutex::new(state.clone()),
                checkpoint_bytes: DEFAULT_CHECKPOINT_BYTES,
            },
            state,
        ))
    }

    pub fn path(&self) -> &Path {
        self.journal.path()
    }

    pub fn state(&self) -> EngineState {
        lock(&self.state).clone()
    }

    fn append(&self, kind: u16, payload: &[u8]) -> Result<()> {
        let mut state = lock(&self.state);
        state.apply(kind, payload)?;
        self.journal.append(kind, payload)?;
        Ok(())
    }

    fn append_json<T: Serialize>(&self, kind: u16, record: &T) -> Result<()> {
        self.append(kind, &serde_json::to_vec(record)?)
    }

    /// Record the whole membership picture (buffered; commit before writing the headers).
    pub fn record_picture(
        &self,
        volume_id: &str,
        generation: u64,
        members: Vec<JournaledHealth>,
    ) -> Result<()> {
        self.append_json(
            KIND_PICTURE,
            &Picture {
                volume_id: volume_id.to_string(),
                generation,
                members,
            },
        )
    }

    /// Record one member's new health (buffered; a flush commits it before acknowledging).
    pub fn record_member(&self, member: usize, health: JournaledHealth) -> Result<()> {
        self.append_json(KIND_MEMBER, &MemberChange { member, health })
    }

    /// Record a rebuild's progress: the caller flushed the member up to `watermark`.
    pub fn record_progress(&self, member: usize, watermark: u64) -> Result<()> {
        self.append_json(KIND_PROGRESS, &Progress { member, watermark })
    }

    /// Record a personality's record (its own `kind`, below 0x8000).
    pub fn record_layout(&self, kind: u16, payload: &[u8]) -> Result<()> {
        if kind >= LAYOUT_KIND_BASE {
            bail!("layout journal record kind {kind} is above 0x7fff");
        }
        self.append(LAYOUT_KIND_BASE + kind, payload)
    }

    /// Make every record so far durable.
    pub fn commit(&self) -> Result<()> {
        self.journal.commit().map(|_| ())
    }

    /// Whether the log has grown enough to be folded into a checkpoint.
    pub fn wants_checkpoint(&self) -> bool {
        self.journal.log_bytes() >= self.checkpoint_bytes
    }

    /// Replace the log by the current state. `layout_image` is called with the state locked
    /// (no record can slip in between): the personality's whole metadata, or None if it
    /// keeps no image (its records are then carried in the checkpoint).
    pub fn checkpoint(&self, layout_image: impl FnOnce() -> Option<Vec<u8>>) -> Result<()> {
        let mut state = lock(&self.state);
        if let Some(image) = layout_image() {
            state.layout_image = Some(image);
            state.layout_records.clear();
        }
        let bytes = serde_json::to_vec(&*state)?;
        self.journal.checkpoint(&bytes)?;
        Ok(())
    }

    /// Start over from `state` (a journal of another volume, or the state assembly decided).
    pub fn reset(&self, new: EngineState) -> Result<()> {
        let mut state = lock(&self.state);
        let bytes = serde_json::to_vec(&new)?;
        self.journal.checkpoint(&bytes)?;
        *state = new;
        Ok(())
    }

    #[cfg(test)]
    pub fn set_checkpoint_bytes(&mut self, bytes: u64) {
        self.checkpoint_bytes = bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("grs-meta-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn records_replay_to_the_state_they_built_across_a_checkpoint() {
        let dir = tmp("replay");
        let (j, state) = MetaJournal::open(&dir).unwrap();
        assert_eq!(state, EngineState::default());
        j.record_picture(
            "vid",
            3,
            vec![JournaledHealth::InSync, JournaledHealth::InSync],
        )
        .unwrap();
        j.record_member(1, JournaledHealth::Rebuilding { watermark: 0 })
            .unwrap();
        j.record_layout(5, b"zone 1").unwrap();
        j.commit().unwrap();
        j.checkpoint(|| None).unwrap();
        j.record_progress(1, 4 << 20).unwrap();
        j.record_progress(1, 2 << 20).unwrap(); // never backwards
        j.record_progress(0, 1 << 20).unwrap(); // not rebuilding: ignored
        j.record_layout(5, b"zone 2").unwrap();
        j.commit().unwrap();
        j.record_progress(1, 9 << 20).unwrap(); // never committed: a crash loses it
        let live = j.state();
        drop(j);
        let (_, state) = MetaJournal::open(&dir).unwrap();
        assert_eq!(state.volume_id, "vid");
        assert_eq!(state.generation, 3);
        assert_eq!(
            state.members,
            vec![
                JournaledHealth::InSync,
                JournaledHealth::Rebuilding { watermark: 4 << 20 }
            ]
        );
        assert_eq!(
            state.layout_records,
            vec![(5, b"zone 1".to_vec()), (5, b"zone 2".to_vec())]
        );
        assert_eq!(
            live.members[1],
            JournaledHealth::Rebuilding { watermark: 9 << 20 },
            "the live state saw the uncommitted record"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_layout_image_replaces_its_records_and_kinds_are_checked() {
        let dir = tmp("image");
        let (j, _) = MetaJournal::open(&dir).unwrap();
        j.record_layout(1, b"a").unwrap();
        assert!(j.record_layout(LAYOUT_KIND_BASE, b"x").is_err());
        j.checkpoint(|| Some(b"image".to_vec())).unwrap();
        j.record_layout(1, b"b").unwrap();
        j.commit().unwrap();
        drop(j);
        let (_, state) = MetaJournal::open(&dir).unwrap();
        assert_eq!(state.layout_image.as_deref(), Some(&b"image"[..]));
        assert_eq!(state.layout_records, vec![(1, b"b".to_vec())]);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
