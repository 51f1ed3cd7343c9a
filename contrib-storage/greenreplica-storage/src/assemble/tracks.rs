//! Track-aligned layouts at assembly: each member's boundary list is read back from its
//! metadata area (validated: a corrupt or forged list refuses the volume with the reason);
//! a member without one (a new volume, a blank replacement) gets the tracks of its own
//! emulated drive model (profile and `drive_seed` unit: what extraction finds on that
//! drive, without spending the extraction's time at every start), and keeps them once the
//! volume's headers are written.

use std::sync::Arc;

use anyhow::{Context, Result};

use super::VolumeSpec;
use crate::layout::{
    raid0_tracks, raid10_tracks, raid5_tracks, Personality, Raid0Tracks, Raid10Tracks, Raid5Tracks,
};
use crate::member::Member;
use crate::profile::DriveProfile;
use crate::tracks::map::TrackMap;
use crate::tracks::stored;

/// Whether the layout places chunks on member tracks.
pub(super) fn wants_tracks(spec: &VolumeSpec) -> bool {
    [raid0_tracks::NAME, raid5_tracks::NAME, raid10_tracks::NAME].contains(&spec.layout.name())
}

/// A member's tracks in sectors, and whether they still have to be stored.
pub(super) struct MemberTracks {
    map: TrackMap,
    sector_bytes: u32,
    stored: bool,
}

pub(super) fn member_tracks(
    spec: &VolumeSpec,
    stores: &[Arc<dyn Member>],
    member_bytes: u64,
) -> Result<Vec<MemberTracks>> {
    let name = &spec.name;
    stores
        .iter()
        .zip(&spec.members)
        .enumerate()
        .map(|(i, (store, m))| {
            let context = || format!("volume {name}: member {i}: track boundaries");
            if let Some((map, sector_bytes)) =
                stored::load_within(store.as_ref(), member_bytes).with_context(context)?
            {
                return Ok(MemberTracks {
                    map,
                    sector_bytes,
                    stored: true,
                });
            }
            let mut profile = DriveProfile::load(&m.profile).with_context(context)?;
            profile.unit = m.drive_seed.or(profile.unit);
            let sector_bytes = profile
                .geometry
                .as_ref()
                .map_or(512, |g| g.sector_bytes)
                .max(1);
            let map = TrackMap::from_model(&profile, member_bytes / sector_bytes + 1)
                .with_context(context)?;
            tracing::info!(volume = %name, member = i, tracks = map.tracks(),
                "no stored boundary list: the member's drive model gives it");
            Ok(MemberTracks {
                map,
                sector_bytes: u32::try_from(sector_bytes).with_context(context)?,
                stored: false,
            })
        })
        .collect()
}

/// The personality over those tracks, with the volume's layout options.
pub(super) fn layout(
    spec: &VolumeSpec,
    tracks: &[MemberTracks],
    member_bytes: u64,
) -> Result<Box<dyn Personality>> {
    let maps = tracks
        .iter()
        .map(|t| t.map.scaled(u64::from(t.sector_bytes)))
        .collect::<Result<Vec<_>>>()?;
    let layout: Box<dyn Personality> = if spec.layout.name() == raid5_tracks::NAME {
        Box::new(Raid5Tracks::with_options(
            maps,
            member_bytes,
            &spec.layout_options,
        )?)
    } else if spec.layout.name() == raid10_tracks::NAME {
        Box::new(Raid10Tracks::with_tracks(maps, member_bytes)?)
    } else {
        Box::new(Raid0Tracks::with_tracks(maps, member_bytes)?)
    };
    for (key, value) in spec.layout_options.iter() {
        layout.set_option(key, value).map_err(|problem| {
            anyhow::anyhow!("volume {}: layout_options.{key}: {problem}", spec.name)
        })?;
    }
    Ok(layout)
}

/// Keep the lists not stored yet (after the headers: a member is never left with a list
/// but no header, which would make a blank member look foreign).
pub(super) fn store_missing(
    spec: &VolumeSpec,
    stores: &[Arc<dyn Member>],
    tracks: &[MemberTracks],
) -> Result<()> {
    for (i, (store, t)) in stores.iter().zip(tracks).enumerate() {
        if !t.stored {
            stored::store(store.as_ref(), &t.map, t.sector_bytes)
                .with_context(|| format!("volume {}: member {i}", spec.name))?;
        }
    }
    Ok(())
}
