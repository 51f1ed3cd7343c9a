//! The drive's buffer: read segments filled by read-ahead, and the write-back cache that
//! acknowledges writes before they reach the platters (lost on power loss unless flushed).

use std::collections::BTreeMap;

use crate::clock::Seconds;

/// One read segment. While `streaming`, the drive keeps reading ahead at `rate` from
/// `stream_from` (reached at `stream_at`) up to `limit`; a command that needs the head
/// elsewhere stops it.
#[derive(Debug, Clone, PartialEq)]
struct Segment {
    start: u64,
    limit: u64,
    stream_from: u64,
    stream_at: Seconds,
    rate: f64,
    streaming: bool,
    last_use: Seconds,
}

impl Segment {
    fn valid_end(&self, t: Seconds) -> u64 {
        if !self.streaming {
            return self.limit;
        }
        let read = ((t - self.stream_at).max(0.0) * self.rate) as u64;
        self.limit.min(self.stream_from.saturating_add(read))
    }

    /// When the byte just before `end` is in the buffer.
    fn available_at(&self, end: u64) -> Seconds {
        if end <= self.stream_from {
            self.stream_at
        } else {
            self.stream_at + (end - self.stream_from) as f64 / self.rate
        }
    }
}

/// How a read meets the read segments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReadLookup {
    /// Fully in the buffer.
    Hit,
    /// Ahead in the running read-ahead stream: ready once the stream reaches its end.
    Stream {
        ready_at: Seconds,
    },
    Miss,
}

#[derive(Debug, Clone)]
pub struct ReadCache {
    segments: Vec<Segment>,
    count: usize,
    segment_bytes: u64,
    read_ahead: u64,
}

impl ReadCache {
    pub fn new(size_bytes: u64, segments: u64, read_ahead: u64) -> Self {
        let segment_bytes = size_bytes / segments.max(1);
        Self {
            segments: Vec::new(),
            count: segments.max(1) as usize,
            segment_bytes,
            read_ahead: read_ahead.min(segment_bytes),
        }
    }

    /// What `lookup` would answer, without touching the segments (for SPTF estimates).
    pub fn peek(&self, offset: u64, len: u64, at: Seconds) -> ReadLookup {
        let end = offset + len;
        for seg in &self.segments {
            if offset < seg.start {
                continue;
            }
            if end <= seg.valid_end(at) {
                return ReadLookup::Hit;
            }
            // Within the read-ahead range: the drive waits for the stream to get there.
            if seg.streaming && offset <= seg.limit {
                return ReadLookup::Stream {
                    ready_at: seg.available_at(end),
                };
            }
        }
        ReadLookup::Miss
    }

    pub fn lookup(&mut self, offset: u64, len: u64, at: Seconds) -> ReadLookup {
        let end = offset + len;
        for seg in &mut self.segments {
            if offset < seg.start {
                continue;
            }
            if end <= seg.valid_end(at) {
                seg.last_use = at;
                return ReadLookup::Hit;
            }
            // Within the read-ahead range: the drive waits for the stream to get there.
            if seg.streaming && offset <= seg.limit {
                // Keep streaming past this request and keep the window one segment long.
                seg.limit = seg.limit.max(end + self.read_ahead);
                seg.start = seg.start.max(seg.limit.saturating_sub(self.segment_bytes));
                seg.last_use = at;
                return ReadLookup::Stream {
                    ready_at: seg.available_at(end),
                };
            }
        }
        ReadLookup::Miss
    }

    /// The head leaves the stream at `at`; returns where the head then is (byte offset).
    pub fn stop_streaming(&mut self, at: Seconds) -> Option<u64> {
        let seg = self.segments.iter_mut().find(|s| s.streaming)?;
        seg.limit = seg.valid_end(at);
        seg.streaming = false;
        Some(seg.limit)
    }

    /// A read miss of [offset, end) finished at `done`: start reading ahead into the least
    /// recently used segment.
    pub fn start_stream(&mut self, offset: u64, end: u64, done: Seconds, rate: f64) {
        let seg = Segment {
            start: offset.max(end.saturating_sub(self.segment_bytes)),
            limit: end + self.read_ahead,
            stream_from: end,
            stream_at: done,
            rate,
            streaming: self.read_ahead > 0,
            last_use: done,
        };
        if self.segments.len() < self.count {
            self.segments.push(seg);
        } else if let Some(lru) = self
            .segments
            .iter_mut()
            .min_by(|a, b| a.last_use.total_cmp(&b.last_use))
        {
            *lru = seg;
        }
    }

    /// Written data supersedes what the segments hold for that range.
    pub fn invalidate(&mut self, offset: u64, len: u64) {
        let end = offset + len;
        self.segments
            .retain(|s| end <= s.start || offset >= s.limit.max(s.start));
    }

    pub fn clear(&mut self) {
        self.segments.clear();
    }
}

/// A dirty extent; `data` is kept when the caller gave the bytes (crash tests).
#[derive(Debug, Clone, PartialEq)]
pub struct Extent {
    pub len: u64,
    pub data: Option<Vec<u8>>,
}

impl Extent {
    fn slice(&self, from: u64, to: u64) -> Extent {
        Extent {
            len: to - from,
            data: self
                .data
                .as_ref()
                .map(|d| d[from as usize..to as usize].to_vec()),
        }
    }
}

/// Dirty data not yet on the platters, merged into non-overlapping extents.
#[derive(Debug, Clone, Default)]
pub struct WriteCache {
    extents: BTreeMap<u64, Extent>,
    dirty: u64,
}

impl WriteCache {
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty
    }

    pub fn is_empty(&self) -> bool {
        self.extents.is_empty()
    }

    /// Remove [offset, offset + len) from the cache, keeping the parts of extents outside.
    pub fn remove_range(&mut self, offset: u64, len: u64) {
        let end = offset + len;
        let overlapping: Vec<u64> = self
            .extents
            .range(..end)
            .filter(|(&s, e)| s + e.len > offset)
            .map(|(&s, _)| s)
            .collect();
        for start in overlapping {
            let Some(e) = self.extents.remove(&start) else {
                continue;
            };
            self.dirty -= e.len;
            let e_end = start + e.len;
            if start < offset {
                self.put(start, e.slice(0, offset - start));
            }
            if e_end > end {
                self.put(end, e.slice(end - start, e.len));
            }
        }
    }

    fn put(&mut self, offset: u64, extent: Extent) {
        self.dirty += extent.len;
        self.extents.insert(offset, extent);
    }

    /// Cache a write; adjacent extents merge so destaging them is one media write.
    pub fn insert(&mut self, offset: u64, len: u64, data: Option<&[u8]>) {
        self.remove_range(offset, len);
        let mut start = offset;
        let mut extent = Extent {
            len,
            data: data.map(<[u8]>::to_vec),
        };
        let left = self
            .extents
            .range(..offset)
            .next_back()
            .map(|(&s, e)| (s, e.len, e.data.is_some()));
        if let Some((s, l, has_data)) = left {
            if s + l == offset && has_data == extent.data.is_some() {
                if let Some(mut prev) = self.extents.remove(&s) {
                    self.dirty -= prev.len;
                    if let (Some(p), Some(d)) = (prev.data.as_mut(), extent.data.take()) {
                        p.extend_from_slice(&d);
                    }
                    prev.len += len;
                    start = s;
                    extent = prev;
                }
            }
        }
        let right_start = start + extent.len;
        let joins = self
            .extents
            .get(&right_start)
            .is_some_and(|r| r.data.is_some() == extent.data.is_some());
        if joins {
            if let Some(right) = self.extents.remove(&right_start) {
                self.dirty -= right.len;
                if let (Some(d), Some(r)) = (extent.data.as_mut(), right.data) {
                    d.extend_from_slice(&r);
                }
                extent.len += right.len;
            }
        }
        self.put(start, extent);
    }

    /// Whether every byte of [offset, offset + len) is dirty in the cache.
    pub fn covers(&self, offset: u64, len: u64) -> bool {
        self.extents
            .range(..=offset)
            .next_back()
            .is_some_and(|(&s, e)| s + e.len >= offset + len)
    }

    /// The cached bytes of [offset, offset + len), when the cache holds all of them.
    pub fn read(&self, offset: u64, len: u64) -> Option<Vec<u8>> {
        let (&s, e) = self.extents.range(..=offset).next_back()?;
        if s + e.len < offset + len {
            return None;
        }
        let from = (offset - s) as usize;
        e.data
            .as_ref()
            .map(|d| d[from..from + len as usize].to_vec())
    }

    pub fn starts(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.extents.iter().map(|(&s, e)| (s, e.len))
    }

    /// Extent starts in [from, to).
    pub fn starts_in(&self, from: u64, to: u64) -> impl Iterator<Item = u64> + '_ {
        self.extents.range(from..to).map(|(&s, _)| s)
    }

    /// Extent starts in sweep order from `offset` upwards, wrapping to the lowest.
    pub fn sweep_from(&self, offset: u64) -> impl Iterator<Item = u64> + '_ {
        self.extents
            .range(offset..)
            .chain(self.extents.range(..offset))
            .map(|(&s, _)| s)
    }

    pub fn take(&mut self, offset: u64) -> Option<Extent> {
        let e = self.extents.remove(&offset)?;
        self.dirty -= e.len;
        Some(e)
    }

    /// Power loss: every dirty extent is gone; returns what was lost.
    pub fn drop_all(&mut self) -> Vec<(u64, u64)> {
        self.dirty = 0;
        std::mem::take(&mut self.extents)
            .into_iter()
            .map(|(s, e)| (s, e.len))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_writes_keep_the_newest_bytes_and_merge() {
        let mut c = WriteCache::default();
        c.insert(0, 4, Some(b"aaaa"));
        c.insert(8, 4, Some(b"cccc"));
        c.insert(2, 8, Some(b"bbbbbbbb"));
        assert_eq!(c.read(0, 12).unwrap(), b"aabbbbbbbbcc");
        assert_eq!(c.dirty_bytes(), 12);
        assert_eq!(c.starts().count(), 1, "one merged extent");
        c.remove_range(4, 2);
        assert_eq!(c.dirty_bytes(), 10);
        assert!(!c.covers(0, 12));
        assert_eq!(c.read(6, 6).unwrap(), b"bbbbcc");
    }

    #[test]
    fn read_ahead_serves_the_next_blocks_once_streamed() {
        let mut r = ReadCache::new(8 << 20, 8, 256 << 10);
        r.start_stream(0, 4096, 1.0, 100e6);
        // Right away the next block is ahead in the stream, later it is in the buffer.
        match r.lookup(4096, 4096, 1.0) {
            ReadLookup::Stream { ready_at } => {
                assert!((ready_at - (1.0 + 4096.0 / 100e6)).abs() < 1e-12)
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(r.lookup(8192, 4096, 2.0), ReadLookup::Hit);
        assert_eq!(r.stop_streaming(2.0), Some(8192 + (256 << 10)));
        assert_eq!(r.lookup(1 << 30, 4096, 2.0), ReadLookup::Miss);
        r.invalidate(8192, 10);
        assert_eq!(r.lookup(8192, 4096, 2.0), ReadLookup::Miss);
    }
}
