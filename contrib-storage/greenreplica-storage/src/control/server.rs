//! Serves the control socket: one thread per connection (at most `max_connections`), the
//! peer's credentials taken from the kernel at accept time, every line answered (bad and
//! oversize lines with an error, the connection kept), idle connections closed.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

use super::protocol::{self, Request};
use crate::users::{peer_credentials, user_name, Peer};

/// A request line longer than this is answered with an error and skipped.
pub const MAX_LINE: usize = 1 << 20;

pub trait Handler: Send + Sync {
    fn handle(&self, request: Request, peer: &Peer) -> Value;
}

/// Root, or a peer whose primary or supplementary groups (at connect time) include `group`.
pub fn authorized(peer: &Peer, group: Option<u32>) -> bool {
    peer.uid == 0 || group.is_some_and(|gid| peer.in_group(gid))
}

/// Who may connect, how many at once, and how long a silent connection is kept.
#[derive(Debug, Clone, Copy)]
pub struct ServerOptions {
    pub group: Option<u32>,
    pub max_connections: usize,
    pub idle_timeout: Duration,
}

pub struct Server {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Bind the socket (replacing a stale one), owned root:group, mode 0660.
    pub fn start(path: &Path, options: ServerOptions, handler: Arc<dyn Handler>) -> Result<Self> {
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
        let mode = if options.group.is_some() {
            0o660
        } else {
            0o600
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot set permissions of {}", path.display()))?;
        if let Some(gid) = options.group {
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
            .spawn(move || accept_loop(listener, options, handler, stop_flag))
            .context("cannot start the control thread")?;
        tracing::info!(socket = %path.display(), max_connections = options.max_connections, "control socket ready");
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

/// Counts a live connection; the count drops with it.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(active: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        active
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(active.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn accept_loop(
    listener: UnixListener,
    options: ServerOptions,
    handler: Arc<dyn Handler>,
    stop: Arc<AtomicBool>,
) {
    let active = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((mut stream, _)) => {
                // Accepted sockets may inherit non-blocking mode on some systems.
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_write_timeout(Some(options.idle_timeout));
                let Some(slot) = Slot::take(&active, options.max_connections) else {
                    tracing::warn!(
                        max = options.max_connections,
                        "control connection refused: too many connections"
                    );
                    let _ = send(
                        &mut stream,
                        &protocol::error(format!(
                            "too many connections (at most {}); try again",
                            options.max_connections
                        )),
                    );
                    continue;
                };
                // The identity is the one the kernel recorded at connect time.
                let peer = peer_credentials(&stream);
                let handler = handler.clone();
                let spawned = std::thread::Builder::new()
                    .name("control-conn".into())
                    .spawn(move || {
                        let _slot = slot;
                        match peer {
                            Ok(peer) => serve_connection(stream, &peer, options, handler.as_ref()),
                            Err(e) => {
                                let _ = send(
                                    &mut stream,
                                    &protocol::error(format!("cannot identify peer: {e:#}")),
                                );
                            }
                        }
                    });
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

/// One line read with a bound on its length.
#[derive(Debug, PartialEq)]
pub enum Line {
    Eof,
    Text(Vec<u8>),
    /// Longer than the bound; it was read to its end and dropped.
    TooLong,
}

/// Read up to the next newline, keeping at most `max` bytes (the rest of a longer line is
/// consumed and dropped, so the next line starts clean).
pub fn read_bounded_line(reader: &mut impl BufRead, max: usize) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buf = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Line::TooLong,
                (false, true) => Line::Eof,
                (false, false) => Line::Text(line),
            });
        }
        let (take, end) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i, Some(i + 1)),
            None => (buf.len(), None),
        };
        if !too_long {
            if line.len() + take > max {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(&buf[..take]);
            }
        }
        reader.consume(end.unwrap_or(take));
        if end.is_some() {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Text(line)
            });
        }
    }
}

pub fn serve_connection(
    mut stream: UnixStream,
    peer: &Peer,
    options: ServerOptions,
    handler: &dyn Handler,
) {
    if !authorized(peer, options.group) {
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
    let _ = stream.set_read_timeout(Some(options.idle_timeout));
    let _ = stream.set_write_timeout(Some(options.idle_timeout));
    let Ok(reader_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(reader_half);
    loop {
        let reply = match read_bounded_line(&mut reader, MAX_LINE) {
            Ok(Line::Eof) => return,
            Ok(Line::TooLong) => {
                protocol::error(format!("request line too long (at most {MAX_LINE} bytes)"))
            }
            Ok(Line::Text(bytes)) => match String::from_utf8(bytes) {
                Err(_) => protocol::error("malformed request: not UTF-8"),
                Ok(line) if line.trim().is_empty() => continue,
                Ok(line) => match protocol::parse(line.trim()) {
                    Ok(request) => {
                        tracing::debug!(uid = peer.uid, ?request, "control request");
                        handler.handle(request, peer)
                    }
                    Err(message) => protocol::error(message),
                },
            },
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                tracing::debug!(
                    uid = peer.uid,
                    pid = peer.pid,
                    "closing idle control connection"
                );
                let _ = send(
                    &mut stream,
                    &protocol::error(format!(
                        "idle for {:.0} s; connection closed",
                        options.idle_timeout.as_secs_f64()
                    )),
                );
                return;
            }
            Err(_) => return,
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

    fn options(idle_ms: u64) -> ServerOptions {
        ServerOptions {
            group: None,
            max_connections: 4,
            idle_timeout: Duration::from_millis(idle_ms),
        }
    }

    fn me() -> Peer {
        Peer {
            pid: 1,
            uid: 0,
            gid: 0,
            groups: vec![],
        }
    }

    #[test]
    fn authorization_uses_the_groups_recorded_at_connect_time() {
        let user = Peer {
            pid: 1,
            uid: 1000,
            gid: 1000,
            groups: vec![50],
        };
        assert!(authorized(&me(), None));
        assert!(!authorized(&user, None));
        assert!(authorized(&user, Some(1000)));
        assert!(authorized(&user, Some(50)));
        assert!(!authorized(&user, Some(51)));
    }

    fn replies(client: UnixStream) -> Vec<Value> {
        BufReader::new(client)
            .lines()
            .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
            .collect()
    }

    #[test]
    fn bad_lines_get_error_replies_and_the_connection_keeps_serving() {
        let (client, server) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || serve_connection(server, &me(), options(5000), &Echo));
        let mut w = client.try_clone().unwrap();
        w.write_all(b"{oops\n{\"op\":\"nope\"}\n\xff\xfe\n{\"op\":\"status\"}\n")
            .unwrap();
        w.shutdown(std::net::Shutdown::Write).unwrap();
        let replies = replies(client);
        t.join().unwrap();
        assert_eq!(replies.len(), 4);
        assert!(replies[0]["error"].as_str().unwrap().contains("malformed"));
        assert!(replies[1]["error"].as_str().unwrap().contains("unknown op"));
        assert_eq!(replies[2]["ok"], false);
        assert_eq!(replies[3]["ok"], true);
    }

    #[test]
    fn an_oversize_line_gets_an_error_and_the_next_line_is_served() {
        let (client, server) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || serve_connection(server, &me(), options(5000), &Echo));
        let mut w = client.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            let mut big = vec![b'x'; MAX_LINE + 4096];
            big.push(b'\n');
            w.write_all(&big).unwrap();
            w.write_all(b"{\"op\":\"status\"}\n").unwrap();
            w.shutdown(std::net::Shutdown::Write).unwrap();
        });
        let replies = replies(client);
        writer.join().unwrap();
        t.join().unwrap();
        assert_eq!(replies.len(), 2, "{replies:?}");
        assert!(replies[0]["error"].as_str().unwrap().contains("too long"));
        assert_eq!(replies[1]["ok"], true);
    }

    #[test]
    fn bounded_lines_split_and_skip_correctly() {
        let mut r = BufReader::with_capacity(3, &b"ab\ncdefgh\nij"[..]);
        assert_eq!(
            read_bounded_line(&mut r, 4).unwrap(),
            Line::Text(b"ab".to_vec())
        );
        assert_eq!(read_bounded_line(&mut r, 4).unwrap(), Line::TooLong);
        assert_eq!(
            read_bounded_line(&mut r, 4).unwrap(),
            Line::Text(b"ij".to_vec())
        );
        assert_eq!(read_bounded_line(&mut r, 4).unwrap(), Line::Eof);
    }

    #[test]
    fn an_idle_connection_is_told_and_closed() {
        let (client, server) = UnixStream::pair().unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let t = std::thread::spawn(move || serve_connection(server, &me(), options(200), &Echo));
        let mut line = String::new();
        let mut reader = BufReader::new(&client);
        reader
            .read_line(&mut line)
            .expect("a reply before the client gives up");
        assert!(line.contains("idle"), "{line}");
        line.clear();
        assert_eq!(
            reader.read_line(&mut line).unwrap(),
            0,
            "then the connection is closed"
        );
        t.join().unwrap();
    }

    #[test]
    fn connections_beyond_the_bound_are_refused_and_slots_come_back() {
        let dir = std::env::temp_dir().join(format!("grs-srv-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("c.sock");
        // SAFETY: getgid has no preconditions.
        let own_group = unsafe { libc::getgid() };
        let opts = ServerOptions {
            group: Some(own_group),
            max_connections: 2,
            idle_timeout: Duration::from_secs(30),
        };
        let mut server = Server::start(&path, opts, Arc::new(Echo)).unwrap();
        let ask = |s: &UnixStream| -> Value {
            let mut w = s.try_clone().unwrap();
            w.write_all(b"{\"op\":\"status\"}\n").unwrap();
            let mut line = String::new();
            BufReader::new(s).read_line(&mut line).unwrap();
            serde_json::from_str(&line).unwrap()
        };
        let a = UnixStream::connect(&path).unwrap();
        let b = UnixStream::connect(&path).unwrap();
        assert_eq!(ask(&a)["ok"], true);
        assert_eq!(ask(&b)["ok"], true);
        let c = UnixStream::connect(&path).unwrap();
        let mut line = String::new();
        BufReader::new(&c).read_line(&mut line).unwrap();
        let refused: Value = serde_json::from_str(&line).unwrap();
        assert!(
            refused["error"]
                .as_str()
                .unwrap()
                .contains("too many connections"),
            "{refused}"
        );
        drop(a);
        let mut served = false;
        for _ in 0..100 {
            let d = UnixStream::connect(&path).unwrap();
            if ask(&d)["ok"] == true {
                served = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(served, "a closed connection frees its slot");
        server.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
