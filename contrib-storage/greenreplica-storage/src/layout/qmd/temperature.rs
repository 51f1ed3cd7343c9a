//! Partial on-line mirrors (the QMD paper's hot and cold data): volume ranges the client
//! marks hot or cold (unmarked bytes are normal). Which pairs may sleep whole, and the
//! copies of their hot data on the pairs that stay up, follow from this table
//! (`online_mirror.rs`). The table is journaled whole (one record per change), so a
//! restart brings it back; it takes effect once that record is durable.

use std::collections::BTreeMap;

/// Most ranges the table keeps (after merging a change in); more is refused.
pub const MAX_RANGES: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Temperature {
    Hot,
    Cold,
    /// Neither: the range leaves the table.
    Normal,
}

impl Temperature {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "hot" => Ok(Self::Hot),
            "cold" => Ok(Self::Cold),
            "normal" => Ok(Self::Normal),
            other => Err(format!(
                "unknown temperature {:?}; use hot, cold or normal",
                other.chars().take(32).collect::<String>()
            )),
        }
    }

    fn code(self) -> u8 {
        match self {
            Self::Hot => 1,
            Self::Cold => 2,
            Self::Normal => 0,
        }
    }

    fn from_code(c: u8) -> Result<Self, String> {
        match c {
            1 => Ok(Self::Hot),
            2 => Ok(Self::Cold),
            other => Err(format!(
                "qmd temperature record with temperature code {other}"
            )),
        }
    }
}

/// Non-overlapping marked ranges: start → (end, temperature); unmarked bytes are normal.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Temperatures {
    ranges: BTreeMap<u64, (u64, Temperature)>,
}

impl Temperatures {
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, Temperature)> + '_ {
        self.ranges.iter().map(|(&s, &(e, t))| (s, e, t))
    }

    /// Mark `start..end` (later marks win where they overlap earlier ones).
    fn mark(&mut self, start: u64, end: u64, t: Temperature) {
        if start >= end {
            return;
        }
        let overlapping: Vec<u64> = self
            .ranges
            .range(..end)
            .filter(|(_, &(e, _))| e > start)
            .map(|(&s, _)| s)
            .collect();
        for s in overlapping {
            if let Some((e, old)) = self.ranges.remove(&s) {
                if s < start {
                    self.ranges.insert(s, (start, old));
                }
                if e > end {
                    self.ranges.insert(end, (e, old));
                }
            }
        }
        if t == Temperature::Normal {
            return;
        }
        // Adjacent ranges of one temperature merge (a file's extents are often contiguous).
        let (mut start, mut end) = (start, end);
        if let Some((&s, &(e, old))) = self.ranges.range(..start).next_back() {
            if e == start && old == t {
                self.ranges.remove(&s);
                start = s;
            }
        }
        if let Some(&(e, old)) = self.ranges.get(&end) {
            if old == t {
                self.ranges.remove(&end);
                end = e;
            }
        }
        self.ranges.insert(start, (end, t));
    }

    /// The table with `extents` (volume offset, length; checked by the caller to lie within
    /// the volume) marked `t`; refused when it would hold more than `MAX_RANGES` ranges.
    pub fn with(&self, extents: &[(u64, u64)], t: Temperature) -> Result<Self, String> {
        let mut next = self.clone();
        for &(offset, len) in extents {
            let end = offset
                .checked_add(len)
                .ok_or_else(|| format!("extent {offset}+{len} overflows"))?;
            next.mark(offset, end, t);
            if next.len() > MAX_RANGES {
                return Err(format!(
                    "the temperature table would hold more than {MAX_RANGES} ranges"
                ));
            }
        }
        Ok(next)
    }

    /// The whole table as one journal payload: count, then (start, end, code) per range.
    pub fn payload(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + 17 * self.len());
        out.extend((self.len() as u32).to_le_bytes());
        for (s, e, t) in self.iter() {
            out.extend(s.to_le_bytes());
            out.extend(e.to_le_bytes());
            out.push(t.code());
        }
        out
    }

    /// A table from `payload`; every range must lie below `capacity`, in order, disjoint.
    pub fn from_payload(payload: &[u8], capacity: u64) -> Result<Self, String> {
        let truncated = || "truncated qmd temperature record".to_string();
        let (count, mut rest) = payload.split_at_checked(4).ok_or_else(truncated)?;
        let n = u32::from_le_bytes(count.try_into().map_err(|_| truncated())?) as usize;
        if n > MAX_RANGES {
            return Err(format!("qmd temperature record lists {n} ranges"));
        }
        let mut table = Self::default();
        let mut last_end = 0;
        for _ in 0..n {
            let (item, tail) = rest.split_at_checked(17).ok_or_else(truncated)?;
            rest = tail;
            let s = u64::from_le_bytes(item[..8].try_into().map_err(|_| truncated())?);
            let e = u64::from_le_bytes(item[8..16].try_into().map_err(|_| truncated())?);
            let t = Temperature::from_code(item[16])?;
            if s < last_end || s >= e || e > capacity {
                return Err(format!(
                    "qmd temperature range {s}..{e} is out of order or outside the volume"
                ));
            }
            last_end = e;
            table.ranges.insert(s, (e, t));
        }
        if !rest.is_empty() {
            return Err("qmd temperature record has trailing bytes".into());
        }
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Temperature::*;

    #[test]
    fn later_marks_split_and_override_earlier_ones() {
        let t = Temperatures::default()
            .with(&[(0, 100)], Cold)
            .unwrap()
            .with(&[(40, 20)], Hot)
            .unwrap();
        assert_eq!(
            t.iter().collect::<Vec<_>>(),
            vec![(0, 40, Cold), (40, 60, Hot), (60, 100, Cold)]
        );
        let merged = t.with(&[(100, 50), (40, 20)], Cold).unwrap();
        assert_eq!(merged.iter().collect::<Vec<_>>(), vec![(0, 150, Cold)]);
        let t = t.with(&[(30, 40)], Normal).unwrap();
        assert_eq!(
            t.iter().collect::<Vec<_>>(),
            vec![(0, 30, Cold), (70, 100, Cold)]
        );
    }

    #[test]
    fn payload_round_trips_and_hostile_payloads_are_refused() {
        let t = Temperatures::default()
            .with(&[(0, 4096), (8192, 4096)], Cold)
            .unwrap()
            .with(&[(65536, 4096)], Hot)
            .unwrap();
        assert_eq!(
            Temperatures::from_payload(&t.payload(), 1 << 20).unwrap(),
            t
        );
        assert!(
            Temperatures::from_payload(&t.payload(), 65536).is_err(),
            "beyond capacity"
        );
        let mut bad = t.payload();
        bad.pop();
        assert!(
            Temperatures::from_payload(&bad, 1 << 20).is_err(),
            "truncated"
        );
        let mut code = t.payload();
        let last = code.len() - 1;
        code[last] = 9;
        assert!(
            Temperatures::from_payload(&code, 1 << 20).is_err(),
            "bad code"
        );
        let mut many = t.payload();
        many[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Temperatures::from_payload(&many, 1 << 20).is_err(), "count");
        assert!(Temperatures::default().with(&[(u64::MAX, 2)], Hot).is_err());
    }

    #[test]
    fn the_table_is_bounded() {
        let extents: Vec<(u64, u64)> = (0..MAX_RANGES as u64 + 1).map(|i| (i * 2, 1)).collect();
        let err = Temperatures::default().with(&extents, Cold).unwrap_err();
        assert!(err.contains("more than 4096"), "{err}");
        assert!(Temperature::parse("warm")
            .unwrap_err()
            .contains("hot, cold or normal"));
    }
}
