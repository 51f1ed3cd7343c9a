//! Volumes whose flash write buffer is an agent-level pool (`[[flash]]`, `src/flash_pool.rs`):
//! the pool opened from its configuration, a volume's spec with the pool as its last
//! member, and assembly with the pool's view of its storage as the flash member.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::{assemble_layout, MemberSpec, VolumeSpec};
use crate::clock::Clock;
use crate::config::FlashConfig;
use crate::flash_pool::{default_extent_bytes, FlashPool, HEADER_AREA};
use crate::layout;
use crate::member::{CommandRunner, FileMember, Member, MemberKind};
use crate::superblock::{self, MemberData, DATA_OFFSET};
use crate::volume::Volume;

/// The pool's metadata journal, beside the volumes' (`state_dir/flash-NAME.journal`).
pub fn pool_journal_dir(state_dir: &Path, pool: &str) -> std::path::PathBuf {
    state_dir.join(format!("flash-{pool}.journal"))
}

/// Open a configured pool: its storage and its journal.
pub fn open_pool(cfg: &FlashConfig, state_dir: &Path) -> Result<Arc<FlashPool>> {
    let name = &cfg.name;
    let store: Arc<dyn Member> = match cfg.kind {
        MemberKind::Blockdev => Arc::new(FileMember::open_device(MemberKind::Blockdev, &cfg.path)?),
        _ => {
            let size = cfg
                .size
                .as_ref()
                .map(|s| s.bytes())
                .transpose()
                .map_err(anyhow::Error::msg)?
                .with_context(|| format!("flash {name}: a file pool needs a size"))?;
            Arc::new(FileMember::open_or_create(
                MemberKind::File,
                &cfg.path,
                size,
            )?)
        }
    };
    let Some(data) = store.size().checked_sub(HEADER_AREA).filter(|&d| d > 0) else {
        bail!(
            "flash {name}: {} is {} bytes, not more than its {HEADER_AREA} bytes of header slots",
            cfg.path.display(),
            store.size()
        );
    };
    let extent = match &cfg.extent_size {
        Some(e) => e.bytes().map_err(anyhow::Error::msg)?,
        None => default_extent_bytes(data),
    };
    let pool = FlashPool::open(
        name,
        data,
        extent,
        &pool_journal_dir(state_dir, name),
        Some(store),
    )?;
    Ok(Arc::new(pool))
}

impl VolumeSpec {
    /// The spec with the pool's storage as its last (flash) member.
    pub fn with_pool_member(mut self, cfg: &FlashConfig) -> Self {
        self.members.push(MemberSpec {
            kind: cfg.kind,
            path: cfg.path.clone(),
            size: None,
            profile: cfg.profile.clone(),
            standby_mode: None,
            drive_seed: None,
            inject_read_errors: Vec::new(),
        });
        self
    }
}

/// Assemble a QMD volume on `pool`: `spec.members` are its disks then the pool (see
/// [`VolumeSpec::with_pool_member`]); the flash member is the pool's view for the volume.
pub fn assemble_pooled(
    spec: &VolumeSpec,
    pool: &Arc<FlashPool>,
    clock: Arc<dyn Clock>,
    state_dir: &Path,
    runner: &Arc<dyn CommandRunner>,
) -> Result<Arc<Volume>> {
    let name = &spec.name;
    pool.attach(name)
        .with_context(|| format!("volume {name}: flash pool"))?;
    let built = assemble_on(spec, pool, clock, state_dir, runner);
    if built.is_err() {
        pool.detach(name);
    }
    built
}

fn assemble_on(
    spec: &VolumeSpec,
    pool: &Arc<FlashPool>,
    clock: Arc<dyn Clock>,
    state_dir: &Path,
    runner: &Arc<dyn CommandRunner>,
) -> Result<Arc<Volume>> {
    let name = &spec.name;
    let Some((_, disks)) = spec.members.split_last() else {
        bail!("volume {name}: no members");
    };
    let mut stores: Vec<Arc<dyn Member>> = disks
        .iter()
        .enumerate()
        .map(|(i, m)| {
            m.open(runner)
                .with_context(|| format!("volume {name}: member {i}"))
        })
        .collect::<Result<_>>()?;
    // The disks set the member size; the pool's view is only as large as its data area.
    let smallest = stores.iter().map(|s| s.size()).min().unwrap_or(0);
    if smallest <= DATA_OFFSET {
        bail!("volume {name}: members must be larger than the {DATA_OFFSET}-byte header area");
    }
    let flash = pool.member_for(name)?;
    check_pool_slot(name, pool, &stores, flash.as_ref())?;
    stores.push(flash);
    let layout = layout::build_with(
        spec.layout,
        spec.members.len(),
        smallest - DATA_OFFSET,
        spec.stripe_unit,
        &spec.layout_options,
    )
    .with_context(|| format!("volume {name}"))?;
    layout
        .attach_flash_pool(pool.clone(), name)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("volume {name}"))?;
    let volume = assemble_layout(spec, clock, state_dir, stores, layout)?;
    if !pool.settled(name) {
        // Nothing was replayed (a new volume, or its journal was not its own): whatever
        // the pool still gives it is unused.
        pool.settle(name, &[])
            .with_context(|| format!("volume {name}: flash pool"))?;
    }
    Ok(volume)
}

/// Refused before anything is written: (1) a volume whose pool slot is blank (or half
/// rebuilt) while its disks belong to an existing volume — the engine rebuilds a member over
/// its whole data range, which on a pool is every volume's extents; (2) a new volume (blank
/// disks) whose name still holds extents in the pool — an earlier volume of that name,
/// left out of the configuration, whose buffered writes only the operator may give up.
fn check_pool_slot(
    name: &str,
    pool: &FlashPool,
    disks: &[Arc<dyn Member>],
    flash: &dyn Member,
) -> Result<()> {
    let blank_slot = match superblock::read(flash) {
        Ok(None) => true,
        Ok(Some(h)) => matches!(h.data, MemberData::Rebuilding { .. }),
        // Damaged or foreign: assembly fails the member (it is not rebuilt).
        Err(_) => false,
    };
    let existing = disks
        .iter()
        .any(|d| matches!(superblock::read(d.as_ref()), Ok(Some(_))));
    let held = pool.held(name).len();
    if !existing && held > 0 {
        bail!(
            "volume {name}: flash pool {} still holds {held} extents of an earlier volume named \
             {name} (its buffered writes may be the only copy of its newest data); restore \
             that volume's members, or release them with release_flash",
            pool.name()
        );
    }
    if blank_slot && existing {
        bail!(
            "volume {name}: its header slot in flash pool {} is blank or half rebuilt while its \
             disks belong to an existing volume; rebuilding a member writes its whole range, \
             which on a shared pool is other volumes' extents — refused (give the volume its \
             own flash member, or recreate it)",
            pool.name()
        );
    }
    Ok(())
}
