//! The mount's view of a server: `hipfs_fusefs::Backend` over the remote client.
//!
//! Requests name files by path relative to the export, so the server keeps
//! no per-inode state and a restarted server needs nothing from before. The
//! client keeps the inode → path table (from lookups, readdir and creates,
//! updated on rename) and the open files (path, flags, and the server handle
//! with the connection it belongs to). After a reconnect an open file is
//! reopened by path the first time it is used; the server checks the inode
//! it finds is still the one the kernel means (`ESTALE` otherwise).
//!
//! Split by concern: [`nodes`] (the inode → path table), [`files`] (open
//! files and their data), [`cache`] (directory batches and missing-xattr
//! answers); this file has the type and the `Backend` operations.

mod ahead;
mod cache;
mod dir_attrs;
mod files;
mod fresh_dirs;
mod head;
mod heads_ahead;
mod held;
mod nodes;
mod notices;
mod prefetch;

pub use notices::ChangeFeed;

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use hipfs_fusefs::{
    Attr, Backend, Credentials, DirEntryPlus, Entry, Errno, IdentifyPurpose, Ino, Result, SetAttr,
    StatFs, TimeOrNow, ROOT_INO,
};

use super::super::proto::{Op, Payload, WireCred, WireSetAttr, WireTime};
use super::RemoteClient;
use cache::{DirListing, ANY_XATTR};
use files::OpenFile;
use nodes::{join, moved, NodeTable};

/// (inode, attribute name) → when the server said it is absent, and how.
type MissingXattrs = HashMap<(Ino, Vec<u8>), (Instant, Errno)>;

/// The remote export as a FUSE backend.
pub struct RemoteFs {
    client: Arc<RemoteClient>,
    nodes: RwLock<NodeTable>,
    files: RwLock<HashMap<u64, Arc<OpenFile>>>,
    next_fh: AtomicU64,
    dirs: Mutex<HashMap<u64, Arc<Mutex<DirListing>>>>,
    /// Recent "no such attribute" answers: `ls -l` asks for ACL and
    /// security attributes of every file, which most files lack.
    missing_xattrs: Mutex<MissingXattrs>,
    /// How long a missing attribute is remembered (the mount's attribute timeout).
    xattr_ttl: Duration,
    /// Extended attributes switched off (`-o noxattr`): answered `ENOSYS`,
    /// after which the kernel stops asking (as with sshfs).
    no_xattr: bool,
    /// POSIX ACLs switched off (`-o noacl`, see [`RemoteFs::without_acls`]).
    no_acl: bool,
    /// Created files hold nothing back (`-o nohold`, see [`held`]).
    no_hold: bool,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    /// Open handle → its last successful read or write (caller, time,
    /// end): see [`files::MID_STREAM_GAP`].
    streams: Mutex<HashMap<u64, files::Progress>>,
    /// Files handed to the direct path, by the kind of handle that asked.
    direct: DirectCounters,
    /// The whole contents small files were opened with, by handle ([`head`]).
    heads: Mutex<head::Heads>,
    /// The server does not know `Op::OpenHead`.
    no_open_head: std::sync::atomic::AtomicBool,
    /// Directories made here whose names are all known ([`fresh_dirs`]).
    fresh_dirs: Mutex<fresh_dirs::FreshDirs>,
    /// Whether to track them: only when change notices tell of the
    /// names others make.
    tracks_fresh_dirs: std::sync::atomic::AtomicBool,
    /// The servers reads are spread over (a multi-server mount).
    cluster: Option<Arc<super::cluster::Cluster>>,
    /// Listings of subdirectories fetched ahead ([`prefetch`]).
    prefetch: prefetch::Prefetch,
    /// Small files' contents fetched ahead ([`heads_ahead`]).
    heads_ahead: heads_ahead::HeadsAhead,
    /// Directories' attributes that came with this mount's own changes
    /// ([`dir_attrs`]).
    dir_attrs: dir_attrs::DirAttrs,
    held: held::HeldFiles,
}

/// What the direct path did with this mount's files (`hipfs stats`).
#[derive(Default)]
struct DirectCounters {
    /// Identify answers for OPAQUE_FD handles (binds and capability renewals).
    opaque_fd: AtomicU64,
    /// Identify answers for UserspaceFs handles (binds and renewals).
    userspace_fs: AtomicU64,
    /// Direct writes the library reported, whose cached pages were dropped.
    invalidations: AtomicU64,
}

/// The attribute of a mount's root directory that answers with this
/// mount's counters (`getfattr -n user.hipfs.stats /mnt/data`, `hipfs stats /mnt/data`).
pub const STATS_XATTR: &str = "user.hipfs.stats";

fn wire_cred(c: &Credentials) -> WireCred {
    WireCred {
        uid: c.uid,
        gid: c.gid,
        groups: c.groups.clone(),
    }
}

/// Whether `name` is a Linux security module's label (`security.selinux`,
/// Smack's, AppArmor's). A mount does not carry them, as NFS without
/// labeled NFS does not: a label is the policy of the machine that
/// enforces it, and the client's kernel labels its files itself when its
/// LSM is active (the request then never reaches the mount). They are
/// answered "not supported", which also tells `ls -l` (that asks for
/// `security.selinux` of every file) to stop asking for this filesystem.
pub fn is_lsm_label(name: &OsStr) -> bool {
    let n = name.as_bytes();
    n == b"security.selinux" || n.starts_with(b"security.SMACK64") || n == b"security.apparmor"
}

/// Whether `name` is one of the attributes that hold POSIX ACLs.
fn is_posix_acl(name: &OsStr) -> bool {
    let n = name.as_bytes();
    n == b"system.posix_acl_access" || n == b"system.posix_acl_default"
}

fn errno(e: i32) -> Errno {
    Errno::new(e)
}

fn wire_time(t: TimeOrNow) -> WireTime {
    match t {
        TimeOrNow::Now => WireTime::Now,
        TimeOrNow::At(t) => WireTime::from_system(t),
    }
}

/// The kernel's attribute change as the server takes it.
fn wire_set(changes: &SetAttr) -> WireSetAttr {
    WireSetAttr {
        mode: changes.mode.map(|m| m & 0o7777),
        uid: changes.uid,
        gid: changes.gid,
        size: changes.size,
        atime: changes.atime.map(wire_time),
        mtime: changes.mtime.map(wire_time),
    }
}

impl RemoteFs {
    /// This mount's counters, as `hipfs stats MOUNTPOINT` prints them.
    pub fn stats_text(&self) -> String {
        let spread = self
            .cluster
            .as_ref()
            .map(|c| c.stats_text())
            .unwrap_or_default();
        let head = format!(
            "hipfs mount of {} (via {})\n  {}\n  read through the mount: {} bytes\n  written through the mount: {} bytes\n  open files: {}, known inodes: {}\n  direct path: {} opaque_fd handles, {} userspace_fs handles, {} direct writes invalidated\n",
            self.client.export_name(),
            self.client.active_server(),
            self.client.counters_line(),
            self.bytes_read.load(Ordering::Relaxed),
            self.bytes_written.load(Ordering::Relaxed),
            self.files.read().unwrap_or_else(|p| p.into_inner()).len(),
            self.nodes.read().unwrap_or_else(|p| p.into_inner()).len(),
            self.direct.opaque_fd.load(Ordering::Relaxed),
            self.direct.userspace_fs.load(Ordering::Relaxed),
            self.direct.invalidations.load(Ordering::Relaxed),
        );
        head + &spread
    }

    /// A filesystem over `client`.
    pub fn new(client: Arc<RemoteClient>) -> RemoteFs {
        let mut nodes = NodeTable::default();
        nodes.insert_root(ROOT_INO);
        RemoteFs {
            prefetch: prefetch::Prefetch::new(&client, cache::DIR_BATCH),
            heads_ahead: heads_ahead::HeadsAhead::new(&client),
            dir_attrs: Default::default(),
            held: Default::default(),
            client,
            nodes: RwLock::new(nodes),
            files: RwLock::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            dirs: Mutex::new(HashMap::new()),
            missing_xattrs: Mutex::new(HashMap::new()),
            xattr_ttl: Duration::from_secs(1),
            no_xattr: false,
            no_acl: false,
            no_hold: false,
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            streams: Mutex::new(HashMap::new()),
            direct: DirectCounters::default(),
            heads: Mutex::new(head::Heads::default()),
            no_open_head: std::sync::atomic::AtomicBool::new(false),
            fresh_dirs: Mutex::new(fresh_dirs::FreshDirs::default()),
            tracks_fresh_dirs: std::sync::atomic::AtomicBool::new(false),
            cluster: None,
        }
    }

    /// Spreads reads of read-only opens over `cluster`'s servers (a
    /// multi-server mount; see [`super::cluster`]).
    pub fn with_cluster(mut self, cluster: Arc<super::cluster::Cluster>) -> RemoteFs {
        self.cluster = Some(cluster);
        self
    }

    /// Turns extended attributes off for this mount.
    pub fn without_xattrs(mut self, off: bool) -> RemoteFs {
        self.no_xattr = off;
        self
    }

    /// Turns POSIX ACLs off for this mount (`-o noacl`): their attributes
    /// are answered "not supported", which `ls -l` remembers for the whole
    /// filesystem instead of asking for every file; other extended
    /// attributes stay.
    pub fn without_acls(mut self, off: bool) -> RemoteFs {
        self.no_acl = off;
        self
    }

    /// `nohold`: created files hold nothing back (see [`held`]).
    pub fn without_holding(mut self, off: bool) -> RemoteFs {
        self.no_hold = off;
        self
    }

    /// Whether this mount carries the extended attribute `name` (security
    /// module labels never; POSIX ACLs unless `noacl`).
    fn carries(&self, name: &OsStr) -> bool {
        !(is_lsm_label(name) || (self.no_acl && is_posix_acl(name)))
    }

    /// Remembers missing extended attributes for `ttl` (0 disables).
    pub fn with_xattr_ttl(mut self, ttl: Duration) -> RemoteFs {
        self.xattr_ttl = ttl;
        self
    }

    /// The client this backend uses.
    pub fn client(&self) -> &Arc<RemoteClient> {
        &self.client
    }

    fn call(&self, cred: &Credentials, op: Op) -> Result<Payload> {
        self.keeping_dir_attrs(|| self.client.call_in_dir(&wire_cred(cred), op).map_err(errno))
    }

    /// Runs `call`, keeping the directory attributes its reply may carry
    /// ([`dir_attrs`]) where change notices keep them true.
    fn keeping_dir_attrs(&self, call: impl FnOnce() -> Result<Payload>) -> Result<Payload> {
        let since = self.dir_attrs.generation();
        let (p, parent) = call()?.split_parent();
        let keeps = self.tracks_fresh_dirs.load(Ordering::Relaxed) && self.cluster.is_none();
        if let Some(a) = parent.filter(|_| keeps) {
            self.dir_attrs.offer(since, a);
        }
        Ok(p)
    }

    fn entry_call(&self, cred: &Credentials, path: Vec<u8>, op: Op) -> Result<Entry> {
        match self.call(cred, op)? {
            Payload::Entry(e) => {
                self.remember(path, &e);
                Ok(e)
            }
            _ => Err(Errno::EIO),
        }
    }
}

impl Backend for RemoteFs {
    fn lookup(&self, parent: Ino, name: &OsStr, cred: &Credentials) -> Result<Entry> {
        let path = self.child(parent, name)?;
        if self.surely_absent(parent, name) {
            return Err(Errno::ENOENT);
        }
        let mut e = self.entry_call(cred, path.clone(), Op::Lookup { path })?;
        if let Some(a) = self.held.attr(e.attr.ino) {
            e.attr = a;
        }
        Ok(e)
    }

    fn forget(&self, ino: Ino, nlookup: u64) {
        if ino == ROOT_INO {
            return;
        }
        self.nodes
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .forget(ino, nlookup);
        if !self
            .nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&ino)
        {
            self.untrack_dir(ino);
            self.dir_attrs.drop_unknown(ino);
        }
    }

    fn getattr(&self, ino: Ino, fh: Option<u64>, cred: &Credentials) -> Result<Attr> {
        if let Some(a) = self.held.attr(ino) {
            return Ok(a);
        }
        if let Some(a) = self.dir_attrs.get(ino) {
            return Ok(a);
        }
        if let Some(fh) = fh.filter(|fh| self.file(*fh).is_ok()) {
            // Through the open file: works after unlink, and needs no path.
            let p = self.file_call(fh, cred, |sfh, _| {
                Ok(Op::Getattr {
                    path: Vec::new(),
                    fh: Some(sfh),
                })
            })?;
            return match p {
                Payload::Attr(a) => Ok(Attr { ino, ..a }),
                _ => Err(Errno::EIO),
            };
        }
        let by_path = self.on_node(ino, |path| {
            match self.call(cred, Op::Getattr { path, fh: None })? {
                Payload::Attr(a) if a.ino == ino => Ok(a),
                // The path now names another file (renamed or replaced behind our back).
                Payload::Attr(_) => Err(Errno::new(libc::ESTALE)),
                _ => Err(Errno::EIO),
            }
        });
        match by_path {
            // Unlinked but still open (fstat reaches us without the handle):
            // ask through any open file of that inode.
            Err(e) if e == Errno::ENOENT || e.code() == libc::ESTALE => {
                match self.open_fh_of(ino) {
                    Some(fh) => self.getattr(ino, Some(fh), cred),
                    None => Err(e),
                }
            }
            r => r,
        }
    }

    fn setattr(&self, ino: Ino, changes: &SetAttr, cred: &Credentials) -> Result<Attr> {
        if let Some(a) = self.hold_setattr(ino, changes, cred) {
            return Ok(a);
        }
        self.stop_holding(ino);
        if changes.size.is_some() {
            self.drop_heads_of(ino);
        }
        let path = self.path_of(ino)?;
        let set = wire_set(changes);
        let p = match changes.fh.filter(|fh| self.file(*fh).is_ok()) {
            Some(fh) => self.file_call(fh, cred, |sfh, _| {
                Ok(Op::Setattr {
                    path: path.clone(),
                    fh: Some(sfh),
                    set,
                })
            })?,
            None => self.on_node(ino, |path| {
                self.call(
                    cred,
                    Op::Setattr {
                        path,
                        fh: None,
                        set,
                    },
                )
            })?,
        };
        match p {
            Payload::Attr(a) => {
                if a.kind == hipfs_fusefs::FileKind::Directory {
                    self.dir_attrs.forget([ino]);
                }
                Ok(a)
            }
            _ => Err(Errno::EIO),
        }
    }

    fn opendir(&self, ino: Ino, _flags: i32, _cred: &Credentials) -> Result<u64> {
        self.path_of(ino)?;
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs.lock().unwrap_or_else(|p| p.into_inner()).insert(
            fh,
            Arc::new(Mutex::new(DirListing {
                from: u64::MAX,
                ..Default::default()
            })),
        );
        Ok(fh)
    }

    fn releasedir(&self, _ino: Ino, fh: u64, _cred: &Credentials) -> Result<()> {
        self.dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh);
        Ok(())
    }

    fn readdir(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        cred: &Credentials,
    ) -> Result<Vec<DirEntryPlus>> {
        let dir = self.path_of(ino)?;
        let items = self.dir_items(ino, fh, offset, cred)?;
        let mut out = Vec::with_capacity(items.len());
        for it in items {
            let name = OsString::from_vec(it.name);
            let mut entry = it.entry;
            if name != "." && name != ".." {
                self.remember(join(&dir, &name)?, &entry);
                if it.no_xattrs {
                    self.note_no_xattrs(entry.attr.ino);
                }
                if let Some(a) = self.held.attr(entry.attr.ino) {
                    entry.attr = a;
                }
            } else {
                entry.attr.ino = ino;
            }
            out.push(DirEntryPlus {
                name,
                entry,
                offset: it.cookie.max(1),
            });
        }
        Ok(out)
    }

    fn open(&self, ino: Ino, flags: i32, cred: &Credentials) -> Result<u64> {
        let plain_read = flags & libc::O_ACCMODE == libc::O_RDONLY
            && flags & (libc::O_TRUNC | libc::O_CREAT) == 0
            && self.tracks_fresh_dirs.load(Ordering::Relaxed);
        self.send_held(ino);
        self.on_node(ino, |path| {
            let wc = wire_cred(cred);
            if plain_read {
                if let Some(data) = self.heads_ahead.take(&path, ino, &wc) {
                    // No server handle yet (epoch 0 is no connection's): the
                    // first call that needs one opens it.
                    let fh = self.add_file(ino, path, flags, 0, 0, wc);
                    self.keep_head(fh, ino, data);
                    return Ok(fh);
                }
            }
            let (epoch, sfh, head) = self.open_with_head(cred, path.clone(), flags)?;
            if plain_read && head.is_some() {
                self.heads_ahead.opened_small(&path, &wc);
            }
            let fh = self.add_file(ino, path, flags, epoch, sfh, wc);
            if let Some(data) = head {
                self.keep_head(fh, ino, data);
            }
            Ok(fh)
        })
    }

    fn create(
        &self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        cred: &Credentials,
    ) -> Result<(Entry, u64)> {
        let path = self.child(parent, name)?;
        self.note_name_in(parent, name.as_bytes());
        let (epoch, p) = self.open_remote(
            cred,
            Op::Create {
                path: path.clone(),
                mode: mode & !umask & 0o7777,
                flags,
            },
        )?;
        let Payload::Created {
            entry,
            fh,
            no_xattrs,
        } = p
        else {
            return Err(Errno::EIO);
        };
        self.remember(path.clone(), &entry);
        if no_xattrs {
            // The server looked: the kernel's capability check before the
            // first write, and any other xattr question, need not ask it.
            self.note_no_xattrs(entry.attr.ino);
        } else if flags & libc::O_EXCL != 0 {
            // A file this create made has no file capability (only setcap
            // sets one; a notice clears this if someone does): the kernel's
            // check before the first write need not ask the server.
            self.note_missing_xattr(entry.attr.ino, b"security.capability", Errno::ENODATA);
        }
        let fh = self.add_file(entry.attr.ino, path, flags, epoch, fh, wire_cred(cred));
        self.hold_created(fh, &entry.attr, flags, cred);
        Ok((entry, fh))
    }

    fn read(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        size: u32,
        cred: &Credentials,
    ) -> Result<Vec<u8>> {
        if let Some(data) = self.read_head(fh, offset, size) {
            return Ok(data);
        }
        self.send_held(ino);
        self.read_file(ino, fh, offset, size, cred)
    }

    fn write(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        data: &[u8],
        cred: &Credentials,
    ) -> Result<usize> {
        self.drop_heads_of(ino);
        if let Some(n) = self.hold_write(ino, fh, offset, data) {
            self.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
            return Ok(n);
        }
        self.stop_holding(ino);
        self.write_file(ino, fh, offset, data, cred)
    }

    fn flush(&self, ino: Ino, fh: u64, _lock_owner: u64, cred: &Credentials) -> Result<()> {
        // Held changes of a file this mount created go now (see `held`);
        // other writes are on the server before they are acknowledged.
        let f = self.file(fh)?;
        self.settle_handle(ino, fh, false)?;
        if self.cluster.is_some() && f.flags & libc::O_ACCMODE != libc::O_RDONLY {
            // Close-to-open across servers: the server that took the
            // writes pushes them to the shared filesystem before close
            // returns, so an open through any other server sees them.
            self.sync_file(fh, true, cred)?;
        }
        Ok(())
    }

    /// Writes are on the server when they are acknowledged and locks are
    /// the kernel's, so a close has nothing to send, except for a file this
    /// mount created, which may hold changes (`held`), and on a
    /// multi-server mount, where closing a writable handle syncs it (see
    /// `flush`). Whatever `flush` ever does for a handle, this must answer
    /// `true` for it.
    fn needs_flush(&self, fh: u64) -> bool {
        let syncs = self.cluster.is_some()
            && self
                .file(fh)
                .is_ok_and(|f| f.flags & libc::O_ACCMODE != libc::O_RDONLY);
        syncs || self.held.holds_for(fh)
    }

    fn fsync(&self, ino: Ino, fh: u64, datasync: bool, cred: &Credentials) -> Result<()> {
        self.settle_handle(ino, fh, false)?;
        self.sync_file(fh, datasync, cred)
    }

    fn release(&self, ino: Ino, fh: u64, flags: i32, cred: &Credentials) -> Result<()> {
        self.drop_head(fh);
        if let Err(e) = self.settle_handle(ino, fh, true) {
            // A close that flushed reported it; this one (the kernel's last
            // reference, after a flush that could not reach us) cannot.
            log::warn!("held changes of inode {ino} were not applied: {e:?}");
        }
        self.release_file(ino, fh, flags, cred)
    }

    fn mkdir(
        &self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        cred: &Credentials,
    ) -> Result<Entry> {
        let path = self.child(parent, name)?;
        let mode = mode & !umask & 0o7777;
        self.note_name_in(parent, name.as_bytes());
        let e = self.entry_call(cred, path.clone(), Op::Mkdir { path, mode })?;
        self.track_new_dir(e.attr.ino);
        Ok(e)
    }

    fn rmdir(&self, parent: Ino, name: &OsStr, cred: &Credentials) -> Result<()> {
        let path = self.child(parent, name)?;
        let gone = self.inos_at(&path);
        self.call(cred, Op::Rmdir { path })?;
        self.dir_attrs.forget(gone);
        Ok(())
    }

    fn unlink(&self, parent: Ino, name: &OsStr, cred: &Credentials) -> Result<()> {
        let path = self.child(parent, name)?;
        for ino in self.inos_at(&path) {
            self.stop_holding(ino);
        }
        self.call(cred, Op::Unlink { path }).map(|_| ())
    }

    fn rename(
        &self,
        parent: Ino,
        name: &OsStr,
        newparent: Ino,
        newname: &OsStr,
        flags: u32,
        cred: &Credentials,
    ) -> Result<()> {
        let from = self.child(parent, name)?;
        let to = self.child(newparent, newname)?;
        self.note_name_in(newparent, newname.as_bytes());
        if flags & libc::RENAME_EXCHANGE != 0 {
            self.note_name_in(parent, name.as_bytes());
        }
        // Moved directories (their `..`) and the directory left change too.
        let mut moved_inos = self.inos_at(&from);
        moved_inos.extend(self.inos_at(&to));
        for ino in &moved_inos {
            self.stop_holding(*ino);
        }
        if parent != newparent {
            moved_inos.push(parent);
        }
        self.call(
            cred,
            Op::Rename {
                from: from.clone(),
                to: to.clone(),
                flags,
            },
        )?;
        self.dir_attrs.forget(moved_inos);
        let exchange = flags & libc::RENAME_EXCHANGE != 0;
        let fix = |p: &[u8]| -> Option<Vec<u8>> {
            moved(p, &from, &to).or_else(|| if exchange { moved(p, &to, &from) } else { None })
        };
        self.nodes
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .rename(fix);
        for f in self
            .files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            let mut p = f.path.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(np) = fix(&p) {
                *p = np;
            }
        }
        Ok(())
    }

    fn symlink(
        &self,
        parent: Ino,
        name: &OsStr,
        target: &Path,
        cred: &Credentials,
    ) -> Result<Entry> {
        let path = self.child(parent, name)?;
        self.note_name_in(parent, name.as_bytes());
        let target = target.as_os_str().as_bytes().to_vec();
        self.entry_call(cred, path.clone(), Op::Symlink { path, target })
    }

    fn readlink(&self, ino: Ino, cred: &Credentials) -> Result<OsString> {
        self.on_node(ino, |path| {
            match self.call(cred, Op::Readlink { path })? {
                Payload::Bytes(b) => Ok(OsString::from_vec(b)),
                _ => Err(Errno::EIO),
            }
        })
    }

    fn link(&self, ino: Ino, newparent: Ino, newname: &OsStr, cred: &Credentials) -> Result<Entry> {
        let to = self.child(newparent, newname)?;
        self.note_name_in(newparent, newname.as_bytes());
        self.stop_holding(ino);
        self.on_node(ino, |from| {
            self.entry_call(
                cred,
                to.clone(),
                Op::Link {
                    from,
                    to: to.clone(),
                },
            )
        })
    }

    fn mknod(
        &self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        cred: &Credentials,
    ) -> Result<Entry> {
        let path = self.child(parent, name)?;
        self.note_name_in(parent, name.as_bytes());
        let mode = (mode & libc::S_IFMT) | (mode & !umask & 0o7777);
        self.entry_call(cred, path.clone(), Op::Mknod { path, mode, rdev })
    }

    fn statfs(&self, ino: Ino, cred: &Credentials) -> Result<StatFs> {
        let path = self.path_of(ino)?;
        match self.call(cred, Op::Statfs { path })? {
            Payload::Statfs(s) => Ok(s),
            _ => Err(Errno::EIO),
        }
    }

    fn getxattr(&self, ino: Ino, name: &OsStr, cred: &Credentials) -> Result<Vec<u8>> {
        if ino == ROOT_INO && name == STATS_XATTR {
            return Ok(self.stats_text().into_bytes());
        }
        if self.no_xattr {
            return Err(Errno::ENOSYS);
        }
        if !self.carries(name) {
            return Err(Errno::EOPNOTSUPP);
        }
        let name = name.as_bytes().to_vec();
        if let Some(e) = self.missing_xattr(ino, &name) {
            return Err(e);
        }
        self.send_held(ino);
        let r = self.on_node(ino, |path| {
            match self.call(
                cred,
                Op::Getxattr {
                    path,
                    name: name.clone(),
                },
            )? {
                Payload::Bytes(b) => Ok(b),
                _ => Err(Errno::EIO),
            }
        });
        if let Err(e) = r {
            if e == Errno::ENODATA || e == Errno::EOPNOTSUPP {
                self.note_missing_xattr(ino, &name, e);
            }
        }
        r
    }

    fn listxattr(&self, ino: Ino, cred: &Credentials) -> Result<Vec<OsString>> {
        if self.no_xattr {
            return Err(Errno::ENOSYS);
        }
        if self.missing_xattr(ino, ANY_XATTR).is_some() {
            return Ok(Vec::new());
        }
        self.send_held(ino);
        self.on_node(ino, |path| {
            match self.call(cred, Op::Listxattr { path })? {
                Payload::Names(v) => Ok(v
                    .into_iter()
                    .map(OsString::from_vec)
                    .filter(|n| self.carries(n))
                    .collect()),
                _ => Err(Errno::EIO),
            }
        })
    }

    fn setxattr(
        &self,
        ino: Ino,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        cred: &Credentials,
    ) -> Result<()> {
        if self.no_xattr {
            return Err(Errno::ENOSYS);
        }
        if !self.carries(name) {
            return Err(Errno::EOPNOTSUPP);
        }
        let name = name.as_bytes().to_vec();
        self.forget_xattrs(ino);
        self.stop_holding(ino);
        self.on_node(ino, |path| {
            self.call(
                cred,
                Op::Setxattr {
                    path,
                    name: name.clone(),
                    value: value.to_vec(),
                    flags,
                },
            )
            .map(|_| ())
        })?;
        // The attributes' change changed the inode's ctime.
        self.dir_attrs.forget([ino]);
        Ok(())
    }

    fn removexattr(&self, ino: Ino, name: &OsStr, cred: &Credentials) -> Result<()> {
        if self.no_xattr {
            return Err(Errno::ENOSYS);
        }
        if !self.carries(name) {
            return Err(Errno::EOPNOTSUPP);
        }
        let name = name.as_bytes().to_vec();
        self.forget_xattrs(ino);
        self.stop_holding(ino);
        self.on_node(ino, |path| {
            self.call(
                cred,
                Op::Removexattr {
                    path,
                    name: name.clone(),
                },
            )
            .map(|_| ())
        })?;
        // The attributes' change changed the inode's ctime.
        self.dir_attrs.forget([ino]);
        Ok(())
    }

    fn identify(&self, ino: Ino, fh: u64, purpose: IdentifyPurpose) -> Option<Vec<u8>> {
        // The direct path reads and writes the server's file itself.
        self.stop_holding(ino);
        let payload = self.identify_payload(ino, fh)?;
        let counter = match purpose {
            IdentifyPurpose::OpaqueFd => &self.direct.opaque_fd,
            IdentifyPurpose::UserspaceFs => &self.direct.userspace_fs,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Some(payload)
    }

    fn written_elsewhere(&self, ino: Ino) {
        // The contents small files were opened with are the only data
        // cached here; the adapter drops the kernel's copy.
        self.drop_heads_of(ino);
        self.direct.invalidations.fetch_add(1, Ordering::Relaxed);
    }

    /// The server writes, truncates and chowns as the caller (fsuid and
    /// groups switched, root's capabilities dropped for anyone else), so
    /// its filesystem clears setuid/setgid exactly as a local one would.
    fn kills_privileges(&self) -> bool {
        true
    }
}
