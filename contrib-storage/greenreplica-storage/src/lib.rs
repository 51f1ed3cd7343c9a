//! greenreplica storage agent: a userspace disk array with drive models, power policies
//! and an energy ledger. One engine (`volume`) runs under a real clock (`serve`) and a
//! virtual clock (`replay`).

pub mod clock;
pub mod drive;
pub mod latency;
pub mod layout;
pub mod ledger;
pub mod member;
pub mod policy;
pub mod power_state;
pub mod profile;
pub mod replay;
pub mod service_model;
pub mod superblock;
pub mod sync;
pub mod trace;
pub mod volume;

/// The agent's version, as reported by the CLI and the control socket.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
