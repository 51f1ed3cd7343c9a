//! The running agent: its volumes, their exports and rebuilds, and the control operations.

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use crate::assemble::{assemble, assemble_pooled, open_pool, VolumeSpec};
use crate::clock::{Clock, RealClock};
use crate::config::{parse_mode, Config, VolumeConfig};
use crate::control::protocol::{self, Request};
use crate::control::server::Handler;
use crate::export::{Export, ExportSpec, MountPoint, MountTarget};
use crate::flash_pool::FlashPool;
use crate::ledger_store;
use crate::member::{CommandRunner, FileMember, Member, MemberKind, SystemRunner};
use crate::metrics;
use crate::safe_path;
use crate::sync::lock;
use crate::users::{resolve_group, resolve_user, Peer};
use crate::volume::{Health, SleepOutcome, Volume};

pub struct ManagedVolume {
    pub spec: VolumeSpec,
    pub volume: Arc<Volume>,
    export: Mutex<Option<Export>>,
    /// uid of the caller that created it over the socket (None: from the config file).
    creator: Option<u32>,
    /// Who besides root may fail or replace its members: the creator, or the configured
    /// export owner (root when none is configured).
    owner: u32,
    /// Directory holding the member files of a socket-created volume.
    member_dir: Option<PathBuf>,
    /// The `[[flash]]` pool its flash write buffer is in (its last member is the pool's).
    pool: Option<Arc<FlashPool>>,
}

pub struct Agent {
    config: Config,
    clock: Arc<RealClock>,
    runner: Arc<dyn CommandRunner>,
    volumes: Mutex<BTreeMap<String, Arc<ManagedVolume>>>,
    /// The configured `[[flash]]` pools, opened at start.
    pools: Mutex<BTreeMap<String, Arc<FlashPool>>>,
}

impl Agent {
    pub fn new(config: Config) -> Self {
        Self {
            config,
            clock: Arc::new(RealClock::new()),
            runner: Arc::new(SystemRunner),
            volumes: Mutex::new(BTreeMap::new()),
            pools: Mutex::new(BTreeMap::new()),
        }
    }

    fn state_dir(&self) -> &Path {
        &self.config.agent.state_dir
    }

    fn get(&self, name: &str) -> Result<Arc<ManagedVolume>> {
        lock(&self.volumes)
            .get(name)
            .cloned()
            .ok_or_else(|| anyhow!("no volume named {name:?}"))
    }

    fn all(&self) -> Vec<Arc<ManagedVolume>> {
        lock(&self.volumes).values().cloned().collect()
    }

    fn export_spec(&self, vc: &VolumeConfig) -> Result<ExportSpec> {
        let e = &vc.export;
        let (uid, primary_gid) = match &e.owner {
            Some(owner) => {
                resolve_user(owner).with_context(|| format!("volume {}: export.owner", vc.name))?
            }
            None => (0, 0),
        };
        let gid = match &e.group {
            Some(g) => {
                resolve_group(g).with_context(|| format!("volume {}: export.group", vc.name))?
            }
            None => primary_gid,
        };
        Ok(ExportSpec {
            image: self
                .config
                .agent
                .runtime_dir
                .join(format!("{}.img", vc.name)),
            mount_point: MountPoint::Trusted(e.mount_point.clone()),
            fstype: e.filesystem.clone(),
            uid,
            gid,
            mode: parse_mode(&e.mode).map_err(anyhow::Error::msg)?,
            fuse_threads: self.config.agent.fuse_threads,
        })
    }

    /// Assemble, export and register one volume.
    fn start_volume(
        &self,
        spec: VolumeSpec,
        export: &ExportSpec,
        creator: Option<u32>,
        member_dir: Option<PathBuf>,
        pool: Option<Arc<FlashPool>>,
    ) -> Result<Arc<ManagedVolume>> {
        if lock(&self.volumes).contains_key(&spec.name) {
            bail!("a volume named {:?} already exists", spec.name);
        }
        let owner = creator.unwrap_or(export.uid);
        let clock: Arc<dyn Clock> = self.clock.clone();
        let volume = match &pool {
            Some(pool) => assemble_pooled(&spec, pool, clock, self.state_dir(), &self.runner)?,
            None => assemble(&spec, clock, self.state_dir(), &self.runner)?,
        };
        volume
            .start_engine(spec.rebuild_mb_s)
            .context("cannot start the volume's engine thread")?;
        let managed = Arc::new(ManagedVolume {
            spec,
            volume: volume.clone(),
            export: Mutex::new(None),
            creator,
            owner,
            member_dir,
            pool,
        });
        for i in 0..volume.member_count() {
            if matches!(
                volume.slot(i).map(|s| s.health()),
                Some(Health::Rebuilding { .. })
            ) {
                self.start_rebuild(&managed, i)?;
            }
        }
        match Export::start(volume.clone(), export) {
            Ok(e) => *lock(&managed.export) = Some(e),
            Err(e) => {
                // Not served: its engine (and any rebuild on it) stops with it.
                managed.volume.stop_engine();
                if let Some(pool) = &managed.pool {
                    pool.detach(&managed.spec.name);
                }
                return Err(e.context(format!("volume {}: export", managed.spec.name)));
            }
        }
        lock(&self.volumes).insert(managed.spec.name.clone(), managed.clone());
        Ok(managed)
    }

    pub fn start_configured(&self) -> Result<()> {
        for fc in &self.config.flash {
            let pool = open_pool(fc, self.state_dir())
                .with_context(|| format!("cannot open flash pool {}", fc.name))?;
            lock(&self.pools).insert(fc.name.clone(), pool);
        }
        for vc in &self.config.volumes {
            let mut spec = VolumeSpec::from_config(vc)?;
            let pool = match &vc.flash {
                Some(name) => {
                    let fc = self.config.flash.iter().find(|f| f.name == *name);
                    let pool = lock(&self.pools).get(name).cloned();
                    let (Some(fc), Some(pool)) = (fc, pool) else {
                        bail!("volume {}: no flash pool named {name:?}", vc.name);
                    };
                    spec = spec.with_pool_member(fc);
                    Some(pool)
                }
                None => None,
            };
            let export = self.export_spec(vc)?;
            self.start_volume(spec, &export, None, None, pool)
                .with_context(|| format!("cannot start volume {}", vc.name))?;
        }
        Ok(())
    }

    /// The flash pools: size, free extents, the extents of every volume (assembled or not).
    fn flash_status(&self) -> Vec<Value> {
        lock(&self.pools).values().map(|p| p.status()).collect()
    }

    /// The operator's release of the extents a volume no longer in the configuration
    /// holds in a pool (root only: its buffered writes may be the only copy of its data).
    fn release_flash(&self, peer: &Peer, flash: &str, volume: &str) -> Result<Value> {
        if peer.uid != 0 {
            bail!(
                "permission denied: release_flash is for root, not uid {}",
                peer.uid
            );
        }
        let pool = lock(&self.pools)
            .get(flash)
            .cloned()
            .ok_or_else(|| anyhow!("no flash pool named {flash:?}"))?;
        let released = pool.release_volume(volume)?;
        Ok(json!({"ok": true, "flash": pool.status(), "released_extents": released}))
    }

    /// The volume's engine runs the rebuild as background events (throttled between the
    /// volume's minimum and `rebuild_mb_s`); it is told to look now.
    fn start_rebuild(&self, managed: &ManagedVolume, member: usize) -> Result<()> {
        if !managed.volume.kick_background() {
            bail!(
                "volume {}: no engine to rebuild member {member}",
                managed.spec.name
            );
        }
        Ok(())
    }

    /// Tear a volume down: rebuilds, mount, loop, FUSE; then flush, mark clean, save ledger.
    fn stop_volume(&self, managed: &ManagedVolume) -> Result<()> {
        let name = &managed.spec.name;
        tracing::info!(volume = %name, "stopping volume");
        let unexported = match lock(&managed.export).take() {
            Some(mut export) => export.stop(),
            None => Ok(()),
        };
        // No more requests: the engine (and the rebuild it runs) stops before the final
        // flush, so the watermark the headers record is covered by it.
        managed.volume.stop_engine();
        let flushed = managed.volume.flush();
        if unexported.is_ok() && flushed.is_ok() {
            if let Err(e) = managed.volume.set_identity_flags(true, true) {
                tracing::warn!(volume = %name, error = %e, "cannot mark the volume clean");
            }
        }
        self.save_ledger(&managed.volume);
        if let Some(pool) = &managed.pool {
            pool.detach(name);
        }
        tracing::info!(volume = %name, "volume stopped");
        unexported.with_context(|| format!("volume {name}: unexport"))?;
        flushed.with_context(|| format!("volume {name}: flush"))?;
        Ok(())
    }

    fn save_ledger(&self, volume: &Volume) {
        let Some(id) = volume.identity() else { return };
        let ledgers = volume.member_ledgers(self.clock.now());
        if let Err(e) = ledger_store::save(self.state_dir(), volume.name(), &id.volume_id, &ledgers)
        {
            tracing::warn!(volume = %volume.name(), error = %e, "cannot save the ledger");
        }
    }

    pub fn save_ledgers(&self) {
        for m in self.all() {
            self.save_ledger(&m.volume);
        }
    }

    pub fn metrics_text(&self) -> String {
        let all = self.all();
        let volumes: Vec<&Volume> = all.iter().map(|m| m.volume.as_ref()).collect();
        metrics::render(&volumes)
    }

    /// Stop every volume, all at once: the unmount writes the filesystem's superblock, and
    /// a sleeping drive must spin up for it; one volume after the other would add up every
    /// volume's spin-up. Socket-created volumes are removed with their files.
    pub fn shutdown(&self) {
        let all: Vec<_> = std::mem::take(&mut *lock(&self.volumes))
            .into_values()
            .collect();
        std::thread::scope(|scope| {
            for m in &all {
                let stop = move || {
                    if let Err(e) = self.stop_volume(m) {
                        tracing::error!(volume = %m.spec.name, error = %format!("{e:#}"), "shutdown of volume failed");
                    }
                    if m.creator.is_some() {
                        self.remove_files(m);
                    }
                };
                let spawned = std::thread::Builder::new()
                    .name(format!("stop-{}", m.spec.name))
                    .spawn_scoped(scope, stop);
                if let Err(e) = spawned {
                    tracing::warn!(volume = %m.spec.name, error = %e, "cannot start a stop thread; stopping in this one");
                    stop();
                }
            }
        });
    }

    fn remove_files(&self, m: &ManagedVolume) {
        if let Some(dir) = &m.member_dir {
            if let Err(e) = std::fs::remove_dir_all(dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot remove member files");
            }
        }
        let _ = std::fs::remove_file(ledger_store::path(self.state_dir(), &m.spec.name));
    }

    fn create_volume(
        &self,
        peer: &Peer,
        name: &str,
        template: &str,
        directory: &str,
    ) -> Result<Value> {
        let tpl = self
            .config
            .template(template)
            .ok_or_else(|| anyhow!("no template named {template:?}"))?;
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            || name.is_empty()
            || name.len() > 64
        {
            bail!("volume name {name:?}: use 1-64 letters, digits, - or _");
        }
        // Resolve the directory once, below a configured root, without symlinks, and hold
        // it: every later step (checks, mount, chown) acts on this descriptor, so swapping
        // the path for a symlink meanwhile redirects nothing.
        let held = safe_path::hold_dir_below(
            &self.config.agent.volume_directories,
            Path::new(directory),
            "directory",
        )
        .context("the directory must be below one of the agent's volume_directories")?;
        let dir = held.shown.clone();
        let st = safe_path::fstat(held.dir.as_fd())?;
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            bail!("{} is not a directory", dir.display());
        }
        if peer.uid != 0 && st.st_uid != peer.uid {
            bail!(
                "directory {} is not owned by the caller (uid {})",
                dir.display(),
                peer.uid
            );
        }
        if !safe_path::dir_is_empty(held.dir.as_fd())
            .with_context(|| format!("directory {}", dir.display()))?
        {
            bail!("directory {} is not empty", dir.display());
        }
        let target = Arc::new(MountTarget {
            shown: dir.clone(),
            dir: held.dir,
            recheck: Some((held.root, held.rel)),
        });
        let member_dir = self.state_dir().join("dynamic").join(name);
        if lock(&self.volumes).contains_key(name) {
            bail!("a volume named {name:?} already exists");
        }
        if member_dir.exists() {
            std::fs::remove_dir_all(&member_dir)
                .with_context(|| format!("cannot clear leftovers in {}", member_dir.display()))?;
        }
        std::fs::create_dir_all(&member_dir)
            .with_context(|| format!("cannot create {}", member_dir.display()))?;
        let spec = VolumeSpec::from_template(tpl, name, &member_dir)?;
        let export = ExportSpec {
            image: self.config.agent.runtime_dir.join(format!("{name}.img")),
            mount_point: MountPoint::Held(target),
            fstype: "ext4".into(),
            uid: peer.uid,
            gid: peer.gid,
            mode: 0o700,
            fuse_threads: self.config.agent.fuse_threads,
        };
        match self.start_volume(
            spec,
            &export,
            Some(peer.uid),
            Some(member_dir.clone()),
            None,
        ) {
            Ok(m) => {
                tracing::info!(volume = name, uid = peer.uid, dir = %dir.display(), "volume created for caller");
                Ok(json!({"ok": true, "volume": m.volume.status(), "mount_point": dir}))
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&member_dir);
                Err(e)
            }
        }
    }

    fn remove_volume(&self, peer: &Peer, name: &str) -> Result<Value> {
        let m = self.get(name)?;
        let Some(creator) = m.creator else {
            bail!("volume {name:?} comes from the configuration file and cannot be removed over the socket");
        };
        if peer.uid != 0 && peer.uid != creator {
            bail!("volume {name:?} belongs to uid {creator}");
        }
        lock(&self.volumes).remove(name);
        let stopped = self.stop_volume(&m);
        self.remove_files(&m);
        stopped?;
        Ok(json!({"ok": true}))
    }

    /// Root, or the volume's owner (its creator, or its configured export owner).
    fn check_member_authority(&self, peer: &Peer, m: &ManagedVolume, op: &str) -> Result<()> {
        if peer.uid != 0 && peer.uid != m.owner {
            bail!(
                "permission denied: {op} on volume {:?} is for root or its owner (uid {}), not uid {}",
                m.spec.name,
                m.owner,
                peer.uid
            );
        }
        Ok(())
    }

    fn fail_member(&self, peer: &Peer, name: &str, member: usize) -> Result<Value> {
        let m = self.get(name)?;
        self.check_member_authority(peer, &m, "fail_member")?;
        if member >= m.volume.member_count() {
            bail!("volume {name:?} has no member {member}");
        }
        m.volume
            .fail_member(member, &format!("failed on request of uid {}", peer.uid));
        Ok(json!({"ok": true, "volume": m.volume.status()}))
    }

    /// Fresh storage for a failed member. A file member is created through a held parent
    /// directory with O_EXCL|O_NOFOLLOW: its own path is recreated (the old file removed
    /// only if it is a regular file); a new path must lie below `agent.member_directories`
    /// and not exist yet. Devices named over the socket are for root only.
    fn open_replacement(
        &self,
        peer: &Peer,
        m: &ManagedVolume,
        member: usize,
        path: Option<&str>,
    ) -> Result<Arc<dyn Member>> {
        let spec = &m.spec.members[member];
        let path = path.map(Path::new).filter(|p| *p != spec.path);
        if spec.kind == MemberKind::Blockdev {
            if path.is_some() && peer.uid != 0 {
                bail!("only root may name a new device for a blockdev member");
            }
            return spec.open_replacement(path, &self.runner);
        }
        let (shown, parent, file_name, replace_existing) = match path {
            None => {
                let (parent, file_name) = safe_path::split_name(&spec.path)?;
                let dir = safe_path::open_trusted_dir(&parent)?;
                (spec.path.clone(), dir, file_name, true)
            }
            Some(p) => {
                let roots = &self.config.agent.member_directories;
                if roots.is_empty() {
                    bail!(
                        "replacement path {} refused: no agent.member_directories are configured \
                         (omit the path to recreate the member in place)",
                        p.display()
                    );
                }
                let (parent, file_name) = safe_path::split_name(p)?;
                let dir = if roots.contains(&parent) {
                    safe_path::open_trusted_dir(&parent)?
                } else {
                    safe_path::hold_dir_below(roots, &parent, "replacement directory")
                        .context("a replacement member must be below one of the agent's member_directories")?
                        .dir
                };
                (p.to_path_buf(), dir, file_name, false)
            }
        };
        let file = safe_path::create_file_at(parent.as_fd(), &file_name, replace_existing)
            .with_context(|| format!("replacement member {}", shown.display()))?;
        Ok(Arc::new(FileMember::from_new_file(
            spec.kind,
            &shown,
            file,
            spec.size.unwrap_or(0),
        )?))
    }

    fn replace_member(
        &self,
        peer: &Peer,
        name: &str,
        member: usize,
        path: Option<&str>,
    ) -> Result<Value> {
        let m = self.get(name)?;
        self.check_member_authority(peer, &m, "replace_member")?;
        if member >= m.spec.members.len() {
            bail!("volume {name:?} has no member {member}");
        }
        if let Some(pool) = &m.pool {
            if member + 1 == m.spec.members.len() {
                bail!(
                    "member {member} of {name:?} is flash pool {}, shared with other volumes: it \
                     cannot be replaced through one volume",
                    pool.name()
                );
            }
        }
        if !matches!(
            m.volume.slot(member).map(|s| s.health()),
            Some(Health::Failed { .. })
        ) {
            bail!("member {member} of {name:?} is not failed (fail it first)");
        }
        if let Some(p) = path {
            if !Path::new(p).is_absolute() {
                bail!("path {p:?} must be absolute");
            }
        }
        let store = self.open_replacement(peer, &m, member, path)?;
        m.volume.replace_member(member, store)?;
        self.start_rebuild(&m, member)?;
        Ok(json!({"ok": true, "state": "rebuilding", "volume": m.volume.status()}))
    }

    fn dispatch(&self, request: Request, peer: &Peer) -> Result<Value> {
        Ok(match request {
            Request::Status => {
                let volumes: Vec<Value> = self.all().iter().map(|m| m.volume.status()).collect();
                json!({"ok": true, "version": crate::VERSION, "volumes": volumes,
                    "flash": self.flash_status()})
            }
            Request::Volumes => {
                let names: Vec<String> = lock(&self.volumes).keys().cloned().collect();
                json!({"ok": true, "volumes": names})
            }
            Request::Volume { volume } => {
                json!({"ok": true, "volume": self.get(&volume)?.volume.status()})
            }
            Request::Wake {
                volume,
                extents,
                writes_only,
            } => {
                let volume = &self.get(&volume)?.volume;
                let (state, ready_in_s) = match extents {
                    Some(extents) if writes_only => volume.wake_for_writes(&extents)?,
                    Some(extents) => volume.wake_for(&extents)?,
                    None => volume.wake(),
                };
                json!({"ok": true, "state": state, "ready_in_s": ready_in_s})
            }
            Request::Sleep {
                volume,
                expected_idle_s,
            } => match self.get(&volume)?.volume.sleep(expected_idle_s) {
                SleepOutcome::Accepted(state) => json!({"ok": true, "state": state}),
                SleepOutcome::Declined(reason) => {
                    json!({"ok": false, "declined": true, "reason": reason, "error": format!("sleep declined: {reason}")})
                }
            },
            Request::Hint { volume, extents } => {
                let n = self.get(&volume)?.volume.hint(&extents)?;
                json!({"ok": true, "extents": n})
            }
            Request::FailMember { volume, member } => self.fail_member(peer, &volume, member)?,
            Request::ReplaceMember {
                volume,
                member,
                path,
            } => self.replace_member(peer, &volume, member, path.as_deref())?,
            Request::Metrics => json!({"ok": true, "text": self.metrics_text()}),
            Request::CreateVolume {
                name,
                template,
                directory,
            } => self.create_volume(peer, &name, &template, &directory)?,
            Request::RemoveVolume { name } => self.remove_volume(peer, &name)?,
            Request::RangeAsleep {
                volume,
                offset,
                len,
            } => {
                let answer = self.get(&volume)?.volume.range_asleep(offset, len)?;
                json!({"ok": true, "volume": volume, "range": answer})
            }
            Request::SetTemperature {
                volume,
                extents,
                temperature,
            } => {
                // Lasting state (journaled) that lets whole pairs sleep: for root and the
                // volume's owner only, as failing or replacing a member is.
                let m = self.get(&volume)?;
                self.check_member_authority(peer, &m, "set_temperature")?;
                let ranges = m.volume.set_temperature(&extents, &temperature)?;
                json!({"ok": true, "volume": volume, "ranges": ranges})
            }
            Request::Boundaries {
                volume,
                offset,
                len,
                max,
            } => {
                let m = self.get(&volume)?;
                crate::control::boundaries::reply(&volume, m.volume.layout(), offset, len, max)?
            }
            Request::ReleaseFlash { flash, volume } => self.release_flash(peer, &flash, &volume)?,
            Request::Scrub { volume, repair } => {
                let report = self.get(&volume)?.volume.scrub(repair.unwrap_or(true))?;
                json!({"ok": true, "volume": volume, "report": report})
            }
        })
    }
}

impl Handler for Agent {
    fn handle(&self, request: Request, peer: &Peer) -> Value {
        match self.dispatch(request, peer) {
            Ok(v) => v,
            Err(e) => protocol::error(format!("{e:#}")),
        }
    }
}

#[cfg(test)]
mod flash_tests;
