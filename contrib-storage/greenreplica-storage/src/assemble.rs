//! Assembling a volume from its members: open them, read their headers, decide whether the
//! volume is new, which members are valid, stale or half rebuilt, and build the engine.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use crate::clock::Clock;
use crate::config::{MemberConfig, Size, TemplateConfig, VolumeConfig};
use crate::drive::Drive;
use crate::journal::meta::{EngineState, JournaledHealth, MetaJournal};
use crate::layout::{self, LayoutKind, LayoutOptions};
use crate::ledger_store;
use crate::member::{BlockDevice, CommandRunner, FaultyMember, FileMember, Member, MemberKind};
use crate::policy::PolicySpec;
use crate::profile::DriveProfile;
use crate::superblock::{self, MemberData, Superblock, SuperblockError, DATA_OFFSET};
use crate::trace::TraceRecorder;
use crate::volume::{
    bitmap_region_bytes, Health, IntegritySettings, MemberSlot, Recovered, Volume, WriteIntent,
};

#[derive(Debug, Clone)]
pub struct MemberSpec {
    pub kind: MemberKind,
    pub path: PathBuf,
    pub size: Option<u64>,
    pub profile: String,
    pub standby_mode: Option<String>,
    /// The member's unit of its drive model (emulated track sizes and defects).
    pub drive_seed: Option<u64>,
    /// Member data ranges whose reads fail until written (fault injection for tests).
    pub inject_read_errors: Vec<(u64, u64)>,
}

/// Everything needed to assemble a volume, from the config file or a template.
#[derive(Debug, Clone)]
pub struct VolumeSpec {
    pub name: String,
    pub layout: LayoutKind,
    pub stripe_unit: u64,
    pub layout_options: LayoutOptions,
    pub policy: PolicySpec,
    pub start_stop_budget_per_day: u32,
    pub rebuild_mb_s: f64,
    /// Write-intent bitmap region (member bytes per bit), before rounding.
    pub bitmap_region: u64,
    pub integrity: IntegritySettings,
    pub trace: Option<PathBuf>,
    pub members: Vec<MemberSpec>,
}

fn region_or_default(size: Option<&Size>) -> Result<u64> {
    size.map_or(Ok(DEFAULT_BITMAP_REGION), |s| {
        s.bytes().map_err(anyhow::Error::msg)
    })
}

/// Default write-intent region (MD's usual bitmap chunk): a resync after a crash copies at
/// most this much per region written last, and a new region (one small write and fdatasync
/// of the bitmap, on the write's path) stays rare even for scattered writes.
pub const DEFAULT_BITMAP_REGION: u64 = 64 << 20;

impl MemberSpec {
    fn from_config(m: &MemberConfig) -> Result<Self> {
        Ok(Self {
            kind: m.kind,
            path: m.path.clone(),
            size: m
                .size
                .as_ref()
                .map(|s| s.bytes())
                .transpose()
                .map_err(anyhow::Error::msg)?,
            profile: m.profile.clone(),
            standby_mode: m.standby_mode.clone(),
            drive_seed: m.drive_seed,
            inject_read_errors: m.inject_read_errors.clone(),
        })
    }

    /// Open (or create) the member's storage.
    pub fn open(&self, runner: &Arc<dyn CommandRunner>) -> Result<Arc<dyn Member>> {
        let store: Arc<dyn Member> = match self.kind {
            MemberKind::Blockdev => Arc::new(BlockDevice::open(&self.path, runner.clone())?),
            kind => Arc::new(FileMember::open_or_create(
                kind,
                &self.path,
                self.size.unwrap_or(0),
            )?),
        };
        if self.inject_read_errors.is_empty() {
            return Ok(store);
        }
        tracing::warn!(member = %self.path.display(), ranges = ?self.inject_read_errors, "fault injection: reads of these member data ranges fail until written");
        let faulty = FaultyMember::new(store);
        for &(offset, len) in &self.inject_read_errors {
            faulty.add_bad_range(DATA_OFFSET + offset..DATA_OFFSET + offset + len);
        }
        Ok(Arc::new(faulty))
    }

    /// Fresh storage for a replacement (files are recreated empty).
    pub fn open_replacement(
        &self,
        path: Option<&Path>,
        runner: &Arc<dyn CommandRunner>,
    ) -> Result<Arc<dyn Member>> {
        let spec = MemberSpec {
            path: path
                .map(Path::to_path_buf)
                .unwrap_or_else(|| self.path.clone()),
            ..self.clone()
        };
        let store: Arc<dyn Member> = match spec.kind {
            MemberKind::Blockdev => Arc::new(BlockDevice::open(&spec.path, runner.clone())?),
            kind => Arc::new(FileMember::recreate(
                kind,
                &spec.path,
                spec.size.unwrap_or(0),
            )?),
        };
        // A replacement must not look like a member of anything yet.
        match superblock::read(store.as_ref()) {
            Ok(None) => Ok(store),
            Ok(Some(sb)) => bail!(
                "replacement {} still carries a header of volume {} (member {}); wipe it first",
                spec.path.display(),
                sb.volume,
                sb.member_index
            ),
            Err(e) => Err(e.into()),
        }
    }
}

impl VolumeSpec {
    pub fn from_config(v: &VolumeConfig) -> Result<Self> {
        Ok(Self {
            name: v.name.clone(),
            layout: v.layout,
            stripe_unit: v.stripe_unit,
            layout_options: v.layout_options.clone(),
            policy: v.policy.clone(),
            start_stop_budget_per_day: v.start_stop_budget_per_day,
            rebuild_mb_s: v.rebuild_mb_s,
            bitmap_region: region_or_default(v.bitmap_region.as_ref())?,
            integrity: IntegritySettings {
                rebuild_min_mb_s: v.rebuild_min_mb_s,
                scrub_interval_s: v.scrub_interval_hours.map(|h| h * 3600.0),
            },
            trace: v.trace.clone(),
            members: v
                .members
                .iter()
                .map(MemberSpec::from_config)
                .collect::<Result<_>>()?,
        })
    }

    pub fn from_template(t: &TemplateConfig, name: &str, member_dir: &Path) -> Result<Self> {
        let size = t.member_size.bytes().map_err(anyhow::Error::msg)?;
        Ok(Self {
            name: name.to_string(),
            layout: t.layout,
            stripe_unit: t.stripe_unit,
            layout_options: t.layout_options.clone(),
            policy: t.policy.clone(),
            start_stop_budget_per_day: t.start_stop_budget_per_day,
            rebuild_mb_s: t.rebuild_mb_s,
            bitmap_region: region_or_default(t.bitmap_region.as_ref())?,
            integrity: IntegritySettings {
                rebuild_min_mb_s: t.rebuild_min_mb_s,
                scrub_interval_s: t.scrub_interval_hours.map(|h| h * 3600.0),
            },
            trace: None,
            members: (0..t.members)
                .map(|i| MemberSpec {
                    kind: t.member_kind,
                    path: member_dir.join(format!("member-{i}.img")),
                    size: Some(size),
                    profile: t.profile.clone(),
                    standby_mode: None,
                    drive_seed: None,
                    inject_read_errors: Vec::new(),
                })
                .collect(),
        })
    }
}

/// Decide each member's health from its header and the newest generation.
fn member_health(
    header: &Option<Superblock>,
    reference: &Superblock,
    has_mirror: bool,
) -> Result<Health> {
    Ok(match header {
        None if has_mirror => Health::Rebuilding { watermark: 0 },
        None => bail!(
            "a member of existing volume {} is blank and there is no copy to rebuild it from",
            reference.volume
        ),
        Some(h) if h.generation < reference.generation => Health::Failed {
            reason: format!(
                "stale: generation {} < {}",
                h.generation, reference.generation
            ),
        },
        Some(Superblock {
            data: MemberData::Rebuilding { watermark },
            ..
        }) => Health::Rebuilding {
            watermark: *watermark,
        },
        Some(_) => Health::InSync,
    })
}

pub fn assemble(
    spec: &VolumeSpec,
    clock: Arc<dyn Clock>,
    state_dir: &Path,
    runner: &Arc<dyn CommandRunner>,
) -> Result<Arc<Volume>> {
    let name = &spec.name;
    let stores: Vec<Arc<dyn Member>> = spec
        .members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            m.open(runner)
                .with_context(|| format!("volume {name}: member {i}"))
        })
        .collect::<Result<_>>()?;
    assemble_stores(spec, clock, state_dir, stores)
}

/// Assemble from members already opened (`spec.members` in order).
pub fn assemble_stores(
    spec: &VolumeSpec,
    clock: Arc<dyn Clock>,
    state_dir: &Path,
    stores: Vec<Arc<dyn Member>>,
) -> Result<Arc<Volume>> {
    let name = &spec.name;
    if stores.len() != spec.members.len() {
        bail!(
            "volume {name}: {} members opened for {} configured",
            stores.len(),
            spec.members.len()
        );
    }
    let smallest = stores.iter().map(|s| s.size()).min().unwrap_or(0);
    if smallest <= DATA_OFFSET {
        bail!("volume {name}: members must be larger than the {DATA_OFFSET}-byte header area");
    }
    if tracks::wants_tracks(spec) {
        let member_tracks = tracks::member_tracks(spec, &stores, smallest - DATA_OFFSET)?;
        let layout = tracks::layout(spec, &member_tracks, smallest - DATA_OFFSET)
            .with_context(|| format!("volume {name}"))?;
        let volume = assemble_layout(spec, clock, state_dir, stores.clone(), layout)?;
        tracks::store_missing(spec, &stores, &member_tracks)?;
        return Ok(volume);
    }
    let layout = layout::build_with(
        spec.layout,
        spec.members.len(),
        smallest - DATA_OFFSET,
        spec.stripe_unit,
        &spec.layout_options,
    )
    .with_context(|| format!("volume {name}"))?;
    assemble_layout(spec, clock, state_dir, stores, layout)
}

/// Assemble with a personality already built for the members (tests bring their own).
pub(crate) fn assemble_layout(
    spec: &VolumeSpec,
    clock: Arc<dyn Clock>,
    state_dir: &Path,
    stores: Vec<Arc<dyn Member>>,
    layout: Box<dyn layout::Personality>,
) -> Result<Arc<Volume>> {
    let name = &spec.name;
    // A damaged header fails only its member (if the rest of the volume can be found).
    let mut damaged: Vec<Option<String>> = vec![None; stores.len()];
    let headers: Vec<Option<Superblock>> = stores
        .iter()
        .enumerate()
        .map(|(i, s)| match superblock::read(s.as_ref()) {
            Err(e @ SuperblockError::Damaged { .. }) => {
                tracing::error!(volume = %name, member = i, error = %e, "damaged header: the member is failed");
                damaged[i] = Some(e.to_string());
                Ok(None)
            }
            other => other.with_context(|| format!("volume {name}: member {i}")),
        })
        .collect::<Result<_>>()?;

    let reference = headers
        .iter()
        .flatten()
        .max_by_key(|h| h.generation)
        .cloned();
    let (identity, mut healths) = match reference {
        None if damaged.iter().any(Option::is_some) => {
            bail!(
                "volume {name}: no member has a readable header (damaged: {})",
                damaged
                    .iter()
                    .flatten()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        }
        None => {
            tracing::info!(volume = %name, "all members blank: new volume");
            let identity = Superblock {
                volume: name.clone(),
                volume_id: superblock::new_volume_id(),
                layout: spec.layout,
                members: spec.members.len(),
                member_index: 0,
                stripe_unit: layout.stripe_unit(),
                layout_options: spec.layout_options.clone(),
                member_data_bytes: layout.member_data_bytes(),
                generation: 1,
                formatted: false,
                clean: true,
                data: MemberData::InSync,
            };
            (identity, vec![Health::InSync; spec.members.len()])
        }
        Some(reference) => {
            for (i, h) in headers.iter().enumerate() {
                let Some(h) = h else { continue };
                let path = spec.members[i].path.display();
                if h.volume_id != reference.volume_id || h.volume != *name {
                    bail!("volume {name}: member {i} ({path}) belongs to volume {} ({}), not to this one", h.volume, h.volume_id);
                }
                if h.member_index != i {
                    bail!("volume {name}: {path} is member {} of the volume but is configured as member {i}", h.member_index);
                }
            }
            if reference.layout != spec.layout
                || reference.members != spec.members.len()
                || reference.stripe_unit != layout.stripe_unit()
            {
                bail!(
                    "volume {name}: the members were created as {} with {} members and stripe unit {}, but the configuration says {} with {} and {}",
                    reference.layout, reference.members, reference.stripe_unit, spec.layout, spec.members.len(), layout.stripe_unit()
                );
            }
            // Options that place bytes must match what the members were written with; the
            // others (a rebuild order, a flush budget) may change between runs.
            let placing = |o: &LayoutOptions| {
                o.iter()
                    .filter(|(k, _)| layout.option_places_data(k))
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
            };
            if placing(&reference.layout_options) != placing(&spec.layout_options) {
                bail!(
                    "volume {name}: the members were created with layout options {:?}, but the configuration says {:?}",
                    placing(&reference.layout_options).join(", "),
                    placing(&spec.layout_options).join(", ")
                );
            }
            if reference.member_data_bytes != layout.member_data_bytes() {
                bail!(
                    "volume {name}: member size changed ({} data bytes recorded, {} now)",
                    reference.member_data_bytes,
                    layout.member_data_bytes()
                );
            }
            let has_mirror = layout.redundant();
            let healths = headers
                .iter()
                .map(|h| member_health(h, &reference, has_mirror))
                .collect::<Result<Vec<_>>>()
                .with_context(|| format!("volume {name}"))?;
            tracing::info!(volume = %name, generation = reference.generation, ?healths, "existing volume reassembled");
            (reference, healths)
        }
    };

    for (health, problem) in healths.iter_mut().zip(&damaged) {
        if let Some(problem) = problem {
            *health = Health::Failed {
                reason: format!("damaged header: {problem}"),
            };
        }
    }

    let (meta, journaled) = open_metadata_journal(state_dir, name)?;
    let mut identity = identity;
    let journaled = match journaled {
        Some(state) if state.volume_id == identity.volume_id => Some(state),
        Some(state) => {
            if !state.volume_id.is_empty() {
                tracing::warn!(volume = %name, journal = %meta.path().display(), their = %state.volume_id,
                    "the metadata journal belongs to another volume of this name; starting a new one");
            }
            None
        }
        None => None,
    };
    if let Some(state) = &journaled {
        let changed = merge_journal(&mut healths, &headers, state, identity.generation);
        if changed {
            // The headers did not see what the journal did: a new generation makes the
            // members it failed stale in the headers too.
            identity.generation = identity.generation.max(state.generation) + 1;
            tracing::warn!(volume = %name, ?healths, generation = identity.generation,
                "the metadata journal recorded membership changes the member headers missed");
        }
        let records: Vec<layout::LayoutRecord> = state
            .layout_records
            .iter()
            .map(|(kind, payload)| layout::LayoutRecord {
                kind: *kind,
                payload: payload.clone(),
            })
            .collect();
        layout
            .replay(state.layout_image.as_deref(), &records)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("volume {name}: replaying the layout's journal records"))?;
        // Blocks the records point at (QMD's address blocks), from members in sync only.
        let mut read = |member: usize, offset: u64, len: u64| -> Option<Vec<u8>> {
            let in_sync = matches!(healths.get(member), Some(Health::InSync));
            let store = stores.get(member).filter(|_| in_sync)?;
            let mut buf = vec![0u8; usize::try_from(len).ok()?];
            store
                .read_at(&mut buf, DATA_OFFSET.checked_add(offset)?)
                .ok()?;
            Some(buf)
        };
        layout
            .replay_blocks(&mut read)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("volume {name}: reading the layout's metadata blocks"))?;
    } else {
        meta.reset(EngineState {
            volume_id: identity.volume_id.clone(),
            ..EngineState::default()
        })
        .with_context(|| format!("volume {name}: metadata journal"))?;
    }

    let ledgers = ledger_store::load(state_dir, name, &identity.volume_id, spec.members.len());
    let now = clock.now();
    let mut slots = Vec::new();
    for (i, ((m, store), (health, ledger))) in spec
        .members
        .iter()
        .zip(stores)
        .zip(healths.into_iter().zip(ledgers))
        .enumerate()
    {
        let mut profile =
            DriveProfile::load(&m.profile).with_context(|| format!("volume {name}: member {i}"))?;
        // The member's own unit of the model (track sizes, defects).
        profile.unit = m.drive_seed.or(profile.unit);
        let profile = Arc::new(profile);
        let mode = match &m.standby_mode {
            Some(mode) => profile
                .mode_index(mode)
                .with_context(|| format!("volume {name}: member {i}: no standby mode {mode:?}"))?,
            None => profile.default_mode_index(),
        };
        let drive = Drive::new(
            profile,
            mode,
            spec.policy.build(spec.start_stop_budget_per_day),
            now,
            ledger,
        );
        slots.push(MemberSlot::new(Some(store), drive, health));
    }
    let recorder = spec
        .trace
        .as_ref()
        .map(|p| {
            TraceRecorder::create(p, name)
                .with_context(|| format!("volume {name}: cannot open trace {}", p.display()))
        })
        .transpose()?;
    let member_data_bytes = layout.member_data_bytes();
    let was_clean = identity.clean;
    let volume_id = identity.volume_id.clone();
    let mut volume = Volume::new(name, layout, slots, clock, recorder, Some(identity))
        .with_integrity(spec.integrity.clone());
    if volume.layout().redundant() {
        let intent = open_write_intent(spec, state_dir, &volume_id, member_data_bytes, was_clean)?;
        volume = volume.with_write_intent(intent);
    }
    let volume = Arc::new(volume.with_metadata_journal(meta));
    // Writes the picture to the journal, then the headers; then the replayed log is folded.
    volume
        .persist_headers()
        .with_context(|| format!("volume {name}"))?;
    volume
        .checkpoint_metadata()
        .with_context(|| format!("volume {name}"))?;
    Ok(volume)
}

/// The volume's metadata journal beside its state; None for the state when it holds no
/// membership yet (a new journal, or an old volume's first start with one).
fn open_metadata_journal(
    state_dir: &Path,
    name: &str,
) -> Result<(MetaJournal, Option<EngineState>)> {
    let path = state_dir.join(format!("{name}.journal"));
    let (meta, state) = MetaJournal::open(&path)
        .with_context(|| format!("volume {name}: metadata journal {}", path.display()))?;
    let known = state.generation > 0;
    Ok((meta, known.then_some(state)))
}

/// Fold the journal's membership into the healths the headers gave; returns whether
/// anything changed. The headers stay authoritative for who belongs (identity, staleness,
/// a blank or damaged member); the journal, committed before every header write and after
/// every rebuild flush, is newer for what happened since: a failure the headers never
/// recorded, a rebuild further along or finished, a member whose header write of the last
/// change was cut short (one generation behind, in sync by the journal). A journal older
/// than the headers (restored, or left from before) is not used for membership.
fn merge_journal(
    healths: &mut [Health],
    headers: &[Option<Superblock>],
    state: &EngineState,
    header_generation: u64,
) -> bool {
    if state.generation < header_generation || state.members.len() != healths.len() {
        return false;
    }
    let mut changed = false;
    for ((health, header), journaled) in healths.iter_mut().zip(headers).zip(&state.members) {
        let Some(header) = header else {
            continue;
        };
        // One generation behind: the agent died between two header writes of the change
        // the journal committed first (MD re-adds such a member on its bitmap's word). Its
        // data is as current as the journal says; the bitmap resyncs what was in flight.
        // Further behind, it is an old copy, whatever the journal says of its slot.
        let interrupted_header_write = header.generation + 1 == header_generation
            && !matches!(journaled, JournaledHealth::Failed { .. });
        if matches!(health, Health::Failed { .. }) && !interrupted_header_write {
            continue;
        }
        let merged = match (&*health, journaled) {
            (_, JournaledHealth::Failed { reason }) => Health::Failed {
                reason: format!("failed before the crash (metadata journal): {reason}"),
            },
            (Health::Rebuilding { watermark: h }, JournaledHealth::Rebuilding { watermark: j }) => {
                Health::Rebuilding {
                    watermark: (*h).max(*j),
                }
            }
            (_, JournaledHealth::Rebuilding { watermark }) => Health::Rebuilding {
                watermark: *watermark,
            },
            (_, JournaledHealth::InSync) => Health::InSync,
        };
        if merged != *health {
            changed |= !matches!(
                (&*health, &merged),
                (Health::Rebuilding { .. }, Health::Rebuilding { .. })
            );
            *health = merged;
        }
    }
    changed
}

/// The write-intent bitmap beside the state; after an unclean stop its set bits are the
/// regions to resync (every region if the bitmap is gone).
fn open_write_intent(
    spec: &VolumeSpec,
    state_dir: &Path,
    volume_id: &str,
    member_data_bytes: u64,
    was_clean: bool,
) -> Result<WriteIntent> {
    let name = &spec.name;
    let region = bitmap_region_bytes(member_data_bytes, spec.bitmap_region);
    let regions = member_data_bytes.div_ceil(region);
    let path = state_dir.join(format!("{name}.write-intent"));
    let bytes = crate::volume::bitmap_file_bytes(regions);
    // A bitmap of another geometry (smaller) is useless: start a new one (recover() then
    // finds no valid bitmap, so an unclean volume is resynced in full).
    let file = FileMember::open_or_create(MemberKind::File, &path, bytes)
        .or_else(|_| FileMember::recreate(MemberKind::File, &path, bytes))
        .with_context(|| format!("volume {name}: write-intent bitmap {}", path.display()))?;
    let intent = WriteIntent::new(Arc::new(file), volume_id, region, member_data_bytes);
    let dirty = match intent.recover() {
        Recovered::Bits(bits) => bits,
        Recovered::Unknown if was_clean => Default::default(),
        Recovered::Unknown => {
            tracing::warn!(volume = %name, "unclean stop and no write-intent bitmap: resyncing every region");
            (0..intent.regions()).collect()
        }
    };
    if !dirty.is_empty() {
        tracing::warn!(volume = %name, regions = dirty.len(), region_bytes = region, "unclean stop: resyncing the regions written last");
    }
    intent.set_recovered(dirty);
    intent
        .store_now()
        .with_context(|| format!("volume {name}: cannot write {}", path.display()))?;
    Ok(intent)
}

#[cfg(test)]
mod crash_tests;
#[cfg(test)]
mod ido_crash_tests;
mod pool;
pub use pool::{assemble_pooled, open_pool, pool_journal_dir};
mod tracks;
#[cfg(test)]
mod tracks_tests;

#[cfg(test)]
mod ido_surrogate_crash_tests;
#[cfg(test)]
mod qmd_crash_tests;
#[cfg(test)]
mod qmd_pool_tests;
#[cfg(test)]
mod qmd_staging_crash_tests;
#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;
    use crate::member::SystemRunner;

    fn spec(dir: &Path, members: usize) -> VolumeSpec {
        VolumeSpec {
            name: "v".into(),
            layout: if members == 1 {
                LayoutKind::SINGLE
            } else {
                LayoutKind::RAID10
            },
            stripe_unit: 65536,
            layout_options: Default::default(),
            policy: PolicySpec::AlwaysOn,
            start_stop_budget_per_day: 48,
            rebuild_mb_s: 100.0,
            bitmap_region: 1 << 20,
            integrity: IntegritySettings::default(),
            trace: None,
            members: (0..members)
                .map(|i| MemberSpec {
                    kind: MemberKind::File,
                    path: dir.join(format!("m{i}.img")),
                    size: Some(8 << 20),
                    profile: "test-fast".into(),
                    standby_mode: None,
                    drive_seed: None,
                    inject_read_errors: Vec::new(),
                })
                .collect(),
        }
    }

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("grs-asm-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn open(spec: &VolumeSpec, dir: &Path) -> Result<Arc<Volume>> {
        let runner: Arc<dyn CommandRunner> = Arc::new(SystemRunner);
        assemble(spec, Arc::new(VirtualClock::new()), dir, &runner)
    }

    #[test]
    fn new_volume_then_reassembly_keeps_identity_and_data() {
        let dir = tmp("reopen");
        let s = spec(&dir, 2);
        let v = open(&s, &dir).unwrap();
        let id = v.identity().unwrap();
        assert!(!id.formatted);
        v.write(4096, b"kept").unwrap();
        v.set_identity_flags(true, true).unwrap();
        drop(v);
        let v = open(&s, &dir).unwrap();
        assert_eq!(v.identity().unwrap().volume_id, id.volume_id);
        assert!(v.identity().unwrap().formatted);
        let mut buf = [0u8; 4];
        v.read(4096, &mut buf).unwrap();
        assert_eq!(&buf, b"kept");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn each_member_drive_is_the_unit_its_seed_names() {
        let dir = tmp("units");
        let mut s = spec(&dir, 2);
        s.members[0].drive_seed = Some(7);
        let v = open(&s, &dir).unwrap();
        let members = v.status_view().members;
        assert_eq!(members[0].profile["unit"], 7);
        assert!(members[1].profile["unit"].is_null());
        drop(v);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_member_that_missed_a_failure_stays_failed() {
        let dir = tmp("stale");
        let s = spec(&dir, 2);
        let v = open(&s, &dir).unwrap();
        v.fail_member(1, "test");
        drop(v);
        let v = open(&s, &dir).unwrap();
        assert!(matches!(v.slot(1).unwrap().health(), Health::Failed { .. }));
        assert_eq!(v.slot(0).unwrap().health(), Health::InSync);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn swapped_members_and_changed_shapes_are_refused() {
        let dir = tmp("swap");
        let s = spec(&dir, 2);
        drop(open(&s, &dir).unwrap());
        let mut swapped = s.clone();
        swapped.members.swap(0, 1);
        let err = format!("{:#}", open(&swapped, &dir).unwrap_err());
        assert!(err.contains("configured as member"), "{err}");
        let mut wider = s.clone();
        wider.stripe_unit = 131072;
        let err = format!("{:#}", open(&wider, &dir).unwrap_err());
        assert!(err.contains("stripe unit"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_blank_member_of_an_existing_mirror_is_rebuilt() {
        let dir = tmp("blank");
        let s = spec(&dir, 2);
        drop(open(&s, &dir).unwrap());
        std::fs::remove_file(dir.join("m1.img")).unwrap();
        let v = open(&s, &dir).unwrap();
        assert_eq!(
            v.slot(1).unwrap().health(),
            Health::Rebuilding { watermark: 0 }
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn member_data(path: &Path) -> Vec<u8> {
        std::fs::read(path).unwrap()[DATA_OFFSET as usize..].to_vec()
    }

    #[test]
    fn after_an_unclean_stop_the_dirty_regions_are_resynced_from_the_first_mirror() {
        use std::os::unix::fs::FileExt;
        let dir = tmp("crash");
        let s = spec(&dir, 2);
        let v = open(&s, &dir).unwrap();
        v.set_identity_flags(true, false).unwrap(); // mounted
        v.write(3 << 20, &[7u8; 65536]).unwrap();
        v.flush().unwrap();
        drop(v); // the agent dies: no clean stop
                 // It died between the two copies of its last write.
        let m1 = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("m1.img"))
            .unwrap();
        m1.write_all_at(&[9u8; 4096], DATA_OFFSET + (3 << 20) + 8192)
            .unwrap();
        drop(m1);
        let v = open(&s, &dir).unwrap();
        // Whatever is read first is what both copies end up holding.
        let mut buf = vec![0u8; 4096];
        v.read((3 << 20) + 8192, &mut buf).unwrap();
        assert_eq!(buf, vec![7u8; 4096], "read from the first mirror");
        for _ in 0..100 {
            v.tick();
        }
        drop(v);
        assert!(
            member_data(&dir.join("m0.img")) == member_data(&dir.join("m1.img")),
            "mirrors still differ after the restart"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_damaged_header_fails_that_member_instead_of_the_volume() {
        use std::os::unix::fs::FileExt;
        let dir = tmp("damaged");
        let s = spec(&dir, 2);
        let v = open(&s, &dir).unwrap();
        v.write(0, b"survives").unwrap();
        v.set_identity_flags(true, true).unwrap();
        drop(v);
        let m1 = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("m1.img"))
            .unwrap();
        m1.write_all_at(b"#garbage#", 40).unwrap();
        drop(m1);
        let v = open(&s, &dir).unwrap();
        assert!(
            matches!(v.slot(1).unwrap().health(), Health::Failed { ref reason } if reason.contains("damaged")),
            "{:?}",
            v.slot(1).unwrap().health()
        );
        let mut buf = [0u8; 8];
        v.read(0, &mut buf).unwrap();
        assert_eq!(&buf, b"survives");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_unclean_stop_with_no_usable_bitmap_resyncs_every_region() {
        use std::os::unix::fs::FileExt;
        let dir = tmp("nobitmap");
        let s = spec(&dir, 2);
        let v = open(&s, &dir).unwrap();
        v.set_identity_flags(true, false).unwrap();
        drop(v);
        // A region never written: its bit is clear, but the bitmap is gone.
        let m1 = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("m1.img"))
            .unwrap();
        m1.write_all_at(&[3u8; 512], DATA_OFFSET + (5 << 20))
            .unwrap();
        drop(m1);
        std::fs::remove_file(dir.join("v.write-intent")).unwrap();
        let v = open(&s, &dir).unwrap();
        assert!(v.resync_pending() > 0);
        for _ in 0..100 {
            v.tick();
        }
        assert_eq!(v.resync_pending(), 0);
        drop(v);
        assert!(member_data(&dir.join("m0.img")) == member_data(&dir.join("m1.img")));
        // A bitmap of another geometry is replaced, not an error.
        let mut finer = s.clone();
        finer.bitmap_region = 64 << 10;
        drop(open(&finer, &dir).unwrap());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
