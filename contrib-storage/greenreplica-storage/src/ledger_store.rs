//! Ledger persistence, so a restarted agent continues its totals. Files are keyed by the
//! volume id: a volume recreated under an old name starts from zero.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::ledger::Ledger;

#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    volume_id: String,
    members: Vec<Ledger>,
}

pub fn path(state_dir: &Path, volume: &str) -> PathBuf {
    state_dir.join(format!("{volume}.ledger.json"))
}

/// Saved member ledgers, or zeros when there are none (or they belong to another volume).
pub fn load(state_dir: &Path, volume: &str, volume_id: &str, members: usize) -> Vec<Ledger> {
    let file = path(state_dir, volume);
    let stored = std::fs::read(&file).ok().and_then(|bytes| {
        match serde_json::from_slice::<Stored>(&bytes) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "ignoring unreadable ledger");
                None
            }
        }
    });
    match stored {
        Some(s) if s.volume_id == volume_id && s.members.len() == members => s.members,
        _ => vec![Ledger::default(); members],
    }
}

/// Write atomically (temporary file, fsync, rename).
pub fn save(state_dir: &Path, volume: &str, volume_id: &str, members: &[Ledger]) -> Result<()> {
    let file = path(state_dir, volume);
    let tmp = file.with_extension("json.tmp");
    let text = serde_json::to_vec_pretty(&Stored {
        volume_id: volume_id.to_string(),
        members: members.to_vec(),
    })?;
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(&text)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &file).with_context(|| format!("cannot replace {}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::power_state::PowerState;

    #[test]
    fn round_trips_and_ignores_other_volume_ids() {
        let dir = std::env::temp_dir().join(format!("grs-ledger-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut l = Ledger::default();
        l.record(PowerState::Idle, 3.0, 15.0);
        save(&dir, "v", "id1", &[l.clone(), Ledger::default()]).unwrap();
        assert_eq!(load(&dir, "v", "id1", 2)[0], l);
        assert_eq!(load(&dir, "v", "id2", 2)[0], Ledger::default());
        assert_eq!(load(&dir, "w", "id1", 2).len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
