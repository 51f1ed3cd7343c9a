//! Throttled rebuild of a replaced member from its mirror, in the background.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::volume::Volume;

const CHUNK: u64 = 1 << 20;
/// Persist the watermark every so often so a restart does not start over.
const CHECKPOINT_BYTES: u64 = 64 << 20;

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

fn run(volume: &Volume, member: usize, rate_mb_s: f64, stop: &AtomicBool) {
    let started = Instant::now();
    let mut copied = 0u64;
    let mut since_checkpoint = 0u64;
    tracing::info!(volume = %volume.name(), member, rate_mb_s, "rebuild started");
    while !stop.load(Ordering::SeqCst) {
        match volume.rebuild_step(member, CHUNK) {
            Ok(Some(_watermark)) => {
                copied += CHUNK;
                since_checkpoint += CHUNK;
                if since_checkpoint >= CHECKPOINT_BYTES {
                    since_checkpoint = 0;
                    if let Err(e) = volume.persist_headers() {
                        tracing::warn!(volume = %volume.name(), error = %e, "cannot checkpoint rebuild");
                    }
                }
                // Throttle: never ahead of the configured rate.
                let due = Duration::from_secs_f64(copied as f64 / (rate_mb_s * 1e6));
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
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
