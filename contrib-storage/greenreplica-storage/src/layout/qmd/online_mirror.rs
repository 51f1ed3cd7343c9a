//! Partial on-line mirrors (the QMD paper's §3.2, Figure 5): hot data that lives on a pair
//! which may sleep whole gets a copy on a pair that stays up, so hot data is always on a
//! spinning disk while whole mirrors sleep.
//!
//! Scheme: a region reserved at the end of every disk member (`mirror_bytes`, whole stripe
//! units, cut into stripe-unit *slots*); a copy lives in a slot of a staying pair's
//! **active** disk (the one that never sleeps). Copies are whole stripe units (the unit the
//! stripe map places). The home pair (its disks and its flash entries) stays authoritative:
//! a copy is a cache that is *current* only after a background copy job wrote it whole, and
//! stays current because every later write to its stripe unit also writes it. Current bits
//! are not journaled: after a restart every copy is stale until copied again (an
//! unacknowledged write may have reached the home and not the copy, or the reverse).
//!
//! A pair **sleeps whole** when every byte it holds is marked (no normal data), some of it
//! cold, and every hot stripe unit on it has a current copy on a staying pair.

use std::collections::{BTreeMap, BTreeSet};

use super::temperature::{Temperature, Temperatures};

/// Where the copies go: the stripe geometry and the reserved region.
#[derive(Debug, Clone, Copy)]
pub struct Geometry {
    pub pairs: usize,
    pub su: u64,
    /// Bytes of each disk member the stripe map uses; the copy region starts here.
    pub data_bytes: u64,
    /// Copy slots (stripe units) per active disk.
    pub slots: u64,
}

impl Geometry {
    fn capacity(&self) -> u64 {
        self.data_bytes * self.pairs as u64
    }

    /// Bytes of volume range `s..e` that live on pair `p`.
    pub fn bytes_on_pair(&self, s: u64, e: u64, p: usize) -> u64 {
        if s >= e {
            return 0;
        }
        let (su, n, p64) = (self.su, self.pairs as u64, p as u64);
        // Whole stripe units c in 0..k with c % n == p.
        let units_below = |k: u64| k / n + u64::from(k % n > p64);
        let (first, last) = (s / su, (e - 1) / su);
        if first == last {
            return if first % n == p64 { e - s } else { 0 };
        }
        let mut bytes = 0;
        if first % n == p64 {
            bytes += (first + 1) * su - s;
        }
        if last % n == p64 {
            bytes += e - last * su;
        }
        bytes + (units_below(last) - units_below(first + 1)) * su
    }

    /// The pair and home offset of volume stripe unit `chunk`.
    pub fn home(&self, chunk: u64) -> (usize, u64) {
        let n = self.pairs as u64;
        ((chunk % n) as usize, chunk / n * self.su)
    }

    /// The stripe unit of pair `p` at home offset `home`.
    pub fn chunk(&self, p: usize, home: u64) -> u64 {
        home / self.su * self.pairs as u64 + p as u64
    }

    /// The member offset of copy slot `slot` on a host's active disk.
    pub fn slot_offset(&self, slot: u64) -> u64 {
        self.data_bytes + slot * self.su
    }
}

/// One hot stripe unit's copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotCopy {
    pub host: usize,
    pub slot: u64,
    /// Written whole by a copy job and kept up to date since.
    pub current: bool,
}

/// The copies and which pairs may sleep whole.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OnlineMirrors {
    /// Volume stripe unit → its copy.
    pub copies: BTreeMap<u64, HotCopy>,
    /// Pairs that may sleep whole once their copies are current.
    pub sleepers: Vec<bool>,
}

impl OnlineMirrors {
    /// Decide the sleepers and place the copies for table `t`, keeping the copies (and
    /// their current bits) that are still wanted where they are.
    pub fn recompute(&mut self, g: &Geometry, t: &Temperatures) {
        let pairs = g.pairs;
        let mut marked = vec![0u64; pairs];
        let mut cold = vec![false; pairs];
        for (s, e, temp) in t.iter() {
            for (p, m) in marked.iter_mut().enumerate() {
                let b = g.bytes_on_pair(s, e.min(g.capacity()), p);
                *m += b;
                cold[p] |= b > 0 && temp == Temperature::Cold;
            }
        }
        let mut eligible: Vec<bool> = (0..pairs)
            .map(|p| cold[p] && marked[p] >= g.data_bytes)
            .collect();
        // Hot stripe units per eligible pair, at most what the copy region could hold.
        let room = g.slots.saturating_mul(pairs as u64);
        let mut hot: Vec<Vec<u64>> = vec![Vec::new(); pairs];
        let mut overflow = vec![false; pairs];
        let mut open = eligible.iter().filter(|&&e| e).count();
        for (s, e, _) in t.iter().filter(|r| r.2 == Temperature::Hot) {
            let e = e.min(g.capacity());
            if s >= e {
                continue;
            }
            for chunk in s / g.su..=(e - 1) / g.su {
                if open == 0 {
                    break;
                }
                let p = (chunk % pairs as u64) as usize;
                if !eligible[p] || overflow[p] {
                    continue;
                }
                if hot[p].len() as u64 >= room {
                    overflow[p] = true;
                    open -= 1;
                    hot[p].clear();
                    continue;
                }
                hot[p].push(chunk);
            }
        }
        for p in 0..pairs {
            eligible[p] &= !overflow[p];
        }
        // Hot data needs a pair that stays up: keep the eligible pair with the most hot
        // units up when every pair could sleep.
        if eligible.iter().all(|&e| e) && hot.iter().any(|h| !h.is_empty()) {
            if let Some(p) = (0..pairs).max_by_key(|&p| (hot[p].len(), std::cmp::Reverse(p))) {
                eligible[p] = false;
            }
        }
        let hosts: Vec<usize> = (0..pairs).filter(|&p| !eligible[p]).collect();
        // Keep the wanted copies that sit on a host; place the rest pair by pair.
        let mut kept = BTreeMap::new();
        for p in (0..pairs).filter(|&p| eligible[p]) {
            for &chunk in &hot[p] {
                if let Some(c) = self.copies.get(&chunk).filter(|c| hosts.contains(&c.host)) {
                    kept.insert(chunk, *c);
                }
            }
        }
        let mut used: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); pairs];
        for c in kept.values() {
            used[c.host].insert(c.slot);
        }
        let mut free: Vec<u64> = (0..pairs)
            .map(|h| {
                if hosts.contains(&h) {
                    g.slots - used[h].len() as u64
                } else {
                    0
                }
            })
            .collect();
        let mut next_slot = vec![0u64; pairs];
        for p in 0..pairs {
            if !eligible[p] {
                continue;
            }
            let wanted: Vec<u64> = hot[p]
                .iter()
                .copied()
                .filter(|c| !kept.contains_key(c))
                .collect();
            if (wanted.len() as u64) > free.iter().sum::<u64>() {
                // Not enough room: this pair stays up, its kept copies go.
                eligible[p] = false;
                let mine: Vec<u64> = hot[p].clone();
                for chunk in mine {
                    if let Some(c) = kept.remove(&chunk) {
                        used[c.host].remove(&c.slot);
                        free[c.host] += 1;
                    }
                }
                continue;
            }
            for chunk in wanted {
                let Some(host) = (0..pairs).filter(|&h| free[h] > 0).max_by_key(|&h| free[h])
                else {
                    break;
                };
                while used[host].contains(&next_slot[host]) {
                    next_slot[host] += 1;
                }
                let slot = next_slot[host];
                used[host].insert(slot);
                free[host] -= 1;
                kept.insert(
                    chunk,
                    HotCopy {
                        host,
                        slot,
                        current: false,
                    },
                );
            }
        }
        self.copies = kept;
        self.sleepers = eligible;
    }

    /// The current copy of stripe unit `chunk`, if any.
    pub fn current(&self, chunk: u64) -> Option<HotCopy> {
        self.copies.get(&chunk).copied().filter(|c| c.current)
    }

    /// Pairs that sleep whole now: sleepers whose hot units all have current copies.
    pub fn cold_pairs(&self, g: &Geometry) -> Vec<bool> {
        let mut cold = self.sleepers.clone();
        cold.resize(g.pairs, false);
        for (&chunk, c) in &self.copies {
            if !c.current {
                cold[g.home(chunk).0] = false;
            }
        }
        cold
    }

    /// The next stripe unit whose copy must be written.
    pub fn next_stale(&self) -> Option<(u64, HotCopy)> {
        self.copies
            .iter()
            .find(|(_, c)| !c.current)
            .map(|(&k, &c)| (k, c))
    }

    /// Every copy on `host` is stale (its active disk was replaced or lost).
    pub fn host_lost(&mut self, host: usize) {
        for c in self.copies.values_mut().filter(|c| c.host == host) {
            c.current = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Temperature::*;

    const SU: u64 = 4096;

    fn geo(pairs: usize, slots: u64) -> Geometry {
        Geometry {
            pairs,
            su: SU,
            data_bytes: 16 * SU,
            slots,
        }
    }

    #[test]
    fn bytes_on_pair_counts_each_pairs_share_of_a_range() {
        let g = geo(3, 0);
        for (s, e) in [
            (0, 48 * SU),
            (100, 7 * SU + 5),
            (SU, 2 * SU),
            (5, 6),
            (0, 1),
        ] {
            let brute: Vec<u64> = (0..3)
                .map(|p| (s..e).filter(|b| (b / SU) % 3 == p as u64).count() as u64)
                .collect();
            let fast: Vec<u64> = (0..3).map(|p| g.bytes_on_pair(s, e, p)).collect();
            assert_eq!(fast, brute, "{s}..{e}");
        }
    }

    #[test]
    fn a_pair_with_normal_data_never_sleeps_whole() {
        let g = geo(2, 4);
        let cap = g.capacity();
        // A cold range across every pair, most of the volume unmarked: review finding (b).
        let t = Temperatures::default().with(&[(0, 8 * SU)], Cold).unwrap();
        let mut m = OnlineMirrors::default();
        m.recompute(&g, &t);
        assert_eq!(m.sleepers, vec![false, false]);
        // The whole volume cold: both pairs may sleep (no hot data needs a host).
        let t = Temperatures::default().with(&[(0, cap)], Cold).unwrap();
        m.recompute(&g, &t);
        assert_eq!(m.sleepers, vec![true, true]);
        assert!(m.copies.is_empty());
    }

    #[test]
    fn hot_units_on_a_sleeper_get_copies_on_the_pair_that_stays_up() {
        let g = geo(2, 4);
        let cap = g.capacity();
        // Small stripe units: the hot range spans both pairs (review finding (a)).
        let t = Temperatures::default()
            .with(&[(0, cap)], Cold)
            .unwrap()
            .with(&[(4 * SU, 5 * SU)], Hot)
            .unwrap();
        let mut m = OnlineMirrors::default();
        m.recompute(&g, &t);
        // Both pairs hold hot units (4, 6, 8 on pair 0; 5, 7 on pair 1): pair 0 stays up.
        assert_eq!(m.sleepers, vec![false, true]);
        assert_eq!(m.copies.keys().copied().collect::<Vec<_>>(), vec![5, 7]);
        assert!(m.copies.values().all(|c| c.host == 0 && !c.current));
        assert_eq!(
            m.cold_pairs(&g),
            vec![false, false],
            "copies not written yet"
        );
        for c in m.copies.values_mut() {
            c.current = true;
        }
        assert_eq!(m.cold_pairs(&g), vec![false, true]);
        // A recompute with the same table keeps the copies current.
        let before = m.clone();
        m.recompute(&g, &t);
        assert_eq!(m, before);
        // More hot units than slots: the pair stays up and its copies go.
        let t = t.with(&[(0, 12 * SU)], Hot).unwrap();
        m.recompute(&g, &t);
        assert_eq!(m.sleepers, vec![false, false]);
        assert!(m.copies.is_empty());
    }

    #[test]
    fn without_a_copy_region_hot_data_keeps_its_pair_up() {
        let g = geo(3, 0);
        let cap = g.capacity();
        let t = Temperatures::default()
            .with(&[(0, cap)], Cold)
            .unwrap()
            .with(&[(SU, SU)], Hot)
            .unwrap();
        let mut m = OnlineMirrors::default();
        m.recompute(&g, &t);
        assert_eq!(m.sleepers, vec![true, false, true]);
        assert!(m.copies.is_empty());
        assert_eq!(m.cold_pairs(&g), vec![true, false, true]);
    }
}
