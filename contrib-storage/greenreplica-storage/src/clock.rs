//! Time sources. The engine only ever asks a `Clock`, so the same layout, member and power
//! code runs in real time (serving a volume) and in virtual time (replaying a trace).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Seconds since the clock's origin.
pub type Seconds = f64;

pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> Seconds;
    /// Block until `t`; a virtual clock returns at once (time is advanced by its driver).
    fn sleep_until(&self, t: Seconds);
    /// The event core's step to its next event at `t`: real time sleeps until then, virtual
    /// time jumps there.
    fn wait_until(&self, t: Seconds) {
        self.sleep_until(t);
    }
}

/// Wall time, measured from the agent's start.
#[derive(Debug)]
pub struct RealClock {
    origin: Instant,
}

impl RealClock {
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for RealClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for RealClock {
    fn now(&self) -> Seconds {
        self.origin.elapsed().as_secs_f64()
    }

    fn sleep_until(&self, t: Seconds) {
        let wait = t - self.now();
        if wait > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(wait));
        }
    }
}

/// Time that moves only when the replay driver says so.
#[derive(Debug, Default)]
pub struct VirtualClock {
    bits: AtomicU64,
}

impl VirtualClock {
    pub fn new() -> Self {
        Self::default()
    }

    /// Move time forward; going backwards is ignored so time stays monotonic.
    pub fn advance_to(&self, t: Seconds) {
        if t > self.now() {
            self.bits.store(t.to_bits(), Ordering::SeqCst);
        }
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Seconds {
        f64::from_bits(self.bits.load(Ordering::SeqCst))
    }

    fn sleep_until(&self, _t: Seconds) {}

    fn wait_until(&self, t: Seconds) {
        self.advance_to(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_clock_only_moves_forward() {
        let c = VirtualClock::new();
        assert_eq!(c.now(), 0.0);
        c.advance_to(5.0);
        c.advance_to(3.0);
        assert_eq!(c.now(), 5.0);
    }

    #[test]
    fn real_clock_sleeps_until_the_deadline() {
        let c = RealClock::new();
        let target = c.now() + 0.01;
        c.sleep_until(target);
        assert!(c.now() >= target);
    }
}
