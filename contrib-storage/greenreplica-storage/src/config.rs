//! The agent's TOML configuration, validated with messages that name the key and the problem.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

use crate::layout::{LayoutKind, LayoutOptions};
use crate::member::MemberKind;
use crate::policy::{PolicySpec, DEFAULT_START_STOP_BUDGET};
use crate::profile::DriveProfile;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read configuration {path}: {cause}")]
    Read { path: String, cause: std::io::Error },
    #[error("configuration {path}: {cause}")]
    Parse {
        path: String,
        cause: Box<toml::de::Error>,
    },
    #[error("configuration {path}: `{key}`: {problem}")]
    Invalid {
        path: String,
        key: String,
        problem: String,
    },
}

/// A byte count written as an integer or as text with a unit ("256MiB", "1G").
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Size {
    Bytes(u64),
    Text(String),
}

impl Size {
    pub fn bytes(&self) -> Result<u64, String> {
        match self {
            Size::Bytes(b) => Ok(*b),
            Size::Text(t) => parse_size(t),
        }
    }
}

pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '_'))
        .unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .replace('_', "")
        .parse()
        .map_err(|_| format!("{text:?} is not a size (e.g. 4096, \"256MiB\", \"10G\")"))?;
    let factor: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" | "k" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        other => return Err(format!("unknown unit {other:?} in {text:?}")),
    };
    n.checked_mul(factor)
        .ok_or_else(|| format!("{text:?} is too large"))
}

fn default_socket() -> PathBuf {
    PathBuf::from("/run/greenreplica-storage/control.sock")
}
fn default_state_dir() -> PathBuf {
    PathBuf::from("/var/lib/greenreplica-storage")
}
fn default_runtime_dir() -> PathBuf {
    PathBuf::from("/run/greenreplica-storage")
}
fn default_fuse_threads() -> usize {
    8
}
fn default_max_connections() -> usize {
    64
}
fn default_connection_idle_timeout_s() -> f64 {
    60.0
}
fn default_stripe_unit() -> u64 {
    65536
}
fn default_policy() -> PolicySpec {
    PolicySpec::IdleTimeout { timeout_s: 600.0 }
}
fn default_budget() -> u32 {
    DEFAULT_START_STOP_BUDGET
}
fn default_rebuild_mb_s() -> f64 {
    50.0
}
fn default_rebuild_min_mb_s() -> f64 {
    5.0
}
fn default_filesystem() -> String {
    "ext4".into()
}
fn default_mode() -> String {
    "0700".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    #[serde(default = "default_socket")]
    pub socket: PathBuf,
    /// Group whose members (besides root) may use the control socket.
    pub group: Option<String>,
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    #[serde(default = "default_runtime_dir")]
    pub runtime_dir: PathBuf,
    /// Optional Prometheus listener; loopback addresses only.
    pub metrics_listen: Option<SocketAddr>,
    /// Directories under which `create_volume` may mount volumes for unprivileged callers.
    #[serde(default)]
    pub volume_directories: Vec<PathBuf>,
    #[serde(default = "default_fuse_threads")]
    pub fuse_threads: usize,
    /// Directories under which `replace_member` may create a replacement member file named
    /// by a socket caller (none: only the member's own path can be recreated).
    #[serde(default)]
    pub member_directories: Vec<PathBuf>,
    /// Control connections served at once; more are answered with an error and closed.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// A control connection that sends nothing for this long is closed.
    #[serde(default = "default_connection_idle_timeout_s")]
    pub connection_idle_timeout_s: f64,
    /// Refuse to start if PR_SET_IO_FLUSHER or mlockall fails (default: log and go on).
    #[serde(default)]
    pub strict_memory: bool,
}

impl Default for AgentSection {
    fn default() -> Self {
        Self {
            socket: default_socket(),
            group: None,
            state_dir: default_state_dir(),
            runtime_dir: default_runtime_dir(),
            metrics_listen: None,
            volume_directories: Vec::new(),
            fuse_threads: default_fuse_threads(),
            member_directories: Vec::new(),
            max_connections: default_max_connections(),
            connection_idle_timeout_s: default_connection_idle_timeout_s(),
            strict_memory: false,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberConfig {
    pub kind: MemberKind,
    pub path: PathBuf,
    /// Required for file and emulated-hdd members; a blockdev has its device's size.
    pub size: Option<Size>,
    pub profile: String,
    /// Standby mode of the profile to use (default: the profile's default).
    pub standby_mode: Option<String>,
    /// Which unit of the profile's model this member is: picks its track-size variant and
    /// defect list (emulated drives; see "Track boundaries" in docs/storage-agent.md).
    pub drive_seed: Option<u64>,
    /// Fault injection for tests: `[[offset, length], …]` in member data bytes whose reads
    /// fail until they are written (a latent sector error the disk remaps on write).
    #[serde(default)]
    pub inject_read_errors: Vec<(u64, u64)>,
    /// What the member is for when the layout gives members roles: "surrogate" marks the
    /// last two members of a `*-ido-s` volume (IDO's surrogate RAID1 pair).
    pub role: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportConfig {
    pub mount_point: PathBuf,
    #[serde(default = "default_filesystem")]
    pub filesystem: String,
    /// User name or numeric uid that owns the mounted filesystem's root.
    pub owner: Option<String>,
    /// Group name or numeric gid (default: the owner's primary group).
    pub group: Option<String>,
    /// Permissions of the filesystem root, octal.
    #[serde(default = "default_mode")]
    pub mode: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeConfig {
    pub name: String,
    pub layout: LayoutKind,
    /// Chunk size of striped layouts (`chunk_size` is the same key, MD's name for it).
    #[serde(default = "default_stripe_unit", alias = "chunk_size")]
    pub stripe_unit: u64,
    /// Options of the logged layouts (graid, rolo-*): log share, rotation and pre-wake fill,
    /// zebra width.
    #[serde(default)]
    pub layout_options: LayoutOptions,
    #[serde(default = "default_policy")]
    pub policy: PolicySpec,
    #[serde(default = "default_budget")]
    pub start_stop_budget_per_day: u32,
    /// Record volume and member I/O here (MSR CSV).
    pub trace: Option<PathBuf>,
    #[serde(default = "default_rebuild_mb_s")]
    pub rebuild_mb_s: f64,
    /// Rebuild rate while foreground I/O is going on (rebuild_mb_s is the maximum).
    #[serde(default = "default_rebuild_min_mb_s")]
    pub rebuild_min_mb_s: f64,
    /// Member bytes per write-intent bit (default 64 MiB).
    pub bitmap_region: Option<Size>,
    /// Compare and repair the mirrors this often (default: only on request).
    pub scrub_interval_hours: Option<f64>,
    pub export: ExportConfig,
    #[serde(rename = "member")]
    pub members: Vec<MemberConfig>,
    /// A QMD volume's flash write buffer in this `[[flash]]` pool (shared with other
    /// volumes) instead of its own last member: the members are then the pairs only.
    pub flash: Option<String>,
}

fn default_flash_profile() -> String {
    "ssd".into()
}

/// An agent-level flash pool (`[[flash]]`): one file or SSD whose write-buffer extents
/// several QMD volumes share (`src/flash_pool.rs`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlashConfig {
    pub name: String,
    /// file or blockdev.
    pub kind: MemberKind,
    pub path: PathBuf,
    /// Required for a file: its whole size (16 MiB of volume header slots, then the data).
    pub size: Option<Size>,
    #[serde(default = "default_flash_profile")]
    pub profile: String,
    /// Extent size (default a sixteenth of the data area, at most 1 GiB, whole MiB).
    pub extent_size: Option<Size>,
}

impl FlashConfig {
    /// Bytes of the pool's data area and its extent size, when the size is known (files).
    pub fn shape(&self) -> Result<Option<(u64, u64)>, String> {
        let Some(size) = &self.size else {
            return Ok(None);
        };
        let size = size.bytes()?;
        let data = size
            .checked_sub(crate::flash_pool::HEADER_AREA)
            .filter(|&d| d > 0)
            .ok_or_else(|| {
                format!(
                    "{size} bytes leave nothing after the {} bytes of volume header slots",
                    crate::flash_pool::HEADER_AREA
                )
            })?;
        let extent = match &self.extent_size {
            Some(e) => e.bytes()?,
            None => crate::flash_pool::default_extent_bytes(data),
        };
        crate::flash_pool::check_shape(data, extent)?;
        Ok(Some((data, extent)))
    }
}

/// A recipe for volumes that unprivileged callers create over the control socket.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateConfig {
    pub name: String,
    pub layout: LayoutKind,
    pub members: usize,
    pub member_kind: MemberKind,
    pub member_size: Size,
    pub profile: String,
    /// Chunk size of striped layouts (`chunk_size` is the same key, MD's name for it).
    #[serde(default = "default_stripe_unit", alias = "chunk_size")]
    pub stripe_unit: u64,
    /// Options of the logged layouts (graid, rolo-*): log share, rotation and pre-wake fill,
    /// zebra width.
    #[serde(default)]
    pub layout_options: LayoutOptions,
    #[serde(default = "default_policy")]
    pub policy: PolicySpec,
    #[serde(default = "default_budget")]
    pub start_stop_budget_per_day: u32,
    #[serde(default = "default_rebuild_mb_s")]
    pub rebuild_mb_s: f64,
    /// Rebuild rate while foreground I/O is going on (rebuild_mb_s is the maximum).
    #[serde(default = "default_rebuild_min_mb_s")]
    pub rebuild_min_mb_s: f64,
    /// Member bytes per write-intent bit (default 64 MiB).
    pub bitmap_region: Option<Size>,
    /// Compare and repair the mirrors this often (default: only on request).
    pub scrub_interval_hours: Option<f64>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub agent: AgentSection,
    #[serde(default, rename = "volume")]
    pub volumes: Vec<VolumeConfig>,
    #[serde(default, rename = "template")]
    pub templates: Vec<TemplateConfig>,
    /// Flash pools several QMD volumes share (`[[flash]]`).
    #[serde(default, rename = "flash")]
    pub flash: Vec<FlashConfig>,
    /// Where the configuration came from (for messages).
    #[serde(skip)]
    pub origin: String,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl Config {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
            path: path.display().to_string(),
            cause,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|cause| ConfigError::Parse {
            path: origin.to_string(),
            cause: Box::new(cause),
        })?;
        config.origin = origin.to_string();
        config.validate()?;
        Ok(config)
    }

    fn invalid(&self, key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.origin.clone(),
            key: key.into(),
            problem: problem.into(),
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let a = &self.agent;
        for (key, path) in [
            ("agent.socket", &a.socket),
            ("agent.state_dir", &a.state_dir),
            ("agent.runtime_dir", &a.runtime_dir),
        ] {
            if !path.is_absolute() {
                return Err(
                    self.invalid(key, format!("{} must be an absolute path", path.display()))
                );
            }
        }
        if let Some(addr) = a.metrics_listen {
            if !addr.ip().is_loopback() {
                return Err(self.invalid(
                    "agent.metrics_listen",
                    format!(
                        "{addr} is not a loopback address (metrics are served on loopback only)"
                    ),
                ));
            }
        }
        for (key, dirs) in [
            ("volume_directories", &a.volume_directories),
            ("member_directories", &a.member_directories),
        ] {
            for (i, dir) in dirs.iter().enumerate() {
                if !dir.is_absolute() {
                    return Err(
                        self.invalid(format!("agent.{key}[{i}]"), "must be an absolute path")
                    );
                }
            }
        }
        if a.max_connections == 0 || a.max_connections > 4096 {
            return Err(self.invalid("agent.max_connections", "must be between 1 and 4096"));
        }
        if !(a.connection_idle_timeout_s.is_finite() && a.connection_idle_timeout_s > 0.0) {
            return Err(self.invalid(
                "agent.connection_idle_timeout_s",
                "must be a positive number of seconds",
            ));
        }
        if a.fuse_threads == 0 || a.fuse_threads > 64 {
            return Err(self.invalid("agent.fuse_threads", "must be between 1 and 64"));
        }
        let mut names = BTreeSet::new();
        let mut paths = BTreeSet::new();
        let mut mounts = BTreeSet::new();
        self.check_flash_pools(&mut paths)?;
        for (v, vol) in self.volumes.iter().enumerate() {
            let key = |k: &str| format!("volume[{v}].{k}");
            if !valid_name(&vol.name) {
                return Err(self.invalid(
                    key("name"),
                    format!("{:?}: use 1-64 letters, digits, - or _", vol.name),
                ));
            }
            if !names.insert(vol.name.clone()) {
                return Err(self.invalid(
                    key("name"),
                    format!("{:?} is used by another volume", vol.name),
                ));
            }
            let smallest = vol
                .members
                .iter()
                .filter_map(|m| m.size.as_ref().and_then(|s| s.bytes().ok()))
                .min();
            self.check_volume_flash(&key, vol, smallest)?;
            // A volume on a flash pool has the pool's view as its last member.
            let member_count = vol.members.len() + usize::from(vol.flash.is_some());
            self.check_common(
                &key,
                vol.layout,
                member_count,
                vol.stripe_unit,
                vol.rebuild_mb_s,
            )?;
            self.check_layout_options(
                &key,
                vol.layout,
                member_count,
                smallest,
                vol.stripe_unit,
                &vol.layout_options,
            )?;
            self.check_integrity(
                &key,
                vol.rebuild_mb_s,
                vol.rebuild_min_mb_s,
                vol.bitmap_region.as_ref(),
                vol.scrub_interval_hours,
            )?;
            if !vol.export.mount_point.is_absolute() {
                return Err(self.invalid(key("export.mount_point"), "must be an absolute path"));
            }
            if !mounts.insert(vol.export.mount_point.clone()) {
                return Err(self.invalid(key("export.mount_point"), "is used by another volume"));
            }
            if vol.export.filesystem != "ext4" {
                return Err(self.invalid(
                    key("export.filesystem"),
                    format!("{:?} is not supported (only ext4)", vol.export.filesystem),
                ));
            }
            parse_mode(&vol.export.mode).map_err(|p| self.invalid(key("export.mode"), p))?;
            self.check_member_roles(&key, vol)?;
            for (m, member) in vol.members.iter().enumerate() {
                let mkey = |k: &str| key(&format!("member[{m}].{k}"));
                if !member.path.is_absolute() {
                    return Err(self.invalid(mkey("path"), "must be an absolute path"));
                }
                if !paths.insert(member.path.clone()) {
                    return Err(self.invalid(
                        mkey("path"),
                        format!("{} is used by another member", member.path.display()),
                    ));
                }
                if member
                    .inject_read_errors
                    .iter()
                    .any(|&(offset, len)| len == 0 || offset.checked_add(len).is_none())
                {
                    return Err(self.invalid(
                        mkey("inject_read_errors"),
                        "every [offset, length] needs a length > 0 and must not overflow",
                    ));
                }
                if !member.inject_read_errors.is_empty() && member.kind == MemberKind::Blockdev {
                    return Err(self.invalid(
                        mkey("inject_read_errors"),
                        "only file and emulated-hdd members take injected faults",
                    ));
                }
                let profile = DriveProfile::load(&member.profile)
                    .map_err(|e| self.invalid(mkey("profile"), e.to_string()))?;
                if let Some(mode) = &member.standby_mode {
                    if profile.mode_index(mode).is_none() {
                        return Err(self.invalid(
                            mkey("standby_mode"),
                            format!("profile {} has no standby mode {mode:?}", profile.name),
                        ));
                    }
                }
                match (&member.size, member.kind) {
                    (None, MemberKind::Blockdev) => {}
                    (None, _) => {
                        return Err(self.invalid(
                            mkey("size"),
                            "is required for file and emulated-hdd members",
                        ))
                    }
                    (Some(size), _) => {
                        let bytes = size.bytes().map_err(|p| self.invalid(mkey("size"), p))?;
                        if bytes < 8 << 20 {
                            return Err(self.invalid(
                                mkey("size"),
                                format!("{bytes} bytes is too small (at least 8 MiB)"),
                            ));
                        }
                    }
                }
            }
        }
        let mut templates = BTreeSet::new();
        for (t, tpl) in self.templates.iter().enumerate() {
            let key = |k: &str| format!("template[{t}].{k}");
            if !valid_name(&tpl.name) || !templates.insert(tpl.name.clone()) {
                return Err(self.invalid(
                    key("name"),
                    format!("{:?} is not a valid, unique name", tpl.name),
                ));
            }
            self.check_common(
                &key,
                tpl.layout,
                tpl.members,
                tpl.stripe_unit,
                tpl.rebuild_mb_s,
            )?;
            self.check_layout_options(
                &key,
                tpl.layout,
                tpl.members,
                tpl.member_size.bytes().ok(),
                tpl.stripe_unit,
                &tpl.layout_options,
            )?;
            self.check_integrity(
                &key,
                tpl.rebuild_mb_s,
                tpl.rebuild_min_mb_s,
                tpl.bitmap_region.as_ref(),
                tpl.scrub_interval_hours,
            )?;
            if tpl.member_kind == MemberKind::Blockdev {
                return Err(self.invalid(
                    key("member_kind"),
                    "templates create file or emulated-hdd members only",
                ));
            }
            let bytes = tpl
                .member_size
                .bytes()
                .map_err(|p| self.invalid(key("member_size"), p))?;
            if bytes < 8 << 20 {
                return Err(self.invalid(key("member_size"), "must be at least 8 MiB"));
            }
            DriveProfile::load(&tpl.profile)
                .map_err(|e| self.invalid(key("profile"), e.to_string()))?;
        }
        Ok(())
    }

    /// `[[flash]]` pools: unique names and paths, sizes that hold extents.
    fn check_flash_pools(&self, paths: &mut BTreeSet<PathBuf>) -> Result<(), ConfigError> {
        let mut names = BTreeSet::new();
        for (f, pool) in self.flash.iter().enumerate() {
            let key = |k: &str| format!("flash[{f}].{k}");
            if !valid_name(&pool.name) || !names.insert(pool.name.clone()) {
                return Err(self.invalid(
                    key("name"),
                    format!(
                        "{:?} is not a unique name of 1-64 letters, digits, - or _",
                        pool.name
                    ),
                ));
            }
            if !pool.path.is_absolute() {
                return Err(self.invalid(key("path"), "must be an absolute path"));
            }
            if !paths.insert(pool.path.clone()) {
                return Err(self.invalid(
                    key("path"),
                    format!("{} is used by another pool or member", pool.path.display()),
                ));
            }
            match (pool.kind, &pool.size) {
                (MemberKind::EmulatedHdd, _) => {
                    return Err(self.invalid(key("kind"), "a flash pool is a file or a blockdev"))
                }
                (MemberKind::File, None) => {
                    return Err(self.invalid(key("size"), "is required for a file pool"))
                }
                (MemberKind::Blockdev, Some(_)) => {
                    return Err(self.invalid(key("size"), "a blockdev pool has its device's size"))
                }
                _ => {}
            }
            pool.shape().map_err(|p| self.invalid(key("size"), p))?;
            DriveProfile::load(&pool.profile)
                .map_err(|e| self.invalid(key("profile"), e.to_string()))?;
        }
        Ok(())
    }

    /// A volume's `flash`: an existing pool, a QMD volume, no buffer shape of its own, and
    /// (for file members) a pool whose extents fit the members' size.
    fn check_volume_flash(
        &self,
        key: &dyn Fn(&str) -> String,
        vol: &VolumeConfig,
        smallest: Option<u64>,
    ) -> Result<(), ConfigError> {
        let Some(name) = &vol.flash else {
            return Ok(());
        };
        let Some(pool) = self.flash.iter().find(|f| f.name == *name) else {
            return Err(self.invalid(key("flash"), format!("no [[flash]] pool is named {name:?}")));
        };
        if vol.layout != LayoutKind::QMD {
            return Err(self.invalid(
                key("flash"),
                format!("layout {} has no flash write buffer (only qmd)", vol.layout),
            ));
        }
        for option in ["buffer_bytes", "extent_bytes"] {
            if vol.layout_options.get(option).is_some() {
                return Err(self.invalid(
                    key(&format!("layout_options.{option}")),
                    format!("the buffer is flash pool {name}'s: set its size and extent_size"),
                ));
            }
        }
        if let (Ok(Some((data, extent))), Some(member)) = (pool.shape(), smallest) {
            let end = data / extent * extent;
            if end > member.saturating_sub(crate::superblock::DATA_OFFSET) {
                return Err(self.invalid(
                    key("flash"),
                    format!(
                        "pool {name}'s {end} bytes of extents exceed the members' data bytes \
                         (a QMD volume addresses its flash within its member size)"
                    ),
                ));
            }
            if !extent.is_multiple_of(vol.stripe_unit.max(1)) {
                return Err(self.invalid(
                    key("flash"),
                    format!("pool {name}'s extents of {extent} bytes are not whole stripe units"),
                ));
            }
        }
        Ok(())
    }

    fn check_common(
        &self,
        key: &dyn Fn(&str) -> String,
        layout: LayoutKind,
        members: usize,
        stripe_unit: u64,
        rebuild_mb_s: f64,
    ) -> Result<(), ConfigError> {
        if let Err(p) = layout.check(members, stripe_unit) {
            return Err(self.invalid(key(p.key), p.problem));
        }
        if !(rebuild_mb_s.is_finite() && rebuild_mb_s > 0.0) {
            return Err(self.invalid(key("rebuild_mb_s"), "must be > 0"));
        }
        Ok(())
    }

    /// `[volume.layout_options]`: a layout built for the check (members of the configured
    /// size, or 1 GiB where a device decides) takes or refuses each key, naming it.
    fn check_layout_options(
        &self,
        key: &dyn Fn(&str) -> String,
        layout: LayoutKind,
        members: usize,
        member_bytes: Option<u64>,
        stripe_unit: u64,
        options: &LayoutOptions,
    ) -> Result<(), ConfigError> {
        if options.is_empty() {
            return Ok(());
        }
        let member_bytes = member_bytes.unwrap_or(1 << 30);
        crate::layout::build_with(layout, members, member_bytes, stripe_unit, options)
            .map(|_| ())
            .map_err(|e| {
                let text = e.to_string();
                let blamed = options
                    .iter()
                    .map(|(k, _)| k)
                    .find(|k| text.contains(&format!("layout_options.{k}")));
                let at = blamed.map_or_else(
                    || "layout_options".to_string(),
                    |k| format!("layout_options.{k}"),
                );
                self.invalid(key(&at), text)
            })
    }

    /// `role = "surrogate"` must mark exactly the surrogate pair of a `*-ido-s` layout.
    fn check_member_roles(
        &self,
        key: &dyn Fn(&str) -> String,
        vol: &VolumeConfig,
    ) -> Result<(), ConfigError> {
        let n = vol.members.len() + usize::from(vol.flash.is_some());
        let probe = crate::layout::build(vol.layout, n, 1 << 30, vol.stripe_unit)
            .map_err(|e| self.invalid(key("layout"), e.to_string()))?;
        for (m, member) in vol.members.iter().enumerate() {
            let surrogate = probe.role(m) == crate::layout::Role::Surrogate;
            match (member.role.as_deref(), surrogate) {
                (None, false) | (Some("surrogate"), true) => {}
                (None, true) => {
                    return Err(self.invalid(
                        key(&format!("member[{m}].role")),
                        format!(
                            "layout {} takes its last two members as the surrogate pair: say \
                             role = \"surrogate\"",
                            vol.layout
                        ),
                    ))
                }
                (Some(role), _) => {
                    return Err(self.invalid(
                        key(&format!("member[{m}].role")),
                        format!(
                            "{role:?}: only the last two members of a *-ido-s layout are \
                             role = \"surrogate\""
                        ),
                    ))
                }
            }
        }
        Ok(())
    }

    fn check_integrity(
        &self,
        key: &dyn Fn(&str) -> String,
        rebuild_mb_s: f64,
        rebuild_min_mb_s: f64,
        bitmap_region: Option<&Size>,
        scrub_interval_hours: Option<f64>,
    ) -> Result<(), ConfigError> {
        if !(rebuild_min_mb_s.is_finite() && rebuild_min_mb_s > 0.0)
            || rebuild_min_mb_s > rebuild_mb_s
        {
            return Err(self.invalid(
                key("rebuild_min_mb_s"),
                format!("must be > 0 and at most rebuild_mb_s ({rebuild_mb_s})"),
            ));
        }
        if let Some(region) = bitmap_region {
            let bytes = region
                .bytes()
                .map_err(|p| self.invalid(key("bitmap_region"), p))?;
            if bytes < 4096 || !bytes.is_multiple_of(4096) {
                return Err(self.invalid(
                    key("bitmap_region"),
                    "must be a multiple of 4 KiB (at least 4 KiB)",
                ));
            }
        }
        if scrub_interval_hours.is_some_and(|h| !(h.is_finite() && h > 0.0)) {
            return Err(self.invalid(key("scrub_interval_hours"), "must be > 0"));
        }
        Ok(())
    }

    pub fn template(&self, name: &str) -> Option<&TemplateConfig> {
        self.templates.iter().find(|t| t.name == name)
    }
}

pub fn parse_mode(text: &str) -> Result<u32, String> {
    u32::from_str_radix(text.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("{text:?} is not an octal file mode like \"0700\""))
}

#[cfg(test)]
mod flash_tests;

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[agent]
socket = "/run/grs/control.sock"
group = "postgres"

[[volume]]
name = "data"
layout = "raid10"
policy = "idle-timeout:60"

[volume.export]
mount_point = "/srv/data"
owner = "postgres"

[[volume.member]]
kind = "emulated-hdd"
path = "/var/lib/grs/data-0.img"
size = "64MiB"
profile = "test-fast"

[[volume.member]]
kind = "emulated-hdd"
path = "/var/lib/grs/data-1.img"
size = "64MiB"
profile = "test-fast"
"#;

    fn err(text: &str) -> String {
        Config::parse(text, "test.toml").unwrap_err().to_string()
    }

    /// A `raid5-ido-s` volume: three array members, then the surrogate pair, and these
    /// `[volume.layout_options]`.
    fn ido_s(options: &str, roles: [&str; 5]) -> String {
        let mut text = MINIMAL
            .split("[[volume.member]]")
            .next()
            .unwrap()
            .replace("layout = \"raid10\"", "layout = \"raid5-ido-s\"");
        for (i, role) in roles.iter().enumerate() {
            text.push_str(&format!(
                "[[volume.member]]\nkind = \"file\"\npath = \"/var/lib/grs/d-{i}.img\"\n\
                 size = \"64MiB\"\nprofile = \"test-fast\"\n{role}\n"
            ));
        }
        if !options.is_empty() {
            text.push_str(&format!("[volume.layout_options]\n{options}\n"));
        }
        text
    }

    #[test]
    fn ido_surrogates_and_rebuild_options_are_checked() {
        let sur = "role = \"surrogate\"";
        let good = ido_s(
            "rebuild = \"workout\"\nzone_size = \"6MiB\"",
            ["", "", "", sur, sur],
        );
        let c = Config::parse(&good, "test.toml").unwrap();
        let o = &c.volumes[0].layout_options;
        assert_eq!(
            (o.get("rebuild"), o.get("zone_size")),
            (Some("workout"), Some("6MiB"))
        );
        let e = err(&ido_s("", ["", "", "", "", sur]));
        assert!(
            e.contains("member[3].role") && e.contains("surrogate"),
            "{e}"
        );
        let e = err(&ido_s("", [sur, "", "", sur, sur]));
        assert!(e.contains("member[0].role"), "{e}");
        let e = err(&ido_s("rebuild = \"fastest\"", ["", "", "", sur, sur]));
        assert!(
            e.contains("volume[0].layout_options.rebuild") && e.contains("pr, workout, vdf, ido"),
            "{e}"
        );
        assert!(Config::parse(&ido_s("rebuild = \"vdf\"", ["", "", "", sur, sur]), "t").is_ok());
        let e = err(&ido_s("zone_size = \"48MiB\"", ["", "", "", sur, sur]));
        assert!(
            e.contains("volume[0].layout_options.zone_size") && e.contains("3-24 MiB"),
            "{e}"
        );
        let e = err(&format!(
            "{MINIMAL}[volume.layout_options]\nrebuild = \"ido\"\n"
        ));
        assert!(e.contains("raid10 has no option"), "{e}");
    }

    #[test]
    fn minimal_config_parses_with_defaults() {
        let c = Config::parse(MINIMAL, "test.toml").unwrap();
        let v = &c.volumes[0];
        assert_eq!(v.members.len(), 2);
        assert_eq!(v.stripe_unit, 65536);
        assert_eq!(v.policy, PolicySpec::IdleTimeout { timeout_s: 60.0 });
        assert_eq!(
            v.members[0].size.as_ref().unwrap().bytes().unwrap(),
            64 << 20
        );
        assert_eq!(v.export.mode, "0700");
    }

    #[test]
    fn a_member_names_its_drive_unit() {
        let text = MINIMAL.replacen(
            "profile = \"test-fast\"",
            "profile = \"test-fast\"\ndrive_seed = 3",
            1,
        );
        let c = Config::parse(&text, "test.toml").unwrap();
        assert_eq!(c.volumes[0].members[0].drive_seed, Some(3));
        assert_eq!(c.volumes[0].members[1].drive_seed, None);
        let e = err(&MINIMAL.replacen(
            "profile = \"test-fast\"",
            "profile = \"test-fast\"\ndrive_seed = -1",
            1,
        ));
        assert!(
            e.contains("drive_seed") || e.contains("invalid value"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_key() {
        let e = err(&MINIMAL.replace("\"64MiB\"", "\"64 furlongs\""));
        assert!(e.contains("volume[0].member[0].size"), "{e}");
        let e = err(&MINIMAL.replace("test-fast", "no-such-drive"));
        assert!(
            e.contains("volume[0].member[0].profile") && e.contains("unknown drive profile"),
            "{e}"
        );
        let e = err(&MINIMAL.replace("layout = \"raid10\"", "layout = \"single\""));
        assert!(
            e.contains("volume[0].member") && e.contains("exactly 1 member"),
            "{e}"
        );
        let e = err(&MINIMAL.replace("[agent]", "[agent]\nmetrics_listen = \"0.0.0.0:9000\""));
        assert!(e.contains("agent.metrics_listen"), "{e}");
        let e = err(&MINIMAL.replace("idle-timeout:60", "idle-timeout:later"));
        assert!(e.contains("policy") || e.contains("later"), "{e}");
        let e = err(&MINIMAL.replace("data-1.img", "data-0.img"));
        assert!(e.contains("volume[0].member[1].path"), "{e}");
    }

    #[test]
    fn socket_bounds_and_member_directories_are_validated() {
        let c = Config::parse(MINIMAL, "test.toml").unwrap();
        assert_eq!(c.agent.max_connections, 64);
        assert_eq!(c.agent.connection_idle_timeout_s, 60.0);
        assert!(c.agent.member_directories.is_empty() && !c.agent.strict_memory);
        let with = |line: &str| MINIMAL.replacen("[agent]", &format!("[agent]\n{line}"), 1);
        assert!(err(&with("max_connections = 0")).contains("agent.max_connections"));
        assert!(err(&with("connection_idle_timeout_s = -1")).contains("connection_idle_timeout_s"));
        assert!(
            err(&with("member_directories = [\"spares\"]")).contains("agent.member_directories[0]")
        );
        let c = Config::parse(&with("member_directories = [\"/srv/spares\"]"), "t").unwrap();
        assert_eq!(
            c.agent.member_directories,
            vec![PathBuf::from("/srv/spares")]
        );
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let e = err(&MINIMAL.replace(
            "layout = \"raid10\"",
            "layout = \"raid10\"\nstipe_unit = 4096",
        ));
        assert!(e.contains("stipe_unit"), "{e}");
    }

    #[test]
    fn raid5_and_raid6_take_a_chunk_size_and_their_member_counts() {
        let third = r#"
[[volume.member]]
kind = "emulated-hdd"
path = "/var/lib/grs/data-2.img"
size = "64MiB"
profile = "test-fast"
"#;
        let three = format!("{MINIMAL}{third}");
        let raid5 = three.replace(
            "layout = \"raid10\"",
            "layout = \"raid5\"\nchunk_size = 131072",
        );
        let c = Config::parse(&raid5, "test.toml").unwrap();
        assert_eq!(c.volumes[0].layout, LayoutKind::RAID5);
        assert_eq!(c.volumes[0].stripe_unit, 131072);
        let e = err(&raid5.replace("131072", "12288"));
        assert!(
            e.contains("volume[0].stripe_unit") && e.contains("power of two"),
            "{e}"
        );
        let e = err(&MINIMAL.replace("layout = \"raid10\"", "layout = \"raid5\""));
        assert!(
            e.contains("volume[0].member") && e.contains("raid5 needs 3"),
            "{e}"
        );
        let e = err(&three.replace("layout = \"raid10\"", "layout = \"raid6\""));
        assert!(e.contains("raid6 needs 4"), "{e}");
        let e = err(&MINIMAL.replace("layout = \"raid10\"", "layout = \"raid7\""));
        assert!(e.contains("raid7") && e.contains("raid5"), "{e}");
    }

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("2GB").unwrap(), 2_000_000_000);
        assert!(parse_size("lots").is_err());
    }

    #[test]
    fn integrity_settings_are_checked() {
        let with = |line: &str| MINIMAL.replace("policy = \"idle-timeout:60\"", line);
        let c = Config::parse(
            &with("rebuild_min_mb_s = 2\nbitmap_region = \"8MiB\"\nscrub_interval_hours = 168"),
            "test.toml",
        )
        .unwrap();
        assert_eq!(c.volumes[0].rebuild_min_mb_s, 2.0);
        assert_eq!(c.volumes[0].scrub_interval_hours, Some(168.0));
        assert!(err(&with("rebuild_min_mb_s = 500")).contains("rebuild_min_mb_s"));
        assert!(err(&with("bitmap_region = 1000")).contains("bitmap_region"));
        assert!(err(&with("scrub_interval_hours = 0")).contains("scrub_interval_hours"));
    }
}
