//! The one table of layouts: name, the shape rules the configuration checks, and the
//! constructor. Everything else (config, headers, the command line, assembly, replay) finds a
//! layout here by name.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{
    Ido, LayoutError, Personality, Raid0Tracks, Raid10, Raid56, Rolo, RoloFlavour, Single,
};
use crate::parity::Level;

/// The shape of a volume as configured.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub members: usize,
    /// Usable bytes of the smallest member.
    pub member_bytes: u64,
    /// `stripe_unit` (alias `chunk_size`) of the configuration.
    pub chunk: u64,
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
    // Track alignment (issue 18): chunks are the members' own tracks.
    Registration {
        name: super::raid0_tracks::NAME,
        default_members: 4,
        check: Raid0Tracks::check,
        build: |s| Ok(Box::new(Raid0Tracks::new(s)?)),
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
    (kind.0.build)(&Shape {
        members,
        member_bytes,
        chunk,
    })
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
