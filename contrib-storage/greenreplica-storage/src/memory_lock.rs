//! Keep memory reclaim from deadlocking the daemon that serves a filesystem: the agent's
//! own allocations must not wait for writeback to the very volumes it serves.
//! PR_SET_IO_FLUSHER marks the process (and threads started afterwards) as an I/O flusher
//! (PF_MEMALLOC_NOIO | PF_LOCAL_THROTTLE); mlockall keeps its pages from being paged out
//! (MCL_ONFAULT: pages are locked as they are touched, so thread stacks are not prefaulted).

use anyhow::{bail, Result};

/// Not in the libc crate for Linux glibc yet (uapi/linux/prctl.h).
const PR_SET_IO_FLUSHER: libc::c_int = 57;

/// Apply both; failures are returned as messages (the caller decides whether they are
/// fatal). Call it before any thread is started, so that every thread inherits the flag.
pub fn harden() -> Vec<String> {
    let mut problems = Vec::new();
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0) } != 0 {
        problems.push(format!(
            "PR_SET_IO_FLUSHER failed: {} (needs CAP_SYS_RESOURCE and Linux 5.6)",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: mlockall takes flags only.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT) } != 0 {
        problems.push(format!(
            "mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) failed: {} (needs CAP_IPC_LOCK or a large \
             enough RLIMIT_MEMLOCK)",
            std::io::Error::last_os_error()
        ));
    }
    problems
}

/// Harden, then log what failed; with `strict`, refuse to go on.
pub fn harden_or_report(strict: bool) -> Result<()> {
    let problems = harden();
    for p in &problems {
        if strict {
            tracing::error!("{p}");
        } else {
            tracing::warn!("{p}; going on without it (agent.strict_memory = false)");
        }
    }
    if strict && !problems.is_empty() {
        bail!(
            "memory hardening failed and agent.strict_memory is set: {}",
            problems.join("; ")
        );
    }
    if problems.is_empty() {
        tracing::info!("running as an I/O flusher with all memory locked");
    }
    Ok(())
}
