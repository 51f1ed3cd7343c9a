//! greenreplica storage agent: a userspace disk array with drive models, power policies
//! and an energy ledger. One engine (`volume`) runs under a real clock (`serve`) and a
//! virtual clock (`replay`).

pub mod agent;
pub mod assemble;
pub mod clock;
pub mod config;
pub mod control;
pub mod daemon;
pub mod drive;
pub mod events;
pub mod export;
pub mod flash_pool;
pub mod journal;
pub mod latency;
pub mod layout;
pub mod ledger;
pub mod ledger_store;
pub mod member;
pub mod memory_lock;
pub mod metrics;
pub mod metrics_http;
pub mod parity;
pub mod policy;
pub mod power_manager;
pub mod power_state;
pub mod profile;
pub mod rebuild;
pub mod reliability;
pub mod replay;
pub mod safe_path;
pub mod sd_notify;
pub mod service_model;
pub mod superblock;
pub mod sync;
pub mod synth;
pub mod trace;
pub mod tracks;
pub mod users;
pub mod volume;

/// The agent's version, as reported by the CLI and the control socket.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
