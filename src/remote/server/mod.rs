//! `hipfs serve`: exports a directory to many clients.
//!
//! Threads: one accepts connections; one per connection reads requests and
//! hands them to a shared pool of workers, which run them as the calling
//! user (see [`creds`]) and send the replies. Cheap requests are run on the
//! transport's receiving thread instead where the transport allows it
//! (see [`inline`]). Replies go out in whatever order requests finish,
//! matched by request id.

mod creds;
mod export;
pub mod export_id;
mod inline;
mod limits;
mod poster;
mod resolve;
mod session;
mod trust;
mod watch;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use hipfs_rdma::{Connection, Listener, RateLimitedLog, TransportConfig, TransportKind};

pub use creds::{parse_uid_ranges, IdentityPolicy, NOBODY};
pub use export::Export;
pub use limits::Limits;
pub use trust::fetch_ticket;

use super::auth::{
    default_local_socket, is_loopback, port_of, random_nonce, transcript, Token, CLIENT_PROOF,
    SERVER_PROOF,
};
use super::proto::{
    export_id_transcript, Challenge, CredKind, Hello, Kind, Proof, Refused, Reply, Request,
    Welcome, EXPORT_ID_VERSION, FLAG_NO_MAC, MAX_MESSAGE,
};
use super::seal::{Opener, Sealer};
use super::RemoteError;
use session::Session;
use trust::{Grants, LocalSocket, Principal, Tickets};

/// How a server runs.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// The directory served.
    pub dir: PathBuf,
    /// `ip:port` to listen on (port 0 picks one).
    pub listen: String,
    /// Refuse writes.
    pub read_only: bool,
    /// Shared secret clients must prove.
    pub token: Option<Token>,
    /// Which transport to listen on.
    pub transport: TransportKind,
    /// Whose identity requests run as.
    pub policy: IdentityPolicy,
    /// Allow listening beyond loopback without a token.
    pub insecure: bool,
    /// Worker threads running requests (0: 4 per CPU, at least 8).
    pub workers: usize,
    /// Run cheap requests (metadata, small reads and writes) on the
    /// connection's receiving thread where the transport allows it (TCP),
    /// saving two thread wake-ups per request (see [`inline`]). On by
    /// default; `hipfs serve --no-inline` sends every request through the
    /// workers, for exports whose metadata operations may stall for long
    /// (a hung network filesystem would stop the whole connection, where
    /// the pool only loses a worker).
    pub inline_requests: bool,
    /// How long the export watcher lets a burst of changes gather before
    /// it sends their notice (one notice for many events of a `cp -r`).
    /// 2 ms by default; longer means fewer notices and later ones.
    pub notice_gather: Duration,
    /// Send reads that name a destination region straight from the file
    /// (`sendfile(2)` on TCP) instead of staging them in registered memory.
    /// On by default: with 4 MiB pieces it carried the direct path into GPU
    /// memory at 1.7x the staged rate on a 16-CPU loopback run (the 2-core
    /// test host measured it slower); `hipfs serve --no-sendfile` stages.
    /// Verbs always stages, and so do connections that hash what they
    /// place (`--hash-placed-reads`) or encrypt (TLS): the server must see
    /// the bytes (docs/SECURITY.md).
    pub send_from_file: bool,
    /// Hash the bytes of placed reads (BLAKE3) into their authenticated
    /// reply on TCP connections (`--hash-placed-reads`), so an active
    /// attacker on the path cannot alter them unseen without TLS. Off by
    /// default: it costs about a quarter of UserspaceFs throughput, and
    /// `--tls-cert` protects the bytes (and hides them) anyway.
    pub hash_placed_reads: bool,
    /// What one client may hold of the server (see [`Limits`]).
    pub limits: Limits,
    /// The Unix socket local clients get tickets from; `None`:
    /// `/run/hipfs/serve-PORT.sock` (see `docs/SECURITY.md`).
    pub local_socket: Option<PathBuf>,
    /// Accept clients that ask for no message authentication after the
    /// handshake (`HIPFS_UNAUTHENTICATED_MESSAGES=1`): only for measuring its cost.
    pub allow_unauthenticated_messages: bool,
    /// TLS on the TCP transport (`--tls-cert`, `--tls-key`): the
    /// certificate chain and key. Every byte of a TCP connection is then
    /// encrypted and authenticated, and plaintext clients are refused.
    /// Verbs connections are not covered (as trusted as the fabric), and
    /// `send_from_file` stages its reads (sendfile cannot encrypt).
    pub tls: Option<hipfs_rdma::TlsConfig>,
    /// Let callers acting as root make block and character device nodes
    /// (`mknod`). On by default, like a local filesystem: the server never
    /// opens them for a client (only regular files are opened), and a caller
    /// is root here only when the policy does not squash it. Off with
    /// `--no-devices` (then `EPERM`, as on a `nodev` export).
    pub allow_devices: bool,
    /// The export's identity, said to clients in the handshake
    /// (`--export-id`); `None`: the id kept in the export root (see
    /// [`export_id`]). Servers of one namespace must agree.
    pub export_id: Option<String>,
}

impl ServeConfig {
    /// Defaults for serving `dir` on `listen`.
    pub fn new(dir: impl Into<PathBuf>, listen: impl Into<String>) -> ServeConfig {
        ServeConfig {
            dir: dir.into(),
            listen: listen.into(),
            read_only: false,
            token: None,
            transport: TransportKind::Auto,
            policy: IdentityPolicy::default(),
            insecure: false,
            workers: 0,
            inline_requests: true,
            notice_gather: Duration::from_millis(2),
            send_from_file: true,
            hash_placed_reads: false,
            limits: Limits::default(),
            local_socket: None,
            allow_unauthenticated_messages: super::seal::unauthenticated_messages_requested(),
            tls: None,
            allow_devices: true,
            export_id: None,
        }
    }
}

/// The transport settings both sides use.
pub fn transport_config(kind: TransportKind) -> TransportConfig {
    let default = TransportConfig::default();
    TransportConfig {
        kind,
        max_message: MAX_MESSAGE,
        chunk_size: stripe_override().unwrap_or(default.chunk_size),
        congestion: tcp_congestion(),
        ..default
    }
}

/// `HIPFS_TCP_CONGESTION`: `auto` (the default: lanes to a loopback peer
/// run cubic or reno, which do not pace; others the system's algorithm),
/// `system` (every lane the system's), or an algorithm's name for every
/// lane (see [`hipfs_rdma::Congestion`]); read once.
pub fn tcp_congestion() -> hipfs_rdma::Congestion {
    static V: std::sync::OnceLock<hipfs_rdma::Congestion> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        hipfs_rdma::Congestion::parse(&std::env::var("HIPFS_TCP_CONGESTION").unwrap_or_default())
    })
    .clone()
}

/// `HIPFS_TCP_STRIPE_KB` (64 to 65536): the stripe unit one-sided
/// transfers are split into across the lanes, for measuring; read once.
fn stripe_override() -> Option<usize> {
    static V: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        crate::config::env_usize("HIPFS_TCP_STRIPE_KB", 64..=65536).map(|kb| kb << 10)
    })
}

/// The server's side of the transport: like [`transport_config`], with
/// every wait on a client (acknowledgments of placed reads, room to queue
/// a reply) bounded by `ack_timeout`, so no client holds a worker longer.
fn server_transport_config(kind: TransportKind, ack_timeout: Duration) -> TransportConfig {
    TransportConfig {
        op_timeout: ack_timeout,
        ..transport_config(kind)
    }
}

pub(crate) struct ServerShared {
    pub(crate) export: Export,
    /// Said in the welcome of version 3 connections.
    export_id: String,
    pub(crate) read_only: bool,
    pub(crate) allow_devices: bool,
    pub(crate) policy: IdentityPolicy,
    inline_requests: bool,
    pub(crate) notice_gather: Duration,
    send_from_file: bool,
    hash_placed_reads: bool,
    token: Option<Token>,
    limits: Limits,
    allow_no_mac: bool,
    tickets: Arc<Tickets>,
    pub(crate) grants: Grants,
    next_session: AtomicU64,
    stopping: AtomicBool,
    in_flight: AtomicUsize,
    /// Connections open now (authenticated or not).
    connections: AtomicUsize,
    /// Staging bytes kept for reuse, over all sessions.
    kept_staging: Arc<AtomicUsize>,
    sessions: Mutex<Vec<Arc<Session>>>,
    /// Whether the export is watched for change notices.
    pub(crate) watch: watch::WatchState,
}

impl ServerShared {
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// The sessions that asked for change notices.
    pub(crate) fn watching_sessions(&self) -> Vec<Arc<Session>> {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|s| s.is_watching())
            .cloned()
            .collect()
    }
}

/// Refusals before authentication: any peer can cause them at will.
static HANDSHAKE_LOG: RateLimitedLog = RateLimitedLog::new(Duration::from_secs(5));

/// A request read from a connection, decoded (or the id and errno of a
/// malformed one), with what it counts against the connection's limits.
struct Job {
    session: Arc<Session>,
    request: Result<Request, Option<(u64, i32)>>,
    cost: usize,
}

/// Counts one open connection while it lives.
struct ConnectionSlot(Arc<ServerShared>);

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A running server. Dropping it does not stop it; call [`Server::shutdown`].
pub struct Server {
    shared: Arc<ServerShared>,
    listener: Arc<dyn Listener>,
    addr: String,
    accept: Option<JoinHandle<()>>,
    local: Option<LocalSocket>,
}

impl Server {
    /// Opens the export, listens, and starts serving in the background.
    pub fn start(cfg: ServeConfig) -> Result<Server, RemoteError> {
        if cfg.token.is_none() && !cfg.insecure && !is_loopback(&cfg.listen) {
            return Err(RemoteError::Config(format!(
                "refusing to listen on {} without a token: pass --token-file FILE (the same file on the clients), or --insecure to listen there anyway (only local users, through the local socket, can then connect)",
                cfg.listen
            )));
        }
        let export = Export::open(&cfg.dir)?;
        let export_id = export_id::resolve(&export.path, cfg.export_id.as_deref(), cfg.read_only)?;
        raise_fd_limit();
        let listener: Arc<dyn Listener> = Arc::from(hipfs_rdma::listen(
            &cfg.listen,
            &TransportConfig {
                tls: cfg.tls.clone(),
                ..server_transport_config(cfg.transport, cfg.limits.ack_timeout)
            },
        )?);
        let addr = listener.local_addr();
        let tickets = Arc::new(Tickets::default());
        let local = match (&cfg.local_socket, port_of(&addr)) {
            (Some(p), _) => Some(LocalSocket::start(p, tickets.clone())?),
            (None, Some(port)) => {
                match LocalSocket::start(&default_local_socket(port), tickets.clone()) {
                    Ok(l) => Some(l),
                    Err(e) => {
                        log::warn!("{e}; local clients cannot connect without a token");
                        None
                    }
                }
            }
            (None, None) => None,
        };
        let shared = Arc::new(ServerShared {
            export,
            export_id,
            read_only: cfg.read_only,
            allow_devices: cfg.allow_devices,
            policy: cfg.policy.clone(),
            inline_requests: cfg.inline_requests,
            notice_gather: cfg.notice_gather,
            send_from_file: cfg.send_from_file,
            hash_placed_reads: cfg.hash_placed_reads,
            token: cfg.token.clone(),
            limits: cfg.limits.clone(),
            allow_no_mac: cfg.allow_unauthenticated_messages,
            tickets,
            grants: Grants::default(),
            next_session: AtomicU64::new(1),
            stopping: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            kept_staging: Arc::new(AtomicUsize::new(0)),
            sessions: Mutex::new(Vec::new()),
            watch: watch::WatchState::default(),
        });
        watch::start(shared.clone());
        let workers = if cfg.workers == 0 {
            std::thread::available_parallelism().map_or(8, |n| (n.get() * 4).max(8))
        } else {
            cfg.workers
        };
        // Every idle worker waits on the channel itself: a job wakes one,
        // where workers queued on a lock around one receiver woke the
        // next in line for nothing each time one took a job.
        let (tx, rx) = crossbeam_channel::bounded::<Job>(workers * 8);
        for i in 0..workers {
            let rx = rx.clone();
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("hipfs-worker-{i}"))
                .spawn(move || worker(shared, rx))?;
        }
        let accept = {
            let shared = shared.clone();
            let listener = listener.clone();
            std::thread::Builder::new()
                .name("hipfs-accept".into())
                .spawn(move || accept_loop(shared, listener, tx))?
        };
        log::info!(
            "serving {} on {addr}{}{}",
            cfg.dir.display(),
            if cfg.read_only { " (read-only)" } else { "" },
            local
                .as_ref()
                .map(|l| format!(", local tickets on {}", l.path().display()))
                .unwrap_or_default()
        );
        Ok(Server {
            shared,
            listener,
            addr,
            accept: Some(accept),
            local,
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> &str {
        &self.addr
    }

    /// The export id this server says in its handshake.
    pub fn export_id(&self) -> &str {
        &self.shared.export_id
    }

    /// The Unix socket local clients get tickets from, if it listens.
    pub fn local_socket(&self) -> Option<&std::path::Path> {
        self.local.as_ref().map(|l| l.path())
    }

    /// Stops accepting, lets requests already running finish (up to
    /// `grace`), then closes every connection.
    pub fn shutdown(mut self, grace: Duration) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        drop(self.local.take());
        self.listener.close();
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        let deadline = Instant::now() + grace;
        while self.shared.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let sessions = std::mem::take(
            &mut *self
                .shared
                .sessions
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for s in sessions {
            s.conn.close();
        }
        log::info!("server on {} stopped", self.addr);
    }
}

fn accept_loop(shared: Arc<ServerShared>, listener: Arc<dyn Listener>, tx: Sender<Job>) {
    loop {
        let conn = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.is_disconnect() || shared.stopping.load(Ordering::SeqCst) => return,
            Err(e) => {
                log::warn!("accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let conn: Arc<dyn Connection> = Arc::from(conn);
        let open = shared.connections.fetch_add(1, Ordering::SeqCst) + 1;
        let slot = ConnectionSlot(shared.clone());
        let shared = shared.clone();
        let tx = tx.clone();
        let spawned = std::thread::Builder::new()
            .name("hipfs-conn".into())
            .spawn(move || {
                if open > shared.limits.max_connections {
                    refuse_over_limit(&shared, conn.as_ref());
                } else {
                    serve_connection(shared, conn, tx);
                }
                drop(slot);
            });
        if let Err(e) = spawned {
            log::warn!("cannot start a connection thread: {e}");
        }
    }
}

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Raises this process's soft limit on open files to its hard limit: the
/// server holds up to `max_connections * max_open_files` descriptors, and
/// the usual soft limit (1024) would let one client's opens make `accept`
/// fail for everyone.
fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    if lim.current < lim.maximum {
        lim.current = lim.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, lim) {
            log::debug!("cannot raise the open-file limit: {e}");
        }
    }
}

/// Answers a connection beyond `max_connections` with a refusal naming
/// the limit (after its hello, which is what the client waits to answer).
fn refuse_over_limit(shared: &ServerShared, conn: &dyn Connection) {
    let max = shared.limits.max_connections;
    HANDSHAKE_LOG.warn(|| {
        format!(
            "refused {}: the server already has {max} connections (--max-connections)",
            conn.peer_addr()
        )
    });
    if conn.recv(Duration::from_secs(2)).is_ok() {
        let reason = format!(
            "the server already has {max} connections open, its limit (hipfs serve --max-connections); try again later"
        );
        let _ = conn.send(&Refused { reason }.encode());
        std::thread::sleep(Duration::from_millis(100));
    }
    conn.close();
}

/// An authenticated connection: who it speaks for and its message keys.
struct Authenticated {
    version: u16,
    who: Principal,
    seal: Sealer,
    open: Opener,
}

/// Version check and authentication. `None` when the client was refused.
fn handshake(
    shared: &ServerShared,
    conn: &dyn Connection,
) -> Result<Option<Authenticated>, RemoteError> {
    let msg = conn.recv(HANDSHAKE_TIMEOUT)?;
    let refuse = |reason: String| -> Result<Option<Authenticated>, RemoteError> {
        HANDSHAKE_LOG.warn(|| format!("refused {}: {reason}", conn.peer_addr()));
        let _ = conn.send(&Refused { reason }.encode());
        Ok(None)
    };
    let hello = match Hello::decode(&msg) {
        Ok(h) => h,
        Err(e) => return refuse(format!("not a hipfs hello message: {e}")),
    };
    let version = match hello.negotiate() {
        Ok(v) => v,
        Err(why) => return refuse(why),
    };
    let nonce = random_nonce()?;
    conn.send(
        &Challenge {
            version,
            nonce,
            auth_required: true,
        }
        .encode(),
    )?;
    let proof = match Proof::decode(&conn.recv(HANDSHAKE_TIMEOUT)?) {
        Ok(p) => p,
        Err(e) => return refuse(format!("bad proof message: {e}")),
    };
    let (secret, who) = match proof.kind {
        CredKind::Token => match &shared.token {
            Some(t) => (t.clone(), Principal::Host { token: true }),
            None => {
                return refuse(
                    "this server has no token: connect from its host (local socket) or start it with --token-file".into(),
                )
            }
        },
        CredKind::Ticket => match shared.tickets.redeem(&proof.id) {
            Some((secret, cred)) if cred.uid == 0 => (secret, Principal::Host { token: false }),
            Some((secret, cred)) => (secret, Principal::User(cred)),
            None => return refuse("unknown or expired local ticket".into()),
        },
        CredKind::FileCap => match shared.grants.find(&proof.id) {
            Some(g) if !g.is_revoked() => (g.secret.clone(), Principal::File(g)),
            _ => return refuse("unknown or revoked file capability".into()),
        },
    };
    let tr = transcript(
        proof.kind as u8,
        proof.flags,
        &proof.id,
        &nonce,
        &hello.nonce,
    );
    if !secret.verify(CLIENT_PROOF, &tr, &proof.mac) {
        return refuse(match proof.kind {
            CredKind::Token => {
                "wrong token: the client's token file does not match the server's".into()
            }
            _ => "the client's proof does not match its credential".into(),
        });
    }
    let no_mac = proof.flags & FLAG_NO_MAC != 0;
    if no_mac && !shared.allow_no_mac {
        return refuse(
            "the client asked for unauthenticated messages, which this server does not allow"
                .into(),
        );
    }
    // Version 3 clients get the export id, under the server's proof.
    let (export_id, mac) = if version >= EXPORT_ID_VERSION {
        let covered = export_id_transcript(&tr, &shared.export_id);
        (
            Some(shared.export_id.clone()),
            secret.proof(SERVER_PROOF, &covered),
        )
    } else {
        (None, secret.proof(SERVER_PROOF, &tr))
    };
    conn.send(
        &Welcome {
            export: shared.export.path.display().to_string(),
            read_only: shared.read_only,
            mac,
            export_id,
        }
        .encode(),
    )?;
    let (c2s, s2c) = secret.session_keys(&tr);
    Ok(Some(Authenticated {
        version,
        who,
        seal: Sealer::new((!no_mac).then_some(s2c)),
        open: Opener::new((!no_mac).then_some(c2s)),
    }))
}

fn serve_connection(shared: Arc<ServerShared>, conn: Arc<dyn Connection>, tx: Sender<Job>) {
    let peer = conn.peer_addr();
    let auth = match handshake(&shared, conn.as_ref()) {
        Ok(Some(a)) => a,
        Ok(None) => {
            // Give the refusal time to reach the client before closing.
            std::thread::sleep(Duration::from_millis(100));
            conn.close();
            return;
        }
        Err(e) => {
            HANDSHAKE_LOG.warn(|| format!("handshake with {peer}: {e}"));
            conn.close();
            return;
        }
    };
    log::info!("client {peer} connected ({})", auth.who.describe());
    let id = shared.next_session.fetch_add(1, Ordering::Relaxed);
    let session = Arc::new(
        Session::new(
            conn.clone(),
            shared.send_from_file,
            &shared.limits,
            shared.kept_staging.clone(),
        )
        .with_trust(id, auth.who, auth.seal)
        .speaking(auth.version)
        .hash_placed_reads(shared.hash_placed_reads),
    );
    shared
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(session.clone());
    // Cheap requests are answered on the transport's reader where it can
    // (TCP); the hook then numbers every message, opens the small ones,
    // and leaves this thread the others, saying how in `deferred`.
    let open = Arc::new(auth.open);
    let deferred = inline::Deferred::default();
    let hooked = shared.inline_requests
        && match conn.set_message_hook(inline::hook(
            shared.clone(),
            session.clone(),
            open.clone(),
            deferred.clone(),
        )) {
            Ok(()) => true,
            Err(e) => {
                log::debug!("{peer}: every request through the pool: {e}");
                false
            }
        };
    loop {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        // At its limits the connection is not read: the client's requests
        // back up into the transport, then into TCP, instead of into
        // this process's memory.
        if !session.in_flight.wait_for_room(Duration::from_millis(500)) {
            continue;
        }
        match conn.recv(Duration::from_millis(500)) {
            Ok(msg) => {
                let opened = if !hooked {
                    open.open(msg)
                } else {
                    // The hook said how it left this message (one entry
                    // per message, pushed before the message was queued).
                    let how = deferred
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .pop_front();
                    match how {
                        Some(Some(seq)) => open.open_as(seq, msg),
                        Some(None) => Ok(msg),
                        // Cannot happen; fails the check rather than
                        // pass the message unchecked.
                        None => open.open(msg),
                    }
                };
                let msg = match opened {
                    Ok(m) => m,
                    Err(e) => {
                        log::warn!("{peer}: {e}; closing");
                        break;
                    }
                };
                if Kind::of(&msg) != Ok(Kind::Request) {
                    log::warn!("{peer}: unexpected message; closing");
                    break;
                }
                let (request, cost) = decode_request(&msg);
                session.in_flight.add(cost);
                shared.in_flight.fetch_add(1, Ordering::SeqCst);
                let job = Job {
                    session: session.clone(),
                    request,
                    cost,
                };
                if tx.send(job).is_err() {
                    shared.in_flight.fetch_sub(1, Ordering::SeqCst);
                    break;
                }
            }
            Err(hipfs_rdma::Error::Timeout(_)) => continue,
            Err(e) => {
                log::info!("client {peer} gone: {e}");
                break;
            }
        }
    }
    // Capabilities this connection granted die with it.
    shared.grants.revoke(id, None);
    shared
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|s| !Arc::ptr_eq(s, &session));
    if !shared.stopping.load(Ordering::SeqCst) {
        conn.close();
    }
}

/// Decodes a request and says what it counts against its connection's
/// byte limit: its own size, plus for a read the bytes its reply (or its
/// staging buffer) will hold.
fn decode_request(msg: &[u8]) -> (Result<Request, Option<(u64, i32)>>, usize) {
    match Request::decode(msg) {
        Ok(req) => {
            let reply = match &req.op {
                super::proto::Op::Read { len, .. } => *len as usize,
                _ => 0,
            };
            (Ok(req), msg.len() + reply)
        }
        Err(e) => {
            log::debug!("malformed request: {e}");
            (
                Err(Request::peek_id(msg).map(|id| (id, e.errno()))),
                msg.len(),
            )
        }
    }
}

fn worker(shared: Arc<ServerShared>, rx: Receiver<Job>) {
    // Before the first credential switch (see poster.rs).
    poster::start_companion(format!(
        "{}-post",
        std::thread::current().name().unwrap_or("hipfs-worker")
    ));
    own_umask();
    while let Ok(Job {
        session,
        request,
        cost,
    }) = rx.recv()
    {
        answer(&shared, &session, request);
        session.in_flight.done(cost);
        shared.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Gives this thread a umask of its own, 0: the client applies the
/// caller's umask; ours must not strip more bits. umask is per process
/// unless the thread has its own fs_struct, so take one: a server embedded
/// in another program (`hipfs mount --local`, tests) leaves that program's
/// umask alone.
fn own_umask() {
    match hipfs_sys::process::unshare_fs() {
        Ok(()) => {
            hipfs_sys::process::umask(0);
        }
        Err(e) => {
            log::warn!("unshare(CLONE_FS) failed ({e}); created files get the server's umask")
        }
    }
}

/// Runs one request (or refuses a malformed one) and sends the reply.
fn answer(
    shared: &ServerShared,
    session: &Arc<Session>,
    request: Result<Request, Option<(u64, i32)>>,
) {
    let reply = match request {
        Ok(req) => Some(Reply {
            id: req.id,
            result: session.handle(shared, &req),
        }),
        Err(id) => id.map(|(id, errno)| Reply {
            id,
            result: Err(errno),
        }),
    };
    let Some(reply) = reply else {
        return;
    };
    let (s, msg) = (session.clone(), reply.encode());
    match poster::post(session.conn.as_ref(), move || s.send(msg)) {
        Ok(()) => {}
        // The client did not take its replies for --ack-timeout: drop it
        // rather than let it hold this thread.
        Err(hipfs_rdma::Error::Timeout(t)) => {
            log::info!(
                "disconnecting {}: its replies were not read within {t:?} (--ack-timeout)",
                session.conn.peer_addr()
            );
            session.conn.close();
        }
        Err(e) => log::debug!("reply to {}: {e}", session.conn.peer_addr()),
    }
}
