//! QMD's staging buffer (issue 16 item 1, the paper's 1 MB buffer): the flash copies of
//! small buffered writes are gathered in memory and written to flash as one append per
//! volume flush, instead of one flash write per request.
//!
//! A write that stages is planned as usual (its flash slot allocated at the tail of the
//! buffer, so consecutive writes get adjacent slots), but its flash piece is *reserved*
//! here instead of written; the engine hands the bytes over when the write completes
//! (`put`) and asks for the appends at the next flush (`take`), writes them, then says so
//! (`appended`). Until then the flash does not hold those bytes: `holds` tells the reads to
//! go to the active disk (which does), and extents with staged bytes are not reused.

use std::collections::BTreeMap;

/// Default staging space (the paper's 1 MB buffer).
pub const DEFAULT_STAGING_BYTES: u64 = 1 << 20;
/// Largest staging space accepted (it is memory of the agent).
pub const MAX_STAGING_BYTES: u64 = 64 << 20;

#[derive(Debug)]
pub struct Staging {
    /// Bytes the buffer may hold (0: staging off).
    capacity: u64,
    /// Bytes of planned pieces and of staged runs not yet taken.
    used: u64,
    /// Pieces planned to stage whose bytes have not arrived: flash offset → length.
    planned: BTreeMap<u64, u64>,
    /// Staged bytes by flash offset, not yet handed out for an append.
    runs: BTreeMap<u64, Vec<u8>>,
    /// Flash ranges handed out for an append and not yet written.
    in_flight: Vec<(u64, u64)>,
}

impl Staging {
    pub fn new(capacity: u64) -> Self {
        Self {
            capacity,
            used: 0,
            planned: BTreeMap::new(),
            runs: BTreeMap::new(),
            in_flight: Vec::new(),
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// A new size applies to later writes; what is staged stays until its append.
    pub fn set_capacity(&mut self, capacity: u64) -> Result<(), String> {
        if capacity > MAX_STAGING_BYTES {
            return Err(format!(
                "qmd option staging_bytes: {capacity} is more than {MAX_STAGING_BYTES} bytes"
            ));
        }
        self.capacity = capacity;
        Ok(())
    }

    /// Stage a piece of `len` bytes bound for flash offset `flash_off`: false when staging
    /// is off or the piece does not fit the space left (the write then goes to flash now).
    pub fn reserve(&mut self, flash_off: u64, len: u64) -> bool {
        if len == 0 || self.used + len > self.capacity || self.planned.contains_key(&flash_off) {
            return false;
        }
        self.used += len;
        self.planned.insert(flash_off, len);
        true
    }

    /// A planned piece will not be written (its write failed or was refused).
    pub fn unreserve(&mut self, flash_off: u64) {
        if let Some(len) = self.planned.remove(&flash_off) {
            self.used -= len;
        }
    }

    /// The bytes of a planned piece (its write completed). False (and nothing kept) for a
    /// piece that was not planned here or whose length differs.
    pub fn put(&mut self, flash_off: u64, bytes: &[u8]) -> bool {
        if self.planned.get(&flash_off) != Some(&(bytes.len() as u64)) {
            return false;
        }
        self.planned.remove(&flash_off);
        self.runs.insert(flash_off, bytes.to_vec());
        true
    }

    /// Every staged run, adjacent runs merged into one append: (flash offset, bytes). They
    /// are in flight (still `holds`) until `appended`.
    pub fn take(&mut self) -> Vec<(u64, Vec<u8>)> {
        let mut appends: Vec<(u64, Vec<u8>)> = Vec::new();
        for (off, bytes) in std::mem::take(&mut self.runs) {
            self.used -= bytes.len() as u64;
            self.in_flight.push((off, bytes.len() as u64));
            match appends.last_mut() {
                Some((start, run)) if *start + run.len() as u64 == off => run.extend(bytes),
                _ => appends.push((off, bytes)),
            }
        }
        appends
    }

    /// The appends handed out by `take` were written (or their member failed): the flash
    /// holds those bytes now, or is not read.
    pub fn appended(&mut self) {
        self.in_flight.clear();
    }

    /// Whether any byte of flash range `flash_off..flash_off+len` is staged, planned to be
    /// or in flight: the flash does not hold it yet.
    pub fn holds(&self, flash_off: u64, len: u64) -> bool {
        let end = flash_off.saturating_add(len);
        let overlaps = |(s, n): (u64, u64)| s < end && flash_off < s + n;
        let before = |m: &BTreeMap<u64, u64>| {
            m.range(..end)
                .next_back()
                .is_some_and(|(&s, &n)| overlaps((s, n)))
        };
        before(&self.planned)
            || self
                .runs
                .range(..end)
                .next_back()
                .is_some_and(|(&s, b)| overlaps((s, b.len() as u64)))
            || self.in_flight.iter().any(|&r| overlaps(r))
    }

    /// Every flash range not yet on flash (planned, staged or in flight).
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.planned
            .iter()
            .map(|(&s, &n)| (s, n))
            .chain(self.runs.iter().map(|(&s, b)| (s, b.len() as u64)))
            .chain(self.in_flight.iter().copied())
    }

    /// Half the space is taken by staged bytes: append them now, not at the next flush, so
    /// that the writes that follow still find room (a burst between flushes).
    pub fn due(&self) -> bool {
        self.capacity > 0 && !self.runs.is_empty() && self.used * 2 >= self.capacity
    }

    /// Bytes staged or planned (what the space holds now).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Forget everything (a restart: what was staged was never acknowledged).
    pub fn clear(&mut self) {
        self.used = 0;
        self.planned.clear();
        self.runs.clear();
        self.in_flight.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_pieces_become_one_append_and_gaps_split_it() {
        let mut s = Staging::new(1 << 20);
        for (off, b) in [(0u64, 1u8), (4096, 2), (8192, 3), (20480, 4)] {
            assert!(s.reserve(off, 4096));
            assert!(s.put(off, &[b; 4096]));
        }
        let appends = s.take();
        assert_eq!(appends.len(), 2, "0..12288 and 20480..24576");
        assert_eq!(appends[0].0, 0);
        assert_eq!(appends[0].1.len(), 12288);
        assert_eq!(&appends[0].1[4096..4100], &[2; 4]);
        assert_eq!(appends[1], (20480, vec![4; 4096]));
        assert_eq!(s.used(), 0, "the space is free once taken");
        assert!(s.holds(5000, 1), "in flight: not on flash yet");
        s.appended();
        assert!(!s.holds(0, 1 << 20));
    }

    #[test]
    fn a_piece_larger_than_the_space_left_is_refused_and_off_stages_nothing() {
        let mut s = Staging::new(8192);
        assert!(s.reserve(0, 4096));
        assert!(s.reserve(4096, 4096));
        assert!(!s.reserve(8192, 1), "full");
        s.unreserve(4096);
        assert!(s.reserve(8192, 4096), "the refused write's space came back");
        assert!(!s.reserve(20000, 0), "empty pieces never stage");
        let mut off = Staging::new(0);
        assert!(!off.reserve(0, 1));
        assert!(s.set_capacity(MAX_STAGING_BYTES + 1).is_err());
    }

    #[test]
    fn half_full_with_staged_bytes_is_due() {
        let mut s = Staging::new(4 * 4096);
        assert!(s.reserve(0, 4096) && s.reserve(4096, 4096));
        assert!(!s.due(), "planned bytes alone are not appendable yet");
        assert!(s.put(0, &[1; 4096]));
        assert!(s.due(), "half the space taken, some of it staged");
        s.take();
        assert!(!s.due());
    }

    #[test]
    fn holds_covers_planned_staged_and_in_flight_ranges_only() {
        let mut s = Staging::new(1 << 20);
        assert!(s.reserve(8192, 4096));
        assert!(s.holds(8192, 1) && s.holds(12287, 1) && s.holds(4096, 4097));
        assert!(!s.holds(12288, 4096) && !s.holds(4096, 4096));
        assert!(
            !s.put(8192, &[0; 100]),
            "a different length is not the planned piece"
        );
        assert!(!s.put(0, &[0; 4096]), "an unplanned piece is ignored");
        assert!(s.put(8192, &[7; 4096]));
        assert!(s.holds(10000, 10));
        assert_eq!(s.ranges().collect::<Vec<_>>(), vec![(8192, 4096)]);
        s.clear();
        assert!(!s.holds(0, u64::MAX) && s.used() == 0);
    }
}
