//! Identity: the volume's header (superblock) template, its generation, and writing it to
//! the members. Every health change that the headers record happens under the `headers`
//! lock together with the generation bump and the header writes.

use super::{Health, Volume, VolumeError};
use crate::superblock::{self, MemberData, Superblock};
use crate::sync::lock;

impl Volume {
    pub(super) fn bump_generation(&self) {
        if let Some(id) = lock(&self.identity).as_mut() {
            id.generation += 1;
        }
    }

    pub fn identity(&self) -> Option<Superblock> {
        lock(&self.identity).clone()
    }

    pub fn set_identity_flags(&self, formatted: bool, clean: bool) -> Result<(), VolumeError> {
        let _headers = lock(&self.headers);
        if let Some(id) = lock(&self.identity).as_mut() {
            id.formatted = formatted;
            id.clean = clean;
        }
        if clean {
            self.clear_all_intent();
        }
        self.write_headers_locked()
    }

    /// Write the current header to every member that is not failed (a rebuild checkpoint:
    /// the replacement's data is flushed before the watermark that vouches for it).
    pub fn persist_headers(&self) -> Result<(), VolumeError> {
        let _headers = lock(&self.headers);
        self.write_headers_locked()
    }

    /// Caller holds `headers`. A member whose header cannot be written is failed, which
    /// bumps the generation, so the survivors are written again.
    pub(super) fn write_headers_locked(&self) -> Result<(), VolumeError> {
        loop {
            let Some(identity) = self.identity() else {
                return Ok(());
            };
            // The journal records the picture first; the headers follow.
            self.journal_picture(identity.generation, &identity.volume_id);
            let mut failed = Vec::new();
            for (i, slot) in self.slots.iter().enumerate() {
                let data = match slot.health() {
                    Health::InSync => MemberData::InSync,
                    Health::Rebuilding { watermark } => MemberData::Rebuilding { watermark },
                    Health::Failed { .. } => continue,
                };
                let Some(store) = slot.live_store() else {
                    continue;
                };
                if matches!(data, MemberData::Rebuilding { .. }) {
                    if let Err(e) = store.flush() {
                        failed.push((i, format!("flush before a rebuild checkpoint: {e}")));
                        continue;
                    }
                }
                let header = Superblock {
                    member_index: i,
                    data,
                    ..identity.clone()
                };
                if let Err(e) = superblock::write(store.as_ref(), &header) {
                    failed.push((i, e.to_string()));
                }
            }
            if failed.is_empty() {
                return self.check_redundancy();
            }
            for (i, reason) in failed {
                self.mark_failed(i, &reason);
            }
            self.bump_generation();
        }
    }
}
