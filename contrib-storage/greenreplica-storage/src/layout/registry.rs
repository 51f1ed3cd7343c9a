//! The one table of layouts: name, the shape rules the configuration checks, and the
//! constructor. Everything else (config, headers, the command line, assembly, replay) finds a
//! layout here by name.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{
    Ido, LayoutError, LayoutOptions, Personality, Qmd, Raid0Tracks, Raid10, Raid56, Rolo,
    RoloFlavour, Single,
};
use crate::parity::Level;

/// The shape of a volume as configured.
#[derive(Debug, Clone)]
pub struct Shape {
    pub members: usize,
    /// Usable bytes of the smallest member.
    pub member_bytes: u64,
    /// `stripe_unit` (alias `chunk_size`) of the configuration.
    pub chunk: u64,
    /// `[volume.layout_options]`: read by constructors whose member layout depends on them
    /// (RoLo's log share and zebra); `build_with` hands every key to `set_option` too.
    pub options: LayoutOptions,
}

/// A shape the layout refuses, with the configuration key to blame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeProblem {
    /// "member" or "stripe_unit".
    pub key: &'static str,
    pub problem: String,
}

/// Stripe units (chunk sizes) the configuration accepts for every striped layout (MD takes
/// powers of two from 4 KiB).
pub(super) fn check_chunk(chunk: u64) -> Result<(), ShapeProblem> {
    if chunk < 4096 || !chunk.is_power_of_two() {
        return Err(ShapeProblem {
            key: "stripe_unit",
            problem: format!("stripe unit {chunk} must be a power of two >= 4096"),
        });
    }
    Ok(())
}

pub struct Registration {
    pub name: &'static str,
    /// Members when the command line does not say.
    pub default_members: usize,
    /// The configuration keys' rules (member count, chunk size); the constructor applies them
    /// too, so config and assembly never disagree.
    pub check: fn(members: usize, chunk: u64) -> Result<(), ShapeProblem>,
    pub build: fn(&Shape) -> Result<Box<dyn Personality>, LayoutError>,
}

pub static REGISTRY: &[Registration] = &[
    Registration {
        name: "single",
        default_members: 1,
        check: Single::check,
        build: |s| Ok(Box::new(Single::new(s)?)),
    },
    Registration {
        name: "raid10",
        default_members: 2,
        check: Raid10::check,
        build: |s| Ok(Box::new(Raid10::new(s)?)),
    },
    Registration {
        name: "raid5",
        default_members: 3,
        check: Raid56::check5,
        build: |s| Ok(Box::new(Raid56::new(Level::Raid5, s)?)),
    },
    Registration {
        name: "raid6",
        default_members: 4,
        check: Raid56::check6,
        build: |s| Ok(Box::new(Raid56::new(Level::Raid6, s)?)),
    },
    Registration {
        name: "graid",
        default_members: 5,
        check: Rolo::check_graid,
        build: |s| Ok(Box::new(Rolo::new(RoloFlavour::Graid, s)?)),
    },
    Registration {
        name: "rolo-p",
        default_members: 4,
        check: Rolo::check_rolo,
        build: |s| Ok(Box::new(Rolo::new(RoloFlavour::RoloP, s)?)),
    },
    // IDO (issue 17): RAID5/6 with a zone table and hot-first reconstruction.
    Registration {
        name: "raid5-ido",
        default_members: 3,
        check: Raid56::check5,
        build: |s| Ok(Box::new(Ido::new(Level::Raid5, s)?)),
    },
    Registration {
        name: "raid6-ido",
        default_members: 4,
        check: Raid56::check6,
        build: |s| Ok(Box::new(Ido::new(Level::Raid6, s)?)),
    },
    // QMD (issue 16): RAID10 pairs plus a flash write buffer (the last member).
    Registration {
        name: "qmd",
        default_members: 3,
        check: Qmd::check,
        build: |s| Ok(Box::new(Qmd::new(s)?)),
    },
    // RoLo flavours (issue 15): three copies; only the on-duty pair active; the zebra.
    Registration {
        name: "rolo-r",
        default_members: 4,
        check: Rolo::check_rolo,
        build: |s| Ok(Box::new(Rolo::new(RoloFlavour::RoloR, s)?)),
    },
    Registration {
        name: "rolo-e",
        default_members: 4,
        check: Rolo::check_rolo,
        build: |s| Ok(Box::new(Rolo::new(RoloFlavour::RoloE, s)?)),
    },
    Registration {
        name: "rolo-s",
        default_members: 4,
        check: Rolo::check_rolo,
        build: |s| Ok(Box::new(Rolo::new(RoloFlavour::RoloS, s)?)),
    },
    // IDO with its surrogate set (issue 17): the last two members are a RAID1 pair.
    Registration {
        name: "raid5-ido-s",
        default_members: 5,
        check: Ido::check5s,
        build: |s| Ok(Box::new(Ido::with_surrogates(Level::Raid5, s)?)),
    },
    Registration {
        name: "raid6-ido-s",
        default_members: 6,
        check: Ido::check6s,
        build: |s| Ok(Box::new(Ido::with_surrogates(Level::Raid6, s)?)),
    },
    // Track alignment (issue 18): chunks are the members' own tracks.
    Registration {
        name: super::raid0_tracks::NAME,
        default_members: 4,
        check: Raid0Tracks::check,
        build: |s| Ok(Box::new(Raid0Tracks::new(s)?)),
    },
    Registration {
        name: super::raid5_tracks::NAME,
        default_members: 3,
        check: super::Raid5Tracks::check,
        build: |s| Ok(Box::new(super::Raid5Tracks::new(s)?)),
    },
    Registration {
        name: super::raid10_tracks::NAME,
        default_members: 4,
        check: super::Raid10Tracks::check,
        build: |s| Ok(Box::new(super::Raid10Tracks::new(s)?)),
    },
];

/// A layout's name, known to be in the registry.
#[derive(Clone, Copy)]
pub struct LayoutKind(&'static Registration);

impl LayoutKind {
    pub const SINGLE: LayoutKind = LayoutKind(&REGISTRY[0]);
    pub const RAID10: LayoutKind = LayoutKind(&REGISTRY[1]);
    pub const RAID5: LayoutKind = LayoutKind(&REGISTRY[2]);
    pub const RAID6: LayoutKind = LayoutKind(&REGISTRY[3]);
    pub const GRAID: LayoutKind = LayoutKind(&REGISTRY[4]);
    pub const ROLO_P: LayoutKind = LayoutKind(&REGISTRY[5]);
    pub const QMD: LayoutKind = LayoutKind(&REGISTRY[8]);
    pub const ROLO_R: LayoutKind = LayoutKind(&REGISTRY[9]);
    pub const ROLO_E: LayoutKind = LayoutKind(&REGISTRY[10]);
    pub const ROLO_S: LayoutKind = LayoutKind(&REGISTRY[11]);
    pub const RAID0_TRACKS: LayoutKind = LayoutKind(&REGISTRY[14]);
    pub const RAID5_TRACKS: LayoutKind = LayoutKind(&REGISTRY[15]);
    pub const RAID10_TRACKS: LayoutKind = LayoutKind(&REGISTRY[16]);

    pub fn name(self) -> &'static str {
        self.0.name
    }

    pub fn registration(self) -> &'static Registration {
        self.0
    }

    pub fn default_members(self) -> usize {
        self.0.default_members
    }

    /// The configuration's shape rules for this layout.
    pub fn check(self, members: usize, chunk: u64) -> Result<(), ShapeProblem> {
        (self.0.check)(members, chunk)
    }

    /// The error of a shape the layout refuses.
    pub fn shape_error(self, problem: ShapeProblem) -> LayoutError {
        LayoutError::Shape {
            layout: self,
            problem: problem.problem,
        }
    }
}

/// Build a layout from its description.
pub fn build(
    kind: LayoutKind,
    members: usize,
    member_bytes: u64,
    chunk: u64,
) -> Result<Box<dyn Personality>, LayoutError> {
    build_with(
        kind,
        members,
        member_bytes,
        chunk,
        &LayoutOptions::default(),
    )
}

/// Build a layout with its `[volume.layout_options]`: every key goes to the layout's
/// `set_option`, which refuses the keys it does not know (naming them), so a misspelt option
/// is an error, never silently ignored.
pub fn build_with(
    kind: LayoutKind,
    members: usize,
    member_bytes: u64,
    chunk: u64,
    options: &LayoutOptions,
) -> Result<Box<dyn Personality>, LayoutError> {
    let layout = (kind.0.build)(&Shape {
        members,
        member_bytes,
        chunk,
        options: options.clone(),
    })?;
    for (key, value) in options.iter() {
        layout
            .set_option(key, value)
            .map_err(|problem| LayoutError::Shape {
                layout: kind,
                problem: format!("layout_options.{key}: {problem}"),
            })?;
    }
    Ok(layout)
}

impl PartialEq for LayoutKind {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for LayoutKind {}

impl fmt::Debug for LayoutKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LayoutKind({})", self.0.name)
    }
}

impl fmt::Display for LayoutKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

impl FromStr for LayoutKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        REGISTRY
            .iter()
            .find(|r| r.name == s)
            .map(LayoutKind)
            .ok_or_else(|| {
                let names: Vec<_> = REGISTRY.iter().map(|r| r.name).collect();
                format!("unknown layout {s:?}; use one of {}", names.join(", "))
            })
    }
}

impl Serialize for LayoutKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.name)
    }
}

impl<'de> Deserialize<'de> for LayoutKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_known_ones() {
        for r in REGISTRY {
            let kind: LayoutKind = r.name.parse().unwrap();
            assert_eq!(kind.to_string(), r.name);
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(serde_json::from_str::<LayoutKind>(&json).unwrap(), kind);
        }
        assert_eq!(LayoutKind::SINGLE.name(), "single");
        assert_eq!(LayoutKind::RAID10.name(), "raid10");
        assert_eq!(LayoutKind::RAID5.name(), "raid5");
        assert_eq!(LayoutKind::RAID6.name(), "raid6");
        assert_eq!(
            LayoutKind::RAID0_TRACKS.name(),
            super::super::raid0_tracks::NAME
        );
        assert_eq!(
            LayoutKind::RAID5_TRACKS.name(),
            super::super::raid5_tracks::NAME
        );
        assert_eq!(
            LayoutKind::RAID10_TRACKS.name(),
            super::super::raid10_tracks::NAME
        );
        let err = "raid7".parse::<LayoutKind>().unwrap_err();
        assert!(err.contains("raid10"), "{err}");
    }

    #[test]
    fn every_layout_builds_with_its_default_members() {
        for r in REGISTRY {
            let kind: LayoutKind = r.name.parse().unwrap();
            kind.check(r.default_members, 65536).unwrap();
            let p = build(kind, r.default_members, 64 << 20, 65536).unwrap();
            assert_eq!(p.kind(), kind);
            assert_eq!(p.member_count(), r.default_members);
        }
    }
}
