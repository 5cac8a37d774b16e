//! One client connection on the server: its open files and staging memory,
//! and the dispatch of each request to the export.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hipfs_rdma::{Connection, OwnedRegion};

use super::super::proto::{
    HeadItem, Op, Payload, ReadDest, Request, Step, WireCred, CREATED_NO_XATTRS_VERSION, MAX_HEAD,
    MAX_HEADS, MAX_IO, MAX_PLACED_READ, PARENT_ATTR_VERSION,
};
use super::super::seal::Sealer;
use super::creds::{become_user, privileged_xattr};
use super::limits::{InFlight, Limits};
use super::resolve::{cstr, Errno, ToErrno};
use super::trust::{Grant, Principal};
use super::ServerShared;
use hipfs_sys::io::{pread_full, pwrite_all};

/// A staging buffer registered on one connection: the source of
/// `write_remote` for reads that name a destination region.
type Staging = OwnedRegion;

/// Most staging buffers kept per connection, per size class.
const MAX_STAGING: usize = 16;
/// Most large staging buffers (MAX_PLACED_READ each) kept per connection.
const MAX_LARGE_STAGING: usize = 4;

pub(crate) struct Session {
    pub(crate) conn: Arc<dyn Connection>,
    files: Mutex<HashMap<u64, Arc<OwnedFd>>>,
    next_fh: AtomicU64,
    staging: Mutex<Vec<Staging>>,
    large_staging: Mutex<Vec<Staging>>,
    /// Whether placed reads are sent straight from the file: asked for
    /// (`ServeConfig::send_from_file`), cleared on the transport's first
    /// `Unsupported` (verbs stages them).
    sends_from_files: AtomicBool,
    /// Requests read from this connection and not yet answered.
    pub(crate) in_flight: InFlight,
    max_open_files: usize,
    /// Staging bytes kept for reuse by all sessions of the server, and the
    /// most it may be.
    kept_staging: Arc<AtomicUsize>,
    max_kept_staging: usize,
    /// This connection's number (owner of the capabilities it grants).
    id: u64,
    /// Who the connection speaks for.
    who: Principal,
    /// Tags every message sent on this connection.
    seal: Sealer,
    /// Placed reads carry the hash of their bytes (authenticated TCP
    /// connections: the bytes travel outside the tagged messages; verbs
    /// is as trusted as the fabric).
    digests: bool,
    /// The client asked for change notices (`Op::Watch`).
    watching: AtomicBool,
    /// The protocol version agreed in the handshake.
    version: u16,
}

impl Session {
    pub(crate) fn is_watching(&self) -> bool {
        self.watching.load(Ordering::Relaxed)
    }

    /// The protocol version agreed with this connection's client.
    pub(crate) fn version(&self) -> u16 {
        self.version
    }

    pub(crate) fn new(
        conn: Arc<dyn Connection>,
        send_from_file: bool,
        limits: &Limits,
        kept_staging: Arc<AtomicUsize>,
    ) -> Session {
        Session {
            conn,
            files: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            staging: Mutex::new(Vec::new()),
            large_staging: Mutex::new(Vec::new()),
            sends_from_files: AtomicBool::new(send_from_file),
            in_flight: InFlight::new(limits),
            max_open_files: limits.max_open_files,
            kept_staging,
            max_kept_staging: limits.max_kept_staging,
            id: 0,
            version: PARENT_ATTR_VERSION - 1,
            // Least privilege until `with_trust` says who it is.
            who: Principal::User(WireCred {
                uid: super::NOBODY,
                gid: super::NOBODY,
                groups: Vec::new(),
            }),
            seal: Sealer::new(None),
            digests: false,
            watching: AtomicBool::new(false),
        }
    }

    /// The same session for connection `id`, authenticated as `who`, its
    /// messages tagged by `seal`.
    /// Whether placed reads carry the hash of their bytes (`--hash-placed-reads`;
    /// only on authenticated TCP connections, see [`Session::with_trust`]).
    pub(crate) fn hash_placed_reads(mut self, on: bool) -> Session {
        self.digests &= on;
        self
    }

    /// Speaks protocol `version` (what the handshake agreed).
    pub(crate) fn speaking(mut self, version: u16) -> Session {
        self.version = version;
        self
    }

    pub(crate) fn with_trust(mut self, id: u64, who: Principal, seal: Sealer) -> Session {
        self.digests = seal.is_on() && self.conn.kind() == hipfs_rdma::TransportKind::Tcp;
        self.id = id;
        self.who = who;
        self.seal = seal;
        self
    }

    /// Sends one message (a reply) on this connection, authenticated.
    pub(crate) fn send(&self, msg: Vec<u8>) -> hipfs_rdma::Result<()> {
        self.seal.send(self.conn.as_ref(), msg)
    }

    /// A request on a file-capability connection: only the granted file,
    /// in its mode. `Some(answer)` when handled (or refused) here.
    fn handle_granted(&self, g: &Arc<Grant>, op: &Op) -> Option<Result<Payload, Errno>> {
        if g.is_revoked() {
            return Some(Err(libc::EBADF));
        }
        Some(match op {
            Op::Open { flags, .. } => {
                let wants_write = flags & libc::O_ACCMODE != libc::O_RDONLY;
                if (wants_write && !g.write) || flags & (libc::O_TRUNC | libc::O_CREAT) != 0 {
                    Err(libc::EACCES)
                } else {
                    // The path is not looked at: the capability names the file.
                    let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                    self.files
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(fh, g.fd.clone());
                    Ok(Payload::Opened { fh })
                }
            }
            Op::Write { .. } if !g.write => Err(libc::EBADF),
            Op::Getattr { fh: Some(_), .. }
            | Op::Read { .. }
            | Op::Write { .. }
            | Op::Fsync { .. }
            | Op::Flush { .. }
            | Op::Release { .. } => return None,
            _ => Err(libc::EPERM),
        })
    }

    fn file(&self, fh: u64) -> Result<Arc<OwnedFd>, Errno> {
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh)
            .cloned()
            .ok_or(libc::EBADF)
    }

    /// Keeps `fd` open for the client; `EMFILE` when this connection
    /// already holds `Limits::max_open_files` (the fd is closed): one
    /// client cannot take every descriptor of the server.
    fn add_file(&self, fd: OwnedFd) -> Result<u64, Errno> {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        if files.len() >= self.max_open_files {
            return Err(libc::EMFILE);
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        files.insert(fh, Arc::new(fd));
        Ok(fh)
    }

    /// Whether the connection may open another file (checked before the
    /// open, so a refused one has no side effect such as O_TRUNC).
    fn may_open(&self) -> Result<(), Errno> {
        if self.files.lock().unwrap_or_else(|p| p.into_inner()).len() >= self.max_open_files {
            return Err(libc::EMFILE);
        }
        Ok(())
    }

    fn pool(&self, len: usize) -> (&Mutex<Vec<Staging>>, usize, usize) {
        if len <= MAX_IO {
            (&self.staging, MAX_IO, MAX_STAGING)
        } else {
            (&self.large_staging, MAX_PLACED_READ, MAX_LARGE_STAGING)
        }
    }

    /// A registered buffer of at least `len` bytes (len <= MAX_PLACED_READ).
    fn take_staging(&self, len: usize) -> Result<Staging, Errno> {
        let (pool, size, _) = self.pool(len);
        if let Some(s) = self.pop_staging(pool) {
            return Ok(s);
        }
        OwnedRegion::new(self.conn.as_ref(), size).map_err(|e| {
            log::warn!("cannot register staging memory: {e}");
            libc::ENOMEM
        })
    }

    fn put_staging(&self, s: Staging) {
        let len = s.len();
        let (pool, _, keep) = self.pool(len);
        let mut v = pool.lock().unwrap_or_else(|p| p.into_inner());
        if v.len() >= keep {
            return;
        }
        // The server-wide budget: idle connections must not pin staging
        // memory without bound (each kept buffer is registered memory).
        let kept = self.kept_staging.fetch_add(len, Ordering::Relaxed);
        if kept + len > self.max_kept_staging {
            self.kept_staging.fetch_sub(len, Ordering::Relaxed);
            return;
        }
        v.push(s);
    }

    fn pop_staging(&self, pool: &Mutex<Vec<Staging>>) -> Option<Staging> {
        let s = pool.lock().unwrap_or_else(|p| p.into_inner()).pop()?;
        self.kept_staging.fetch_sub(s.len(), Ordering::Relaxed);
        Some(s)
    }

    /// Runs one request and returns its reply payload.
    pub(crate) fn handle(&self, shared: &ServerShared, req: &Request) -> Result<Payload, Errno> {
        if shared.read_only && req.op.mutates() {
            return Err(libc::EROFS);
        }
        let cred: WireCred = shared.policy.authorize(&req.cred, &self.who)?;
        if let Principal::File(g) = &self.who {
            if let Some(answer) = self.handle_granted(g, &req.op) {
                return answer;
            }
        }
        become_user(&cred)?;
        let result = self.handle_op(shared, req, &cred)?;
        // The directory whose entries changed, and its attributes now: the
        // client answers the kernel's next look at it without asking.
        let parent = match (&req.op, self.version >= PARENT_ATTR_VERSION) {
            (_, false) => None,
            (
                Op::Create { path, .. }
                | Op::Mkdir { path, .. }
                | Op::Mknod { path, .. }
                | Op::Symlink { path, .. }
                | Op::Unlink { path }
                | Op::Rmdir { path }
                | Op::Link { to: path, .. }
                | Op::Rename { to: path, .. },
                true,
            ) => shared.export.parent_attr(path).ok(),
            _ => None,
        };
        Ok(match parent {
            Some(parent) => Payload::InDir {
                parent,
                inner: Box::new(result),
            },
            None => result,
        })
    }

    /// [`Session::handle`]'s operation, run as `cred`.
    fn handle_op(
        &self,
        shared: &ServerShared,
        req: &Request,
        cred: &WireCred,
    ) -> Result<Payload, Errno> {
        let ex = &shared.export;
        match &req.op {
            Op::Setxattr { name, .. } | Op::Removexattr { name, .. }
                if cred.uid != 0 && privileged_xattr(name) =>
            {
                Err(libc::EPERM)
            }
            Op::GrantFile { fh, write } => {
                if matches!(self.who, Principal::File(_)) {
                    return Err(libc::EPERM);
                }
                let f = self.file(*fh)?;
                // Write access only if the file was opened for writing.
                let mode = rustix::fs::fcntl_getfl(f.as_fd()).map_err(|e| e.raw_os_error())?
                    & rustix::fs::OFlags::ACCMODE;
                let write = *write && mode != rustix::fs::OFlags::RDONLY;
                shared
                    .grants
                    .grant(self.id, *fh, f, write, cred.clone())
                    .map(|secret| Payload::Bytes(secret.to_vec()))
                    .map_err(|e| {
                        log::warn!("cannot grant a file capability: {e}");
                        libc::ENOMEM
                    })
            }
            Op::Watch => {
                // The initial walk of a large export may still run.
                if shared.watch.watching(Duration::from_secs(20)) {
                    self.watching.store(true, Ordering::Relaxed);
                    Ok(Payload::Empty)
                } else {
                    Err(libc::ENOSYS)
                }
            }
            Op::Lookup { path } => ex.lookup(path).map(Payload::Entry),
            Op::Getattr { path, fh } => match fh {
                Some(fh) => ex.getattr_fd(self.file(*fh)?.as_fd()).map(Payload::Attr),
                None => ex.lookup(path).map(|e| Payload::Attr(e.attr)),
            },
            Op::Setattr { path, fh, set } => {
                let f = match fh {
                    Some(fh) => Some(self.file(*fh)?),
                    None => None,
                };
                ex.setattr(path, f.as_deref(), set).map(Payload::Attr)
            }
            Op::Readdir { path, cookie, max } => ex
                .readdir(path, *cookie, (*max as usize).clamp(1, 2048))
                .map(Payload::Dir),
            Op::Open { path, flags } => {
                self.may_open()?;
                let fd = ex.open_file(path, *flags)?;
                Ok(Payload::Opened {
                    fh: self.add_file(fd)?,
                })
            }
            Op::OpenHead { path, flags, max } => {
                self.may_open()?;
                let fd = ex.open_file(path, *flags)?;
                let data = small_file_contents(&fd, *flags, *max)?;
                Ok(Payload::OpenedHead {
                    fh: self.add_file(fd)?,
                    data,
                })
            }
            Op::ReadHeads {
                path,
                cookie,
                max_each,
                max_total,
            } => {
                let (items, next) = read_heads(ex, path, *cookie, *max_each, *max_total)?;
                Ok(Payload::Heads { items, next })
            }
            Op::Create { path, mode, flags } => {
                self.may_open()?;
                let ask = self.version >= CREATED_NO_XATTRS_VERSION;
                let (entry, fd, no_xattrs) = ex.create(path, *mode, *flags, ask)?;
                Ok(Payload::Created {
                    entry,
                    fh: self.add_file(fd)?,
                    no_xattrs,
                })
            }
            Op::Release { fh } => {
                self.files
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(fh);
                // The direct-path capabilities of this open end with it.
                shared.grants.revoke(self.id, Some(*fh));
                Ok(Payload::Empty)
            }
            Op::Read {
                fh,
                offset,
                len,
                dest,
            } => self.read(*fh, *offset, *len as usize, dest.as_ref()),
            Op::Write { fh, offset, data } => {
                let f = self.file(*fh)?;
                let n = pwrite_all(f.as_fd(), data, *offset).errno()?;
                Ok(Payload::Written(n as u32))
            }
            Op::Apply { fh, steps } => {
                let f = self.file(*fh)?;
                for step in steps {
                    match step {
                        Step::Write { offset, data } => {
                            let n = pwrite_all(f.as_fd(), data, *offset).errno()?;
                            if n < data.len() {
                                // pwrite_all stops short only at a full disk.
                                return Err(libc::ENOSPC);
                            }
                        }
                        Step::Setattr(set) => ex.setattr_open(f.as_fd(), set)?,
                    }
                }
                ex.getattr_fd(f.as_fd()).map(Payload::Attr)
            }
            Op::Fsync { fh, datasync } => {
                let f = self.file(*fh)?;
                hipfs_sys::fs::fsync(f.as_fd(), *datasync).errno()?;
                Ok(Payload::Empty)
            }
            Op::Flush { fh } => self.file(*fh).map(|_| Payload::Empty),
            Op::Mkdir { path, mode } => ex.mkdir(path, *mode).map(Payload::Entry),
            Op::Rmdir { path } => ex.remove(path, true).map(|_| Payload::Empty),
            Op::Unlink { path } => ex.remove(path, false).map(|_| Payload::Empty),
            Op::Rename { from, to, flags } => ex.rename(from, to, *flags).map(|_| Payload::Empty),
            Op::Symlink { path, target } => ex.symlink(path, target).map(Payload::Entry),
            Op::Readlink { path } => ex.readlink(path).map(Payload::Bytes),
            Op::Link { from, to } => ex.link(from, to).map(Payload::Entry),
            Op::Mknod { path, mode, rdev } => ex
                .mknod(path, *mode, *rdev, shared.allow_devices && cred.uid == 0)
                .map(Payload::Entry),
            Op::Statfs { path } => ex.statfs(path).map(Payload::Statfs),
            Op::Getxattr { path, name } => ex.xattr_get(path, &cstr(name)?).map(Payload::Bytes),
            Op::Listxattr { path } => ex.xattr_list(path).map(Payload::Names),
            Op::Setxattr {
                path,
                name,
                value,
                flags,
            } => ex
                .xattr_set(path, &cstr(name)?, value, *flags)
                .map(|_| Payload::Empty),
            Op::Removexattr { path, name } => {
                ex.xattr_remove(path, &cstr(name)?).map(|_| Payload::Empty)
            }
        }
    }

    fn read(
        &self,
        fh: u64,
        offset: u64,
        len: usize,
        dest: Option<&ReadDest>,
    ) -> Result<Payload, Errno> {
        let f = self.file(fh)?;
        match dest {
            None => {
                let mut data = vec![0u8; len];
                let n = pread_full(f.as_fd(), &mut data, offset).errno()?;
                data.truncate(n);
                Ok(Payload::Read { n: n as u32, data })
            }
            Some(d) => {
                // sendfile never shows this side the bytes, so it cannot
                // hash them: authenticated TCP connections stage.
                if !self.digests && self.sends_from_files.load(Ordering::Relaxed) {
                    match self.read_from_file(&f, offset, len, d) {
                        Ok(n) => {
                            return Ok(Payload::Read {
                                n: n as u32,
                                data: Vec::new(),
                            })
                        }
                        Err(None) => self.sends_from_files.store(false, Ordering::Relaxed),
                        Err(Some(e)) => return Err(e),
                    }
                }
                let mut staging = self.take_staging(len)?;
                // The staging memory is ours, at least `len` bytes long
                // (take_staging), and no one else uses it while we hold it.
                let read = pread_full(f.as_fd(), &mut staging.bytes_mut()[..len], offset).errno();
                let result = read.and_then(|n| {
                    if n > 0 {
                        let (conn, src, dst, at) = (
                            self.conn.clone(),
                            staging.region().clone(),
                            d.region,
                            d.offset,
                        );
                        super::poster::post(self.conn.as_ref(), move || {
                            conn.write_remote(&src, 0, n, &dst, at)
                        })
                        .map_err(|e| self.placement_errno(&e))?;
                    }
                    Ok(n)
                });
                let digest = match &result {
                    Ok(n) if self.digests => {
                        Some(super::super::seal::placed_digest(&staging.bytes()[..*n]))
                    }
                    _ => None,
                };
                self.put_staging(staging);
                let n = result?;
                Ok(match digest {
                    Some(digest) => Payload::Placed {
                        n: n as u32,
                        digest,
                    },
                    None => Payload::Read {
                        n: n as u32,
                        data: Vec::new(),
                    },
                })
            }
        }
    }
}

impl Session {
    /// A placed read sent straight from the file (sendfile on TCP: no copy
    /// through user memory on this side). `Err(None)`: the transport cannot
    /// do it, use staging.
    ///
    /// The transport's sender thread reads the file, not this worker, so
    /// the read is not made with the request's credentials; like pread on
    /// the same fd it relies on the permission check done at open.
    fn read_from_file(
        &self,
        f: &Arc<OwnedFd>,
        offset: u64,
        len: usize,
        d: &ReadDest,
    ) -> Result<usize, Option<Errno>> {
        // Ask only for bytes the file has, so a read at the end reports a
        // short count instead of zeros.
        let st = hipfs_sys::fs::fstat(f.as_raw_fd()).errno().map_err(Some)?;
        let size = u64::try_from(st.st_size).unwrap_or(0);
        let n = size.saturating_sub(offset).min(len as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        let (conn, file, dst, at) = (self.conn.clone(), f.clone(), d.region, d.offset);
        let sent = super::poster::post(self.conn.as_ref(), move || {
            conn.write_remote_from_file(file.as_fd(), offset, n, &dst, at)
        });
        match sent {
            Ok(got) => Ok(got),
            Err(hipfs_rdma::Error::Unsupported(why)) => {
                log::debug!("placed reads through staging: {why}");
                Err(None)
            }
            Err(e) => Err(Some(self.placement_errno(&e))),
        }
    }

    /// The errno a client sees when placing a read in its memory failed.
    /// A client that did not acknowledge the placement in time is
    /// disconnected: waiting longer would let it hold this worker.
    fn placement_errno(&self, e: &hipfs_rdma::Error) -> Errno {
        log::debug!("write_remote to {}: {e}", self.conn.peer_addr());
        if let hipfs_rdma::Error::Timeout(t) = e {
            log::info!(
                "disconnecting {}: a placed read was not acknowledged within {t:?} (--ack-timeout)",
                self.conn.peer_addr()
            );
            self.conn.close();
            return libc::ETIMEDOUT;
        }
        match e {
            hipfs_rdma::Error::OutOfRange { .. }
            | hipfs_rdma::Error::RemoteRejected(_)
            | hipfs_rdma::Error::InvalidArgument(_) => libc::EFAULT,
            _ => libc::EIO,
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Give this session's kept staging back to the server-wide budget.
        let pools = [&self.staging, &self.large_staging];
        let kept: usize = pools
            .iter()
            .map(|p| {
                p.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .map(|s| s.len())
                    .sum::<usize>()
            })
            .sum();
        self.kept_staging.fetch_sub(kept, Ordering::Relaxed);
    }
}

/// The whole contents of the file just opened on `fd` when it is a regular
/// file of at most `max` (and [`MAX_HEAD`]) bytes opened for reading;
/// `None` otherwise. One byte more than the limit is asked for, so a file
/// that grew since the `fstat` is not mistaken for a whole one.
/// Most files in one `Payload::Heads`.
const MAX_HEAD_FILES: usize = 4096;

/// The small regular files of directory `rel` from `cookie` on, each
/// opened as the caller (`Op::ReadHeads`); files it may not open, or that
/// changed kind, are left out. Returns them and the cookie to go on from
/// (0: the listing ended).
fn read_heads(
    ex: &super::export::Export,
    rel: &[u8],
    cookie: u64,
    max_each: u32,
    max_total: u32,
) -> Result<(Vec<HeadItem>, u64), Errno> {
    let max_total = (max_total as usize).min(MAX_HEADS);
    let names = ex.list_names(rel, cookie, MAX_HEAD_FILES)?;
    let ended = names.len() < MAX_HEAD_FILES;
    let mut items = Vec::new();
    let mut total = 0;
    let mut next = cookie;
    for (name, kind, off) in names {
        if kind == libc::DT_REG || kind == libc::DT_UNKNOWN {
            let path = super::export::child_path(rel, &name);
            let head = ex
                .open_file(&path, libc::O_RDONLY)
                .and_then(|fd| Ok((small_file_contents(&fd, libc::O_RDONLY, max_each)?, fd)));
            if let Ok((Some(data), fd)) = head {
                // Past the budget: the caller goes on from this file
                // (the first always goes in, so every answer progresses).
                if !items.is_empty() && total + data.len() > max_total {
                    return Ok((items, next));
                }
                total += data.len();
                let ino = ex.getattr_fd(fd.as_fd())?.ino;
                items.push(HeadItem { name, ino, data });
            }
        }
        next = off;
    }
    Ok((items, if ended { 0 } else { next }))
}

fn small_file_contents(fd: &OwnedFd, flags: i32, max: u32) -> Result<Option<Vec<u8>>, Errno> {
    let limit = (max as usize).min(MAX_HEAD);
    if flags & libc::O_ACCMODE == libc::O_WRONLY || limit == 0 {
        return Ok(None);
    }
    let st = hipfs_sys::fs::fstat(fd.as_raw_fd()).errno()?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_size as u64 > limit as u64 {
        return Ok(None);
    }
    let mut data = vec![0u8; st.st_size as usize + 1];
    let n = pread_full(fd.as_fd(), &mut data, 0).errno()?;
    if n > limit || n == data.len() {
        return Ok(None);
    }
    data.truncate(n);
    Ok(Some(data))
}
