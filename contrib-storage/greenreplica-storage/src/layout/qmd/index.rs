//! Per mirror, the index of its buffered writes: disk address (home bytes on the pair) →
//! flash address, kept sorted by disk address (what Figure 4 sorts before a flush), and
//! the elevator that picks the next write-back from the head position.
//!
//! The paper keeps the index in two levels: an address root in NVRAM pointing to address
//! blocks on flash (`address.rs`); this is the index both levels describe, in memory.

use std::collections::BTreeMap;

/// Where a run of a pair's home bytes has its newest second copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub len: u64,
    pub flash_off: u64,
    /// The flash holds the only copy (written while both disks of the pair slept): the
    /// disks are both stale there, and the write-back goes to both.
    pub sole: bool,
}

/// A run of home bytes and, if buffered, the flash offset of its newest copy.
pub type Fragment = (u64, u64, Option<u64>);

#[derive(Debug, Clone, Default)]
pub struct MirrorIndex {
    entries: BTreeMap<u64, Entry>,
}

impl MirrorIndex {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, Entry)> + '_ {
        self.entries.iter().map(|(h, e)| (*h, *e))
    }

    /// Set home bytes `home..home+len` to `entry` (None: the second disk is current
    /// there); calls `dropped(flash_off, len)` for every flash byte run no longer referenced.
    pub fn set_range(
        &mut self,
        home: u64,
        len: u64,
        entry: Option<Entry>,
        mut dropped: impl FnMut(u64, u64),
        mut kept: impl FnMut(u64, u64),
    ) {
        let end = home + len;
        let overlapping: Vec<(u64, Entry)> = self
            .entries
            .range(..end)
            .rev()
            .take_while(|(s, e)| *s + e.len > home)
            .map(|(s, e)| (*s, *e))
            .collect();
        for (start, e) in overlapping {
            self.entries.remove(&start);
            dropped(e.flash_off, e.len);
            if start < home {
                let keep = Entry {
                    len: home - start,
                    ..e
                };
                kept(keep.flash_off, keep.len);
                self.entries.insert(start, keep);
            }
            if start + e.len > end {
                let cut = end - start;
                let keep = Entry {
                    len: e.len - cut,
                    flash_off: e.flash_off + cut,
                    sole: e.sole,
                };
                kept(keep.flash_off, keep.len);
                self.entries.insert(end, keep);
            }
        }
        if let Some(e) = entry {
            kept(e.flash_off, e.len);
            self.entries.insert(home, e);
        }
    }

    /// The start of the entry holding home byte `at`, if one does.
    pub fn covering(&self, at: u64) -> Option<u64> {
        self.entries
            .range(..=at)
            .next_back()
            .filter(|(s, e)| *s + e.len > at)
            .map(|(s, _)| *s)
    }

    /// The entries starting at home bytes `start..end` (an address block's).
    pub fn starting_in(&self, start: u64, end: u64) -> Vec<(u64, Entry)> {
        self.entries
            .range(start..end)
            .map(|(h, e)| (*h, *e))
            .collect()
    }

    /// Whether the entry holding home byte `at` is a flash-only copy.
    pub fn sole_at(&self, at: u64) -> bool {
        self.entries
            .range(..=at)
            .next_back()
            .is_some_and(|(s, e)| *s + e.len > at && e.sole)
    }

    /// The pair has flash-only entries (losing the flash would lose them).
    pub fn has_sole(&self) -> bool {
        self.entries.values().any(|e| e.sole)
    }

    /// Split home bytes `home..home+len` into buffered and unbuffered runs (the binary
    /// search of Figure 4's read hit test).
    pub fn fragments(&self, home: u64, len: u64) -> Vec<Fragment> {
        let end = home + len;
        let mut out = Vec::new();
        let mut at = home;
        let first = self
            .entries
            .range(..home)
            .next_back()
            .filter(|(s, e)| *s + e.len > home)
            .map(|(s, e)| (*s, *e));
        let overlapping = first
            .into_iter()
            .chain(self.entries.range(home..end).map(|(s, e)| (*s, *e)));
        for (start, e) in overlapping {
            let from = start.max(home);
            let to = (start + e.len).min(end);
            if from > at {
                out.push((at, from - at, None));
            }
            out.push((from, to - from, Some(e.flash_off + (from - start))));
            at = to;
        }
        if at < end {
            out.push((at, end - at, None));
        }
        out
    }
}

/// The second disk's head as the flush remembers it: position (home bytes) and direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub pos: u64,
    pub up: bool,
}

impl Default for Head {
    fn default() -> Self {
        Self { pos: 0, up: true }
    }
}

impl Head {
    /// The disk served home bytes `home..home+len`: the head is at their end, moving in the
    /// direction it went to get there.
    pub fn moved_to(&mut self, home: u64, len: u64) {
        self.up = home >= self.pos || (home + len > self.pos && self.up);
        self.pos = if self.up { home + len } else { home };
    }

    /// Figure 4's elevator: the next buffered run from the head in its direction, turning
    /// round at the end; moves the head there.
    pub fn next(&mut self, index: &MirrorIndex) -> Option<(u64, Entry)> {
        let forward = |h: &Head| -> Option<(u64, Entry)> {
            if h.up {
                index.entries.range(h.pos..).next()
            } else {
                index.entries.range(..h.pos).next_back()
            }
            .map(|(s, e)| (*s, *e))
        };
        let found = forward(self).or_else(|| {
            self.up = !self.up;
            forward(self)
        })?;
        self.pos = if self.up {
            found.0 + found.1.len
        } else {
            found.0
        };
        Some(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(runs: &[(u64, u64, u64)]) -> MirrorIndex {
        let mut i = MirrorIndex::default();
        for &(home, len, flash) in runs {
            i.set_range(
                home,
                len,
                Some(Entry {
                    len,
                    flash_off: flash,
                    sole: false,
                }),
                |_, _| {},
                |_, _| {},
            );
        }
        i
    }

    #[test]
    fn overwrites_split_entries_and_report_the_flash_they_drop() {
        let mut i = index(&[(100, 50, 1000)]);
        let (mut dropped, mut kept) = (0, 0);
        i.set_range(
            120,
            10,
            Some(Entry {
                len: 10,
                flash_off: 5000,
                sole: false,
            }),
            |_, n| dropped += n,
            |_, n| kept += n,
        );
        assert_eq!((dropped, kept), (50, 20 + 20 + 10));
        assert_eq!(
            i.fragments(90, 70),
            vec![
                (90, 10, None),
                (100, 20, Some(1000)),
                (120, 10, Some(5000)),
                (130, 20, Some(1030)),
                (150, 10, None)
            ]
        );
        i.set_range(0, 1000, None, |_, _| {}, |_, _| {});
        assert!(i.is_empty());
    }

    #[test]
    fn the_elevator_continues_in_the_heads_direction_then_turns() {
        let i = index(&[
            (0, 8, 0),
            (40, 8, 8),
            (80, 8, 16),
            (120, 8, 24),
            (160, 8, 32),
        ]);
        let mut head = Head::default();
        head.moved_to(90, 8); // a read moved the head up to 98
        let mut order = Vec::new();
        let mut left = i.clone();
        while let Some((home, e)) = head.next(&left) {
            order.push(home);
            left.set_range(home, e.len, None, |_, _| {}, |_, _| {});
        }
        assert_eq!(order, vec![120, 160, 80, 40, 0]);
        // Moving down: continue down first.
        let mut head = Head {
            pos: 100,
            up: false,
        };
        let mut left = i;
        let mut order = Vec::new();
        while let Some((home, e)) = head.next(&left) {
            order.push(home);
            left.set_range(home, e.len, None, |_, _| {}, |_, _| {});
        }
        assert_eq!(order, vec![80, 40, 0, 120, 160]);
    }
}
