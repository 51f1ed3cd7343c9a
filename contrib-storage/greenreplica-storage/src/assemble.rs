//! Assembling a volume from its members: open them, read their headers, decide whether the
//! volume is new, which members are valid, stale or half rebuilt, and build the engine.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use crate::clock::Clock;
use crate::config::{MemberConfig, TemplateConfig, VolumeConfig};
use crate::drive::Drive;
use crate::layout::{self, LayoutKind};
use crate::ledger_store;
use crate::member::{BlockDevice, CommandRunner, FileMember, Member, MemberKind};
use crate::policy::PolicySpec;
use crate::profile::DriveProfile;
use crate::superblock::{self, MemberData, Superblock, DATA_OFFSET};
use crate::trace::TraceRecorder;
use crate::volume::{Health, MemberSlot, Volume};

#[derive(Debug, Clone)]
pub struct MemberSpec {
    pub kind: MemberKind,
    pub path: PathBuf,
    pub size: Option<u64>,
    pub profile: String,
    pub standby_mode: Option<String>,
}

/// Everything needed to assemble a volume, from the config file or a template.
#[derive(Debug, Clone)]
pub struct VolumeSpec {
    pub name: String,
    pub layout: LayoutKind,
    pub stripe_unit: u64,
    pub policy: PolicySpec,
    pub start_stop_budget_per_day: u32,
    pub rebuild_mb_s: f64,
    pub trace: Option<PathBuf>,
    pub members: Vec<MemberSpec>,
}

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
        })
    }

    /// Open (or create) the member's storage.
    pub fn open(&self, runner: &Arc<dyn CommandRunner>) -> Result<Arc<dyn Member>> {
        Ok(match self.kind {
            MemberKind::Blockdev => Arc::new(BlockDevice::open(&self.path, runner.clone())?),
            kind => Arc::new(FileMember::open_or_create(
                kind,
                &self.path,
                self.size.unwrap_or(0),
            )?),
        })
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
            policy: v.policy.clone(),
            start_stop_budget_per_day: v.start_stop_budget_per_day,
            rebuild_mb_s: v.rebuild_mb_s,
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
            policy: t.policy.clone(),
            start_stop_budget_per_day: t.start_stop_budget_per_day,
            rebuild_mb_s: t.rebuild_mb_s,
            trace: None,
            members: (0..t.members)
                .map(|i| MemberSpec {
                    kind: t.member_kind,
                    path: member_dir.join(format!("member-{i}.img")),
                    size: Some(size),
                    profile: t.profile.clone(),
                    standby_mode: None,
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
    let headers: Vec<Option<Superblock>> = stores
        .iter()
        .enumerate()
        .map(|(i, s)| {
            superblock::read(s.as_ref()).with_context(|| format!("volume {name}: member {i}"))
        })
        .collect::<Result<_>>()?;
    let smallest = stores.iter().map(|s| s.size()).min().unwrap_or(0);
    if smallest <= DATA_OFFSET {
        bail!("volume {name}: members must be larger than the {DATA_OFFSET}-byte header area");
    }
    let layout = layout::build(
        spec.layout,
        spec.members.len(),
        smallest - DATA_OFFSET,
        spec.stripe_unit,
    )
    .with_context(|| format!("volume {name}"))?;

    let reference = headers
        .iter()
        .flatten()
        .max_by_key(|h| h.generation)
        .cloned();
    let (identity, healths) = match reference {
        None => {
            tracing::info!(volume = %name, "all members blank: new volume");
            let identity = Superblock {
                volume: name.clone(),
                volume_id: superblock::new_volume_id(),
                layout: spec.layout,
                members: spec.members.len(),
                member_index: 0,
                stripe_unit: layout.stripe_unit(),
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
            if reference.member_data_bytes != layout.member_data_bytes() {
                bail!(
                    "volume {name}: member size changed ({} data bytes recorded, {} now)",
                    reference.member_data_bytes,
                    layout.member_data_bytes()
                );
            }
            let has_mirror = layout.mirror_of(0).is_some();
            let healths = headers
                .iter()
                .map(|h| member_health(h, &reference, has_mirror))
                .collect::<Result<Vec<_>>>()
                .with_context(|| format!("volume {name}"))?;
            tracing::info!(volume = %name, generation = reference.generation, ?healths, "existing volume reassembled");
            (reference, healths)
        }
    };

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
        let profile = Arc::new(
            DriveProfile::load(&m.profile).with_context(|| format!("volume {name}: member {i}"))?,
        );
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
    let volume = Arc::new(Volume::new(
        name,
        layout,
        slots,
        clock,
        recorder,
        Some(identity),
    ));
    volume
        .persist_headers()
        .with_context(|| format!("volume {name}"))?;
    Ok(volume)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;
    use crate::member::SystemRunner;

    fn spec(dir: &Path, members: usize) -> VolumeSpec {
        VolumeSpec {
            name: "v".into(),
            layout: if members == 1 {
                LayoutKind::Single
            } else {
                LayoutKind::Raid10
            },
            stripe_unit: 65536,
            policy: PolicySpec::AlwaysOn,
            start_stop_budget_per_day: 48,
            rebuild_mb_s: 100.0,
            trace: None,
            members: (0..members)
                .map(|i| MemberSpec {
                    kind: MemberKind::File,
                    path: dir.join(format!("m{i}.img")),
                    size: Some(8 << 20),
                    profile: "test-fast".into(),
                    standby_mode: None,
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
}
