//! Where a logged layout keeps home bytes and log bytes on a member: one data region below
//! one log region (RoLo-P/R/E, the log share at the top of every pair member), or RoLo-S's
//! zebra: bands of `width` bytes, each a data band followed by its log band, so that a
//! logger's log writes and its pair's destage writes sit near each other. Both copies of a
//! pair use the same geometry, so the mirror of home byte h is at the primary's offset.

/// What a member offset holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Region {
    /// Home bytes at this home offset.
    Home(u64),
    /// Log bytes at this log offset (on a member that keeps a log).
    Log(u64),
    /// Bytes the layout does not use (the log bands of a member that keeps no log, the tail).
    Unused,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Zebra {
    width: u64,
    /// Home bytes at the start of each band; the rest of the band is log.
    data: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Geometry {
    /// Home bytes per pair member.
    pub data_bytes: u64,
    /// Log bytes per log member.
    pub log_len: u64,
    /// Plain geometry: member offset of the log region.
    log_start: u64,
    zebra: Option<Zebra>,
}

impl Geometry {
    /// A data region of (1 - share) of the member (whole stripe units) below the log.
    pub fn plain(member_bytes: u64, su: u64, share: f64) -> Result<Self, String> {
        let log = (member_bytes as f64 * share) as u64;
        let data = member_bytes.saturating_sub(log) / su * su;
        let g = Self {
            data_bytes: data,
            log_len: member_bytes - data,
            log_start: data,
            zebra: None,
        };
        g.check(su)
    }

    /// GRAID's data members (all home) and its log member (all log).
    pub fn whole(member_bytes: u64) -> Self {
        Self {
            data_bytes: member_bytes,
            log_len: member_bytes,
            log_start: 0,
            zebra: None,
        }
    }

    /// Bands of `width` bytes, each a data band of (1 - share) (whole stripe units) and a
    /// log band; the tail short of a whole band is unused.
    pub fn zebra(member_bytes: u64, su: u64, share: f64, width: u64) -> Result<Self, String> {
        if width < 2 * su || !width.is_multiple_of(su) {
            return Err(format!(
                "zebra width {width} must be a multiple of the stripe unit ({su}) and at least \
                 two of them"
            ));
        }
        let data = ((width as f64 * (1.0 - share)) as u64 / su * su).clamp(su, width - su);
        let bands = member_bytes / width;
        let g = Self {
            data_bytes: bands * data,
            log_len: bands * (width - data),
            log_start: 0,
            zebra: Some(Zebra { width, data }),
        };
        g.check(su)
    }

    fn check(self, su: u64) -> Result<Self, String> {
        if self.data_bytes < su || self.log_len < su {
            return Err(
                "members are too small for a data and a log region of one stripe unit each".into(),
            );
        }
        Ok(self)
    }

    /// (data band, log band) widths of the zebra, if there is one.
    pub fn bands(&self) -> Option<(u64, u64)> {
        self.zebra.map(|z| (z.data, z.width - z.data))
    }

    /// Member offset of home byte `h` (a run within one stripe unit stays contiguous).
    pub fn home(&self, h: u64) -> u64 {
        match self.zebra {
            None => h,
            Some(z) => h / z.data * z.width + h % z.data,
        }
    }

    /// Member offset of log byte `l`.
    pub fn log(&self, l: u64) -> u64 {
        match self.zebra {
            None => self.log_start + l,
            Some(z) => {
                let lw = z.width - z.data;
                l / lw * z.width + z.data + l % lw
            }
        }
    }

    /// What member offset `off` holds and how many bytes from it the region runs on (on a
    /// member that keeps a log region).
    pub fn region(&self, off: u64) -> (Region, u64) {
        match self.zebra {
            None if off < self.data_bytes => (Region::Home(off), self.data_bytes - off),
            None if off < self.log_start + self.log_len && off >= self.log_start => (
                Region::Log(off - self.log_start),
                self.log_start + self.log_len - off,
            ),
            None => (Region::Unused, u64::MAX - off),
            Some(z) => {
                let (band, within) = (off / z.width, off % z.width);
                let lw = z.width - z.data;
                if band * z.data >= self.data_bytes {
                    (Region::Unused, u64::MAX - off)
                } else if within < z.data {
                    (Region::Home(band * z.data + within), z.data - within)
                } else {
                    (Region::Log(band * lw + within - z.data), z.width - within)
                }
            }
        }
    }

    /// Where a log run of `len` bytes goes with the log filled up to `head`: there, or at
    /// the start of the next log band if it would cross one; None when the log is full.
    pub fn log_alloc(&self, head: u64, len: u64) -> Option<u64> {
        let start = match self.zebra {
            None => head,
            Some(z) => {
                let lw = z.width - z.data;
                if len > lw {
                    return None;
                }
                if head / lw == (head + len - 1) / lw {
                    head
                } else {
                    (head / lw + 1) * lw
                }
            }
        };
        (start + len <= self.log_len).then_some(start)
    }
}

/// The paper's mean seek distance of RoLo-S (§4.1): data bands of `p`, log bands of `q` on
/// a disk of `c`, a share `phi` of the destage I/O dispersed at random.
pub fn seek_distance(p: f64, q: f64, c: f64, phi: f64) -> f64 {
    (p + q) / 2.0 * (1.0 - phi) + c / 2.0 * phi
}

#[cfg(test)]
mod tests {
    use super::*;

    const SU: u64 = 65536;
    const MB: u64 = 1 << 20;

    #[test]
    fn zebra_maps_home_and_log_into_alternating_bands_and_back() {
        let g = Geometry::zebra(1024 * MB, SU, 0.25, 64 * MB).unwrap();
        assert_eq!(g.bands(), Some((48 * MB, 16 * MB)));
        assert_eq!((g.data_bytes, g.log_len), (16 * 48 * MB, 16 * 16 * MB));
        assert_eq!(g.home(0), 0);
        assert_eq!(g.home(48 * MB), 64 * MB);
        assert_eq!(g.log(0), 48 * MB);
        assert_eq!(g.log(16 * MB + 5), 64 * MB + 48 * MB + 5);
        for h in [0, 1, 48 * MB - 1, 48 * MB, 100 * MB + 7] {
            assert_eq!(g.region(g.home(h)).0, Region::Home(h));
        }
        for l in [0, 16 * MB - 1, 16 * MB, 200 * MB + 3] {
            assert_eq!(g.region(g.log(l)).0, Region::Log(l));
        }
        // A run never crosses a band: the allocator skips to the next log band.
        assert_eq!(g.log_alloc(16 * MB - 4096, 8192), Some(16 * MB));
        assert_eq!(g.log_alloc(16 * MB - 8192, 8192), Some(16 * MB - 8192));
        assert_eq!(g.log_alloc(g.log_len - 4096, 8192), None);
        assert!(Geometry::zebra(1024 * MB, SU, 0.25, SU).is_err());
        let plain = Geometry::plain(1024 * MB, SU, 0.25).unwrap();
        assert_eq!((plain.data_bytes, plain.log(0)), (768 * MB, 768 * MB));
        assert_eq!(plain.region(800 * MB), (Region::Log(32 * MB), 224 * MB));
    }

    /// Mean |log position - destage position| over every pair of positions, in stripe units.
    fn mean_distance(logs: &[u64], homes: &[u64]) -> f64 {
        let mut sum = 0.0;
        for &l in logs {
            for &h in homes {
                sum += l.abs_diff(h) as f64;
            }
        }
        sum / (logs.len() * homes.len()) as f64
    }

    /// The paper's seek distances (§4.1) from the geometry itself: with the log at the top
    /// of the disk (RoLo), a destage anywhere in the data region is c/2 away from the log on
    /// average; with the zebra and sequential destage (the data band next to the log band
    /// being written) it is (p+q)/2; a share phi of dispersed destage mixes the two.
    #[test]
    fn seek_distances_follow_the_papers_formula() {
        let c = 1024 * MB;
        let plain = Geometry::plain(c, SU, 0.25).unwrap();
        let logs: Vec<u64> = (0..plain.log_len / SU).map(|i| plain.log(i * SU)).collect();
        let homes: Vec<u64> = (0..plain.data_bytes / SU)
            .map(|i| plain.home(i * SU))
            .collect();
        let rolo = mean_distance(&logs, &homes);
        let expect = seek_distance(0.0, 0.0, c as f64, 1.0);
        assert!(
            (rolo - expect).abs() < 0.01 * expect,
            "{rolo} vs c/2 {expect}"
        );
        for width in [32 * MB, 64 * MB, 128 * MB] {
            let z = Geometry::zebra(c, SU, 0.25, width).unwrap();
            let (p, q) = z.bands().unwrap();
            // Sequential destage: log band k and data band k.
            let band = 5;
            let logs: Vec<u64> = (0..q / SU).map(|i| z.log(band * q + i * SU)).collect();
            let homes: Vec<u64> = (0..p / SU).map(|i| z.home(band * p + i * SU)).collect();
            let seq = mean_distance(&logs, &homes);
            let expect = seek_distance(p as f64, q as f64, c as f64, 0.0);
            assert!(
                (seq - expect).abs() < 0.01 * expect,
                "width {width}: {seq} vs (p+q)/2 {expect}"
            );
            // Dispersed destage anywhere on the disk is at most c/2 from the log on average.
            let all: Vec<u64> = (0..z.data_bytes / SU).map(|i| z.home(i * SU)).collect();
            let random = mean_distance(&logs, &all);
            assert!(random <= c as f64 / 2.0, "{random}");
            for phi in [0.25, 0.5] {
                let mixed = (1.0 - phi) * seq + phi * c as f64 / 2.0;
                let f = seek_distance(p as f64, q as f64, c as f64, phi);
                assert!((mixed - f).abs() < 0.01 * f);
                assert!(f < rolo, "the zebra is nearer than RoLo for phi {phi}");
            }
        }
    }
}
