//! `serve`: bring the configured volumes up, serve the control socket and metrics, run the
//! power manager, and take everything down cleanly on SIGTERM or SIGINT.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::agent::Agent;
use crate::config::Config;
use crate::control::server::{Server, ServerOptions};
use crate::memory_lock;
use crate::metrics_http;
use crate::sd_notify;
use crate::users::resolve_group;

/// Power transitions, resync and scrub are events of each volume's engine
/// (`volume::Engine`); this thread only saves the ledgers now and then.
const LEDGER_SAVE_EVERY: Duration = Duration::from_secs(10);
const STOP_POLL: Duration = Duration::from_millis(100);

/// Block the shutdown signals in this thread (and so in every thread started later), so
/// that `wait_for_signal` is the only place they are received.
fn block_shutdown_signals() -> Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data; the libc calls only read and write `set`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            bail!("pthread_sigmask: {}", std::io::Error::from_raw_os_error(rc));
        }
        Ok(set)
    }
}

fn wait_for_signal(set: &libc::sigset_t) -> i32 {
    let mut sig = 0;
    // SAFETY: `set` is initialised and `sig` is a valid out pointer.
    unsafe { libc::sigwait(set, &mut sig) };
    sig
}

pub fn serve(config_path: &Path) -> Result<()> {
    let config = Config::load(config_path)?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("serve must run as root: it mounts filesystems and attaches loop devices");
    }
    // Before any thread starts, so that every thread (FUSE ones included) inherits it.
    memory_lock::harden_or_report(config.agent.strict_memory)?;
    let signals = block_shutdown_signals()?;
    for dir in [&config.agent.state_dir, &config.agent.runtime_dir] {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let group = config
        .agent
        .group
        .as_deref()
        .map(resolve_group)
        .transpose()
        .context("agent.group")?;

    let agent = Arc::new(Agent::new(config.clone()));
    let options = ServerOptions {
        group,
        max_connections: config.agent.max_connections,
        idle_timeout: Duration::from_secs_f64(config.agent.connection_idle_timeout_s),
    };
    let mut server = Server::start(&config.agent.socket, options, agent.clone())?;
    if let Err(e) = agent.start_configured() {
        server.stop();
        agent.shutdown();
        return Err(e);
    }
    if let Some(addr) = config.agent.metrics_listen {
        let a = agent.clone();
        // The listener thread lives as long as the process.
        if let Err(e) = metrics_http::spawn(addr, Arc::new(move || a.metrics_text())) {
            server.stop();
            agent.shutdown();
            return Err(e);
        }
    }

    let stop = Arc::new(AtomicBool::new(false));
    let ledgers = {
        let agent = agent.clone();
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("ledgers".into())
            .spawn(move || {
                let mut saved = Instant::now();
                while !stop.load(Ordering::SeqCst) {
                    if saved.elapsed() >= LEDGER_SAVE_EVERY {
                        agent.save_ledgers();
                        saved = Instant::now();
                    }
                    std::thread::sleep(STOP_POLL);
                }
            })
            .context("cannot start the ledger thread")?
    };
    tracing::info!(config = %config_path.display(), "agent ready");
    // Only now, with every configured volume mounted, may systemd start PostgreSQL.
    if let Err(e) = sd_notify::notify("READY=1") {
        tracing::warn!(error = %format!("{e:#}"), "cannot tell systemd the agent is ready");
    }

    let sig = wait_for_signal(&signals);
    tracing::info!(signal = sig, "shutting down");
    let _ = sd_notify::notify("STOPPING=1");
    stop.store(true, Ordering::SeqCst);
    let _ = ledgers.join();
    server.stop();
    agent.shutdown();
    tracing::info!("stopped cleanly");
    Ok(())
}
