//! systemd's readiness protocol: one datagram to $NOTIFY_SOCKET ("READY=1", "STOPPING=1").
//! Without $NOTIFY_SOCKET (not started by systemd with Type=notify) it does nothing.

use std::os::unix::net::UnixDatagram;

use anyhow::{bail, Context, Result};

/// Send `state` to the service manager; Ok(false) when there is none to tell.
pub fn notify(state: &str) -> Result<bool> {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET").filter(|t| !t.is_empty()) else {
        return Ok(false);
    };
    let bytes = target.as_encoded_bytes();
    let socket = UnixDatagram::unbound().context("sd_notify: socket")?;
    match bytes.first() {
        Some(b'/') => {
            socket
                .send_to(state.as_bytes(), std::path::Path::new(&target))
                .with_context(|| format!("sd_notify: send to {}", target.to_string_lossy()))?;
        }
        Some(b'@') => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(&bytes[1..])
                .context("sd_notify: abstract address")?;
            socket
                .send_to_addr(state.as_bytes(), &addr)
                .with_context(|| format!("sd_notify: send to {}", target.to_string_lossy()))?;
        }
        _ => bail!(
            "NOTIFY_SOCKET={:?} is neither a path nor an abstract socket",
            target.to_string_lossy()
        ),
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both address forms, in one test (the variable is process-wide).
    #[test]
    fn sends_to_path_and_abstract_sockets_and_is_a_no_op_without_one() {
        let dir = std::env::temp_dir().join(format!("grs-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        // SAFETY (of the env calls): this is the only test touching NOTIFY_SOCKET.
        std::env::set_var("NOTIFY_SOCKET", &path);
        assert!(notify("READY=1").unwrap());
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("grs-notify-test-{}", std::process::id());
        let abs = UnixDatagram::bind_addr(
            &std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap(),
        )
        .unwrap();
        std::env::set_var("NOTIFY_SOCKET", format!("@{name}"));
        assert!(notify("STOPPING=1").unwrap());
        let n = abs.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");

        std::env::remove_var("NOTIFY_SOCKET");
        assert!(!notify("READY=1").unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
