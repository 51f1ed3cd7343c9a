//! The timer of an emulated member: its drive model (profile and unit) served in virtual
//! time, with the drive's buffer off (as one would turn a real drive's read cache off).

use anyhow::{anyhow, bail, Result};

use crate::drive::disk::DiskMechanism;
use crate::drive::geometry::Geometry;
use crate::drive::queue::{Class, Command, Op};
use crate::drive::Mechanism;
use crate::profile::DriveProfile;

use super::AccessTimer;

pub struct EmulatedTimer {
    disk: DiskMechanism,
    sectors: u64,
    sector_bytes: u64,
    now: f64,
}

impl EmulatedTimer {
    pub fn new(profile: &DriveProfile) -> Result<Self> {
        if profile.rpm == 0 {
            bail!("profile {} is flash: it has no tracks", profile.name);
        }
        let mut plain = profile.clone();
        plain.cache = None;
        let disk = DiskMechanism::new(&plain).map_err(|e| anyhow!(e))?;
        let g = disk.geometry();
        Ok(Self {
            sectors: g.total_sectors(),
            sector_bytes: g.sector_bytes(),
            disk,
            now: 0.0,
        })
    }

    pub fn geometry(&self) -> &Geometry {
        self.disk.geometry()
    }
}

impl AccessTimer for EmulatedTimer {
    fn sectors(&self) -> u64 {
        self.sectors
    }

    fn read(&mut self, first: u64, count: u64) -> Result<f64> {
        if count == 0 || first.saturating_add(count) > self.sectors {
            bail!("read of {count} sectors at {first} outside the drive");
        }
        let command = Command {
            id: 0,
            op: Op::Read,
            offset: first * self.sector_bytes,
            len: count * self.sector_bytes,
            class: Class::Foreground,
            arrival: self.now,
            data: None,
        };
        let done = self.disk.serve(&command, self.now).done;
        let took = done - self.now;
        self.now = done;
        Ok(took)
    }
}
