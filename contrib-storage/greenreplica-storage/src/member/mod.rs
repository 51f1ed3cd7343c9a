//! Members: where a volume's bytes physically live. The drive model (timing, power, ledger)
//! is separate (`drive.rs`); a member says whether that model's timing is enforced with
//! real waits and what to do on a power transition.

mod blockdev;
mod command;
mod faulty;
mod file;
#[cfg(test)]
pub mod memory;

use std::fmt;
use std::io;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use blockdev::BlockDevice;
#[cfg(test)]
pub use command::RecordingRunner;
pub use command::{CommandRunner, SystemRunner};
pub use faulty::FaultyMember;
pub use file::FileMember;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemberKind {
    /// A plain backing file, served at its own speed; the drive model only keeps the ledger.
    File,
    /// A backing file plus the drive model's service times and power transitions, in real time.
    EmulatedHdd,
    /// A real disk; spin-down is commanded through hdparm.
    Blockdev,
}

impl FromStr for MemberKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "file" => Ok(MemberKind::File),
            "emulated-hdd" => Ok(MemberKind::EmulatedHdd),
            "blockdev" => Ok(MemberKind::Blockdev),
            other => Err(format!(
                "unknown member kind {other:?}; use file, emulated-hdd or blockdev"
            )),
        }
    }
}

impl fmt::Display for MemberKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemberKind::File => "file",
            MemberKind::EmulatedHdd => "emulated-hdd",
            MemberKind::Blockdev => "blockdev",
        })
    }
}

pub trait Member: Send + Sync + fmt::Debug {
    fn kind(&self) -> MemberKind;
    fn describe(&self) -> String;
    fn size(&self) -> u64;
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()>;
    /// Make every completed write durable.
    fn flush(&self) -> io::Result<()>;
    /// Whether the drive model's service and spin-up times are waited out for real.
    fn emulates_timing(&self) -> bool {
        self.kind() == MemberKind::EmulatedHdd
    }
    /// The model decided to spin the drive down (real disks act on it).
    fn spin_down(&self) -> anyhow::Result<()> {
        Ok(())
    }
    /// What the device itself says about its power state, when it can tell.
    fn reported_power_state(&self) -> Option<String> {
        None
    }
}
