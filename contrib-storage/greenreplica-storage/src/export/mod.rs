//! Exporting a volume: FUSE image file → loop device → ext4 → mount point, and back.

mod fuse_image;
pub mod held_mount;
pub mod system;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use fuser::{BackgroundSession, MountOption};

use crate::volume::Volume;
pub use fuse_image::ImageFs;
pub use held_mount::MountTarget;

/// A configured mount point is opened (and held) once stale mounts are cleared; one named
/// by a socket caller was resolved and held before anything slow happened.
#[derive(Debug, Clone)]
pub enum MountPoint {
    Trusted(PathBuf),
    Held(Arc<MountTarget>),
}

impl MountPoint {
    pub fn shown(&self) -> &Path {
        match self {
            MountPoint::Trusted(p) => p,
            MountPoint::Held(t) => &t.shown,
        }
    }
}

/// Where and how a volume is mounted.
#[derive(Debug, Clone)]
pub struct ExportSpec {
    pub image: PathBuf,
    pub mount_point: MountPoint,
    pub fstype: String,
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
    pub fuse_threads: usize,
}

/// How long teardown waits for a detached loop device to close the image before it tries
/// to unmount the FUSE image anyway.
const LOOP_RELEASE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub struct Export {
    session: Option<BackgroundSession>,
    image: PathBuf,
    loop_device: Option<String>,
    /// The held mount point and the id of our mount on it.
    mounted: Option<(Arc<MountTarget>, u64)>,
}

/// Undo what a killed agent left behind: mounts of loop devices on our image, the loop
/// devices, and the dead FUSE mount of the image itself.
pub fn cleanup_stale(image: &Path) {
    for device in system::loops_backed_by(image) {
        for m in system::mounts().iter().filter(|m| m.source == device) {
            tracing::warn!(device = %device, target = %m.target.display(), "unmounting stale mount");
            if let Err(e) = system::umount_lazy(&m.target) {
                tracing::warn!(error = %e, "stale unmount failed");
            }
        }
        tracing::warn!(device = %device, image = %image.display(), "detaching stale loop device");
        if let Err(e) = system::loop_detach(&device) {
            tracing::warn!(error = %e, "stale loop detach failed");
        }
    }
    if system::mounts().iter().any(|m| m.target == image) {
        tracing::warn!(image = %image.display(), "unmounting stale FUSE image");
        if let Err(e) = system::umount_lazy(image) {
            tracing::warn!(error = %e, "stale FUSE unmount failed");
        }
    }
}

impl Export {
    /// Bring the volume up at its mount point, formatting only a volume that never was.
    pub fn start(volume: Arc<Volume>, spec: &ExportSpec) -> Result<Self> {
        cleanup_stale(&spec.image);
        let shown = spec.mount_point.shown();
        if let Some(m) = system::mounts().iter().find(|m| m.target == shown) {
            bail!(
                "mount point {} is already in use by {} ({})",
                shown.display(),
                m.source,
                m.fstype
            );
        }
        let target = match &spec.mount_point {
            MountPoint::Trusted(path) => Arc::new(MountTarget::trusted(path)?),
            MountPoint::Held(t) => t.clone(),
        };
        if let Some(dir) = spec.image.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&spec.image)
            .with_context(|| format!("cannot create image mount point {}", spec.image.display()))?;

        let mut export = Export {
            session: None,
            image: spec.image.clone(),
            loop_device: None,
            mounted: None,
        };
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            MountOption::FSName(format!("greenreplica-{}", volume.name())),
            MountOption::Subtype("greenreplica".into()),
        ];
        config.n_threads = Some(spec.fuse_threads);
        config.clone_fd = true;
        let session = fuser::spawn_mount(ImageFs::new(volume.clone()), &spec.image, &config)
            .with_context(|| format!("cannot mount the FUSE image at {}", spec.image.display()))?;
        export.session = Some(session);

        let device = system::loop_attach(&spec.image)?;
        export.loop_device = Some(device.clone());
        let identity = volume
            .identity()
            .context("a served volume has an identity")?;
        if !identity.formatted {
            tracing::info!(volume = %volume.name(), device = %device, "new volume: creating ext4");
            system::mkfs_ext4(&device, volume.name())?;
            volume.set_identity_flags(true, false)?;
        } else {
            if !identity.clean {
                tracing::warn!(volume = %volume.name(), "volume was not released cleanly: running e2fsck -p");
                system::fsck_preen(&device)?;
            }
            volume.set_identity_flags(true, false)?;
        }
        let mount_id = held_mount::mount_onto(
            &device,
            &spec.fstype,
            &target,
            spec.uid,
            spec.gid,
            spec.mode,
        )?;
        export.mounted = Some((target, mount_id));
        tracing::info!(volume = %volume.name(), device = %device, mount_point = %shown.display(), "volume mounted");
        Ok(export)
    }

    /// Unmount, detach and end the FUSE session; keeps going on errors and reports the first.
    pub fn stop(&mut self) -> Result<()> {
        let mut first_error = None;
        if let Some((target, mount_id)) = self.mounted.take() {
            if let Err(e) = held_mount::unmount(&target, mount_id, false) {
                first_error.get_or_insert(e);
            }
        }
        let mut image_held = false;
        if let Some(device) = self.loop_device.take() {
            match system::loop_detach(&device) {
                // The kernel lets go of the backing file asynchronously; the FUSE image
                // cannot be unmounted while the loop device still holds it open.
                Ok(()) => {
                    image_held = !system::wait_for_loop_release(&device, LOOP_RELEASE_TIMEOUT)
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if image_held {
            // Another mount namespace still holds a copy of the filesystem (its loop device
            // stays open until that namespace lets go; detach is pending). Take the image
            // out of ours lazily; the session ends with the agent.
            tracing::warn!(image = %self.image.display(), "the loop device is still held (by a copy of the mount in another mount namespace?); detaching the FUSE image lazily");
            if let Err(e) = system::umount_lazy(&self.image) {
                first_error.get_or_insert(e);
            }
            if let Some(session) = self.session.take() {
                // Its own unmount now finds nothing mounted and returns without joining.
                let _ = session.umount_and_join();
            }
        }
        if let Some(session) = self.session.take() {
            if let Err(e) = session.umount_and_join() {
                first_error.get_or_insert(anyhow::Error::from(e).context("FUSE unmount"));
            }
        }
        let _ = std::fs::remove_file(&self.image);
        match first_error {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}

/// Whether the loop devices on `image` went away (within 5 s).
impl Drop for Export {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::error!(image = %self.image.display(), error = %e, "export teardown failed");
        }
    }
}
