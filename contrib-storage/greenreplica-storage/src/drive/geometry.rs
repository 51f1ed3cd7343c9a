//! Zoned recording: where a logical block lies on the platters (zone, cylinder, head,
//! sector) and at which angle its sector passes under the head, track and cylinder skew
//! included. Zone 0 is the outermost band. By default LBAs fill a cylinder surface by
//! surface before moving inwards (DiskSim's "traditional" layout, without spares); a
//! profile may number them serpentine (bands of cylinders swept outward on one surface and
//! inward on the next), give each unit of the model its own track sizes per surface, and
//! a unit may carry slipped defects, which shorten their tracks by one LBA each
//! (the properties of the Maxtor Atlas 10K V in the track-alignment paper).
//!
//! Positions are worked out in "slot" space, the LBAs the drive would have without
//! defects; a defect list (sorted slots) maps slots to LBAs and back.

use crate::profile::{DriveProfile, GeometrySpec, ZoneSpec};

#[derive(Debug, Clone, PartialEq)]
pub struct Zone {
    pub first_cylinder: u64,
    pub cylinders: u64,
    /// The zone's nominal track size (the profile's); `surface_sectors` has this unit's.
    pub sectors_per_track: u64,
    /// The first LBA in the zone (defects before it slipped out).
    pub first_lba: u64,
    pub track_skew: u64,
    pub cylinder_skew: u64,
    /// Sectors per track on each surface for this unit.
    pub surface_sectors: Vec<u64>,
    /// First slot of the zone (its first LBA without defects).
    first_slot: u64,
}

impl Zone {
    fn cylinder_sectors(&self) -> u64 {
        self.surface_sectors.iter().sum()
    }

    fn slots(&self) -> u64 {
        self.cylinders * self.cylinder_sectors()
    }

    /// Sectors the zone would hold without defects.
    #[cfg(test)]
    fn sectors(&self, _surfaces: u64) -> u64 {
        self.slots()
    }
}

/// A physical sector address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub zone: usize,
    pub cylinder: u64,
    pub head: u64,
    pub sector: u64,
}

/// The part of a transfer that lies on one track.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackRun {
    /// The first sector of the run.
    pub start: Location,
    /// LBAs of the transfer on this track.
    pub lbas: u64,
    /// Physical sectors the head passes over (slipped ones included).
    pub sectors: u64,
    /// Sectors on this track (physical, slipped ones included).
    pub track_sectors: u64,
}

#[derive(Debug, Clone)]
pub struct Geometry {
    zones: Vec<Zone>,
    surfaces: u64,
    sector_bytes: u64,
    total_sectors: u64,
    total_slots: u64,
    revolution_s: f64,
    /// Serpentine band width in cylinders; 0 for the traditional layout.
    serpentine: u64,
    zero_latency: bool,
    /// Slipped slots, sorted.
    defects: Vec<u64>,
}

/// splitmix64: the unit's draws (variant, defect places) from its seed.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Geometry {
    /// The geometry of a rotating drive's profile (of its `unit` when set); a profile
    /// without `[geometry]` gets one zone sized from its capacity, transfer rate and
    /// rotation.
    pub fn from_profile(profile: &DriveProfile) -> Self {
        let revolution_s = 60.0 / f64::from(profile.rpm.max(1));
        let spec = profile
            .geometry
            .clone()
            .unwrap_or_else(|| Self::derived_spec(profile, revolution_s));
        // Writes settle longer after a seek: the cylinder skew covers the slower of the two.
        let cylinder_switch_s = (profile.track_to_track_seek_ms + spec.write_settle_ms) / 1e3;
        // A unit with defects keeps the model's capacity: spare cylinders at the end.
        let wanted = profile.capacity_bytes.div_ceil(spec.sector_bytes.max(1));
        let mut spec = spec;
        let mut tries = 0;
        loop {
            let g = Self::for_unit(&spec, profile.unit, revolution_s, cylinder_switch_s);
            tries += 1;
            let Some(last) = g.zones.last() else {
                return g;
            };
            if g.total_sectors >= wanted || tries > 8 {
                return g;
            }
            let extra = (wanted - g.total_sectors).div_ceil(last.cylinder_sectors().max(1));
            if let Some(z) = spec.zones.last_mut() {
                z.cylinders += extra;
            }
        }
    }

    /// One zone, two surfaces, the profile's transfer rate as media rate.
    pub fn derived_spec(profile: &DriveProfile, revolution_s: f64) -> GeometrySpec {
        let surfaces = 2;
        let spt = ((profile.read_rate_bytes_s() * revolution_s / 512.0).round() as u64).max(1);
        let cylinders = profile.capacity_bytes.div_ceil(spt * 512 * surfaces).max(1);
        GeometrySpec {
            sector_bytes: 512,
            surfaces,
            head_switch_ms: profile.track_to_track_seek_ms / 2.0,
            full_stroke_seek_ms: 2.0 * profile.avg_seek_ms,
            write_settle_ms: 0.0,
            short_seek_fraction: 0.2,
            zones: vec![ZoneSpec {
                cylinders,
                sectors_per_track: spt,
                track_skew: None,
                cylinder_skew: None,
                variants: Vec::new(),
            }],
            serpentine_cylinders: 0,
            zero_latency: false,
            defects_per_gb: 0.0,
        }
    }

    /// The nominal drive of a spec (no unit: the zones' own track sizes, no defects).
    pub fn new(spec: &GeometrySpec, revolution_s: f64, cylinder_switch_s: f64) -> Self {
        Self::for_unit(spec, None, revolution_s, cylinder_switch_s)
    }

    /// Skews default to the sectors that pass under the head during a head switch
    /// (track skew) or a one-cylinder switch (cylinder skew), so a sequential transfer
    /// continues on the next track without losing a revolution. A `unit` picks one track
    /// size variant for every zone that lists them, and places its defects.
    pub fn for_unit(
        spec: &GeometrySpec,
        unit: Option<u64>,
        revolution_s: f64,
        cylinder_switch_s: f64,
    ) -> Self {
        let surfaces = spec.surfaces.max(1);
        let pick = unit.map(|u| mix(u ^ 0x7472_6163_6b73));
        let mut zones = Vec::with_capacity(spec.zones.len());
        let (mut cylinder, mut slot) = (0, 0);
        for z in &spec.zones {
            let sector_s = revolution_s / z.sectors_per_track as f64;
            let sectors_in = |s: f64| ((s / sector_s).ceil() as u64) % z.sectors_per_track;
            let nominal = vec![z.sectors_per_track; surfaces as usize];
            let surface_sectors = match pick {
                Some(p) if !z.variants.is_empty() => {
                    z.variants[(p % z.variants.len() as u64) as usize].clone()
                }
                _ => nominal,
            };
            // A unit with smaller tracks has more cylinders in the zone, as formatted.
            let per_cylinder: u64 = surface_sectors.iter().sum::<u64>().max(1);
            let cylinders = (z.cylinders * z.sectors_per_track * surfaces).div_ceil(per_cylinder);
            let zone = Zone {
                first_cylinder: cylinder,
                cylinders,
                sectors_per_track: z.sectors_per_track,
                first_lba: slot,
                track_skew: z
                    .track_skew
                    .unwrap_or_else(|| sectors_in(spec.head_switch_ms / 1e3)),
                cylinder_skew: z
                    .cylinder_skew
                    .unwrap_or_else(|| sectors_in(cylinder_switch_s)),
                surface_sectors,
                first_slot: slot,
            };
            cylinder += zone.cylinders;
            slot += zone.slots();
            zones.push(zone);
        }
        let mut g = Self {
            zones,
            surfaces,
            sector_bytes: spec.sector_bytes,
            total_sectors: slot,
            total_slots: slot,
            revolution_s,
            serpentine: spec.serpentine_cylinders,
            zero_latency: spec.zero_latency,
            defects: Vec::new(),
        };
        if let Some(u) = unit {
            let gb = (slot * spec.sector_bytes) as f64 / 1e9;
            let count = (spec.defects_per_gb * gb).round() as u64;
            let mut draw = mix(u ^ 0x6465_6665_6374);
            let mut defects: Vec<u64> = (0..count)
                .map(|_| {
                    draw = mix(draw);
                    draw % slot.max(1)
                })
                .collect();
            defects.sort_unstable();
            defects.dedup();
            g.set_defects(defects);
        }
        g
    }

    fn set_defects(&mut self, defects: Vec<u64>) {
        self.defects = defects;
        self.total_sectors = self.total_slots - self.defects.len() as u64;
        for i in 0..self.zones.len() {
            let first = self.zones[i].first_slot;
            self.zones[i].first_lba = first - self.defects_before(first);
        }
    }

    /// Slipped slots below `slot`.
    fn defects_before(&self, slot: u64) -> u64 {
        self.defects.partition_point(|&d| d < slot) as u64
    }

    /// The slot holding `lba`: the least fixed point of slot = lba + defects up to slot.
    fn slot_of(&self, lba: u64) -> u64 {
        let mut slot = lba;
        loop {
            let next = lba + self.defects.partition_point(|&d| d <= slot) as u64;
            if next == slot {
                return slot;
            }
            slot = next;
        }
    }

    fn lba_of_slot(&self, slot: u64) -> u64 {
        slot - self.defects_before(slot)
    }

    /// The slipped sectors of this unit, as LBAs of the sector that follows each.
    pub fn defect_count(&self) -> usize {
        self.defects.len()
    }

    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    pub fn surfaces(&self) -> u64 {
        self.surfaces
    }

    pub fn sector_bytes(&self) -> u64 {
        self.sector_bytes
    }

    pub fn total_sectors(&self) -> u64 {
        self.total_sectors
    }

    pub fn cylinders(&self) -> u64 {
        self.zones
            .last()
            .map_or(1, |z| z.first_cylinder + z.cylinders)
    }

    pub fn revolution_s(&self) -> f64 {
        self.revolution_s
    }

    pub fn zero_latency(&self) -> bool {
        self.zero_latency
    }

    pub fn serpentine_cylinders(&self) -> u64 {
        self.serpentine
    }

    /// Sectors per track on `loc`'s surface.
    pub fn track_sectors(&self, loc: Location) -> u64 {
        self.zones[loc.zone].surface_sectors[loc.head as usize]
    }

    /// Bytes per second under the head in `zone` (mean over surfaces), ignoring switches.
    pub fn media_rate(&self, zone: usize) -> f64 {
        let z = &self.zones[zone.min(self.zones.len() - 1)];
        (z.cylinder_sectors() * self.sector_bytes) as f64 / self.surfaces as f64 / self.revolution_s
    }

    /// The band of a zone-relative cylinder: (first cylinder, width).
    fn band(&self, z: &Zone, rel_cylinder: u64) -> (u64, u64) {
        if self.serpentine == 0 {
            return (rel_cylinder, 1);
        }
        let first = rel_cylinder / self.serpentine * self.serpentine;
        (first, self.serpentine.min(z.cylinders - first))
    }

    /// The surfaces in the order a band sweeps them.
    fn surface_order(&self, band_index: u64) -> impl Iterator<Item = u64> {
        let s = self.surfaces;
        let reversed = self.serpentine != 0 && band_index % 2 == 1;
        (0..s).map(move |k| if reversed { s - 1 - k } else { k })
    }

    fn locate_slot(&self, slot: u64) -> Location {
        let zone = self.zones.partition_point(|z| z.first_slot <= slot).max(1) - 1;
        let z = &self.zones[zone];
        let rel = slot - z.first_slot;
        let per_cylinder = z.cylinder_sectors();
        let width = self.serpentine.max(1);
        let band_first = (rel / (per_cylinder * width)) * width;
        let (band_first, w) = self.band(z, band_first);
        let mut r = rel - band_first * per_cylinder;
        for (k, head) in self.surface_order(band_first / width).enumerate() {
            let spt = z.surface_sectors[head as usize];
            if r < w * spt {
                let j = r / spt;
                let c = if self.serpentine == 0 {
                    0
                } else if k % 2 == 0 {
                    w - 1 - j
                } else {
                    j
                };
                return Location {
                    zone,
                    cylinder: z.first_cylinder + band_first + c,
                    head,
                    sector: r % spt,
                };
            }
            r -= w * spt;
        }
        // Not reached: the surfaces hold the band's sectors.
        Location {
            zone,
            cylinder: z.first_cylinder + band_first,
            head: 0,
            sector: 0,
        }
    }

    /// Where a location's track lies in the zone's LBA order: its zone-relative first
    /// slot, and the head and cylinder switches that lead to it from the zone's first track.
    fn track_order(&self, loc: Location) -> (u64, u64, u64) {
        let z = &self.zones[loc.zone];
        let rel_c = loc.cylinder - z.first_cylinder;
        let (band_first, w) = self.band(z, rel_c);
        let width = self.serpentine.max(1);
        let band_index = band_first / width;
        let mut slot = band_first * z.cylinder_sectors();
        let mut k = 0;
        for (i, head) in self.surface_order(band_index).enumerate() {
            if head == loc.head {
                k = i as u64;
                break;
            }
            slot += w * z.surface_sectors[head as usize];
        }
        let j = if self.serpentine == 0 || k % 2 == 1 {
            rel_c - band_first
        } else {
            w - 1 - (rel_c - band_first)
        };
        slot += j * z.surface_sectors[loc.head as usize];
        let s = self.surfaces;
        let (head_switches, cylinder_switches) = if self.serpentine == 0 {
            (rel_c * (s - 1) + loc.head, rel_c)
        } else {
            (
                band_index * (s - 1) + k,
                band_index * (s * (width - 1) + 1) + k * (w - 1) + j,
            )
        };
        (slot, head_switches, cylinder_switches)
    }

    fn slot_of_location(&self, loc: Location) -> u64 {
        self.zones[loc.zone].first_slot + self.track_order(loc).0 + loc.sector
    }

    /// Where logical block `lba` lies; blocks past the end wrap around.
    pub fn locate(&self, lba: u64) -> Location {
        self.locate_slot(self.slot_of(lba % self.total_sectors))
    }

    /// The logical block at a physical address (the inverse of `locate`); a slipped
    /// sector gives the block that follows it.
    pub fn lba(&self, loc: Location) -> u64 {
        self.lba_of_slot(self.slot_of_location(loc))
    }

    /// The LBAs of `loc`'s track: (first, count).
    pub fn track_lbas(&self, loc: Location) -> (u64, u64) {
        let first = self.slot_of_location(Location { sector: 0, ..loc });
        let end = first + self.track_sectors(loc);
        let lba = self.lba_of_slot(first);
        (lba, self.lba_of_slot(end) - lba)
    }

    /// The part of a transfer of `count` blocks from `lba` that lies on `lba`'s track.
    pub fn track_run(&self, lba: u64, count: u64) -> TrackRun {
        let lba = lba % self.total_sectors;
        let slot = self.slot_of(lba);
        let start = self.locate_slot(slot);
        let track_end = slot - start.sector + self.track_sectors(start);
        let lbas = count.min(self.lba_of_slot(track_end) - lba).max(1);
        let last = self.slot_of(lba + lbas - 1);
        TrackRun {
            start,
            lbas,
            sectors: last + 1 - slot,
            track_sectors: self.track_sectors(start),
        }
    }

    /// Every track boundary (the first LBA of each track but the first), in LBA order:
    /// what extraction must find.
    pub fn track_boundaries(&self) -> Vec<u64> {
        let mut out = Vec::new();
        let mut lba = 0;
        while lba < self.total_sectors {
            let run = self.track_run(lba, u64::MAX);
            lba += run.lbas;
            if lba < self.total_sectors {
                out.push(lba);
            }
        }
        out
    }

    pub fn zone_of_cylinder(&self, cylinder: u64) -> usize {
        self.zones
            .partition_point(|z| z.first_cylinder <= cylinder)
            .max(1)
            - 1
    }

    /// The rotation of `loc`'s track's first sector against the zone's first track, as a
    /// fraction of a turn: every head switch in LBA order adds the track skew, every
    /// cylinder switch the cylinder skew (both in the zone's nominal sectors).
    fn skew_turns(&self, loc: Location) -> f64 {
        let z = &self.zones[loc.zone];
        let (_, heads, cylinders) = self.track_order(loc);
        let spt = z.sectors_per_track;
        let skew = ((heads % spt) * z.track_skew + (cylinders % spt) * z.cylinder_skew) % spt;
        skew as f64 / spt as f64
    }

    /// How far (in sectors of its track) the first sector of this location's track is
    /// rotated against the zone's first track.
    pub fn skew(&self, loc: Location) -> u64 {
        let spt = self.track_sectors(loc);
        (self.skew_turns(loc) * spt as f64).round() as u64 % spt
    }

    /// The angle, as a fraction of a revolution, at which `loc`'s sector starts.
    pub fn angle(&self, loc: Location) -> f64 {
        let spt = self.track_sectors(loc);
        (loc.sector as f64 / spt as f64 + self.skew_turns(loc)).fract()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn geometry(name: &str) -> Geometry {
        Geometry::from_profile(&DriveProfile::load(name).unwrap())
    }

    /// A deterministic stream of pseudo-random numbers (no extra crate for the tests).
    pub(crate) fn lcg(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed;
        move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 11
        }
    }

    #[test]
    fn lba_round_trips_through_every_profile_geometry() {
        for name in DriveProfile::builtin_names() {
            let profile = DriveProfile::load(name).unwrap();
            if profile.rpm == 0 {
                continue;
            }
            let g = Geometry::from_profile(&profile);
            let mut next = lcg(7);
            let mut probes: Vec<u64> = (0..5_000).map(|_| next() % g.total_sectors()).collect();
            // Every zone's first and last block.
            for z in g.zones() {
                probes.push(z.first_lba);
                probes.push(z.first_lba + z.sectors(g.surfaces()) - 1);
            }
            for lba in probes {
                let loc = g.locate(lba);
                assert_eq!(g.lba(loc), lba, "{name}: {loc:?}");
                let z = &g.zones()[loc.zone];
                assert!(loc.sector < z.sectors_per_track && loc.head < g.surfaces());
                assert!(loc.cylinder >= z.first_cylinder);
                assert!(loc.cylinder < z.first_cylinder + z.cylinders);
            }
        }
    }

    /// The profile's drive with the traditional layout (no serpentine numbering).
    fn plain(name: &str) -> Geometry {
        let mut profile = DriveProfile::load(name).unwrap();
        if let Some(g) = profile.geometry.as_mut() {
            g.serpentine_cylinders = 0;
        }
        Geometry::from_profile(&profile)
    }

    fn unit(name: &str, seed: u64) -> Geometry {
        let mut profile = DriveProfile::load(name).unwrap();
        profile.unit = Some(seed);
        Geometry::from_profile(&profile)
    }

    #[test]
    fn consecutive_blocks_fill_a_track_then_switch_head_then_cylinder() {
        let g = plain("maxtor-atlas-10k-v");
        let z = &g.zones()[0];
        let spt = z.sectors_per_track;
        let a = g.locate(spt - 1);
        let b = g.locate(spt);
        assert_eq!((a.cylinder, a.head, a.sector), (0, 0, spt - 1));
        assert_eq!((b.cylinder, b.head, b.sector), (0, 1, 0), "head switch");
        let c = g.locate(spt * g.surfaces());
        assert_eq!((c.cylinder, c.head, c.sector), (1, 0, 0), "cylinder switch");
    }

    #[test]
    fn outer_zones_hold_more_sectors_per_track() {
        let g = geometry("wd1600aajs");
        let spt: Vec<u64> = g.zones().iter().map(|z| z.sectors_per_track).collect();
        assert!(spt.windows(2).all(|w| w[0] >= w[1]), "{spt:?}");
        assert!(g.media_rate(0) > 1.5 * g.media_rate(g.zones().len() - 1));
    }

    #[test]
    fn skew_covers_the_switch_time() {
        let g = plain("maxtor-atlas-10k-v");
        let z = &g.zones()[0];
        let sector_s = g.revolution_s() / z.sectors_per_track as f64;
        // The Atlas's head switch (0.4 ms) must fit in the track skew.
        assert!(z.track_skew as f64 * sector_s >= 0.4e-3 - 1e-12);
        // Next track's first sector is shifted by exactly the skew.
        let first = g.locate(0);
        let next_head = g.locate(z.sectors_per_track);
        let next_cylinder = g.locate(z.sectors_per_track * g.surfaces());
        assert_eq!(g.skew(first), 0);
        assert_eq!(g.skew(next_head), z.track_skew);
        let expected = ((g.surfaces() - 1) * z.track_skew + z.cylinder_skew) % z.sectors_per_track;
        assert_eq!(g.skew(next_cylinder), expected);
        let delta = (g.angle(next_head) - g.angle(first)).rem_euclid(1.0);
        assert!((delta - z.track_skew as f64 / z.sectors_per_track as f64).abs() < 1e-12);
    }

    #[test]
    fn blocks_past_the_end_wrap() {
        let g = geometry("ultrastar-36z15");
        assert_eq!(g.locate(g.total_sectors() + 5), g.locate(5));
    }

    #[test]
    fn serpentine_numbering_sweeps_one_surface_outward_and_the_next_inward() {
        // The paper's Figure 2: LBA 0 on track 31 of the top surface going outward to
        // track 0, back inward on the other surface to 31, then track 63 of that surface.
        let g = geometry("maxtor-atlas-10k-v");
        let spt = g.zones()[0].sectors_per_track;
        let at = |lba: u64| {
            let l = g.locate(lba);
            (l.cylinder, l.head, l.sector)
        };
        assert_eq!(at(0), (31, 0, 0));
        assert_eq!(at(spt - 1), (31, 0, spt - 1));
        assert_eq!(at(spt), (30, 0, 0), "outward on the same surface");
        assert_eq!(at(32 * spt - 1), (0, 0, spt - 1));
        assert_eq!(at(32 * spt), (0, 1, 0), "turn on the other surface");
        assert_eq!(at(64 * spt - 1), (31, 1, spt - 1));
        assert_eq!(
            at(64 * spt),
            (63, 1, 0),
            "next band starts on the last surface"
        );
        assert_eq!(at(96 * spt), (32, 0, 0));
        assert_eq!(at(128 * spt), (95, 0, 0));
    }

    #[test]
    fn serpentine_skew_follows_lba_order() {
        // Each next track in LBA order is rotated by the switch that leads to it: a
        // cylinder switch within a sweep, a head switch at the band's turn.
        let g = geometry("maxtor-atlas-10k-v");
        let z = &g.zones()[0];
        let spt = z.sectors_per_track;
        let turns = |lba: u64| g.angle(g.locate(lba));
        let step = |from: u64, to: u64| (turns(to) - turns(from)).rem_euclid(1.0);
        let cylinder = z.cylinder_skew as f64 / spt as f64;
        let head = z.track_skew as f64 / spt as f64;
        assert!((step(0, spt) - cylinder).abs() < 1e-9);
        assert!((step(31 * spt, 32 * spt) - head).abs() < 1e-9);
        assert!((step(63 * spt, 64 * spt) - cylinder).abs() < 1e-9);
    }

    #[test]
    fn units_of_one_model_differ_in_track_sizes_and_keep_the_capacity() {
        let profile = DriveProfile::load("maxtor-atlas-10k-v").unwrap();
        let variants = &profile.geometry.as_ref().unwrap().zones[0].variants;
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..12 {
            let g = unit("maxtor-atlas-10k-v", seed);
            let sizes = g.zones()[0].surface_sectors.clone();
            assert!(variants.contains(&sizes), "seed {seed}: {sizes:?}");
            seen.insert(sizes);
            assert!(
                g.total_sectors() * 512 >= profile.capacity_bytes,
                "seed {seed}"
            );
            assert!(g.defect_count() > 1000, "seed {seed}: {}", g.defect_count());
        }
        assert!(seen.len() >= 3, "{seen:?}");
        // The same seed is the same unit.
        let (a, b) = (unit("maxtor-atlas-10k-v", 5), unit("maxtor-atlas-10k-v", 5));
        assert_eq!(a.track_boundaries()[..1000], b.track_boundaries()[..1000]);
    }

    #[test]
    fn lba_round_trips_on_units_with_variants_and_defects() {
        for seed in 0..4 {
            let g = unit("maxtor-atlas-10k-v", seed);
            let mut next = lcg(seed + 100);
            for _ in 0..20_000 {
                let lba = next() % g.total_sectors();
                let loc = g.locate(lba);
                assert_eq!(g.lba(loc), lba, "seed {seed}: {loc:?}");
                assert!(loc.sector < g.track_sectors(loc));
                let (first, count) = g.track_lbas(loc);
                assert!(first <= lba && lba < first + count, "seed {seed}: {lba}");
            }
        }
    }

    #[test]
    fn a_slipped_defect_shortens_its_track_by_one_block() {
        let g = unit("maxtor-atlas-10k-v", 3);
        let bounds = g.track_boundaries();
        let mut shortened = 0;
        let mut start = 0;
        for &b in &bounds {
            let loc = g.locate(start);
            let size = g.track_sectors(loc);
            let holds = b - start;
            assert!(
                holds <= size && holds + 8 > size,
                "{start}: {holds} of {size}"
            );
            assert_eq!(g.track_lbas(loc), (start, holds));
            shortened += u64::from(holds < size);
            start = b;
        }
        assert!(shortened as usize <= g.defect_count());
        assert!(
            shortened as usize * 10 >= g.defect_count() * 9,
            "{shortened}"
        );
    }

    #[test]
    fn zero_latency_reads_a_whole_track_in_one_turn_wherever_the_head_lands() {
        use crate::drive::disk::DiskMechanism;
        use crate::drive::queue::{Class, Command, Op};
        use crate::drive::Mechanism;
        let mut profile = DriveProfile::load("maxtor-atlas-10k-v").unwrap();
        profile.cache = None;
        let read = |offset: u64, len: u64| Command {
            id: 1,
            op: Op::Read,
            offset,
            len,
            class: Class::Foreground,
            arrival: 0.0,
            data: None,
        };
        let g = Geometry::from_profile(&profile);
        let rev = g.revolution_s();
        let spt = g.zones()[0].sectors_per_track;
        let track = spt * 512;
        for zero_latency in [true, false] {
            profile.geometry.as_mut().unwrap().zero_latency = zero_latency;
            let mut disk = DiskMechanism::new(&profile).unwrap();
            let mut worst: f64 = 0.0;
            let mut t = 0.0;
            let mut next = lcg(9);
            for _ in 0..50 {
                // Land the head on track 10's cylinder at a random moment, then read it whole.
                t = disk.serve(&read(9 * track, 512), t).done + (next() % 1000) as f64 * 1e-5;
                let done = disk.serve(&read(10 * track, track), t).done;
                worst = worst.max(done - t);
                t = done;
            }
            // Overhead and a one-cylinder seek are well under 2 ms.
            if zero_latency {
                assert!(worst <= rev + 2e-3, "{worst} vs turn {rev}");
            } else {
                assert!(worst > rev * 1.6 + 2e-3, "{worst} vs turn {rev}");
            }
        }
    }
}
