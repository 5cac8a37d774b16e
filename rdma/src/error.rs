//! The crate's one error type.

use std::time::Duration;

/// Everything a transport operation can fail with.
///
/// `Timeout` and `Disconnected` are the two a caller usually handles
/// specially: the first means "the deadline passed, the connection may still
/// be fine", the second means "this connection is dead, reconnect".
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A wait passed its deadline (`TransportConfig::op_timeout` or the
    /// timeout given to `recv`).
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The peer closed the connection, died, or the connection was closed
    /// locally; every pending and later operation on it fails with this.
    #[error("connection lost: {0}")]
    Disconnected(String),
    /// The transport cannot do this (e.g. dmabuf registration over TCP).
    #[error("not supported by this transport: {0}")]
    Unsupported(String),
    /// `TransportKind::Verbs` was asked for but the host has no RDMA device.
    #[error("no RDMA device on this host (use transport 'tcp' or 'auto')")]
    NoDevice,
    /// A caller-supplied argument is wrong (zero length, null pointer,
    /// malformed address, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A local or remote range does not fit in its region.
    #[error(
        "range out of bounds: offset {offset} + length {len} exceeds region of {region_len} bytes"
    )]
    OutOfRange {
        /// Offset into the region.
        offset: u64,
        /// Length of the access.
        len: u64,
        /// Size of the region.
        region_len: u64,
    },
    /// The peer refused a one-sided operation (unknown or stale key, range
    /// outside the region it registered).
    #[error("peer rejected the operation: {0}")]
    RemoteRejected(String),
    /// A message bigger than `TransportConfig::max_message`.
    #[error("message of {len} bytes exceeds the limit of {max} bytes")]
    MessageTooLarge {
        /// Size of the message.
        len: usize,
        /// The configured cap.
        max: usize,
    },
    /// Bytes from the peer that do not follow the wire format.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A descriptor, address or transport name that does not parse.
    #[error("cannot parse {what}: {why}")]
    Parse {
        /// What was being parsed.
        what: &'static str,
        /// Why it failed.
        why: String,
    },
    /// A libibverbs / librdmacm call failed.
    #[error("{call} failed: {source}")]
    Verbs {
        /// The C function that failed.
        call: &'static str,
        /// errno as reported by the library.
        source: std::io::Error,
    },
    /// A work completion came back with an error status.
    #[error("work completion error: {0}")]
    Completion(String),
    /// TLS could not be set up or failed: a certificate the peer does not
    /// accept, a plaintext peer where TLS is required, a bad PEM file.
    #[error("TLS: {0}")]
    Tls(String),
    /// A socket or other OS I/O error.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// Result with the crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// True for errors after which the connection is unusable.
    pub fn is_disconnect(&self) -> bool {
        matches!(self, Error::Disconnected(_))
    }
}
