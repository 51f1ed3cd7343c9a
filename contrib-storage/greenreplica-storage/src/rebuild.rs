//! Throttled rebuild of a replaced member from its mirror, in the background. Like MD's
//! speed_limit_min/max: at the configured rate (the maximum) while the volume is otherwise
//! quiet, at the minimum while foreground I/O is going on, so the rebuild yields to it.
//! Only I/O to the chunk being copied ever waits for the rebuild (`Volume::rebuild_step`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::volume::Volume;

const CHUNK: u64 = 1 << 20;
/// Persist the watermark every so often so a restart does not start over.
const CHECKPOINT_BYTES: u64 = 64 << 20;
/// Journal the watermark (flush, then one small record) more often than the headers.
const JOURNAL_BYTES: u64 = 8 << 20;

pub fn spawn(
    volume: Arc<Volume>,
    member: usize,
    rate_mb_s: f64,
    stop: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("rebuild-{}-{member}", volume.name()))
        .spawn(move || run(&volume, member, rate_mb_s, &stop))
}

/// Rate for the next chunk: the minimum if foreground requests arrived meanwhile.
pub fn rate_mb_s(foreground_moved: bool, min_mb_s: f64, max_mb_s: f64) -> f64 {
    if foreground_moved {
        min_mb_s.min(max_mb_s)
    } else {
        max_mb_s
    }
}

/// How long to pause after copying `bytes` in `took`, to stay at `rate_mb_s`.
pub fn pause_after(bytes: u64, rate_mb_s: f64, took: Duration) -> Duration {
    let due = Duration::from_secs_f64(bytes as f64 / (rate_mb_s.max(0.001) * 1e6));
    due.saturating_sub(took)
}

fn run(volume: &Volume, member: usize, max_mb_s: f64, stop: &AtomicBool) {
    let started = Instant::now();
    let min_mb_s = volume.integrity().rebuild_min_mb_s;
    let mut since_checkpoint = 0u64;
    let mut since_journal = 0u64;
    let mut foreground_seen = volume.foreground_requests();
    tracing::info!(volume = %volume.name(), member, max_mb_s, min_mb_s, "rebuild started");
    while !stop.load(Ordering::SeqCst) {
        let step_started = Instant::now();
        match volume.rebuild_step(member, CHUNK) {
            Ok(Some(_watermark)) => {
                since_checkpoint += CHUNK;
                since_journal += CHUNK;
                if since_journal >= JOURNAL_BYTES {
                    since_journal = 0;
                    if let Err(e) = volume.journal_rebuild_progress(member) {
                        tracing::warn!(volume = %volume.name(), error = %e, "cannot journal rebuild progress");
                    }
                }
                if since_checkpoint >= CHECKPOINT_BYTES {
                    since_checkpoint = 0;
                    // persist_headers flushes the copied data before the watermark.
                    if let Err(e) = volume.persist_headers() {
                        tracing::warn!(volume = %volume.name(), error = %e, "cannot checkpoint rebuild");
                    }
                }
                let foreground = volume.foreground_requests();
                let rate = rate_mb_s(foreground != foreground_seen, min_mb_s, max_mb_s);
                foreground_seen = foreground;
                std::thread::sleep(pause_after(CHUNK, rate, step_started.elapsed()));
            }
            Ok(None) => {
                tracing::info!(volume = %volume.name(), member, seconds = started.elapsed().as_secs_f64(), "rebuild finished");
                return;
            }
            Err(e) => {
                tracing::error!(volume = %volume.name(), member, error = %e, "rebuild stopped");
                return;
            }
        }
    }
    if let Err(e) = volume.persist_headers() {
        tracing::warn!(volume = %volume.name(), error = %e, "cannot checkpoint rebuild");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rebuild_drops_to_the_minimum_while_foreground_io_moves() {
        assert_eq!(rate_mb_s(false, 5.0, 200.0), 200.0);
        assert_eq!(rate_mb_s(true, 5.0, 200.0), 5.0);
        assert_eq!(rate_mb_s(true, 500.0, 200.0), 200.0, "min above max");
    }

    #[test]
    fn the_pause_keeps_the_rate() {
        let mb = 1_000_000;
        assert_eq!(
            pause_after(mb, 10.0, Duration::ZERO),
            Duration::from_millis(100)
        );
        assert_eq!(
            pause_after(mb, 10.0, Duration::from_millis(40)),
            Duration::from_millis(60)
        );
        assert_eq!(
            pause_after(mb, 10.0, Duration::from_secs(1)),
            Duration::ZERO
        );
    }
}
