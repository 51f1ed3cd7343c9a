//! Zoned recording: where a logical block lies on the platters (zone, cylinder, head,
//! sector) and at which angle its sector passes under the head, track and cylinder skew
//! included. Zone 0 is the outermost band; LBAs fill a cylinder surface by surface before
//! moving inwards, as on real drives (DiskSim's "traditional" layout, without spares).

use crate::profile::{DriveProfile, GeometrySpec, ZoneSpec};

#[derive(Debug, Clone, PartialEq)]
pub struct Zone {
    pub first_cylinder: u64,
    pub cylinders: u64,
    pub sectors_per_track: u64,
    pub first_lba: u64,
    pub track_skew: u64,
    pub cylinder_skew: u64,
}

impl Zone {
    fn sectors(&self, surfaces: u64) -> u64 {
        self.cylinders * surfaces * self.sectors_per_track
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

#[derive(Debug, Clone)]
pub struct Geometry {
    zones: Vec<Zone>,
    surfaces: u64,
    sector_bytes: u64,
    total_sectors: u64,
    revolution_s: f64,
}

impl Geometry {
    /// The geometry of a rotating drive's profile; a profile without `[geometry]` gets one
    /// zone sized from its capacity, transfer rate and rotation.
    pub fn from_profile(profile: &DriveProfile) -> Self {
        let revolution_s = 60.0 / f64::from(profile.rpm.max(1));
        let spec = profile
            .geometry
            .clone()
            .unwrap_or_else(|| Self::derived_spec(profile, revolution_s));
        // Writes settle longer after a seek: the cylinder skew covers the slower of the two.
        let cylinder_switch_s = (profile.track_to_track_seek_ms + spec.write_settle_ms) / 1e3;
        Self::new(&spec, revolution_s, cylinder_switch_s)
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
            }],
        }
    }

    /// Skews default to the sectors that pass under the head during a head switch
    /// (track skew) or a one-cylinder switch (cylinder skew), so a sequential transfer
    /// continues on the next track without losing a revolution.
    pub fn new(spec: &GeometrySpec, revolution_s: f64, cylinder_switch_s: f64) -> Self {
        let mut zones = Vec::with_capacity(spec.zones.len());
        let (mut cylinder, mut lba) = (0, 0);
        for z in &spec.zones {
            let sector_s = revolution_s / z.sectors_per_track as f64;
            let sectors_in = |s: f64| ((s / sector_s).ceil() as u64) % z.sectors_per_track;
            let zone = Zone {
                first_cylinder: cylinder,
                cylinders: z.cylinders,
                sectors_per_track: z.sectors_per_track,
                first_lba: lba,
                track_skew: z
                    .track_skew
                    .unwrap_or_else(|| sectors_in(spec.head_switch_ms / 1e3)),
                cylinder_skew: z
                    .cylinder_skew
                    .unwrap_or_else(|| sectors_in(cylinder_switch_s)),
            };
            cylinder += zone.cylinders;
            lba += zone.sectors(spec.surfaces);
            zones.push(zone);
        }
        Self {
            zones,
            surfaces: spec.surfaces,
            sector_bytes: spec.sector_bytes,
            total_sectors: lba,
            revolution_s,
        }
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

    /// Bytes per second under the head in `zone`, ignoring switches.
    pub fn media_rate(&self, zone: usize) -> f64 {
        let z = &self.zones[zone.min(self.zones.len() - 1)];
        (z.sectors_per_track * self.sector_bytes) as f64 / self.revolution_s
    }

    /// Where logical block `lba` lies; blocks past the end wrap around.
    pub fn locate(&self, lba: u64) -> Location {
        let lba = lba % self.total_sectors;
        let zone = self.zones.partition_point(|z| z.first_lba <= lba) - 1;
        let z = &self.zones[zone];
        let rel = lba - z.first_lba;
        let track = rel / z.sectors_per_track;
        Location {
            zone,
            cylinder: z.first_cylinder + track / self.surfaces,
            head: track % self.surfaces,
            sector: rel % z.sectors_per_track,
        }
    }

    /// The logical block at a physical address (the inverse of `locate`).
    pub fn lba(&self, loc: Location) -> u64 {
        let z = &self.zones[loc.zone];
        let track = (loc.cylinder - z.first_cylinder) * self.surfaces + loc.head;
        z.first_lba + track * z.sectors_per_track + loc.sector
    }

    pub fn zone_of_cylinder(&self, cylinder: u64) -> usize {
        self.zones
            .partition_point(|z| z.first_cylinder <= cylinder)
            .max(1)
            - 1
    }

    /// How far (in sectors) the first sector of this location's track is rotated against
    /// the zone's first track: every head switch adds the track skew, every cylinder
    /// boundary the cylinder skew.
    pub fn skew(&self, loc: Location) -> u64 {
        let z = &self.zones[loc.zone];
        let c = loc.cylinder - z.first_cylinder;
        let switches = c * (self.surfaces - 1) + loc.head;
        (switches * z.track_skew + c * z.cylinder_skew) % z.sectors_per_track
    }

    /// The angle, as a fraction of a revolution, at which `loc`'s sector starts.
    pub fn angle(&self, loc: Location) -> f64 {
        let spt = self.zones[loc.zone].sectors_per_track;
        ((loc.sector + self.skew(loc)) % spt) as f64 / spt as f64
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

    #[test]
    fn consecutive_blocks_fill_a_track_then_switch_head_then_cylinder() {
        let g = geometry("maxtor-atlas-10k-v");
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
        let g = geometry("maxtor-atlas-10k-v");
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
}
