//! The remote client: one per server per process, shared by every mount
//! thread and every UserspaceFs handle.
//!
//! Calls are multiplexed over one connection by request id. When the server
//! goes away, calls keep retrying the connection until their deadline
//! ([`ClientConfig::timeout`]) and then fail with an errno: `ENOTCONN` when
//! the server could not be reached, `ETIMEDOUT` when it did not answer in
//! time, `EIO` when the connection died under a request that is not safe to
//! resend. After a server restart the next call reconnects and carries on;
//! open files are reopened by path on the new connection (see [`backend`]).

pub mod backend;
pub mod direct;
mod link;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hipfs_rdma::TransportKind;

use super::auth::Token;
use super::proto::{Op, Payload, Request, WireCred};
use super::RemoteError;
pub(crate) use link::{registration_containing, Link, RecvBuf};

/// How a client reaches its server.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// `host:port`.
    pub server: String,
    pub token: Option<Token>,
    /// Where the token came from (for messages; never handed to processes).
    pub token_file: Option<PathBuf>,
    pub transport: TransportKind,
    /// How long a call may wait for the server (including reconnecting).
    pub timeout: Duration,
    /// TCP streams or QPs of the connection; 0: the transport's default.
    pub lanes: usize,
    /// Where to get a local ticket when there is no token (see
    /// [`LocalTicket`]).
    pub local_ticket: LocalTicket,
    /// A file capability to authenticate with instead (the direct path):
    /// the connection may then only use that one file.
    pub capability: Option<FileCapability>,
    /// Ask for no message authentication after the handshake
    /// (`HIPFS_UNAUTHENTICATED_MESSAGES=1`; the server must allow it too):
    /// only for measuring what authentication costs.
    pub unauthenticated_messages: bool,
}

/// A capability for one open file, and how to get a new one when the
/// server no longer knows it (it restarted, or the mount daemon's
/// connection to it was replaced): ask the mount again.
#[derive(Clone)]
pub struct FileCapability {
    current: Arc<Mutex<[u8; 32]>>,
    renew: Option<Arc<dyn Fn() -> Option<[u8; 32]> + Send + Sync>>,
}

impl std::fmt::Debug for FileCapability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileCapability(<hidden>)")
    }
}

impl FileCapability {
    pub fn new(
        secret: [u8; 32],
        renew: Option<Arc<dyn Fn() -> Option<[u8; 32]> + Send + Sync>>,
    ) -> FileCapability {
        FileCapability {
            current: Arc::new(Mutex::new(secret)),
            renew,
        }
    }

    /// The secret to present; `fresh` asks the mount for a new one first.
    pub(crate) fn secret(&self, fresh: bool) -> [u8; 32] {
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if fresh {
            if let Some(new) = self.renew.as_ref().and_then(|r| r()) {
                *cur = new;
            }
        }
        *cur
    }
}

/// Where a client without a token gets a local ticket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum LocalTicket {
    /// From `/run/hipfs/serve-PORT.sock` when the server address is loopback.
    #[default]
    Auto,
    /// From this socket (`-o local_socket=PATH`).
    At(PathBuf),
    /// Never (a token is then required).
    Never,
}

/// The port `hipfs serve` listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 7471;

impl ClientConfig {
    /// `server` is `host`, `host:port` or `[v6]:port`.
    pub fn new(server: &str) -> ClientConfig {
        ClientConfig {
            server: with_default_port(server),
            token: None,
            token_file: None,
            transport: TransportKind::Auto,
            timeout: Duration::from_secs(30),
            lanes: 0,
            local_ticket: LocalTicket::Auto,
            capability: None,
            unauthenticated_messages: super::seal::unauthenticated_messages_requested(),
        }
    }
}

/// Lanes of the process-wide client that UserspaceFs handles share:
/// `HIPFS_REMOTE_LANES` (1..=64) when set, else one per two CPUs, 4 to 16.
/// Each lane is a TCP stream (or QP) with its own receiving thread, so the
/// bytes a client can take in grow with the lanes until the cores are busy.
pub fn userspace_lanes() -> usize {
    if let Some(n) = std::env::var("HIPFS_REMOTE_LANES")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| (1..=64).contains(n))
    {
        return n;
    }
    let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
    (cpus / 2).clamp(4, 16)
}

/// Adds the default port when `s` has none.
pub fn with_default_port(s: &str) -> String {
    let has_port = if s.starts_with('[') {
        s.contains("]:")
    } else {
        s.matches(':').count() == 1
    };
    if has_port {
        s.to_string()
    } else if s.contains(':') && !s.starts_with('[') {
        format!("[{s}]:{DEFAULT_PORT}")
    } else {
        format!("{s}:{DEFAULT_PORT}")
    }
}

/// A connection (re-established as needed) to one server.
pub struct RemoteClient {
    pub(crate) cfg: ClientConfig,
    counters: ClientCounters,
    link: Mutex<Option<Arc<Link>>>,
    connecting: Mutex<()>,
    next_id: AtomicU64,
    epoch: AtomicU64,
}

impl std::fmt::Debug for RemoteClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteClient")
            .field("server", &self.cfg.server)
            .finish()
    }
}

impl RemoteClient {
    /// Connects now, so a bad address or token is reported at once.
    pub fn connect(cfg: ClientConfig) -> Result<Arc<RemoteClient>, RemoteError> {
        let c = Arc::new(RemoteClient {
            cfg,
            link: Mutex::new(None),
            connecting: Mutex::new(()),
            next_id: AtomicU64::new(1),
            epoch: AtomicU64::new(0),
            counters: ClientCounters::default(),
        });
        c.link()?;
        Ok(c)
    }

    /// The server address.
    pub fn server(&self) -> &str {
        &self.cfg.server
    }

    /// The transport this client was configured with (`transport=`).
    pub fn transport(&self) -> TransportKind {
        self.cfg.transport
    }

    /// Whether the server exports read-only (as of the last connection).
    pub fn read_only(&self) -> bool {
        self.current().is_some_and(|l| l.welcome.read_only)
    }

    /// The server's name for its export.
    pub fn export_name(&self) -> String {
        self.current()
            .map(|l| l.welcome.export.clone())
            .unwrap_or_default()
    }

    fn current(&self) -> Option<Arc<Link>> {
        self.link
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|l| !l.is_dead())
    }

    /// The live link, connecting if there is none.
    pub(crate) fn link(&self) -> Result<Arc<Link>, RemoteError> {
        if let Some(l) = self.current() {
            return Ok(l);
        }
        let _one_at_a_time = self.connecting.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = self.current() {
            return Ok(l);
        }
        let epoch = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        let l = Link::open(&self.cfg, epoch)?;
        if epoch > 1 {
            log::info!("reconnected to {}", self.cfg.server);
            self.counters.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        *self.link.lock().unwrap_or_else(|p| p.into_inner()) = Some(l.clone());
        Ok(l)
    }

    /// Runs one operation, built by `make` for the link it will travel on
    /// (so file handles can be translated for that link), retrying across
    /// reconnects until the deadline when that is safe.
    pub(crate) fn call_with(
        &self,
        cred: &WireCred,
        make: impl FnMut(&Arc<Link>) -> Result<Op, i32>,
        on_link: impl Fn(&Arc<Link>, &Payload),
    ) -> Result<Payload, i32> {
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        let r = self.call_with_retries(cred, make, on_link);
        // Answers like ENOENT are the filesystem working; count transport trouble.
        if let Err(libc::EIO | libc::ENOTCONN | libc::ETIMEDOUT) = r {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn call_with_retries(
        &self,
        cred: &WireCred,
        mut make: impl FnMut(&Arc<Link>) -> Result<Op, i32>,
        on_link: impl Fn(&Arc<Link>, &Payload),
    ) -> Result<Payload, i32> {
        let deadline = Instant::now() + self.cfg.timeout;
        let mut backoff = Duration::from_millis(20);
        let mut reached = false;
        loop {
            let link = match self.link() {
                Ok(l) => l,
                Err(e) => {
                    if let RemoteError::Auth(_) | RemoteError::Refused(_) = e {
                        log::warn!("{}: {e}", self.cfg.server);
                        return Err(libc::EACCES);
                    }
                    if Instant::now() + backoff >= deadline {
                        log::debug!("{}: {e}", self.cfg.server);
                        return Err(if reached { libc::EIO } else { libc::ENOTCONN });
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                    continue;
                }
            };
            let op = make(&link)?;
            let idempotent = op.is_idempotent();
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let msg = Request {
                id,
                cred: cred.clone(),
                op,
            }
            .encode();
            let rx = match link.send(id, msg) {
                Ok(rx) => rx,
                // Not sent: always safe to try again on a new link.
                Err(e) if e.is_disconnect() => continue,
                Err(e) => {
                    log::warn!("{}: cannot send a request: {e}", self.cfg.server);
                    return Err(libc::EIO);
                }
            };
            let wait = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(reply) => {
                    if let Ok(p) = &reply.result {
                        on_link(&link, p);
                    }
                    return reply.result;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    link.forget(id);
                    return Err(libc::ETIMEDOUT);
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    reached = true;
                    if !idempotent {
                        return Err(libc::EIO);
                    }
                }
            }
        }
    }

    /// Checks bytes a server placed in our memory against the hash its
    /// authenticated reply carries (`Payload::Placed`). On a mismatch the
    /// stream was altered: the link is dropped (the next call reconnects)
    /// and the caller answers EIO.
    pub(crate) fn check_placed(&self, bytes: &[u8], digest: &[u8; 32]) -> Result<(), i32> {
        if super::seal::placed_digest(bytes) == *digest {
            return Ok(());
        }
        log::warn!(
            "{}: placed read data does not match its authenticated hash; dropping the connection",
            self.cfg.server
        );
        if let Some(l) = self.current() {
            l.kill();
        }
        Err(libc::EIO)
    }

    /// One line of counters: requests, failures, reconnects.
    pub fn counters_line(&self) -> String {
        let c = &self.counters;
        format!(
            "server {}: {} requests, {} failed, {} reconnects",
            self.cfg.server,
            c.calls.load(Ordering::Relaxed),
            c.failed.load(Ordering::Relaxed),
            c.reconnects.load(Ordering::Relaxed)
        )
    }

    /// Sends `op` on the live link if it is still connection `epoch`,
    /// without waiting for (or ever reading) the answer. For requests whose
    /// outcome changes nothing for the caller (releasing a handle).
    pub(crate) fn post(&self, cred: &WireCred, op: Op, epoch: u64) {
        let Some(link) = self.current().filter(|l| l.epoch == epoch) else {
            return;
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let msg = Request {
            id,
            cred: cred.clone(),
            op,
        }
        .encode();
        if let Err(e) = link.send_only(msg) {
            log::debug!("{}: {e}", self.cfg.server);
        }
    }

    /// Runs one operation that involves no file handle.
    pub fn call(&self, cred: &WireCred, op: Op) -> Result<Payload, i32> {
        self.call_with(cred, |_| Ok(op.clone()), |_, _| {})
    }
}

impl Drop for RemoteClient {
    fn drop(&mut self) {
        // The link's reply reader holds it alive; closing the connection
        // ends that thread and frees the server's session.
        if let Some(l) = self.link.lock().unwrap_or_else(|p| p.into_inner()).take() {
            l.kill();
        }
    }
}

/// What a client has done, for `hipfs stats MOUNTPOINT`.
#[derive(Default)]
struct ClientCounters {
    calls: AtomicU64,
    failed: AtomicU64,
    reconnects: AtomicU64,
}

/// Process-wide clients, one per server address (UserspaceFs handles share
/// them; see [`direct`]).
static CLIENTS: Mutex<Vec<Arc<RemoteClient>>> = Mutex::new(Vec::new());

/// Clients of direct-path files (one per bound file: each connection's
/// credential is that file's capability), for [`register_with_clients`].
static DIRECT: Mutex<Vec<std::sync::Weak<RemoteClient>>> = Mutex::new(Vec::new());

/// Counts `c` among the clients RDMA_REGISTER buffers are registered with.
pub(crate) fn add_direct_client(c: &Arc<RemoteClient>) {
    crate::rdma_hooks::add_rdma_register_hook(register_with_clients);
    let mut v = DIRECT.lock().unwrap_or_else(|p| p.into_inner());
    v.retain(|w| w.strong_count() > 0);
    v.push(Arc::downgrade(c));
}

/// The live clients of direct-path (UserspaceFs) files in this process.
pub fn direct_clients() -> Vec<Arc<RemoteClient>> {
    DIRECT
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter_map(|w| w.upgrade())
        .collect()
}

/// The process-wide client for `cfg.server`, connecting on first use.
pub fn shared_client(cfg: ClientConfig) -> Result<Arc<RemoteClient>, RemoteError> {
    // From the first client on, buffers registered with RDMA_REGISTER are
    // registered with every connected client's transport at once.
    crate::rdma_hooks::add_rdma_register_hook(register_with_clients);
    let mut v = CLIENTS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = v.iter().find(|c| c.cfg.server == cfg.server) {
        return Ok(c.clone());
    }
    let c = RemoteClient::connect(cfg)?;
    v.push(c.clone());
    Ok(c)
}

/// The rdma hook: registers `buf` on the live link of every process-wide
/// client and gives it the first one's descriptor, so that `desc_str` (C
/// ABI) and `UserspaceBuf::Rdma` carry the transport's own descriptor.
/// Clients that connect later register the buffer on first use (see
/// [`direct`]).
fn register_with_clients(buf: &crate::buffer::RegisteredBuffer) {
    if buf.info.kind == crate::gpu::MemoryKind::Device {
        log::debug!(
            "buffer {:#x}: device memory is not registered with hipfs clients",
            buf.base
        );
        return;
    }
    let mut clients: Vec<Arc<RemoteClient>> =
        CLIENTS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    clients.extend(direct_clients());
    for c in clients {
        let Some(link) = c.current() else { continue };
        match link.buffer_region(buf) {
            Ok(r) => {
                // The first client's descriptor wins; the others are used
                // through the registration itself.
                let _ = buf.rdma_desc.set(r.descriptor().to_desc_string());
            }
            Err(e) => log::warn!(
                "{}: cannot register buffer {:#x} ({} bytes): {e}",
                c.cfg.server,
                buf.base,
                buf.len
            ),
        }
    }
}
