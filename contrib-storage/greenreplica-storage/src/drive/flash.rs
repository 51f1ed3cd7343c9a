//! A flash device (SATA SSD or NVMe): a fixed command latency per read or write, no
//! positioning, `parallel_units` commands in flight at once sharing the device's bandwidth.

use crate::clock::Seconds;
use crate::profile::DriveProfile;

use super::mechanism::{HeadPosition, Mechanism, Served};
use super::queue::{Command, Op};

#[derive(Debug, Clone)]
pub struct FlashMechanism {
    read_latency_s: f64,
    write_latency_s: f64,
    read_rate: f64,
    write_rate: f64,
    units: usize,
    /// The shared data path is busy until then.
    channel_free_at: Seconds,
}

impl FlashMechanism {
    pub fn new(profile: &DriveProfile) -> Self {
        Self {
            read_latency_s: profile.read_overhead_ms / 1e3,
            write_latency_s: profile.write_overhead_ms / 1e3,
            read_rate: profile.read_rate_bytes_s(),
            write_rate: profile.write_rate_bytes_s(),
            units: profile.flash.as_ref().map_or(1, |f| f.parallel_units),
            channel_free_at: f64::NEG_INFINITY,
        }
    }
}

impl Mechanism for FlashMechanism {
    fn parallelism(&self) -> usize {
        self.units
    }

    fn positioning(&self, _: &Command, _: Seconds) -> Seconds {
        0.0
    }

    fn cylinder(&self, _: u64) -> u64 {
        0
    }

    fn head(&self) -> Option<HeadPosition> {
        None
    }

    fn serve(&mut self, command: &Command, start: Seconds) -> Served {
        let (latency, rate) = match command.op {
            Op::Read => (self.read_latency_s, self.read_rate),
            Op::Write { .. } => (self.write_latency_s, self.write_rate),
            // Power-loss protected or write-through: nothing to flush.
            Op::Flush => (0.0, f64::INFINITY),
        };
        let transfer = command.len as f64 / rate;
        let done = (start + latency).max(self.channel_free_at) + transfer;
        self.channel_free_at = done;
        Served {
            done,
            media_free_at: done,
            cache_hit: false,
            data: None,
        }
    }

    fn forget_head(&mut self) {}

    fn power_loss(&mut self) -> Vec<(u64, u64)> {
        Vec::new()
    }
}
