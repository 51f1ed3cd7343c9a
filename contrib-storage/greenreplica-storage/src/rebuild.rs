//! The rebuild's throttle, like MD's speed_limit_min/max: at the configured rate (the
//! maximum) while the drives are idle of foreground I/O, at the minimum while it goes on, so
//! the rebuild yields to it. The steps themselves are events of the volume's event core
//! (`volume::runner`, `Volume::rebuild_chunk`); only I/O to the chunk being copied ever
//! waits for one, and the core never waits for a request's lock.

/// Bytes copied per rebuild step.
pub const CHUNK: u64 = 1 << 20;
/// Persist the watermark every so often so a restart does not start over.
pub const CHECKPOINT_BYTES: u64 = 64 << 20;
/// Journal the watermark (flush, then one small record) more often than the headers.
pub const JOURNAL_BYTES: u64 = 8 << 20;
/// A step whose chunk a request holds is tried again this much later.
pub const BUSY_RETRY_S: f64 = 0.001;

/// Rate for the next chunk: the minimum if foreground requests arrived meanwhile.
pub fn rate_mb_s(foreground_moved: bool, min_mb_s: f64, max_mb_s: f64) -> f64 {
    if foreground_moved {
        min_mb_s.min(max_mb_s)
    } else {
        max_mb_s
    }
}

/// Seconds from one step of `bytes` to the next, to stay at `rate_mb_s`.
pub fn step_interval_s(bytes: u64, rate_mb_s: f64) -> f64 {
    bytes as f64 / (rate_mb_s.max(0.001) * 1e6)
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
    fn the_interval_keeps_the_rate() {
        assert_eq!(step_interval_s(1_000_000, 10.0), 0.1);
        assert_eq!(step_interval_s(1 << 20, 200.0), 1048576.0 / 200e6);
        assert!(
            step_interval_s(1, 0.0).is_finite(),
            "a zero rate does not stop time"
        );
    }
}
