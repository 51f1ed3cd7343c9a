//! A minimal loopback HTTP listener that serves the metrics text on any GET.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{bail, Context, Result};

pub fn spawn(
    addr: SocketAddr,
    render: Arc<dyn Fn() -> String + Send + Sync>,
) -> Result<JoinHandle<()>> {
    if !addr.ip().is_loopback() {
        bail!("metrics listener {addr} is not on loopback");
    }
    let listener = TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    tracing::info!(%addr, "metrics listener ready");
    Ok(std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut request_line = String::new();
                let _ = BufReader::new(&stream).read_line(&mut request_line);
                let body = render();
                let _ = write!(
                    stream,
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        })?)
}
