//! The remote client: one per server per process, shared by every mount
//! thread and every UserspaceFs handle.
//!
//! Calls are multiplexed over one connection by request id. Two modes, as
//! with NFS ([`ClientConfig::hard`]):
//!
//! - **soft**: when the server goes away, calls keep retrying the connection
//!   until their deadline ([`ClientConfig::timeout`]) and then fail with an
//!   errno: `ENOTCONN` when the server could not be reached, `ETIMEDOUT`
//!   when it did not answer in time, `EIO` when the connection died under a
//!   request that is not safe to resend. The deadline belongs to the
//!   operation, not to each request: every request made for it (a reopen
//!   after a reconnect, the pieces of a large read) shares it ([`Scope`]),
//!   and a FUSE request that follows a timed-out request of the same
//!   process within [`SHARED_DEADLINE_GAP`] (the kernel's capability lookup
//!   before a write, then the write) shares the expired deadline too.
//! - **hard** (the mount default): a request that times out is waited for
//!   on (with a warning per timeout), one whose connection dies is resent
//!   after reconnecting when that is safe, until the server answers, says a
//!   real errno, or the calling process is killed (`EINTR`).
//!
//! After a server restart the next call reconnects and carries on; open
//! files are reopened by path on the new connection (see [`backend`]).

pub mod backend;
pub mod cluster;
mod device_reg;
pub mod direct;
mod lane_staging;
mod link;
pub(crate) mod spread;

use std::cell::Cell;
use std::collections::HashMap;
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
    /// Where the token came from (for messages; never handed to processes).
    pub token_file: Option<PathBuf>,
    /// Which transport to use.
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
    /// Retry until the server answers (or the caller is killed) instead of
    /// failing after `timeout` (see the module docs). Off for library
    /// clients (UserspaceFs), on for mounts unless `-o soft`.
    pub hard: bool,
    /// TLS on the TCP transport (`-o tls,ca=FILE`): the CA that signed the
    /// server's certificate and, optionally, the name to check.
    pub tls: Option<hipfs_rdma::TlsConfig>,
    /// More servers of the same export (a multi-server mount): when the
    /// current one cannot be reached, or leaves a request unanswered for
    /// [`ClientConfig::failover_after`], the client moves to the next one
    /// and reopens its files there by path (see [`cluster`]).
    pub failover: Vec<String>,
    /// The export id every server must say in its handshake; a server
    /// saying another one is refused (it exports another namespace).
    pub export_id: Option<String>,
    /// How long connecting may wait for the server's handshake.
    pub connect_timeout: Duration,
    /// A call whose connection cannot be made fails at once (`ENOTCONN`)
    /// instead of trying again until its deadline: for the servers of a
    /// multi-server mount, where another server takes the request.
    pub connect_once: bool,
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
    /// A capability with its secret and, optionally, a way to ask the
    /// mount for a fresh one (after a server restart).
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
            hard: false,
            tls: None,
            failover: Vec::new(),
            export_id: None,
            connect_timeout: Duration::from_secs(10),
            connect_once: false,
        }
    }

    /// How long a request may go unanswered before a client with
    /// [`ClientConfig::failover`] servers gives up on the current one: a
    /// third of the timeout, 1 to 10 s, so that a hung server is left
    /// well within the operation's deadline.
    pub fn failover_after(&self) -> Duration {
        (self.timeout / 3).clamp(Duration::from_secs(1), Duration::from_secs(10))
    }

    /// Every server of this client: the first, then the failover ones.
    pub fn servers(&self) -> Vec<String> {
        std::iter::once(self.server.clone())
            .chain(self.failover.iter().cloned())
            .collect()
    }
}

/// Lanes of the process-wide client that UserspaceFs handles share:
/// `HIPFS_REMOTE_LANES` (1..=64) when set, else one per CPU, 4 to 16.
/// Each lane is a TCP stream (or QP) with its own receiving thread, so the
/// bytes a client can take in grow with the lanes until the cores are busy.
/// On the 16-CPU H200 host (`scripts/gpu/tcp-sweep.sh`, 4 GiB file, 64 MiB
/// requests into device memory, one run) 16 lanes gave 15.98 GiB/s where
/// 8 gave 13.71.
pub fn userspace_lanes() -> usize {
    if let Some(n) = crate::config::env_usize("HIPFS_REMOTE_LANES", 1..=64) {
        return n;
    }
    let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
    cpus.clamp(4, 16)
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
    /// Caller pid → (expired deadline, when) of its last timed-out request.
    timed_out: Mutex<HashMap<u32, (Instant, Instant)>>,
    /// Where change notices go once [`RemoteClient::watch`] succeeded;
    /// every new link subscribes again.
    notices: Mutex<Option<std::sync::mpsc::Sender<link::Notice>>>,
    /// Which of [`ClientConfig::servers`] the client uses (failover moves it).
    active: std::sync::atomic::AtomicUsize,
}

/// A FUSE request that arrives this soon after a request of the same
/// process timed out is taken to be part of the same system call (the
/// kernel sends the capability lookup of a write, then the write, or the
/// lookups of a path one after the other, within microseconds) and shares
/// its deadline, so `timeout=S` bounds the system call, not each request.
pub const SHARED_DEADLINE_GAP: Duration = Duration::from_millis(50);

/// `wait_for_reply`'s answer when the failover cut, not the deadline,
/// ended the wait (not an errno any caller sees).
const FAIL_OVER: i32 = -1;

/// How the calls made on this thread for one operation are bounded.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scope {
    /// Soft mode: no request of the operation waits past it.
    pub(crate) deadline: Instant,
    pub(crate) hard: bool,
    /// Soft mode, for a request that continues a system call that already
    /// has bytes (see `backend::files::MID_STREAM_GAP`): a request on a
    /// live connection is waited for past the deadline (failing it would
    /// make the kernel return a short count); only reconnecting stays
    /// bounded by the deadline.
    pub(crate) patient: bool,
    /// The operation's writes are positional (not `O_APPEND`): resending
    /// one after a connection loss rewrites the same bytes at the same
    /// place, so hard mode may.
    pub(crate) resend_writes: bool,
}

thread_local! {
    /// The scope of the operation this thread runs, if any (set by the
    /// outermost [`RemoteClient::within`]).
    static SCOPE: Cell<Option<Scope>> = const { Cell::new(None) };
}

/// Clears this thread's scope when the operation that set it ends (also on
/// panic, so a pooled FUSE thread never inherits a stale deadline).
struct ScopeGuard;

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        SCOPE.with(|s| s.set(None));
    }
}

/// Sleeps `d`, waking every 100 ms to see whether the FUSE caller was
/// killed; true if it was.
fn nap_unless_killed(d: Duration) -> bool {
    const STEP: Duration = Duration::from_millis(100);
    let end = Instant::now() + d;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(STEP));
        if hipfs_fusefs::caller_killed() {
            return true;
        }
    }
}

impl std::fmt::Debug for RemoteClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteClient")
            .field("server", &self.cfg.server)
            .finish()
    }
}

/// This process's identity, for requests made for the mount itself.
pub(crate) fn own_cred() -> WireCred {
    WireCred {
        uid: hipfs_sys::process::euid(),
        gid: hipfs_sys::process::egid(),
        groups: Vec::new(),
    }
}

impl RemoteClient {
    /// Connects now, so a bad address or token is reported at once.
    pub fn connect(cfg: ClientConfig) -> Result<Arc<RemoteClient>, RemoteError> {
        let c = RemoteClient::unconnected(cfg);
        c.link()?;
        Ok(c)
    }

    /// A client that connects on first use (a multi-server mount's server
    /// that is down when the mount starts joins when it answers).
    pub(crate) fn unconnected(cfg: ClientConfig) -> Arc<RemoteClient> {
        Arc::new(RemoteClient {
            cfg,
            link: Mutex::new(None),
            connecting: Mutex::new(()),
            next_id: AtomicU64::new(1),
            epoch: AtomicU64::new(0),
            counters: ClientCounters::default(),
            timed_out: Mutex::new(HashMap::new()),
            notices: Mutex::new(None),
            active: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// The server the client uses now (after a failover, not the first).
    pub fn active_server(&self) -> String {
        let servers = self.cfg.servers();
        let i = self.active.load(Ordering::Relaxed) % servers.len();
        servers[i].clone()
    }

    /// Drops the live connection (the next call makes a new one): after a
    /// request was abandoned, no late reply or placement may arrive.
    pub(crate) fn drop_link(&self) {
        if let Some(l) = self.current() {
            l.kill();
        }
    }

    /// Connects to the server at `addr` (one of this client's servers),
    /// refusing one that says another export id than the configured one.
    fn open_link_to(&self, addr: &str, epoch: u64) -> Result<Arc<Link>, RemoteError> {
        let mut cfg = self.cfg.clone();
        cfg.server = addr.to_string();
        let l = Link::open(&cfg, epoch)?;
        if let Some(want) = &self.cfg.export_id {
            if l.welcome.export_id.as_deref() != Some(want.as_str()) {
                l.kill();
                return Err(RemoteError::Refused(format!(
                    "server {addr} exports id {}, not the mount's {want}: it does not serve the same namespace (hipfs serve --export-id)",
                    l.welcome.export_id.as_deref().unwrap_or("(none: an older server)")
                )));
            }
        }
        Ok(l)
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

    /// The export id the server said (protocol 3; `None` from an older
    /// server, or while disconnected).
    pub fn export_id(&self) -> Option<String> {
        self.current().and_then(|l| l.welcome.export_id.clone())
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
        // Each server in turn, from the one in use (failover).
        let servers = self.cfg.servers();
        let first = self.active.load(Ordering::Relaxed);
        let mut tried = Err(RemoteError::Config("no server".into()));
        // A server that refused (another export id, a wrong token) is not
        // the answer while another one may only be down for a while: the
        // caller retries unreachable servers, not refusals.
        let mut unreachable = false;
        for k in 0..servers.len() {
            let i = (first + k) % servers.len();
            tried = self.open_link_to(&servers[i], epoch);
            match tried {
                Ok(_) => {
                    if i != first % servers.len() {
                        log::warn!(
                            "failed over from {} to {}",
                            servers[first % servers.len()],
                            servers[i]
                        );
                    }
                    self.active.store(i, Ordering::Relaxed);
                    break;
                }
                Err(ref e) if servers.len() > 1 => {
                    log::debug!("{}: {e}", servers[i]);
                    if !matches!(e, RemoteError::Auth(_) | RemoteError::Refused(_)) {
                        unreachable = true;
                    }
                }
                Err(_) => {}
            }
        }
        if tried.is_err() && unreachable {
            if let Err(RemoteError::Auth(_) | RemoteError::Refused(_)) = tried {
                tried = Err(RemoteError::Io(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "no server of the mount could be reached",
                )));
            }
        }
        let l = tried?;
        if epoch > 1 {
            log::info!("reconnected to {}", self.active_server());
            self.counters.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        *self.link.lock().unwrap_or_else(|p| p.into_inner()) = Some(l.clone());
        let notices = self
            .notices
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(tx) = notices {
            // Changes while disconnected were not seen: drop every cache,
            // and subscribe the new link (on its own thread: this call may
            // be inside the request that found the old link dead).
            l.set_notices(tx.clone());
            let _ = tx.send(link::Notice::Everything);
            self.post(&own_cred(), Op::Watch, epoch);
        }
        Ok(l)
    }

    /// Subscribes to the server's change notices, delivered to `tx` from
    /// now on (again after every reconnect). `false` when the server cannot
    /// promise them (an older server, or an export it cannot watch whole).
    pub(crate) fn watch(&self, tx: std::sync::mpsc::Sender<link::Notice>) -> bool {
        let Ok(l) = self.link() else { return false };
        l.set_notices(tx.clone());
        match self.call(&own_cred(), Op::Watch) {
            Ok(_) => {
                *self.notices.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
                true
            }
            Err(e) => {
                log::info!("server sends no change notices (errno {e}); short cache lifetimes");
                false
            }
        }
    }

    /// Runs `f` as one operation: every call it makes on this thread shares
    /// one scope. `deadline` (default: now + timeout, or the expired one of
    /// this FUSE caller's request that just timed out) applies only if no
    /// operation runs on this thread yet (an inner `within` joins the outer
    /// scope); `patient` makes the rest of the operation patient whatever
    /// the outer scope said.
    pub(crate) fn within<T>(
        &self,
        deadline: Option<Instant>,
        patient: bool,
        resend_writes: bool,
        f: impl FnOnce() -> T,
    ) -> T {
        if let Some(outer) = SCOPE.with(Cell::get) {
            if patient && !outer.patient {
                SCOPE.with(|s| {
                    s.set(Some(Scope {
                        patient: true,
                        ..outer
                    }))
                });
                let r = f();
                SCOPE.with(|s| s.set(Some(outer)));
                return r;
            }
            return f();
        }
        let scope = Scope {
            deadline: deadline.unwrap_or_else(|| self.fresh_deadline()),
            hard: self.cfg.hard,
            patient,
            resend_writes,
        };
        SCOPE.with(|s| s.set(Some(scope)));
        let _clear = ScopeGuard;
        f()
    }

    /// The deadline of a new operation: now + timeout, unless the FUSE
    /// caller's previous request timed out a moment ago (same system call).
    fn fresh_deadline(&self) -> Instant {
        let now = Instant::now();
        let fresh = now + self.cfg.timeout;
        let Some(pid) = hipfs_fusefs::caller_pid() else {
            return fresh;
        };
        let mut m = self.timed_out.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|_, (_, at)| now.duration_since(*at) < SHARED_DEADLINE_GAP);
        m.get(&pid).map_or(fresh, |(d, _)| *d)
    }

    /// Notes that a request of this FUSE caller ran out of `deadline`.
    fn note_timeout(&self, deadline: Instant) {
        if let Some(pid) = hipfs_fusefs::caller_pid() {
            self.timed_out
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(pid, (deadline, Instant::now()));
        }
    }

    /// Runs one operation, built by `make` for the link it will travel on
    /// (so file handles can be translated for that link), retrying across
    /// reconnects within the operation's scope (see [`Self::within`]).
    pub(crate) fn call_with(
        &self,
        cred: &WireCred,
        make: impl FnMut(&Arc<Link>) -> Result<Op, i32>,
        on_link: impl Fn(&Arc<Link>, &Payload),
    ) -> Result<Payload, i32> {
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        let r = self.within(None, false, false, || {
            let scope = SCOPE.with(Cell::get);
            let scope = scope.unwrap_or(Scope {
                deadline: Instant::now() + self.cfg.timeout,
                hard: self.cfg.hard,
                patient: false,
                resend_writes: false,
            });
            let r = self.call_with_retries(scope, cred, make, on_link);
            if r == Err(libc::ETIMEDOUT) {
                self.note_timeout(scope.deadline);
            }
            r
        });
        // Answers like ENOENT are the filesystem working; count transport trouble.
        if let Err(libc::EIO | libc::ENOTCONN | libc::ETIMEDOUT) = r {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Says once per operation that the server does not answer (hard mode).
    fn still_trying(&self, warned: &mut bool, why: &dyn std::fmt::Display) {
        if !*warned {
            log::warn!(
                "server {} not responding ({why}), still trying",
                self.cfg.server
            );
            *warned = true;
        }
    }

    fn call_with_retries(
        &self,
        scope: Scope,
        cred: &WireCred,
        mut make: impl FnMut(&Arc<Link>) -> Result<Op, i32>,
        on_link: impl Fn(&Arc<Link>, &Payload),
    ) -> Result<Payload, i32> {
        let Scope {
            deadline,
            hard,
            patient,
            resend_writes,
        } = scope;
        // Waits for an answer on a live connection past the deadline.
        let waits = hard || patient;
        let mut backoff = Duration::from_millis(20);
        let mut reached = false;
        let mut warned = false;
        // Whether this is a second attempt: only then is the caller asked
        // after (it reads /proc/PID/status, a good part of a small
        // request's own time).
        let mut again = false;
        loop {
            if again && hipfs_fusefs::caller_killed() {
                return Err(libc::EINTR);
            }
            again = true;
            let link = match self.link() {
                Ok(l) => l,
                Err(e) => {
                    if let RemoteError::Auth(_) | RemoteError::Refused(_) = e {
                        log::warn!("{}: {e}", self.cfg.server);
                        return Err(libc::EACCES);
                    }
                    if self.cfg.connect_once {
                        log::debug!("{}: {e}", self.cfg.server);
                        return Err(if reached { libc::EIO } else { libc::ENOTCONN });
                    }
                    if hard {
                        self.still_trying(&mut warned, &e);
                    } else if Instant::now() + backoff >= deadline {
                        log::debug!("{}: {e}", self.cfg.server);
                        return Err(if reached { libc::EIO } else { libc::ENOTCONN });
                    }
                    if nap_unless_killed(backoff) {
                        return Err(libc::EINTR);
                    }
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                    continue;
                }
            };
            // An operation whose deadline passed (a system call whose first
            // request timed out) sends nothing more.
            if !waits && Instant::now() >= deadline {
                return Err(libc::ETIMEDOUT);
            }
            let op = make(&link)?;
            let resend_ok =
                op.is_idempotent() || (hard && resend_writes && matches!(op, Op::Write { .. }));
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
                // The outgoing queue stayed full (the server stopped
                // reading): nothing was queued, so trying again is safe.
                Err(e @ hipfs_rdma::Error::Timeout(_)) => {
                    if !waits {
                        return Err(libc::ETIMEDOUT);
                    }
                    self.still_trying(&mut warned, &e);
                    continue;
                }
                Err(e) => {
                    log::warn!("{}: cannot send a request: {e}", self.cfg.server);
                    return Err(libc::EIO);
                }
            };
            let waited = loop {
                let full = if waits {
                    Instant::now() + self.cfg.timeout
                } else {
                    deadline
                };
                // With other servers to go to, a hung one is left early.
                let cut = (!self.cfg.failover.is_empty())
                    .then(|| Instant::now() + self.cfg.failover_after())
                    .filter(|c| *c < full);
                match wait_for_reply(&rx, cut.unwrap_or(full)) {
                    Err(Some(libc::ETIMEDOUT)) if cut.is_some() => break Err(Some(FAIL_OVER)),
                    // The connection is alive, the server is slow or
                    // stopped; its answer will come on this channel.
                    Err(Some(libc::ETIMEDOUT)) if waits => {
                        self.still_trying(&mut warned, &"no answer within timeout=");
                    }
                    r => break r,
                }
            };
            match waited {
                Ok(reply) => {
                    if warned {
                        log::warn!("server {} OK", self.cfg.server);
                    }
                    if let Ok(p) = &reply.result {
                        on_link(&link, p);
                    }
                    return reply.result;
                }
                Err(Some(FAIL_OVER)) => {
                    link.forget(id);
                    log::warn!(
                        "server {} did not answer within {:?}; failing over to the next server",
                        self.active_server(),
                        self.cfg.failover_after()
                    );
                    link.kill();
                    self.active.fetch_add(1, Ordering::Relaxed);
                    reached = true;
                    // Whether the server did it is unknown: only what is
                    // safe to do twice goes to the next one.
                    if !resend_ok {
                        return Err(libc::EIO);
                    }
                }
                Err(Some(errno)) => {
                    link.forget(id);
                    return Err(errno);
                }
                Err(None) => {
                    reached = true;
                    if !resend_ok {
                        return Err(libc::EIO);
                    }
                    if hard {
                        self.still_trying(&mut warned, &"connection lost");
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

    /// The bytes of a placed read's reply in `dst`: copied from the reply
    /// when the server sent them inline, else checked where the transport
    /// placed them before the reply (their hash, over TCP). Returns how many.
    pub(crate) fn finish_placed_read(&self, reply: Payload, dst: &mut [u8]) -> Result<usize, i32> {
        let len = dst.len();
        match reply {
            Payload::Read { n, data } => {
                // The server never returns more than asked (checked on decode
                // to be <= MAX_IO); copy at most `len` all the same.
                let k = data.len().min(len);
                dst[..k].copy_from_slice(&data[..k]);
                Ok((n as usize).min(len))
            }
            Payload::Placed { n, digest } => {
                let n = n as usize;
                if n > len {
                    return Err(libc::EIO);
                }
                self.check_placed(&dst[..n], &digest)?;
                Ok(n)
            }
            _ => Err(libc::EIO),
        }
    }

    /// One line of counters: requests, failures, reconnects.
    pub fn counters_line(&self) -> String {
        let c = &self.counters;
        format!(
            "server {}: {} requests, {} failed, {} reconnects",
            self.active_server(),
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
        self.call_in_dir(cred, op).map(|p| p.split_parent().0)
    }

    /// [`RemoteClient::call`], with the directory attributes a reply to a
    /// change of a directory's entries may carry (`Payload::InDir`).
    pub(crate) fn call_in_dir(&self, cred: &WireCred, op: Op) -> Result<Payload, i32> {
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

/// Clients of direct-path files (one per bound file: each connection's
/// credential is that file's capability), for [`on_rdma_register`].
static DIRECT: Mutex<Vec<std::sync::Weak<RemoteClient>>> = Mutex::new(Vec::new());

/// Counts `c` among the clients RDMA_REGISTER buffers are registered with.
pub(crate) fn add_direct_client(c: &Arc<RemoteClient>) {
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
    let mut clients = live_shared_clients();
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
    fn a_server_of_another_export_is_refused_but_does_not_hide_one_that_is_down() {
        let (_export, server) = tcp_server();
        let mut only = tcp_config(server.local_addr());
        only.export_id = Some("not-this-one".into());
        let e = RemoteClient::connect(only).unwrap_err();
        assert!(matches!(e, RemoteError::Refused(_)), "{e}");
        assert!(
            e.to_string().contains("not the mount's not-this-one"),
            "{e}"
        );
        // First a server that is down, then the refusing one: the answer is
        // "unreachable" (retried), not the refusal (final).
        let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let down_addr = down.local_addr().unwrap().to_string();
        drop(down);
        let mut both = tcp_config(&down_addr);
        both.failover = vec![server.local_addr().to_string()];
        both.export_id = Some("not-this-one".into());
        let e = RemoteClient::connect(both).unwrap_err();
        assert!(
            !matches!(e, RemoteError::Refused(_) | RemoteError::Auth(_)),
            "{e}"
        );
        // With the right id the second server is taken.
        let mut right = tcp_config(&down_addr);
        right.failover = vec![server.local_addr().to_string()];
        right.export_id = Some(server.export_id().to_string());
        let c = RemoteClient::connect(right).unwrap();
        assert_eq!(c.active_server(), server.local_addr());
        assert_eq!(c.export_id().as_deref(), Some(server.export_id()));
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
