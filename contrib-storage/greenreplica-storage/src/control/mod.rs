//! The control socket: JSON lines over a Unix socket, one request and one reply per line.

pub mod boundaries;
pub mod client;
pub mod protocol;
pub mod server;
