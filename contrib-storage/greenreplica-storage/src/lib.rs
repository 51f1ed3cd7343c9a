//! greenreplica storage agent: a userspace disk array with drive models,
//! power policies and an energy ledger.

/// The agent's version, as reported by the CLI and the control socket.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[cfg(test)]
mod tests {
    #[test]
    fn version_is_set() {
        assert!(!super::VERSION.is_empty());
    }
}
