//! Serves the control socket: one thread per connection, peer credentials checked before
//! anything is read, every line answered, the connection kept on bad input.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

use super::protocol::{self, Request};
use crate::users::{peer_credentials, process_groups, user_name, Peer};

/// A request line longer than this is refused (and the connection closed).
const MAX_LINE: u64 = 1 << 20;

pub trait Handler: Send + Sync {
    fn handle(&self, request: Request, peer: &Peer) -> Value;
}

/// Root, or a process whose primary or supplementary groups include `group`.
pub fn authorized(peer: &Peer, group: Option<u32>, groups_of: impl Fn(i32) -> Vec<u32>) -> bool {
    if peer.uid == 0 {
        return true;
    }
    match group {
        Some(gid) => peer.gid == gid || groups_of(peer.pid).contains(&gid),
        None => false,
    }
}

pub struct Server {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Bind the socket (replacing a stale one), owned root:group, mode 0660.
    pub fn start(path: &Path, group: Option<u32>, handler: Arc<dyn Handler>) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        if UnixStream::connect(path).is_ok() {
            anyhow::bail!("another agent is already serving {}", path.display());
        }
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)
            .with_context(|| format!("cannot bind control socket {}", path.display()))?;
        let mode = if group.is_some() { 0o660 } else { 0o600 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot set permissions of {}", path.display()))?;
        if let Some(gid) = group {
            std::os::unix::fs::chown(path, Some(0), Some(gid))
                .with_context(|| format!("cannot give {} to group {gid}", path.display()))?;
        }
        listener
            .set_nonblocking(true)
            .context("control socket: set_nonblocking")?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("control".into())
            .spawn(move || accept_loop(listener, group, handler, stop_flag))
            .context("cannot start the control thread")?;
        tracing::info!(socket = %path.display(), "control socket ready");
        Ok(Self {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(
    listener: UnixListener,
    group: Option<u32>,
    handler: Arc<dyn Handler>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let handler = handler.clone();
                let spawned = std::thread::Builder::new()
                    .name("control-conn".into())
                    .spawn(move || serve_connection(stream, group, handler.as_ref()));
                if let Err(e) = spawned {
                    tracing::error!(error = %e, "cannot start a connection thread");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn send(stream: &mut UnixStream, reply: &Value) -> std::io::Result<()> {
    let mut line = reply.to_string();
    line.push('\n');
    stream.write_all(line.as_bytes())
}

pub fn serve_connection(mut stream: UnixStream, group: Option<u32>, handler: &dyn Handler) {
    // Accepted sockets may inherit non-blocking mode on some systems.
    let _ = stream.set_nonblocking(false);
    let peer = match peer_credentials(&stream) {
        Ok(p) => p,
        Err(e) => {
            let _ = send(
                &mut stream,
                &protocol::error(format!("cannot identify peer: {e:#}")),
            );
            return;
        }
    };
    if !authorized(&peer, group, process_groups) {
        tracing::warn!(uid = peer.uid, pid = peer.pid, "refused control connection");
        let _ = send(
            &mut stream,
            &protocol::error(format!(
                "permission denied: user {} is neither root nor in the agent's group",
                user_name(peer.uid)
            )),
        );
        return;
    }
    let Ok(reader_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(reader_half);
    loop {
        let mut line = String::new();
        match (&mut reader).take(MAX_LINE).read_line(&mut line) {
            Ok(0) => return,
            Ok(_) if !line.ends_with('\n') && line.len() as u64 >= MAX_LINE => {
                let _ = send(&mut stream, &protocol::error("request line too long"));
                return;
            }
            Ok(_) => {}
            Err(e) => {
                // Invalid UTF-8 and the like: answer and go on with the next line.
                if send(
                    &mut stream,
                    &protocol::error(format!("malformed request: {e}")),
                )
                .is_err()
                {
                    return;
                }
                continue;
            }
        }
        if line.trim().is_empty() {
            continue;
        }
        let reply = match protocol::parse(line.trim()) {
            Ok(request) => {
                tracing::debug!(uid = peer.uid, ?request, "control request");
                handler.handle(request, &peer)
            }
            Err(message) => protocol::error(message),
        };
        if send(&mut stream, &reply).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Echo;
    impl Handler for Echo {
        fn handle(&self, request: Request, _peer: &Peer) -> Value {
            json!({"ok": true, "echo": format!("{request:?}")})
        }
    }

    #[test]
    fn authorization_rules() {
        let root = Peer {
            pid: 1,
            uid: 0,
            gid: 0,
        };
        let user = Peer {
            pid: 1,
            uid: 1000,
            gid: 1000,
        };
        assert!(authorized(&root, None, |_| vec![]));
        assert!(!authorized(&user, None, |_| vec![]));
        assert!(authorized(&user, Some(1000), |_| vec![]));
        assert!(authorized(&user, Some(50), |_| vec![50]));
        assert!(!authorized(&user, Some(50), |_| vec![51]));
    }

    #[test]
    fn bad_lines_get_error_replies_and_the_connection_keeps_serving() {
        let (client, server) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || serve_connection(server, None, &Echo));
        let mut w = client.try_clone().unwrap();
        w.write_all(b"{oops\n{\"op\":\"nope\"}\n\xff\xfe\n{\"op\":\"status\"}\n")
            .unwrap();
        w.shutdown(std::net::Shutdown::Write).unwrap();
        let replies: Vec<Value> = BufReader::new(client)
            .lines()
            .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
            .collect();
        t.join().unwrap();
        assert_eq!(replies.len(), 4);
        assert!(replies[0]["error"].as_str().unwrap().contains("malformed"));
        assert!(replies[1]["error"].as_str().unwrap().contains("unknown op"));
        assert_eq!(replies[2]["ok"], false);
        assert_eq!(replies[3]["ok"], true);
    }
}
