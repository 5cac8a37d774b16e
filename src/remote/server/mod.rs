//! `hipfs serve`: exports a directory to many clients.
//!
//! Threads: one accepts connections; one per connection reads requests and
//! hands them to a shared pool of workers, which run them as the calling
//! user (see [`creds`]) and send the replies. Replies go out in whatever
//! order requests finish, matched by request id.

mod creds;
mod export;
mod poster;
mod resolve;
mod session;
mod trust;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hipfs_rdma::{Connection, Listener, TransportConfig, TransportKind};

pub use creds::{parse_uid_ranges, IdentityPolicy, NOBODY};
pub use export::Export;
pub use trust::fetch_ticket;

use super::auth::{
    default_local_socket, is_loopback, port_of, random_nonce, transcript, Token, CLIENT_PROOF,
    SERVER_PROOF,
};
use super::proto::{
    Challenge, CredKind, Hello, Kind, Proof, Refused, Reply, Request, Welcome, FLAG_NO_MAC,
    MAX_MESSAGE,
};
use super::seal::{Opener, Sealer};
use super::RemoteError;
use session::Session;
use trust::{Grants, LocalSocket, Principal, Tickets};

/// How a server runs.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub dir: PathBuf,
    /// `ip:port` to listen on (port 0 picks one).
    pub listen: String,
    pub read_only: bool,
    pub token: Option<Token>,
    pub transport: TransportKind,
    pub policy: IdentityPolicy,
    /// Allow listening beyond loopback without a token.
    pub insecure: bool,
    /// Worker threads running requests (0: 4 per CPU, at least 8).
    pub workers: usize,
    /// Send reads that name a destination region straight from the file
    /// (`sendfile(2)` on TCP) instead of staging them in registered memory.
    /// Off by default: measured both ways on loopback (25-45% slower on a
    /// 2-core machine, 30% faster in one 16-CPU sweep; compare with
    /// `hipfs bench userspace --sendfile`); it saves the server a copy
    /// where the peer is another host. Verbs always stages, and so do
    /// authenticated TCP connections, which hash what they place (see
    /// docs/SECURITY.md): it applies only to connections without message
    /// authentication.
    pub send_from_file: bool,
    /// The Unix socket local clients get tickets from; `None`:
    /// `/run/hipfs/serve-PORT.sock` (see `docs/SECURITY.md`).
    pub local_socket: Option<PathBuf>,
    /// Accept clients that ask for no message authentication after the
    /// handshake (`HIPFS_UNAUTHENTICATED_MESSAGES=1`): only for measuring its cost.
    pub allow_unauthenticated_messages: bool,
}

impl ServeConfig {
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
            send_from_file: false,
            local_socket: None,
            allow_unauthenticated_messages: super::seal::unauthenticated_messages_requested(),
        }
    }
}

/// The transport settings both sides use.
pub fn transport_config(kind: TransportKind) -> TransportConfig {
    TransportConfig {
        kind,
        max_message: MAX_MESSAGE,
        ..TransportConfig::default()
    }
}

pub(crate) struct ServerShared {
    pub(crate) export: Export,
    pub(crate) read_only: bool,
    pub(crate) policy: IdentityPolicy,
    send_from_file: bool,
    token: Option<Token>,
    allow_no_mac: bool,
    tickets: Arc<Tickets>,
    pub(crate) grants: Grants,
    next_session: AtomicU64,
    stopping: AtomicBool,
    in_flight: AtomicUsize,
    sessions: Mutex<Vec<Arc<Session>>>,
}

type Job = (Arc<Session>, Vec<u8>);

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
        let listener: Arc<dyn Listener> = Arc::from(hipfs_rdma::listen(
            &cfg.listen,
            &transport_config(cfg.transport),
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
            read_only: cfg.read_only,
            policy: cfg.policy.clone(),
            send_from_file: cfg.send_from_file,
            token: cfg.token.clone(),
            allow_no_mac: cfg.allow_unauthenticated_messages,
            tickets,
            grants: Grants::default(),
            next_session: AtomicU64::new(1),
            stopping: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            sessions: Mutex::new(Vec::new()),
        });
        let workers = if cfg.workers == 0 {
            std::thread::available_parallelism().map_or(8, |n| (n.get() * 4).max(8))
        } else {
            cfg.workers
        };
        let (tx, rx) = sync_channel::<Job>(workers * 8);
        let rx = Arc::new(Mutex::new(rx));
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

fn accept_loop(shared: Arc<ServerShared>, listener: Arc<dyn Listener>, tx: SyncSender<Job>) {
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
        let shared = shared.clone();
        let tx = tx.clone();
        let spawned = std::thread::Builder::new()
            .name("hipfs-conn".into())
            .spawn(move || serve_connection(shared, conn, tx));
        if let Err(e) = spawned {
            log::warn!("cannot start a connection thread: {e}");
        }
    }
}

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// An authenticated connection: who it speaks for and its message keys.
struct Authenticated {
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
        log::warn!("refused {}: {reason}", conn.peer_addr());
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
    conn.send(
        &Welcome {
            export: shared.export.path.display().to_string(),
            read_only: shared.read_only,
            mac: secret.proof(SERVER_PROOF, &tr),
        }
        .encode(),
    )?;
    let (c2s, s2c) = secret.session_keys(&tr);
    Ok(Some(Authenticated {
        who,
        seal: Sealer::new((!no_mac).then_some(s2c)),
        open: Opener::new((!no_mac).then_some(c2s)),
    }))
}

fn serve_connection(shared: Arc<ServerShared>, conn: Arc<dyn Connection>, tx: SyncSender<Job>) {
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
            log::warn!("handshake with {peer}: {e}");
            conn.close();
            return;
        }
    };
    log::info!("client {peer} connected ({})", auth.who.describe());
    let id = shared.next_session.fetch_add(1, Ordering::Relaxed);
    let session = Arc::new(
        Session::new(conn.clone(), shared.send_from_file).with_trust(id, auth.who, auth.seal),
    );
    shared
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(session.clone());
    loop {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        match conn.recv(Duration::from_millis(500)) {
            Ok(msg) => {
                let msg = match auth.open.open(msg) {
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
                shared.in_flight.fetch_add(1, Ordering::SeqCst);
                if tx.send((session.clone(), msg)).is_err() {
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

fn worker(shared: Arc<ServerShared>, rx: Arc<Mutex<Receiver<Job>>>) {
    // Before the first credential switch (see poster.rs).
    poster::start_companion(format!(
        "{}-post",
        std::thread::current().name().unwrap_or("hipfs-worker")
    ));
    // The client applies the caller's umask; ours must not strip more bits.
    // umask is per process unless the thread has its own fs_struct, so take
    // one: a server embedded in another program (`hipfs mount --local`,
    // tests) leaves that program's umask alone.
    // SAFETY: unshare(CLONE_FS) affects only this thread; umask cannot fail.
    unsafe {
        if libc::unshare(libc::CLONE_FS) == 0 {
            libc::umask(0);
        } else {
            log::warn!(
                "unshare(CLONE_FS) failed ({}); created files get the server's umask",
                std::io::Error::last_os_error()
            );
        }
    }
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
            rx.recv()
        };
        let Ok((session, msg)) = job else { return };
        let reply = match Request::decode(&msg) {
            Ok(req) => Some(Reply {
                id: req.id,
                result: session.handle(&shared, &req),
            }),
            Err(e) => Request::peek_id(&msg).map(|id| {
                log::debug!("{}: malformed request: {e}", session.conn.peer_addr());
                Reply {
                    id,
                    result: Err(e.errno()),
                }
            }),
        };
        if let Some(reply) = reply {
            let (s, msg) = (session.clone(), reply.encode());
            if let Err(e) = poster::post(session.conn.as_ref(), move || s.send(msg)) {
                log::debug!("reply to {}: {e}", session.conn.peer_addr());
            }
        }
        shared.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}
