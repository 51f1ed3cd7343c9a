//! The CLI side of the control socket.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

/// Send one request and return the reply object.
pub fn call(socket: &Path, request: &Value) -> Result<Value> {
    let mut stream = UnixStream::connect(socket)
        .with_context(|| format!("cannot connect to the agent at {}", socket.display()))?;
    let mut line = request.to_string();
    line.push('\n');
    stream
        .write_all(line.as_bytes())
        .context("cannot send the request")?;
    let mut reply = String::new();
    BufReader::new(&stream)
        .read_line(&mut reply)
        .context("cannot read the reply")?;
    if reply.is_empty() {
        anyhow::bail!("the agent closed the connection without replying");
    }
    serde_json::from_str(&reply).with_context(|| format!("unreadable reply {reply:?}"))
}
