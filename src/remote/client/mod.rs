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
use std::sync::{Arc, Mutex, Weak};

use crate::registry::RegisteredBuffer;
use std::time::{Duration, Instant};

use hipfs_rdma::TransportKind;

use super::auth::Token;
use super::proto::{Op, Payload, Request, WireCred};
use super::RemoteError;
pub(crate) use link::{Link, RecvBuf};

/// How a client reaches its server.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// `host:port`.
    pub server: String,
    /// Shared secret the server asks for.
    pub token: Option<Token>,
    /// Where the token came from (handed to UserspaceFs users of a mount).
    pub token_file: Option<PathBuf>,
    /// Which transport to use.
    pub transport: TransportKind,
    /// How long a call may wait for the server (including reconnecting).
    pub timeout: Duration,
    /// TCP streams or QPs of the connection; 0: the transport's default.
    pub lanes: usize,
    /// TLS on the TCP transport (`-o tls,ca=FILE`): the CA that signed the
    /// server's certificate and, optionally, the name to check.
    pub tls: Option<hipfs_rdma::TlsConfig>,
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
            tls: None,
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
            let rx = match link.send(id, &msg) {
                Ok(rx) => rx,
                // Not sent: always safe to try again on a new link.
                Err(e) if e.is_disconnect() => continue,
                Err(e) => {
                    log::warn!("{}: cannot send a request: {e}", self.cfg.server);
                    return Err(libc::EIO);
                }
            };
            match wait_for_reply(&rx, deadline) {
                Ok(reply) => {
                    if let Ok(p) = &reply.result {
                        on_link(&link, p);
                    }
                    return reply.result;
                }
                Err(Some(errno)) => {
                    link.forget(id);
                    return Err(errno);
                }
                Err(None) => {
                    reached = true;
                    if !idempotent {
                        return Err(libc::EIO);
                    }
                }
            }
        }
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
        if let Err(e) = link.conn.send(&msg) {
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

/// What makes two clients differ: a second mount of the same server with
/// another transport, token or lane count gets a client of its own. (The
/// timeout is not part of it: it bounds calls, it does not change what the
/// connection is, and the first user's timeout holds.)
#[derive(Clone, Debug, PartialEq, Eq)]
struct ClientKey {
    server: String,
    transport: TransportKind,
    token_file: Option<PathBuf>,
    token: Option<Token>,
    lanes: usize,
    tls: Option<hipfs_rdma::TlsConfig>,
}

impl ClientKey {
    fn of(cfg: &ClientConfig) -> ClientKey {
        ClientKey {
            server: cfg.server.clone(),
            transport: cfg.transport,
            token_file: cfg.token_file.clone(),
            token: cfg.token.clone(),
            lanes: cfg.lanes,
            tls: cfg.tls.clone(),
        }
    }
}

/// One key's client, held weakly, so a client nobody uses is dropped (and
/// its connection closed) with its last user. `connect` serialises
/// connecting for this key only; `client` is only held for a moment.
#[derive(Default)]
struct Slot {
    connect: Mutex<()>,
    client: Mutex<Weak<RemoteClient>>,
}

impl Slot {
    fn get(&self) -> Option<Arc<RemoteClient>> {
        self.client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .upgrade()
    }
}

/// Process-wide clients (UserspaceFs handles share them; see [`direct`]).
/// The outer lock is only held to find or add a slot, never while connecting.
static CLIENTS: Mutex<Vec<(ClientKey, Arc<Slot>)>> = Mutex::new(Vec::new());

/// The process-wide client for `cfg` (server, transport, token and lanes),
/// connecting on first use. Connecting blocks only other callers with the
/// same key; unrelated clients and buffer registration go on meanwhile.
pub fn shared_client(cfg: ClientConfig) -> Result<Arc<RemoteClient>, RemoteError> {
    let key = ClientKey::of(&cfg);
    let slot = {
        let mut v = CLIENTS.lock().unwrap_or_else(|p| p.into_inner());
        // Forget slots whose client is gone and that nobody is filling.
        v.retain(|(_, s)| Arc::strong_count(s) > 1 || s.get().is_some());
        match v.iter().find(|(k, _)| *k == key) {
            Some((_, s)) => Arc::clone(s),
            None => {
                let s = Arc::new(Slot::default());
                v.push((key, Arc::clone(&s)));
                s
            }
        }
    };
    if let Some(c) = slot.get() {
        return Ok(c);
    }
    let _one_at_a_time = slot.connect.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = slot.get() {
        return Ok(c);
    }
    let c = RemoteClient::connect(cfg)?;
    *slot.client.lock().unwrap_or_else(|p| p.into_inner()) = Arc::downgrade(&c);
    Ok(c)
}

/// The process-wide clients somebody uses now (those [`shared_client`]
/// handed out and that are still alive), without waiting on any that is
/// connecting.
pub fn live_shared_clients() -> Vec<Arc<RemoteClient>> {
    let v = CLIENTS.lock().unwrap_or_else(|p| p.into_inner());
    v.iter().filter_map(|(_, s)| s.get()).collect()
}

/// Called by `buf_register` for a buffer registered with `RDMA_REGISTER`:
/// registers `buf` on the live link of every process-wide client and gives
/// it the first one's descriptor, so that `desc_str` (C ABI) and
/// `UserspaceBuf::Rdma` carry the transport's own descriptor. Clients that
/// connect later register the buffer on first use (see [`direct`]).
pub fn on_rdma_register(buf: &RegisteredBuffer) {
    if buf.info.kind == crate::gpu::MemoryKind::Device {
        log::debug!(
            "buffer {:#x}: device memory is not registered with hipfs clients",
            buf.base
        );
        return;
    }
    let clients = live_shared_clients();
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

/// The reply on `rx`, or why not: `Some(ETIMEDOUT)` at `deadline`,
/// `Some(EINTR)` when the process the FUSE request is for was killed (the
/// kernel holds it in D state until answered), `None` when the link died.
fn wait_for_reply(
    rx: &std::sync::mpsc::Receiver<super::proto::Reply>,
    deadline: Instant,
) -> Result<super::proto::Reply, Option<i32>> {
    use std::sync::mpsc::RecvTimeoutError;
    const CHECK_KILLED: Duration = Duration::from_millis(100);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left.min(CHECK_KILLED)) {
            Ok(reply) => return Ok(reply),
            Err(RecvTimeoutError::Disconnected) => return Err(None),
            Err(RecvTimeoutError::Timeout) if left <= CHECK_KILLED => {
                return Err(Some(libc::ETIMEDOUT))
            }
            Err(RecvTimeoutError::Timeout) => {
                if hipfs_fusefs::caller_killed() {
                    return Err(Some(libc::EINTR));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::server::{ServeConfig, Server};

    fn tcp_server() -> (tempfile::TempDir, Server) {
        let export = tempfile::tempdir().unwrap();
        let mut cfg = ServeConfig::new(export.path(), "127.0.0.1:0");
        cfg.transport = TransportKind::Tcp;
        (export, Server::start(cfg).unwrap())
    }

    fn tcp_config(addr: &str) -> ClientConfig {
        let mut cc = ClientConfig::new(addr);
        cc.transport = TransportKind::Tcp;
        cc
    }

    #[test]
    fn a_second_config_with_other_lanes_or_transport_gets_its_own_client() {
        let (_export, server) = tcp_server();
        let mut one = tcp_config(server.local_addr());
        one.lanes = 1;
        let a = shared_client(one.clone()).unwrap();
        assert!(Arc::ptr_eq(&a, &shared_client(one.clone()).unwrap()));
        let mut two = one.clone();
        two.lanes = 2;
        let b = shared_client(two).unwrap();
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(b.cfg.lanes, 2);
        let mut auto = one;
        auto.transport = TransportKind::Auto;
        let c = shared_client(auto).unwrap();
        assert!(!Arc::ptr_eq(&a, &c) && !Arc::ptr_eq(&b, &c));
        assert_eq!(c.transport(), TransportKind::Auto);
    }

    #[test]
    fn a_client_nobody_uses_is_dropped() {
        let (_export, server) = tcp_server();
        let mut cfg = tcp_config(server.local_addr());
        cfg.lanes = 3;
        let a = shared_client(cfg.clone()).unwrap();
        let weak = Arc::downgrade(&a);
        drop(a);
        assert!(
            weak.upgrade().is_none(),
            "the cache kept an unused client alive"
        );
        // The next user connects a fresh one.
        let b = shared_client(cfg).unwrap();
        assert!(b.current().is_some());
    }

    #[test]
    fn connecting_to_a_silent_server_blocks_no_unrelated_client_or_registration() {
        // Accepts TCP connections (the kernel does) but never answers the
        // handshake: connecting waits out the client's whole timeout.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut stuck = tcp_config(&silent.local_addr().unwrap().to_string());
        stuck.timeout = Duration::from_secs(3);
        let waiting = std::thread::spawn(move || shared_client(stuck).map(drop));
        // Let that thread get into its connect.
        std::thread::sleep(Duration::from_millis(200));
        let (_export, server) = tcp_server();
        let t = Instant::now();
        let live = shared_client(tcp_config(server.local_addr())).unwrap();
        let mut mem = vec![0u8; 65536];
        let base = mem.as_mut_ptr() as usize;
        crate::buffer::buf_register(base, mem.len(), crate::registry::RDMA_REGISTER).unwrap();
        let took = t.elapsed();
        crate::buffer::buf_deregister(base).unwrap();
        assert!(
            took < Duration::from_millis(1500),
            "an unrelated connect and register waited {took:?} on the silent server"
        );
        assert!(live.current().is_some());
        // The silent connect was still going on all that time (the thread
        // ends by itself when its timeout runs out).
        assert!(!waiting.is_finished());
    }
}
