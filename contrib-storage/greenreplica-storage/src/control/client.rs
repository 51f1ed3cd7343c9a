//! The CLI side of the control socket.

use std::io::{BufRead, BufReader, Read, Write};
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

/// Forward `input` line by line without looking at it; print one reply line per line sent.
pub fn pipe(socket: &Path, input: impl Read, mut output: impl Write) -> Result<()> {
    let mut stream = UnixStream::connect(socket)
        .with_context(|| format!("cannot connect to the agent at {}", socket.display()))?;
    let mut replies = BufReader::new(stream.try_clone().context("cannot clone the socket")?);
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if !line.ends_with(b"\n") {
            line.push(b'\n');
        }
        stream.write_all(&line).context("cannot send")?;
        let mut reply = String::new();
        if replies.read_line(&mut reply)? == 0 {
            anyhow::bail!("the agent closed the connection");
        }
        output.write_all(reply.as_bytes())?;
    }
}
