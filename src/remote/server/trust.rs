//! Who a connection speaks for (see `docs/SECURITY.md`): the credentials a
//! server accepts and what each lets a connection do.
//!
//! - The shared token: a trusted client host (its mount daemon), which may
//!   speak for any uid the export allows; root is squashed by default.
//! - A ticket from the server's local Unix socket: the server reads the
//!   asking process's credentials from the socket (`SO_PEERCRED`) and its
//!   groups from `/proc`, and binds a single-use, short-lived ticket to
//!   them. A ticket of uid 0 is a trusted host daemon (not squashed unless
//!   `--squash-root`); any other uid may only ever act as itself.
//! - A file capability: minted by `GrantFile` for one open file of the
//!   granting connection, bound to its access mode; the connection may only
//!   read (and write, if granted) that file, as the user who opened it.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::super::auth::{random_nonce, secret_id, Token};
use super::super::proto::WireCred;
use super::super::RemoteError;

/// What an authenticated connection may do.
#[derive(Clone)]
pub(crate) enum Principal {
    /// A trusted host daemon: `token` when it proved the shared token
    /// (remote host), else a local uid-0 ticket.
    Host { token: bool },
    /// A local user (ticket): only this identity, never another.
    User(WireCred),
    /// A file capability: this one open file.
    File(Arc<Grant>),
}

impl Principal {
    pub(crate) fn describe(&self) -> String {
        match self {
            Principal::Host { token: true } => "token host".into(),
            Principal::Host { token: false } => "local root".into(),
            Principal::User(c) => format!("local uid {}", c.uid),
            Principal::File(_) => "file capability".into(),
        }
    }
}

/// How long a ticket may wait for its handshake.
const TICKET_LIFETIME: Duration = Duration::from_secs(10);
/// Most tickets waiting at once (expired ones are purged first).
const MAX_TICKETS: usize = 1024;

struct Ticket {
    secret: Token,
    cred: WireCred,
    expires: Instant,
}

/// Tickets waiting to be redeemed, by id.
#[derive(Default)]
pub(crate) struct Tickets {
    map: Mutex<HashMap<[u8; 32], Ticket>>,
}

impl Tickets {
    /// A new ticket for `cred`; returns its secret.
    fn mint(&self, cred: WireCred) -> Result<[u8; 32], RemoteError> {
        let secret = random_nonce()?;
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        m.retain(|_, t| t.expires > now);
        if m.len() >= MAX_TICKETS {
            return Err(RemoteError::Config("too many tickets waiting".into()));
        }
        m.insert(
            secret_id(&secret),
            Ticket {
                secret: Token::from_bytes(&secret),
                cred,
                expires: now + TICKET_LIFETIME,
            },
        );
        Ok(secret)
    }

    /// Takes ticket `id` (single use): its secret and identity, unless
    /// unknown or expired.
    pub(crate) fn redeem(&self, id: &[u8; 32]) -> Option<(Token, WireCred)> {
        let t = self
            .map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)?;
        (t.expires > Instant::now()).then_some((t.secret, t.cred))
    }
}

/// A capability for one open file.
pub(crate) struct Grant {
    pub(crate) secret: Token,
    pub(crate) fd: Arc<OwnedFd>,
    pub(crate) write: bool,
    /// The identity the file was opened with; capability connections act as it.
    pub(crate) cred: WireCred,
    /// The granting session and its handle.
    owner: u64,
    owner_fh: u64,
    revoked: AtomicBool,
}

impl Grant {
    pub(crate) fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::SeqCst)
    }
}

/// Every live file capability, by id.
#[derive(Default)]
pub(crate) struct Grants {
    map: Mutex<HashMap<[u8; 32], Arc<Grant>>>,
}

impl Grants {
    /// A capability for handle `fh` of session `owner`; one per (handle,
    /// mode), so asking again returns the same secret.
    pub(crate) fn grant(
        &self,
        owner: u64,
        owner_fh: u64,
        fd: Arc<OwnedFd>,
        write: bool,
        cred: WireCred,
    ) -> Result<[u8; 32], RemoteError> {
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = m
            .values()
            .find(|g| g.owner == owner && g.owner_fh == owner_fh && g.write == write)
        {
            let mut s = [0u8; 32];
            s.copy_from_slice(g.secret.expose());
            return Ok(s);
        }
        let secret = random_nonce()?;
        m.insert(
            secret_id(&secret),
            Arc::new(Grant {
                secret: Token::from_bytes(&secret),
                fd,
                write,
                cred,
                owner,
                owner_fh,
                revoked: AtomicBool::new(false),
            }),
        );
        Ok(secret)
    }

    pub(crate) fn find(&self, id: &[u8; 32]) -> Option<Arc<Grant>> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    /// Revokes the capabilities of session `owner` (of its handle `fh`
    /// only, when given): later requests through them fail with EBADF.
    pub(crate) fn revoke(&self, owner: u64, fh: Option<u64>) {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, g| {
                let hit = g.owner == owner && fh.is_none_or(|f| f == g.owner_fh);
                if hit {
                    g.revoked.store(true, Ordering::SeqCst);
                }
                !hit
            });
    }
}

/// The groups of process `pid` from `/proc/PID/status`, if it still has
/// effective ids `uid`/`gid` (else the pid may have been reused: none).
fn process_groups(pid: i32, uid: u32, gid: u32) -> Vec<u32> {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    // "Uid:\treal\teffective\tsaved\tfs"
    let field = |name: &str, i: usize| -> Option<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .split_whitespace()
            .nth(i)?
            .parse()
            .ok()
    };
    if field("Uid:", 1) != Some(uid) || field("Gid:", 1) != Some(gid) {
        return Vec::new();
    }
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The first line a ticket answer starts with.
const TICKET_HEADER: &str = "hipfs-ticket 1";

/// The local socket: answers every connection with a ticket bound to the
/// connecting process's credentials.
pub(crate) struct LocalSocket {
    path: PathBuf,
    stopping: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LocalSocket {
    /// Listens on `path` (mode 0666: any local user may ask for a ticket
    /// of their own identity). A socket file left by a dead server is
    /// replaced; one a live server answers on is not.
    pub(crate) fn start(path: &Path, tickets: Arc<Tickets>) -> Result<LocalSocket, RemoteError> {
        let bad = |e: std::io::Error| {
            RemoteError::Config(format!("local socket {}: {e}", path.display()))
        };
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() && !dir.exists() {
                std::fs::create_dir_all(dir).map_err(bad)?;
            }
        }
        if UnixStream::connect(path).is_ok() {
            return Err(RemoteError::Config(format!(
                "local socket {}: another hipfs server answers there (pass --local-socket PATH)",
                path.display()
            )));
        }
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).map_err(bad)?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(bad)?;
        }
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = stopping.clone();
        let thread = std::thread::Builder::new()
            .name("hipfs-local".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    match conn {
                        Ok(c) => {
                            if let Err(e) = answer(c, &tickets) {
                                log::debug!("local ticket request: {e}");
                            }
                        }
                        Err(e) => {
                            log::debug!("local socket accept: {e}");
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
            })?;
        Ok(LocalSocket {
            path: path.to_path_buf(),
            stopping,
            thread: Some(thread),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LocalSocket {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the accepting thread so that it sees the flag.
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn answer(mut c: UnixStream, tickets: &Tickets) -> Result<(), RemoteError> {
    c.set_write_timeout(Some(Duration::from_secs(2)))?;
    let peer = rustix::net::sockopt::socket_peercred(&c).map_err(std::io::Error::from)?;
    let (uid, gid) = (peer.uid.as_raw(), peer.gid.as_raw());
    let groups = process_groups(peer.pid.as_raw_nonzero().get(), uid, gid);
    let secret = tickets.mint(WireCred { uid, gid, groups })?;
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    c.write_all(format!("{TICKET_HEADER}\n{hex}\n").as_bytes())?;
    Ok(())
}

/// Asks the server's local socket at `path` for a ticket; returns its secret.
pub fn fetch_ticket(path: &Path) -> Result<[u8; 32], RemoteError> {
    let bad = |why: String| RemoteError::Auth(format!("local socket {}: {why}", path.display()));
    let c = UnixStream::connect(path).map_err(|e| bad(e.to_string()))?;
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut s = String::new();
    c.take(256)
        .read_to_string(&mut s)
        .map_err(|e| bad(e.to_string()))?;
    let mut lines = s.lines();
    if lines.next() != Some(TICKET_HEADER) {
        return Err(bad("not a hipfs ticket answer".into()));
    }
    let hex = lines.next().unwrap_or_default();
    let mut out = [0u8; 32];
    if hex.len() != 64 {
        return Err(bad("malformed ticket".into()));
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = hex
            .get(2 * i..2 * i + 2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .ok_or_else(|| bad("malformed ticket".into()))?;
    }
    Ok(out)
}
