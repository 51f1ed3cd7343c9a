//! A real disk. I/O goes to the device node; when the power model decides to spin down the
//! disk is told so with `hdparm -y`, and `hdparm -C` reports what the drive thinks it is in.

use std::io;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};

use super::{CommandRunner, FileMember, Member, MemberKind};

#[derive(Debug)]
pub struct BlockDevice {
    io: FileMember,
    device: String,
    runner: Arc<dyn CommandRunner>,
}

impl BlockDevice {
    pub fn open(path: &Path, runner: Arc<dyn CommandRunner>) -> Result<Self> {
        Ok(Self {
            io: FileMember::open_device(MemberKind::Blockdev, path)?,
            device: path.display().to_string(),
            runner,
        })
    }

    /// For tests: any member I/O plus a command runner.
    pub fn with_io(io: FileMember, device: &str, runner: Arc<dyn CommandRunner>) -> Self {
        Self {
            io,
            device: device.to_string(),
            runner,
        }
    }
}

/// Parse `hdparm -C` output ("drive state is:  standby").
fn parse_drive_state(output: &str) -> Option<String> {
    output
        .lines()
        .find_map(|l| l.split_once("drive state is:"))
        .map(|(_, state)| state.trim().to_string())
}

impl Member for BlockDevice {
    fn kind(&self) -> MemberKind {
        MemberKind::Blockdev
    }

    fn describe(&self) -> String {
        self.device.clone()
    }

    fn size(&self) -> u64 {
        self.io.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.io.read_at(buf, offset)
    }

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.io.write_at(data, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.io.flush()
    }

    fn emulates_timing(&self) -> bool {
        false
    }

    fn spin_down(&self) -> Result<()> {
        // Dirty data must be on the platters before the heads park.
        self.io
            .flush()
            .with_context(|| format!("cannot flush {} before spin-down", self.device))?;
        self.runner.run("hdparm", &["-y", &self.device]).map(|_| ())
    }

    fn reported_power_state(&self) -> Option<String> {
        match self.runner.run("hdparm", &["-C", &self.device]) {
            Ok(out) => parse_drive_state(&out),
            Err(e) => {
                tracing::debug!(device = %self.device, error = %e, "hdparm -C failed");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::RecordingRunner;

    #[test]
    fn spin_down_runs_hdparm_y_and_state_comes_from_hdparm_c() {
        let dir = std::env::temp_dir().join(format!("grs-blockdev-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let io = FileMember::open_or_create(MemberKind::Blockdev, &dir.join("d"), 1 << 20).unwrap();
        let runner = Arc::new(RecordingRunner::default());
        let dev = BlockDevice::with_io(io, "/dev/sdz", runner.clone());
        dev.spin_down().unwrap();
        assert_eq!(dev.reported_power_state().as_deref(), Some("standby"));
        assert_eq!(
            *runner.calls.lock().unwrap(),
            vec![
                "hdparm -y /dev/sdz".to_string(),
                "hdparm -C /dev/sdz".to_string()
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn parses_hdparm_c_output() {
        assert_eq!(
            parse_drive_state("/dev/sda:\n drive state is:  active/idle\n").as_deref(),
            Some("active/idle")
        );
        assert_eq!(parse_drive_state("garbage"), None);
    }
}
