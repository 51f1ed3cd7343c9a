//! IDO's Zone Table (Wu et al., "IDO: Intelligent Data Outsourcing with Improved RAID
//! Reconstruction Performance", FAST'12): the volume's address space in equal zones, each
//! with a popularity (incremented on every read hit, halved at the end of every epoch) and a
//! flag (reconstructed, migrated; here also hinted). It is tracked in the normal state, before
//! any failure, so that a rebuild knows at once which zones are hot.

use std::collections::BTreeSet;
use std::ops::Range;

/// Flag bits of a zone (the paper's two bits, plus the standby's hint).
pub const RECONSTRUCTED: u8 = 0b001;
pub const MIGRATED: u8 = 0b010;
/// Named by the last `hint` (the next batch's block set): rebuilt before anything else.
pub const HINTED: u8 = 0b100;

/// The paper's default zone size; 3-12 MB worked best.
pub const DEFAULT_ZONE_BYTES: u64 = 12 << 20;
/// Volumes smaller than this many default zones get smaller zones (whole stripes), so that
/// hot-first still has zones to order.
pub const MIN_ZONES: u64 = 64;
/// Read requests per epoch by default. With the layout option `epoch_s` an epoch is a time
/// period instead, as in the paper (`end_epochs`, from the volume tick); plans are pure, so
/// without it an epoch is counted in read requests.
pub const EPOCH_READS: u64 = 1024;
/// Halvings after which every u32 popularity is 0 (more epochs change nothing).
const MAX_HALVINGS: u32 = 32;

const IMAGE_VERSION: u8 = 1;
/// Version, zone bytes, zone count, reads of the current epoch.
const IMAGE_HEADER: usize = 1 + 8 + 8 + 8;
/// Popularity (u32) and flags (u8) per zone.
const IMAGE_ZONE: usize = 5;
/// Version, entries, reads of the current epoch.
const DELTA_HEADER: usize = 1 + 8 + 8;
/// Zone (u64), popularity (u32), flags (u8).
const DELTA_ENTRY: usize = 13;

/// What changed in the table since it was last journaled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Changes {
    None,
    /// The whole table (an epoch ended, a hint arrived, or most zones changed).
    Full(Vec<u8>),
    /// The zones read since (their popularity and flags).
    Delta(Vec<u8>),
}

/// The zone size for a volume: 12 MiB, or less for small volumes (at least `MIN_ZONES`
/// zones), always whole stripes and at least one.
pub fn zone_bytes_for(capacity: u64, stripe_bytes: u64) -> u64 {
    let stripe = stripe_bytes.max(1);
    let target = DEFAULT_ZONE_BYTES.min(capacity / MIN_ZONES);
    (target / stripe).max(1) * stripe
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneTable {
    zone_bytes: u64,
    popularity: Vec<u32>,
    flags: Vec<u8>,
    reads_in_epoch: u64,
    /// Epochs end after `EPOCH_READS` reads (else only by `end_epochs`, on a clock).
    by_reads: bool,
    /// Zones read since the table was last journaled.
    changed: BTreeSet<usize>,
    /// Every zone may have changed (an epoch ended, a hint arrived) since then.
    all_changed: bool,
}

impl ZoneTable {
    pub fn new(zone_bytes: u64, capacity: u64) -> Self {
        let zone_bytes = zone_bytes.max(1);
        let zones = capacity.div_ceil(zone_bytes) as usize;
        Self {
            zone_bytes,
            popularity: vec![0; zones],
            flags: vec![0; zones],
            reads_in_epoch: 0,
            by_reads: true,
            changed: BTreeSet::new(),
            all_changed: false,
        }
    }

    pub fn zone_bytes(&self) -> u64 {
        self.zone_bytes
    }

    pub fn len(&self) -> usize {
        self.popularity.len()
    }

    pub fn is_empty(&self) -> bool {
        self.popularity.is_empty()
    }

    /// The zones volume bytes `offset..offset+len` touch (clamped to the table).
    pub fn zones(&self, offset: u64, len: u64) -> Range<usize> {
        let first = (offset / self.zone_bytes) as usize;
        let end = offset.saturating_add(len.max(1)).div_ceil(self.zone_bytes) as usize;
        first.min(self.len())..end.min(self.len())
    }

    pub fn popularity(&self, zone: usize) -> u32 {
        self.popularity.get(zone).copied().unwrap_or(0)
    }

    pub fn flags(&self, zone: usize) -> u8 {
        self.flags.get(zone).copied().unwrap_or(0)
    }

    pub fn set_flag(&mut self, zone: usize, flag: u8) {
        if let Some(f) = self.flags.get_mut(zone) {
            *f |= flag;
        }
    }

    /// Clear `flag` on every zone (a new rebuild starts; a new hint replaces the last).
    pub fn clear_flag(&mut self, flag: u8) {
        for f in &mut self.flags {
            *f &= !flag;
        }
    }

    /// A read hit volume bytes `offset..offset+len`: every zone it touches gains one; the
    /// epoch ends after `EPOCH_READS` reads.
    pub fn read_hit(&mut self, offset: u64, len: u64) {
        for z in self.zones(offset, len) {
            self.popularity[z] = self.popularity[z].saturating_add(1);
            if !self.all_changed {
                self.changed.insert(z);
            }
        }
        self.reads_in_epoch = self.reads_in_epoch.saturating_add(1);
        if self.by_reads && self.reads_in_epoch >= EPOCH_READS {
            self.end_epoch();
        }
    }

    /// Whether epochs end by read count (the default) or only by `end_epochs` (a clock).
    pub fn set_epoch_by_reads(&mut self, by_reads: bool) {
        self.by_reads = by_reads;
    }

    /// `n` epochs ended (a clock saw that many periods pass): each halves every popularity.
    pub fn end_epochs(&mut self, n: u64) {
        for _ in 0..n.min(u64::from(MAX_HALVINGS)) {
            self.end_epoch();
        }
    }

    /// Age the popularities: every zone's is halved.
    pub fn end_epoch(&mut self) {
        for p in &mut self.popularity {
            *p /= 2;
        }
        self.reads_in_epoch = 0;
        self.all_changed = true;
        self.changed.clear();
    }

    /// The standby's hint: these volume extents are about to be read. Their zones are
    /// marked hinted (the previous hint's are not any more).
    pub fn hint(&mut self, extents: &[(u64, u64)]) {
        self.clear_flag(HINTED);
        // Merged first: many extents over the same zones cost their count, not their zones.
        let mut ranges: Vec<Range<usize>> = extents
            .iter()
            .map(|&(offset, len)| self.zones(offset, len))
            .collect();
        ranges.sort_by_key(|r| r.start);
        let mut next = 0;
        for r in ranges {
            for z in r.start.max(next)..r.end {
                self.flags[z] |= HINTED;
            }
            next = next.max(r.end);
        }
        self.all_changed = true;
        self.changed.clear();
    }

    /// The order a hot-first rebuild takes the zones in: hinted zones, then zones read in
    /// the recent epochs (hottest first), then the cold ones in address order.
    pub fn rebuild_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.len()).collect();
        order.sort_by_key(|&z| {
            let hinted = self.flags[z] & HINTED != 0;
            let pop = self.popularity[z];
            (!hinted, pop == 0, std::cmp::Reverse(pop), z)
        });
        order
    }

    /// A zone worth migrating to a surrogate set: hinted, or read more than the average zone
    /// (zones touched by a stray read are not: migrating them would cost more than it saves).
    pub fn is_hot(&self, zone: usize) -> bool {
        if self.flags(zone) & HINTED != 0 {
            return true;
        }
        let pop = u64::from(self.popularity(zone));
        let total: u64 = self.popularity.iter().map(|&p| u64::from(p)).sum();
        pop > 0 && pop * self.len() as u64 > total
    }

    /// Bytes the table takes in memory (the paper reports 0.06-0.24 MB).
    pub fn memory_bytes(&self) -> u64 {
        (std::mem::size_of::<Self>()
            + self.popularity.capacity() * std::mem::size_of::<u32>()
            + self.flags.capacity()) as u64
    }

    /// What changed since the last call, as a journal payload: the zones read, or the
    /// whole table when an epoch ended, a hint arrived, or the delta would be larger.
    pub fn take_changes(&mut self) -> Changes {
        let changed = std::mem::take(&mut self.changed);
        let full = std::mem::take(&mut self.all_changed)
            || DELTA_HEADER + changed.len() * DELTA_ENTRY >= IMAGE_HEADER + self.len() * IMAGE_ZONE;
        if full {
            return Changes::Full(self.image());
        }
        if changed.is_empty() {
            return Changes::None;
        }
        let mut out = Vec::with_capacity(DELTA_HEADER + changed.len() * DELTA_ENTRY);
        out.push(IMAGE_VERSION);
        out.extend_from_slice(&(changed.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.reads_in_epoch.to_le_bytes());
        for z in changed {
            out.extend_from_slice(&(z as u64).to_le_bytes());
            out.extend_from_slice(&self.popularity[z].to_le_bytes());
            out.push(self.flags[z]);
        }
        Changes::Delta(out)
    }

    /// Apply a delta written by `take_changes` (after the image it followed).
    pub fn load_delta(&mut self, delta: &[u8]) -> Result<(), String> {
        match delta.first() {
            Some(&IMAGE_VERSION) => {}
            Some(v) => {
                return Err(format!(
                    "zone table delta version {v} is not {IMAGE_VERSION}"
                ))
            }
            None => return Err("empty zone table delta".to_string()),
        }
        let word = |at: usize| -> Option<u64> {
            delta
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let (Some(count), Some(reads)) = (word(1), word(9)) else {
            return Err(format!(
                "zone table delta of {} bytes is truncated",
                delta.len()
            ));
        };
        let entries = &delta[DELTA_HEADER..];
        if count.checked_mul(DELTA_ENTRY as u64) != Some(entries.len() as u64) {
            return Err(format!(
                "zone table delta says {count} entries in {} bytes",
                entries.len()
            ));
        }
        let mut parsed = Vec::with_capacity(count as usize);
        for e in entries.chunks_exact(DELTA_ENTRY) {
            let zone = u64::from_le_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]);
            if zone >= self.len() as u64 {
                return Err(format!(
                    "zone table delta names zone {zone} of {}",
                    self.len()
                ));
            }
            let pop = u32::from_le_bytes([e[8], e[9], e[10], e[11]]);
            parsed.push((zone as usize, pop, e[12] & (MIGRATED | HINTED)));
        }
        for (z, pop, flags) in parsed {
            self.popularity[z] = pop;
            self.flags[z] = flags | (self.flags[z] & RECONSTRUCTED);
        }
        self.reads_in_epoch = reads.min(EPOCH_READS);
        Ok(())
    }

    /// The table as bytes (journal record and checkpoint image).
    pub fn image(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(IMAGE_HEADER + self.len() * IMAGE_ZONE);
        out.push(IMAGE_VERSION);
        out.extend_from_slice(&self.zone_bytes.to_le_bytes());
        out.extend_from_slice(&(self.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.reads_in_epoch.to_le_bytes());
        for z in 0..self.len() {
            out.extend_from_slice(&self.popularity[z].to_le_bytes());
            out.push(self.flags[z]);
        }
        out
    }

    /// Load an image written by `image` for the same geometry. `RECONSTRUCTED` is dropped:
    /// which member bytes a rebuild has copied durably is the journaled watermark's to say.
    pub fn load(&mut self, image: &[u8]) -> Result<(), String> {
        let word = |at: usize| -> Result<u64, String> {
            image
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
                .ok_or_else(|| format!("zone table image of {} bytes is truncated", image.len()))
        };
        match image.first() {
            Some(&IMAGE_VERSION) => {}
            Some(v) => {
                return Err(format!(
                    "zone table image version {v} is not {IMAGE_VERSION}"
                ))
            }
            None => return Err("empty zone table image".to_string()),
        }
        let zone_bytes = word(1)?;
        let zones = word(9)?;
        let reads_in_epoch = word(17)?;
        if zone_bytes != self.zone_bytes || zones != self.len() as u64 {
            return Err(format!(
                "zone table image has {zones} zones of {zone_bytes} bytes; the volume has {} of {}",
                self.len(),
                self.zone_bytes
            ));
        }
        if image.len() != IMAGE_HEADER + self.len() * IMAGE_ZONE {
            return Err(format!(
                "zone table image is {} bytes, expected {}",
                image.len(),
                IMAGE_HEADER + self.len() * IMAGE_ZONE
            ));
        }
        for (z, rec) in image[IMAGE_HEADER..].chunks_exact(IMAGE_ZONE).enumerate() {
            self.popularity[z] = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
            self.flags[z] = rec[4] & (MIGRATED | HINTED);
        }
        self.reads_in_epoch = reads_in_epoch.min(EPOCH_READS);
        self.changed.clear();
        self.all_changed = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_hit_counts_in_every_zone_it_touches() {
        let mut t = ZoneTable::new(1000, 10_000);
        assert_eq!(t.len(), 10);
        t.read_hit(990, 20);
        t.read_hit(1500, 10);
        assert_eq!(t.popularity(0), 1);
        assert_eq!(t.popularity(1), 2);
        assert_eq!(t.popularity(2), 0);
        // A read past the end counts nowhere rather than panicking.
        t.read_hit(20_000, 10);
        assert_eq!(t.zones(20_000, 10), 10..10);
    }

    #[test]
    fn hot_zones_are_hinted_or_read_more_than_the_average() {
        let mut t = ZoneTable::new(100, 1000);
        // Every zone read once (stray reads) but zone 3, zone 0 five times more.
        for z in (0..10).filter(|&z| z != 3) {
            t.read_hit(z * 100, 1);
        }
        for _ in 0..5 {
            t.read_hit(0, 1);
        }
        t.hint(&[(900, 1)]);
        let hot: Vec<usize> = (0..t.len()).filter(|&z| t.is_hot(z)).collect();
        assert_eq!(hot, vec![0, 9], "above the average of 1.4 reads, or hinted");
    }

    #[test]
    fn popularity_is_halved_at_every_epoch_end() {
        let mut t = ZoneTable::new(1000, 4000);
        for _ in 0..7 {
            t.read_hit(0, 1);
        }
        t.end_epoch();
        assert_eq!(t.popularity(0), 3);
        t.end_epoch();
        assert_eq!(t.popularity(0), 1);
        // The epoch also ends by itself after EPOCH_READS reads.
        let mut t = ZoneTable::new(1000, 4000);
        for _ in 0..EPOCH_READS - 1 {
            t.read_hit(1000, 1);
        }
        assert_eq!(t.popularity(1), (EPOCH_READS - 1) as u32);
        t.read_hit(1000, 1);
        assert_eq!(t.popularity(1), (EPOCH_READS / 2) as u32);
        assert!(
            matches!(t.take_changes(), Changes::Full(_)),
            "an epoch end journals the whole table"
        );
        assert_eq!(t.take_changes(), Changes::None);
    }

    #[test]
    fn on_a_clock_only_the_periods_passed_end_epochs_not_the_read_count() {
        let mut t = ZoneTable::new(1000, 4000);
        t.set_epoch_by_reads(false);
        for _ in 0..EPOCH_READS * 3 {
            t.read_hit(1000, 1);
        }
        assert_eq!(
            t.popularity(1),
            (EPOCH_READS * 3) as u32,
            "no epoch ended by reads"
        );
        t.end_epochs(2);
        assert_eq!(
            t.popularity(1),
            (EPOCH_READS * 3 / 4) as u32,
            "two periods: quartered"
        );
        assert!(matches!(t.take_changes(), Changes::Full(_)));
        t.end_epochs(u64::MAX);
        assert_eq!(
            t.popularity(1),
            0,
            "a long idle time forgets everything, quickly"
        );
        t.end_epochs(0);
        assert_eq!(t.take_changes(), Changes::Full(t.image()));
    }

    #[test]
    fn flags_set_and_clear_and_a_new_hint_replaces_the_last() {
        let mut t = ZoneTable::new(1000, 4000);
        t.set_flag(2, RECONSTRUCTED);
        t.set_flag(2, MIGRATED);
        assert_eq!(t.flags(2), RECONSTRUCTED | MIGRATED);
        t.clear_flag(RECONSTRUCTED);
        assert_eq!(t.flags(2), MIGRATED);
        t.hint(&[(0, 1), (3500, 100)]);
        assert_eq!(t.flags(0) & HINTED, HINTED);
        assert_eq!(t.flags(3) & HINTED, HINTED);
        t.hint(&[(1000, 1)]);
        assert_eq!(t.flags(0) & HINTED, 0);
        assert_eq!(t.flags(1) & HINTED, HINTED);
    }

    #[test]
    fn overlapping_hint_extents_mark_each_zone_they_cover() {
        let mut t = ZoneTable::new(1000, 10_000);
        t.hint(&[
            (5500, 3000),
            (0, 10_000),
            (2000, 10),
            (9999, 1),
            (4200, 100),
        ]);
        assert!((0..10).all(|z| t.flags(z) & HINTED != 0));
        t.hint(&[(6500, 2000), (5000, 1), (6000, 10), (8100, 10)]);
        let hinted: Vec<usize> = (0..10).filter(|&z| t.flags(z) & HINTED != 0).collect();
        assert_eq!(hinted, vec![5, 6, 7, 8]);
    }

    #[test]
    fn the_rebuild_order_is_hinted_then_hot_then_cold_in_address_order() {
        let mut t = ZoneTable::new(1000, 6000);
        t.read_hit(4000, 1);
        for _ in 0..3 {
            t.read_hit(2000, 1);
        }
        t.hint(&[(5000, 1)]);
        assert_eq!(t.rebuild_order(), vec![5, 2, 4, 0, 1, 3]);
    }

    #[test]
    fn memory_is_reported_within_the_papers_range_for_its_volumes() {
        // The paper's metadata of 0.06-0.24 MB covers the Zone Table and the D Map; a
        // 1 TB volume in 12 MiB zones takes well under that for the table.
        let t = ZoneTable::new(DEFAULT_ZONE_BYTES, 1 << 40);
        assert_eq!(t.len(), 87_382);
        let bytes = t.memory_bytes();
        assert!(bytes >= 87_382 * 5, "{bytes}");
        assert!(bytes < 240_000 * 2, "{bytes}");
    }

    #[test]
    fn the_image_round_trips_without_the_reconstructed_flags() {
        let mut t = ZoneTable::new(1000, 5000);
        t.read_hit(1200, 1);
        t.read_hit(1200, 1);
        t.end_epoch();
        t.read_hit(4100, 1);
        t.set_flag(1, RECONSTRUCTED | MIGRATED);
        t.hint(&[(0, 1)]);
        let mut back = ZoneTable::new(1000, 5000);
        back.load(&t.image()).unwrap();
        assert_eq!(back.popularity(1), 1);
        assert_eq!(back.popularity(4), 1);
        assert_eq!(back.flags(1), MIGRATED);
        assert_eq!(back.flags(0), HINTED);
        // Another geometry, a truncated or foreign image: a clear error, nothing loaded.
        let mut other = ZoneTable::new(2000, 5000);
        assert!(other.load(&t.image()).unwrap_err().contains("zones"));
        let image = t.image();
        assert!(back.load(&image[..image.len() - 1]).is_err());
        assert!(back.load(&[9]).unwrap_err().contains("version"));
        assert!(back.load(&[]).is_err());
    }

    #[test]
    fn deltas_carry_the_zones_read_since_the_last_record() {
        let mut t = ZoneTable::new(1000, 100_000);
        t.hint(&[(0, 1)]);
        let Changes::Full(image) = t.take_changes() else {
            panic!("a hint journals the whole table")
        };
        t.read_hit(5000, 1);
        t.read_hit(5000, 1);
        t.read_hit(77_000, 1);
        let Changes::Delta(delta) = t.take_changes() else {
            panic!("a few reads journal a delta")
        };
        assert_eq!(delta.len(), DELTA_HEADER + 2 * DELTA_ENTRY);
        let mut back = ZoneTable::new(1000, 100_000);
        back.load(&image).unwrap();
        back.load_delta(&delta).unwrap();
        assert_eq!(back.image(), t.image());
        // Hostile deltas: a clear error and nothing applied.
        let mut bad = delta.clone();
        bad[DELTA_HEADER..DELTA_HEADER + 8].copy_from_slice(&500u64.to_le_bytes());
        assert!(back.load_delta(&bad).unwrap_err().contains("zone 500"));
        assert!(back.load_delta(&delta[..delta.len() - 1]).is_err());
        assert!(back.load_delta(&delta[..5]).is_err());
        assert_eq!(back.image(), t.image());
    }

    #[test]
    fn zones_are_whole_stripes_and_small_volumes_get_at_least_64() {
        assert_eq!(zone_bytes_for(1 << 40, 3 * 65536), 12 << 20);
        assert_eq!(zone_bytes_for(1 << 40, 5 * 65536), 38 * 5 * 65536);
        assert_eq!(zone_bytes_for(2 << 20, 32768), 32768);
        assert_eq!(zone_bytes_for(1 << 20, 3 * 65536), 3 * 65536);
    }
}
