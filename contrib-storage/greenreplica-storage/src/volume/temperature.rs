//! Hot and cold ranges (QMD's partial on-line mirrors) through the engine: client extents
//! are checked like a hint's (bounded count, inside the volume, no overflow), handed to the
//! personality, and the new table is journaled and committed before the answer, so it
//! survives an agent restart.

use super::status::TemperatureSummary;
use super::{Volume, VolumeError};
use crate::layout::Plan;

impl Volume {
    /// Mark `extents` `temperature` ("hot", "cold" or "normal"); returns how many ranges
    /// the volume's table holds now. Layouts without temperatures refuse.
    pub fn set_temperature(
        &self,
        extents: &[(u64, u64)],
        temperature: &str,
    ) -> Result<usize, VolumeError> {
        self.check_extents(extents)?;
        let n = self
            .layout
            .set_temperature(extents, temperature)
            .map_err(|problem| VolumeError::Io {
                volume: self.name.clone(),
                problem,
            })?;
        self.complete_plan(&Plan::default(), None)?;
        self.commit_metadata()?;
        if self.meta.is_none() {
            // Nothing to make durable: the layout installs the table now.
            self.layout.committed();
        }
        Ok(n)
    }

    /// The marked ranges: (offset, length, "hot" or "cold").
    pub fn temperatures(&self) -> Vec<(u64, u64, &'static str)> {
        self.layout.temperatures()
    }

    /// The marked ranges summed, for the status.
    pub fn temperature_summary(&self) -> TemperatureSummary {
        let mut s = TemperatureSummary {
            cold_groups: self.layout.cold_groups(),
            ..TemperatureSummary::default()
        };
        for (_, len, t) in self.temperatures() {
            s.ranges += 1;
            if t == "hot" {
                s.hot_bytes += len;
            } else {
                s.cold_bytes += len;
            }
        }
        s
    }
}
