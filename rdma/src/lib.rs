//! hipfs-rdma: moves bytes between hosts. Knows nothing about files.
//!
//! One interface, two transports:
//! - **verbs**: ibverbs RC queue pairs set up with the RDMA connection
//!   manager; control messages are SEND/RECV, data moves with one-sided
//!   RDMA WRITE / READ into memory the peer registered.
//! - **tcp**: the same semantics over several TCP streams; one-sided
//!   operations are frames that the peer's reader threads apply to its
//!   registered regions (read straight from the socket into the region).
//!
//! **TLS.** With [`TransportConfig::tls`] every TCP lane runs over rustls
//! (TLS 1.3): control messages and one-sided frames are encrypted and
//! authenticated, a listener refuses plaintext clients, a client refuses a
//! certificate its CA did not sign. Verbs traffic is not covered: it is as
//! trusted as the fabric it crosses.
//!
//! A [`Connection`] has `lanes` QPs or TCP streams. Control messages are
//! reliable and ordered; one-sided operations may be issued from many
//! threads at once and large ones are striped across the lanes.
//!
//! **Ordering.** Once [`Connection::write_remote`] has returned on side A
//! and A then [`Connection::send`]s a message, B's region holds the written
//! bytes before B's [`Connection::recv`] returns that message.
//!
//! **Confinement.** A one-sided operation can only touch memory the peer
//! registered on that connection; nothing is ever written elsewhere. A
//! range outside the descriptor fails locally ([`Error::OutOfRange`])
//! before anything is sent. A wrong or stale key, or a forged descriptor:
//! over TCP the applying side refuses the frame, counts it
//! ([`ConnectionStats::remote_ops_rejected`]) and the issuer gets
//! [`Error::RemoteRejected`], the connection stays up; over verbs the
//! adapter NAKs it, the issuer gets [`Error::Completion`] and the queue
//! pairs go to error, so both sides see [`Error::Disconnected`].
//!
//! ```no_run
//! use hipfs_rdma::{connect, TransportConfig};
//! let conn = connect("10.0.0.2:7471", &TransportConfig::default())?;
//! conn.send(b"hello")?;
//! let reply = conn.recv(std::time::Duration::from_secs(5))?;
//! # Ok::<(), hipfs_rdma::Error>(())
//! ```

mod descriptor;
mod error;
mod mem;
mod ratelog;
mod region;
pub mod tcp;
#[cfg(feature = "verbs")]
pub mod verbs;

use std::fmt;
use std::os::fd::{BorrowedFd, RawFd};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

pub use descriptor::{DescriptorTransport, RemoteDescriptor};
pub use error::{Error, Result};
pub use mem::{probe_registrations, OwnedRegion};
pub use ratelog::RateLimitedLog;
pub use region::LocalRegion;
pub use tcp::congestion::Congestion;

/// Which transport to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TransportKind {
    /// Verbs when this host has an RDMA device, else TCP. A listener with
    /// `Auto` on a host with a device accepts both kinds; a connect with
    /// `Auto` tries verbs first and falls back to TCP.
    #[default]
    Auto,
    /// ibverbs only; [`Error::NoDevice`] without a device.
    Verbs,
    /// TCP only.
    Tcp,
}

impl FromStr for TransportKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(TransportKind::Auto),
            "verbs" | "rdma" | "ib" => Ok(TransportKind::Verbs),
            "tcp" => Ok(TransportKind::Tcp),
            other => Err(Error::Parse {
                what: "transport kind",
                why: format!("'{other}' is not one of auto, verbs, tcp"),
            }),
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransportKind::Auto => "auto",
            TransportKind::Verbs => "verbs",
            TransportKind::Tcp => "tcp",
        })
    }
}

/// Settings of a connection. Both sides should use the same `lanes`; the
/// connecting side's value wins (the listener adopts it).
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// Transport selection.
    pub kind: TransportKind,
    /// Queue pairs (verbs) or TCP streams per connection; 1..=64.
    pub lanes: usize,
    /// Largest control message `send` accepts (and `recv` can return).
    pub max_message: usize,
    /// Deadline on every blocking wait (connect, one-sided ops, credits).
    pub op_timeout: Duration,
    /// Stripe unit: one-sided transfers larger than this are split into
    /// pieces of this size spread over the lanes.
    pub chunk_size: usize,
    /// Receive buffers (= send credits) posted per verbs lane.
    pub recv_credits: usize,
    /// TLS for every lane of a TCP connection (rustls); `None` is plain
    /// TCP. The verbs transport ignores it: verbs traffic is as trusted as
    /// the fabric it crosses. See [`TlsConfig`].
    pub tls: Option<TlsConfig>,
    /// TCP congestion control of the lanes (see [`Congestion`]): by
    /// default loopback lanes do not pace, others keep the system's. The
    /// verbs transport ignores it.
    pub congestion: Congestion,
}

/// TLS settings of the TCP transport. A listener needs `cert_chain` and
/// `key`; a connecting side needs `ca`. One value may hold both (tests,
/// benchmarks).
///
/// With TLS every byte of a TCP connection is encrypted and authenticated,
/// one-sided frames included. What it costs: `write_remote_from_file`
/// cannot hand file pages to the socket with `sendfile(2)` (the kernel
/// would send plaintext), so its bytes are read into a buffer and
/// encrypted (staged); frames are encrypted and decrypted in user space.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM file with the listener's certificate chain (leaf first).
    pub cert_chain: Option<std::path::PathBuf>,
    /// PEM file with the listener's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<std::path::PathBuf>,
    /// PEM file with the CA certificate(s) a connecting side trusts.
    pub ca: Option<std::path::PathBuf>,
    /// Name the listener's certificate must carry; `None`: the host part
    /// of the address passed to [`connect`] (a DNS name or an IP address).
    pub server_name: Option<String>,
}

impl TlsConfig {
    /// A listener's settings: its certificate chain and key.
    pub fn server(
        cert_chain: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        TlsConfig {
            cert_chain: Some(cert_chain.into()),
            key: Some(key.into()),
            ..Default::default()
        }
    }

    /// A connecting side's settings: the CA it trusts.
    pub fn client(ca: impl Into<std::path::PathBuf>) -> Self {
        TlsConfig {
            ca: Some(ca.into()),
            ..Default::default()
        }
    }
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            kind: TransportKind::Auto,
            lanes: 4,
            max_message: 64 * 1024,
            op_timeout: Duration::from_secs(30),
            chunk_size: 1 << 20,
            recv_credits: 16,
            tls: None,
            congestion: Congestion::Auto,
        }
    }
}

impl TransportConfig {
    /// Rejects settings no transport can honour.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if self.lanes == 0 || self.lanes > 64 {
            return bad(format!("lanes must be 1..=64, got {}", self.lanes));
        }
        if self.max_message == 0 || self.max_message > (1 << 30) {
            return bad(format!(
                "max_message must be 1..=1 GiB, got {}",
                self.max_message
            ));
        }
        if self.chunk_size < 4096 || self.chunk_size > (1 << 30) {
            return bad(format!(
                "chunk_size must be 4 KiB..=1 GiB, got {}",
                self.chunk_size
            ));
        }
        if self.recv_credits < 2 || self.recv_credits > 4096 {
            return bad(format!(
                "recv_credits must be 2..=4096, got {}",
                self.recv_credits
            ));
        }
        if self.op_timeout.is_zero() {
            return bad("op_timeout must be > 0".into());
        }
        Ok(())
    }
}

/// What [`Connection::set_message_hook`] installs: called with each control
/// message as it arrives; returns `None` when it took the message, or
/// `Some(m)` to queue `m` for [`Connection::recv`] as usual.
pub type MessageHook = Box<dyn FnMut(Vec<u8>) -> Option<Vec<u8>> + Send>;

/// One connection between two hosts. All methods take `&self` and may be
/// called from many threads at once.
pub trait Connection: Send + Sync {
    /// The transport actually in use (never `Auto`).
    fn kind(&self) -> TransportKind;

    /// Address of the peer, for logs.
    fn peer_addr(&self) -> String;

    /// Sends a control message (reliable, ordered, at most
    /// `max_message` bytes). May block for flow control, up to `op_timeout`.
    fn send(&self, msg: &[u8]) -> Result<()>;

    /// The next control message, or [`Error::Timeout`] after `timeout`, or
    /// [`Error::Disconnected`] once the connection is gone.
    fn recv(&self, timeout: Duration) -> Result<Vec<u8>>;

    /// Hands every control message to `hook` on the transport's own
    /// receiving thread, as it arrives, before [`Connection::recv`] could
    /// see it: the messages already queued first, then each new one, in
    /// order. What `hook` returns is queued for `recv` (with the usual
    /// flow control). It saves the thread hop from the transport's reader
    /// to a thread blocked in `recv`, which on a small or virtual machine
    /// is a large part of a small request's round trip.
    ///
    /// Call it before any thread calls `recv` (messages could otherwise be
    /// taken out of order). `hook` runs on the thread that reads this
    /// connection: while it runs nothing more is received, replies to this
    /// side's one-sided operations included, so it must never wait for
    /// this connection's incoming traffic, and should be quick. It may
    /// `send` and `close`. It is dropped when the connection goes.
    ///
    /// TCP supports it; the default (verbs) returns
    /// [`Error::Unsupported`], where the caller keeps using `recv`: its
    /// completion thread also reposts receive buffers, which must not wait
    /// for a caller's work.
    fn set_message_hook(&self, hook: MessageHook) -> Result<()> {
        drop(hook);
        Err(Error::Unsupported(
            "this transport delivers messages through recv only".into(),
        ))
    }

    /// Registers `len` bytes at `ptr` (host memory, or GPU memory through a
    /// peer-memory driver on verbs) so the peer may access them and so they
    /// can be the local side of `write_remote` / `read_remote`. Registering
    /// the same range again while the region is alive returns the same
    /// region.
    ///
    /// # Safety
    /// `[ptr, ptr+len)` must be valid, writable memory that stays allocated
    /// until the returned region (all its clones) is dropped; the peer and
    /// this side's one-sided operations read and write it concurrently with
    /// the caller, who must not rely on its contents while they run.
    unsafe fn register(&self, ptr: *mut u8, len: usize) -> Result<Arc<LocalRegion>>;

    /// Registers a dmabuf (exported by a GPU runtime): `len` bytes at
    /// `offset` in the buffer, addressed as `iova` in descriptors. Verbs
    /// only; TCP returns [`Error::Unsupported`].
    ///
    /// # Safety
    /// `fd` must be a dmabuf that stays valid until the region is dropped.
    unsafe fn register_dmabuf(
        &self,
        fd: RawFd,
        offset: u64,
        len: usize,
        iova: u64,
    ) -> Result<Arc<LocalRegion>>;

    /// Registers device memory `[addr, addr+len)` as a target the peer may
    /// WRITE into and nothing else (it cannot be READ, nor be the local
    /// side of `write_remote` / `read_remote`). The CPU cannot write device
    /// memory, so the TCP transport receives such a WRITE into `sink`'s
    /// pinned staging on the lane's reader thread and has the sink copy
    /// each piece on; the WRITE is acknowledged once every copy ended.
    /// Default: [`Error::Unsupported`] (verbs registers device memory with
    /// `register_dmabuf` or `register` instead).
    ///
    /// # Safety
    /// `[addr, addr+len)` must be device memory `sink` can copy into, and
    /// stay allocated until the returned region is dropped.
    unsafe fn register_device(
        &self,
        addr: u64,
        len: usize,
        sink: Arc<dyn DeviceSink>,
    ) -> Result<Arc<LocalRegion>> {
        let _ = (addr, len, sink);
        Err(Error::Unsupported(
            "this transport registers device memory with register_dmabuf or register".into(),
        ))
    }

    /// Copies `len` bytes from `local[local_off..]` into the peer's region
    /// `remote` at `remote_off` (RDMA WRITE). Returns once the bytes are
    /// placed in the peer's memory.
    fn write_remote(
        &self,
        local: &LocalRegion,
        local_off: usize,
        len: usize,
        remote: &RemoteDescriptor,
        remote_off: u64,
    ) -> Result<()>;

    /// Sends `len` bytes of the file `file` starting at `file_offset` into
    /// the peer's region `remote` at `remote_off`, like [`write_remote`]
    /// but without a registered local buffer: the TCP transport hands the
    /// file's pages to the socket with `sendfile(2)`, so the bytes never
    /// pass through user memory on this side. With TLS the bytes must be
    /// encrypted in user space, so they are read into a buffer first
    /// (staged) and the call is no cheaper than `write_remote`. Returns once they are placed
    /// in the peer's memory, with the number of bytes that came from the
    /// file.
    ///
    /// That number is `len` unless the file ends (or a read of it fails)
    /// before `file_offset + len`: every frame has already promised the
    /// peer its length, so the rest is sent as zeros (the stream stays in
    /// step and usable) and the answer is the length of the prefix that
    /// really holds file data. Callers should size `len` from `fstat` and
    /// report only the returned count.
    ///
    /// Range and key checks are those of [`write_remote`]. The default
    /// (verbs) returns [`Error::Unsupported`]: stage the bytes in a
    /// registered buffer and use [`write_remote`] instead.
    ///
    /// [`write_remote`]: Connection::write_remote
    fn write_remote_from_file(
        &self,
        file: BorrowedFd<'_>,
        file_offset: u64,
        len: usize,
        remote: &RemoteDescriptor,
        remote_off: u64,
    ) -> Result<usize> {
        let _ = (file, file_offset, len, remote, remote_off);
        Err(Error::Unsupported(
            "this transport cannot send from a file; stage the bytes and use write_remote".into(),
        ))
    }

    /// Copies `len` bytes from the peer's region `remote` at `remote_off`
    /// into `local[local_off..]` (RDMA READ). Returns once they are here.
    fn read_remote(
        &self,
        local: &LocalRegion,
        local_off: usize,
        len: usize,
        remote: &RemoteDescriptor,
        remote_off: u64,
    ) -> Result<()>;

    /// Counters of this connection (for `hipfs stats` and tests).
    fn stats(&self) -> ConnectionStats;

    /// Closes the connection: pending and later operations on both sides
    /// fail with [`Error::Disconnected`]. Idempotent.
    fn close(&self);
}

/// Where a TCP connection's lanes put bytes that a peer WRITEs into device
/// memory registered with [`Connection::register_device`]: each lane's
/// reader thread gets a [`Stager`] of its own from the sink (on its first
/// such WRITE) and keeps it for the connection's life, so the few pinned
/// buffers it receives into stay in the CPU caches.
pub trait DeviceSink: Send + Sync {
    /// Staging for one lane.
    fn stager(&self) -> Result<Box<dyn Stager>>;
}

/// One lane's staging towards device memory: host buffers the lane
/// receives into, each copied on to the device before it is reused.
pub trait Stager: Send {
    /// The next buffer to receive into, holding at most `len` bytes (its
    /// length: at least 1), once the copy that last used it ended.
    fn next_buf(&mut self, len: usize) -> Result<&mut [u8]>;

    /// Starts copying the first `len` bytes of the buffer [`next_buf`]
    /// gave last to device address `dst`.
    ///
    /// # Safety
    /// `[dst, dst+len)` lies inside device memory registered with
    /// [`Connection::register_device`] for this stager's sink, and stays
    /// registered until [`flush`](Stager::flush) returned.
    ///
    /// [`next_buf`]: Stager::next_buf
    unsafe fn copy_out(&mut self, dst: u64, len: usize) -> Result<()>;

    /// Waits until every copy started has ended.
    fn flush(&mut self) -> Result<()>;
}

/// Counters of one connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionStats {
    /// Bytes this side moved with `write_remote`.
    pub bytes_written: u64,
    /// Bytes this side moved with `read_remote`.
    pub bytes_read: u64,
    /// Control messages sent.
    pub messages_sent: u64,
    /// One-sided operations of the peer that this side refused (wrong or
    /// stale key, range outside the region). Always 0 on verbs, where the
    /// adapter refuses them and the connection fails instead.
    pub remote_ops_rejected: u64,
}

/// Accepts connections.
pub trait Listener: Send + Sync {
    /// Waits for the next connection (all its lanes established).
    fn accept(&self) -> Result<Box<dyn Connection>>;
    /// The address it listens on (`ip:port`, port resolved if 0 was asked).
    fn local_addr(&self) -> String;
    /// Stops listening; a blocked and every later `accept` returns
    /// [`Error::Disconnected`].
    fn close(&self);
}

/// Listens on `addr` (`ip:port`; port 0 picks one).
pub fn listen(addr: &str, cfg: &TransportConfig) -> Result<Box<dyn Listener>> {
    cfg.validate()?;
    match cfg.kind {
        TransportKind::Tcp => Ok(Box::new(tcp::TcpListener::bind(addr, cfg)?)),
        TransportKind::Verbs => {
            if devices()?.is_empty() {
                return Err(no_device());
            }
            with_verbs::listen(addr, cfg, false)
        }
        TransportKind::Auto => {
            if devices()?.is_empty() {
                Ok(Box::new(tcp::TcpListener::bind(addr, cfg)?))
            } else {
                with_verbs::listen(addr, cfg, true)
            }
        }
    }
}

/// Connects to a listener at `addr` (`host:port`).
pub fn connect(addr: &str, cfg: &TransportConfig) -> Result<Box<dyn Connection>> {
    cfg.validate()?;
    match cfg.kind {
        TransportKind::Tcp => Ok(Box::new(tcp::TcpConnection::connect(addr, cfg)?)),
        TransportKind::Verbs => {
            if devices()?.is_empty() {
                return Err(no_device());
            }
            with_verbs::connect(addr, cfg)
        }
        TransportKind::Auto => {
            if !devices()?.is_empty() {
                match with_verbs::connect(addr, cfg) {
                    Ok(c) => return Ok(c),
                    Err(e) => {
                        log::info!("verbs connect to {addr} failed ({e}); falling back to tcp")
                    }
                }
            }
            Ok(Box::new(tcp::TcpConnection::connect(addr, cfg)?))
        }
    }
}

/// The error for "verbs asked for, none here": a build without the `verbs`
/// feature says so, since installing a NIC would not help.
fn no_device() -> Error {
    if cfg!(feature = "verbs") {
        Error::NoDevice
    } else {
        Error::Unsupported(
            "this build has no verbs transport (built without the `verbs` feature)".into(),
        )
    }
}

/// The verbs transport, or its absence in a build without the `verbs`
/// feature (then [`devices`] is empty and these are never reached).
#[cfg(feature = "verbs")]
mod with_verbs {
    use super::{verbs, Connection, Listener, Result, TransportConfig};

    pub(crate) fn listen(
        addr: &str,
        cfg: &TransportConfig,
        dual: bool,
    ) -> Result<Box<dyn Listener>> {
        if dual {
            Ok(Box::new(verbs::DualListener::bind(addr, cfg)?))
        } else {
            Ok(Box::new(verbs::VerbsListener::bind(addr, cfg)?))
        }
    }

    pub(crate) fn connect(addr: &str, cfg: &TransportConfig) -> Result<Box<dyn Connection>> {
        Ok(Box::new(verbs::VerbsConnection::connect(addr, cfg)?))
    }

    pub(crate) fn devices() -> Result<Vec<super::DeviceInfo>> {
        verbs::devices()
    }
}

#[cfg(not(feature = "verbs"))]
mod with_verbs {
    use super::{no_device, Connection, DeviceInfo, Listener, Result, TransportConfig};

    pub(crate) fn listen(_: &str, _: &TransportConfig, _: bool) -> Result<Box<dyn Listener>> {
        Err(no_device())
    }

    pub(crate) fn connect(_: &str, _: &TransportConfig) -> Result<Box<dyn Connection>> {
        Err(no_device())
    }

    pub(crate) fn devices() -> Result<Vec<DeviceInfo>> {
        Ok(Vec::new())
    }
}

/// An RDMA device of this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device name, e.g. `mlx5_0` or `rxe0`.
    pub name: String,
    /// Node GUID (host byte order).
    pub guid: u64,
    /// Whether port 1 is ACTIVE.
    pub port_active: bool,
    /// `Ethernet` (RoCE) or `InfiniBand`.
    pub link_layer: String,
}

/// What one RDMA device said to the registrations device memory needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationProbe {
    /// Device name.
    pub device: String,
    /// `ibv_reg_dmabuf_mr` of the probe's dmabuf (`None`: not tried).
    pub dmabuf: Option<std::result::Result<(), String>>,
    /// `ibv_reg_mr` of the probe's device address (peer memory).
    pub peer_memory: Option<std::result::Result<(), String>>,
}

/// The RDMA devices of this host. An empty list (not an error) when there
/// are none, including when libibverbs reports ENOSYS because the kernel
/// has no RDMA support.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    with_verbs::devices()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_kinds_parse_and_print_as_their_names() {
        for k in [
            TransportKind::Auto,
            TransportKind::Verbs,
            TransportKind::Tcp,
        ] {
            assert_eq!(k.to_string().parse::<TransportKind>().unwrap(), k);
        }
        assert_eq!(
            " TCP ".parse::<TransportKind>().unwrap(),
            TransportKind::Tcp
        );
        assert!("udp".parse::<TransportKind>().is_err());
    }

    #[test]
    fn configs_no_transport_can_honour_are_rejected() {
        assert!(TransportConfig::default().validate().is_ok());
        let bad = [
            TransportConfig {
                lanes: 0,
                ..Default::default()
            },
            TransportConfig {
                lanes: 65,
                ..Default::default()
            },
            TransportConfig {
                max_message: 0,
                ..Default::default()
            },
            TransportConfig {
                chunk_size: 100,
                ..Default::default()
            },
            TransportConfig {
                recv_credits: 1,
                ..Default::default()
            },
            TransportConfig {
                op_timeout: Duration::ZERO,
                ..Default::default()
            },
        ];
        for c in bad {
            assert!(
                matches!(c.validate(), Err(Error::InvalidArgument(_))),
                "{c:?}"
            );
            assert!(listen("127.0.0.1:0", &c).is_err());
        }
    }
}
