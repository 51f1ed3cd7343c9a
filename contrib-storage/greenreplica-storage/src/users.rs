//! User and group lookups, and the credentials of a socket peer.

use std::ffi::{CStr, CString};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use anyhow::{bail, Context, Result};

/// Who is on the other end of a Unix socket, as the kernel recorded it when the peer
/// connected (SO_PEERCRED, SO_PEERGROUPS): later changes of the peer process, or a new
/// process reusing its pid, do not alter it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups at connect time.
    pub groups: Vec<u32>,
}

impl Peer {
    /// Whether the peer had `gid` as its primary or a supplementary group.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

pub fn peer_credentials(stream: &UnixStream) -> Result<Peer> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, which is a ucred.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("SO_PEERCRED");
    }
    Ok(Peer {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
        groups: peer_groups(stream)?,
    })
}

/// SO_PEERGROUPS: the peer's supplementary groups when it connected.
fn peer_groups(stream: &UnixStream) -> Result<Vec<u32>> {
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into the vector's buffer.
        let rc = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / std::mem::size_of::<libc::gid_t>();
        if rc == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let e = std::io::Error::last_os_error();
        // ERANGE: the buffer was too small and `len` says how large it must be.
        if e.raw_os_error() == Some(libc::ERANGE) && n > groups.len() && n <= 65536 {
            groups.resize(n, 0);
            continue;
        }
        return Err(e).context("SO_PEERGROUPS");
    }
}

/// Resolve a user name or numeric uid to (uid, primary gid).
pub fn resolve_user(name: &str) -> Result<(u32, u32)> {
    if let Ok(uid) = name.parse::<u32>() {
        // SAFETY: getpwuid_r fills `pwd` using `buf`; both outlive the call.
        return lookup_passwd(|pwd, buf, result| unsafe {
            libc::getpwuid_r(uid, pwd, buf.as_mut_ptr(), buf.len(), result)
        })
        .map(|found| found.unwrap_or((uid, uid)));
    }
    let c = CString::new(name).context("user name contains a NUL byte")?;
    // SAFETY: as above; `c` is a valid C string for the duration of the call.
    match lookup_passwd(|pwd, buf, result| unsafe {
        libc::getpwnam_r(c.as_ptr(), pwd, buf.as_mut_ptr(), buf.len(), result)
    })? {
        Some(ids) => Ok(ids),
        None => bail!("no such user {name:?}"),
    }
}

fn lookup_passwd(
    call: impl Fn(*mut libc::passwd, &mut [libc::c_char], *mut *mut libc::passwd) -> libc::c_int,
) -> Result<Option<(u32, u32)>> {
    // SAFETY: an all-zero passwd is a valid value for the C struct (pointers are null).
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16384];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    let rc = call(&mut pwd, &mut buf, &mut result);
    if rc != 0 {
        bail!(
            "user lookup failed: {}",
            std::io::Error::from_raw_os_error(rc)
        );
    }
    Ok((!result.is_null()).then_some((pwd.pw_uid, pwd.pw_gid)))
}

/// Resolve a group name or numeric gid.
pub fn resolve_group(name: &str) -> Result<u32> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(gid);
    }
    let c = CString::new(name).context("group name contains a NUL byte")?;
    // SAFETY: an all-zero group struct is valid; getgrnam_r fills it using `buf`.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16384];
    let mut result: *mut libc::group = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the duration of the call.
    let rc = unsafe {
        libc::getgrnam_r(
            c.as_ptr(),
            &mut grp,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 {
        bail!(
            "group lookup failed: {}",
            std::io::Error::from_raw_os_error(rc)
        );
    }
    if result.is_null() {
        bail!("no such group {name:?}");
    }
    Ok(grp.gr_gid)
}

/// Name of a uid for messages (falls back to the number).
pub fn user_name(uid: u32) -> String {
    // SAFETY: see lookup_passwd; the name is copied out before the buffer is dropped.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16384];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc == 0 && !result.is_null() && !pwd.pw_name.is_null() {
        // SAFETY: pw_name points into `buf` and is NUL-terminated.
        return unsafe { CStr::from_ptr(pwd.pw_name) }
            .to_string_lossy()
            .into_owned();
    }
    uid.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_root_both_ways() {
        assert_eq!(resolve_user("root").unwrap(), (0, 0));
        assert_eq!(resolve_user("0").unwrap().0, 0);
        assert_eq!(resolve_group("root").unwrap(), 0);
        assert_eq!(user_name(0), "root");
        assert!(resolve_user("no-such-user-xyz").is_err());
    }

    #[test]
    fn peer_of_a_socket_pair_is_this_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let peer = peer_credentials(&a).unwrap();
        assert_eq!(peer.pid as u32, std::process::id());
        // SAFETY: getuid has no preconditions.
        assert_eq!(peer.uid, unsafe { libc::getuid() });
        // SAFETY: getgroups with a buffer of the size it reported.
        let mut own = unsafe {
            let n = libc::getgroups(0, std::ptr::null_mut());
            let mut g = vec![0 as libc::gid_t; n.max(0) as usize];
            let n = libc::getgroups(g.len() as libc::c_int, g.as_mut_ptr());
            g.truncate(n.max(0) as usize);
            g
        };
        let mut seen = peer.groups.clone();
        own.sort_unstable();
        seen.sort_unstable();
        assert_eq!(
            seen, own,
            "SO_PEERGROUPS gives this process's supplementary groups"
        );
    }
}
