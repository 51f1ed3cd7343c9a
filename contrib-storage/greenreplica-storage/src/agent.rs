//! The running agent: its volumes, their exports and rebuilds, and the control operations.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use crate::assemble::{assemble, VolumeSpec};
use crate::clock::{Clock, RealClock};
use crate::config::{parse_mode, Config, VolumeConfig};
use crate::control::protocol::{self, Request};
use crate::control::server::Handler;
use crate::export::{Export, ExportSpec};
use crate::ledger_store;
use crate::member::{CommandRunner, SystemRunner};
use crate::metrics;
use crate::rebuild;
use crate::sync::lock;
use crate::users::{resolve_group, resolve_user, Peer};
use crate::volume::{Health, SleepOutcome, Volume};

pub struct ManagedVolume {
    pub spec: VolumeSpec,
    pub volume: Arc<Volume>,
    export: Mutex<Option<Export>>,
    rebuild_stop: Arc<AtomicBool>,
    rebuilds: Mutex<Vec<JoinHandle<()>>>,
    /// uid of the caller that created it over the socket (None: from the config file).
    creator: Option<u32>,
    /// Directory holding the member files of a socket-created volume.
    member_dir: Option<PathBuf>,
}

pub struct Agent {
    config: Config,
    clock: Arc<RealClock>,
    runner: Arc<dyn CommandRunner>,
    volumes: Mutex<BTreeMap<String, Arc<ManagedVolume>>>,
}

impl Agent {
    pub fn new(config: Config) -> Self {
        Self {
            config,
            clock: Arc::new(RealClock::new()),
            runner: Arc::new(SystemRunner),
            volumes: Mutex::new(BTreeMap::new()),
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
            mount_point: e.mount_point.clone(),
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
    ) -> Result<Arc<ManagedVolume>> {
        if lock(&self.volumes).contains_key(&spec.name) {
            bail!("a volume named {:?} already exists", spec.name);
        }
        let clock: Arc<dyn Clock> = self.clock.clone();
        let volume = assemble(&spec, clock, self.state_dir(), &self.runner)?;
        let managed = Arc::new(ManagedVolume {
            spec,
            volume: volume.clone(),
            export: Mutex::new(None),
            rebuild_stop: Arc::new(AtomicBool::new(false)),
            rebuilds: Mutex::new(Vec::new()),
            creator,
            member_dir,
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
                self.stop_rebuilds(&managed);
                return Err(e.context(format!("volume {}: export", managed.spec.name)));
            }
        }
        lock(&self.volumes).insert(managed.spec.name.clone(), managed.clone());
        Ok(managed)
    }

    pub fn start_configured(&self) -> Result<()> {
        for vc in &self.config.volumes {
            let spec = VolumeSpec::from_config(vc)?;
            let export = self.export_spec(vc)?;
            self.start_volume(spec, &export, None, None)
                .with_context(|| format!("cannot start volume {}", vc.name))?;
        }
        Ok(())
    }

    fn start_rebuild(&self, managed: &ManagedVolume, member: usize) -> Result<()> {
        let handle = rebuild::spawn(
            managed.volume.clone(),
            member,
            managed.spec.rebuild_mb_s,
            managed.rebuild_stop.clone(),
        )
        .context("cannot start the rebuild thread")?;
        lock(&managed.rebuilds).push(handle);
        Ok(())
    }

    fn stop_rebuilds(&self, managed: &ManagedVolume) {
        managed.rebuild_stop.store(true, Ordering::SeqCst);
        for handle in lock(&managed.rebuilds).drain(..) {
            let _ = handle.join();
        }
    }

    /// Tear a volume down: rebuilds, mount, loop, FUSE; then flush, mark clean, save ledger.
    fn stop_volume(&self, managed: &ManagedVolume) -> Result<()> {
        let name = &managed.spec.name;
        self.stop_rebuilds(managed);
        let unexported = match lock(&managed.export).take() {
            Some(mut export) => export.stop(),
            None => Ok(()),
        };
        let flushed = managed.volume.flush();
        if unexported.is_ok() && flushed.is_ok() {
            if let Err(e) = managed.volume.set_identity_flags(true, true) {
                tracing::warn!(volume = %name, error = %e, "cannot mark the volume clean");
            }
        }
        self.save_ledger(&managed.volume);
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

    pub fn power_tick(&self) {
        for m in self.all() {
            m.volume.tick();
        }
    }

    pub fn metrics_text(&self) -> String {
        let all = self.all();
        let volumes: Vec<&Volume> = all.iter().map(|m| m.volume.as_ref()).collect();
        metrics::render(&volumes)
    }

    /// Stop every volume; socket-created ones are removed with their files.
    pub fn shutdown(&self) {
        let all: Vec<_> = std::mem::take(&mut *lock(&self.volumes))
            .into_values()
            .collect();
        for m in all {
            if let Err(e) = self.stop_volume(&m) {
                tracing::error!(volume = %m.spec.name, error = %format!("{e:#}"), "shutdown of volume failed");
            }
            if m.creator.is_some() {
                self.remove_files(&m);
            }
        }
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
        let dir = Path::new(directory);
        if !dir.is_absolute() {
            bail!("directory {directory:?} must be an absolute path");
        }
        let dir = dir
            .canonicalize()
            .with_context(|| format!("directory {directory:?}"))?;
        let allowed = self
            .config
            .agent
            .volume_directories
            .iter()
            .filter_map(|d| d.canonicalize().ok())
            .any(|root| dir.starts_with(&root) && dir != root);
        if !allowed {
            bail!(
                "directory {} is not below one of the agent's volume_directories",
                dir.display()
            );
        }
        let meta =
            std::fs::metadata(&dir).with_context(|| format!("directory {}", dir.display()))?;
        if !meta.is_dir() {
            bail!("{} is not a directory", dir.display());
        }
        use std::os::unix::fs::MetadataExt;
        if peer.uid != 0 && meta.uid() != peer.uid {
            bail!(
                "directory {} is not owned by the caller (uid {})",
                dir.display(),
                peer.uid
            );
        }
        if std::fs::read_dir(&dir)?.next().is_some() {
            bail!("directory {} is not empty", dir.display());
        }
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
            mount_point: dir.clone(),
            fstype: "ext4".into(),
            uid: peer.uid,
            gid: peer.gid,
            mode: 0o700,
            fuse_threads: self.config.agent.fuse_threads,
        };
        match self.start_volume(spec, &export, Some(peer.uid), Some(member_dir.clone())) {
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

    fn replace_member(&self, name: &str, member: usize, path: Option<&str>) -> Result<Value> {
        let m = self.get(name)?;
        let spec = m
            .spec
            .members
            .get(member)
            .ok_or_else(|| anyhow!("volume {name:?} has no member {member}"))?;
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
        let store = spec.open_replacement(path.map(Path::new), &self.runner)?;
        m.volume.replace_member(member, store)?;
        self.start_rebuild(&m, member)?;
        Ok(json!({"ok": true, "state": "rebuilding", "volume": m.volume.status()}))
    }

    fn dispatch(&self, request: Request, peer: &Peer) -> Result<Value> {
        Ok(match request {
            Request::Status => {
                let volumes: Vec<Value> = self.all().iter().map(|m| m.volume.status()).collect();
                json!({"ok": true, "version": crate::VERSION, "volumes": volumes})
            }
            Request::Volumes => {
                let names: Vec<String> = lock(&self.volumes).keys().cloned().collect();
                json!({"ok": true, "volumes": names})
            }
            Request::Volume { volume } => {
                json!({"ok": true, "volume": self.get(&volume)?.volume.status()})
            }
            Request::Wake { volume } => {
                let (state, ready_in_s) = self.get(&volume)?.volume.wake();
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
            Request::FailMember { volume, member } => {
                let m = self.get(&volume)?;
                if member >= m.volume.member_count() {
                    bail!("volume {volume:?} has no member {member}");
                }
                m.volume
                    .fail_member(member, &format!("failed on request of uid {}", peer.uid));
                json!({"ok": true, "volume": m.volume.status()})
            }
            Request::ReplaceMember {
                volume,
                member,
                path,
            } => self.replace_member(&volume, member, path.as_deref())?,
            Request::Metrics => json!({"ok": true, "text": self.metrics_text()}),
            Request::CreateVolume {
                name,
                template,
                directory,
            } => self.create_volume(peer, &name, &template, &directory)?,
            Request::RemoveVolume { name } => self.remove_volume(peer, &name)?,
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
