//! IDO's D Map (Wu et al., FAST'12): where the writes redirected to the surrogate set during
//! a reconstruction sit. Each entry maps a run of volume bytes (the paper's D Offset and Len)
//! to the surrogate bytes holding its newest copy (S Offset). Entries never overlap: a newer
//! write replaces the part of an older one it covers, so a lookup gives the newest copy.

use std::collections::BTreeMap;

/// A run of volume bytes and, if redirected, the surrogate offset of its newest copy.
pub type Fragment = (u64, u64, Option<u64>);

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DMap {
    /// Volume start → (len, surrogate offset).
    map: BTreeMap<u64, (u64, u64)>,
}

impl DMap {
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn entries(&self) -> usize {
        self.map.len()
    }

    /// Volume bytes `d..d+len` now have their newest copy at surrogate offset `s`.
    pub fn insert(&mut self, d: u64, len: u64, s: u64) {
        if len == 0 {
            return;
        }
        self.remove(d, len);
        self.map.insert(d, (len, s));
    }

    /// Volume bytes `d..d+len` are no longer redirected (written home, or reclaimed).
    pub fn remove(&mut self, d: u64, len: u64) {
        let end = d.saturating_add(len);
        // Entries are sorted and disjoint: walking back from `end`, the first one ending at
        // or before `d` ends the overlap.
        let overlapping: Vec<(u64, u64, u64)> = self
            .map
            .range(..end)
            .rev()
            .take_while(|(&k, &(l, _))| k + l > d)
            .map(|(&k, &(l, s))| (k, l, s))
            .collect();
        for (k, l, s) in overlapping {
            self.map.remove(&k);
            if k < d {
                self.map.insert(k, (d - k, s));
            }
            if k + l > end {
                self.map.insert(end, (k + l - end, s + (end - k)));
            }
        }
    }

    /// Volume bytes `d..d+len` in runs, each redirected (its surrogate offset) or not.
    pub fn lookup(&self, d: u64, len: u64) -> Vec<Fragment> {
        let end = d.saturating_add(len);
        let mut out = Vec::new();
        let mut at = d;
        let first = self
            .map
            .range(..=d)
            .next_back()
            .filter(|(&k, &(l, _))| k + l > d)
            .map(|(&k, _)| k)
            .unwrap_or(d);
        for (&k, &(l, s)) in self.map.range(first..end) {
            let (lo, hi) = (k.max(d), (k + l).min(end));
            if hi <= lo {
                continue;
            }
            if lo > at {
                out.push((at, lo - at, None));
            }
            out.push((lo, hi - lo, Some(s + (lo - k))));
            at = hi;
        }
        if at < end {
            out.push((at, end - at, None));
        }
        out
    }

    /// The first redirected run: (volume offset, len, surrogate offset).
    pub fn first(&self) -> Option<(u64, u64, u64)> {
        self.map.iter().next().map(|(&k, &(l, s))| (k, l, s))
    }

    /// The end of the highest surrogate bytes an entry uses.
    pub fn surrogate_end(&self) -> u64 {
        self.map.values().map(|&(l, s)| s + l).max().unwrap_or(0)
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.map.iter().map(|(&k, &(l, s))| (k, l, s))
    }

    pub fn memory_bytes(&self) -> u64 {
        // A B-tree entry: key and value, plus about as much again for the node.
        (self.map.len() * 2 * 3 * std::mem::size_of::<u64>()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::Rng;

    #[test]
    fn a_newer_write_replaces_the_part_of_an_older_one_it_covers() {
        let mut m = DMap::default();
        m.insert(100, 100, 0);
        m.insert(150, 10, 1000);
        assert_eq!(
            m.lookup(90, 120),
            vec![
                (90, 10, None),
                (100, 50, Some(0)),
                (150, 10, Some(1000)),
                (160, 40, Some(60)),
                (200, 10, None)
            ]
        );
        m.remove(120, 200);
        assert_eq!(m.lookup(100, 30), vec![(100, 20, Some(0)), (120, 10, None)]);
        assert_eq!(m.first(), Some((100, 20, 0)));
        m.remove(0, 1000);
        assert!(m.is_empty());
    }

    /// Against a byte model: every volume byte maps to the surrogate byte of the last
    /// insert covering it, unless removed since.
    #[test]
    fn lookups_agree_with_a_byte_model() {
        let mut rng = Rng(99);
        for _ in 0..50 {
            let mut m = DMap::default();
            let mut model: Vec<Option<u64>> = vec![None; 512];
            for step in 0..60u64 {
                let d = rng.next() % 500;
                let len = 1 + rng.next() % (512 - d).min(40);
                if rng.next().is_multiple_of(4) {
                    m.remove(d, len);
                    model[d as usize..(d + len) as usize].fill(None);
                } else {
                    let s = 10_000 * step;
                    m.insert(d, len, s);
                    for i in 0..len {
                        model[(d + i) as usize] = Some(s + i);
                    }
                }
                let mut at = 0;
                for (o, l, s) in m.lookup(0, 512) {
                    assert_eq!(o, at, "fragments are contiguous");
                    for i in 0..l {
                        assert_eq!(model[(o + i) as usize], s.map(|s| s + i));
                    }
                    at = o + l;
                }
                assert_eq!(at, 512);
            }
        }
    }
}
