//! The `fuser::Filesystem` implementation: every kernel request becomes one [`Backend`] call.
//!
//! The adapter keeps no filesystem state of its own (no inode table, no handle table): inode
//! numbers and file handles are the backend's, passed through unchanged. What it adds is the
//! kernel-facing policy: cache lifetimes, open flags (direct I/O or page cache), the read-only
//! guard, the xattr size protocol, readdir buffer handling and the identify ioctl.

use std::ffi::OsStr;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, IoctlFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, WriteFlags,
};
use log::{error, warn};

mod convert;
mod dir;
mod init;

use convert::{fe, is_dot, reply_empty, reply_xattr, to_fuse_attr, to_time, NEGATIVE_ATTR};
use dir::{fill_readdir, fill_readdirplus};
use init::negotiate;

use crate::credentials::GroupCache;
use crate::identify::{identify_reply, ioctl_request, IoctlRequest};
use crate::{Attr, Backend, Credentials, DirEntryPlus, Entry, Errno, SetAttr};

/// The kernel-facing settings of one mount (derived from [`crate::MountConfig`]).
#[derive(Clone, Debug)]
pub(crate) struct AdapterOptions {
    pub(crate) attr_timeout: Duration,
    pub(crate) entry_timeout: Duration,
    pub(crate) negative_timeout: Duration,
    pub(crate) read_only: bool,
    pub(crate) direct_io: bool,
    pub(crate) keep_cache: bool,
    pub(crate) cache_dir: bool,
    pub(crate) posix_acl: bool,
    pub(crate) max_write: u32,
    pub(crate) max_readahead: u32,
    pub(crate) max_background: u16,
}

/// How long an invalidation ioctl waits for the kernel to drop the pages.
const INVALIDATE_WAIT: Duration = Duration::from_secs(5);

pub(crate) struct FuseAdapter {
    backend: Arc<dyn Backend>,
    opts: AdapterOptions,
    groups: GroupCache,
    /// Set when the mount is torn down: backends waiting for a request
    /// (a hard mount retrying) see it through `caller_killed` and give up.
    closing: Arc<AtomicBool>,
    /// The session's notifier, set once the session exists (the adapter is
    /// built before it): cache invalidations the kernel is told about.
    notifier: Arc<OnceLock<fuser::Notifier>>,
}

impl FuseAdapter {
    pub(crate) fn new(
        backend: Arc<dyn Backend>,
        opts: AdapterOptions,
        closing: Arc<AtomicBool>,
        notifier: Arc<OnceLock<fuser::Notifier>>,
    ) -> FuseAdapter {
        FuseAdapter {
            backend,
            opts,
            groups: GroupCache::default(),
            closing,
            notifier,
        }
    }

    /// Drops the kernel's cached pages `[offset, offset + len)` (`len` 0: to
    /// the end) and attributes of `ino`, from another thread: the kernel may
    /// write dirty pages back first, which needs a free session thread, so
    /// it must not run on this one. Waits for it a bounded time.
    fn invalidate_inode(&self, ino: u64, offset: i64, len: i64) -> Result<(), i32> {
        self.backend.written_elsewhere(ino);
        let Some(notifier) = self.notifier.get().cloned() else {
            return Ok(());
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("hipfs-fuse-inval".into())
            .spawn(move || {
                let r = notifier.inval_inode(INodeNo(ino), offset, len);
                let _ = tx.send(r);
            })
            .map_err(|_| libc::EAGAIN)?;
        match rx.recv_timeout(INVALIDATE_WAIT) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                warn!("invalidating inode {ino}: {e}");
                Err(e.raw_os_error().unwrap_or(libc::EIO))
            }
            Err(_) => {
                warn!("invalidating inode {ino} takes over {INVALIDATE_WAIT:?}; not waiting");
                Ok(())
            }
        }
    }

    /// Runs one backend call; a panic in the backend becomes `EIO` for that request instead
    /// of killing the session thread (which would leave the mount with fewer threads, or
    /// none).
    fn call<T>(&self, f: impl FnOnce(&dyn Backend) -> Result<T, Errno>) -> Result<T, Errno> {
        self.guarded(f).unwrap_or(Err(Errno::EIO))
    }

    /// Like [`Self::call`] for calls without a result: `None` if the backend panicked.
    fn guarded<T>(&self, f: impl FnOnce(&dyn Backend) -> T) -> Option<T> {
        let backend: &dyn Backend = self.backend.as_ref();
        let r = panic::catch_unwind(AssertUnwindSafe(|| f(backend)));
        crate::caller::clear_caller();
        match r {
            Ok(v) => Some(v),
            Err(_) => {
                error!("backend panicked; answering EIO");
                None
            }
        }
    }

    fn cred(&self, req: &Request) -> Credentials {
        // Evaluated on the thread that then runs the backend call: lets a
        // waiting backend see that this caller was killed (caller.rs).
        crate::caller::set_caller(req.pid(), &self.closing);
        self.groups.credentials(req.uid(), req.gid(), req.pid())
    }

    /// The read-only guard. The kernel already refuses writes on an `ro` mount; this is the
    /// second line, so a backend never sees a mutation on a read-only mount whatever the
    /// kernel's path to it.
    fn writable(&self) -> Result<(), fuser::Errno> {
        if self.opts.read_only {
            Err(fuser::Errno::from_i32(libc::EROFS))
        } else {
            Ok(())
        }
    }

    /// Replies that carry one TTL for both the name and the attributes (readdirplus, create)
    /// use the shorter, so neither is cached longer than configured.
    fn combined_ttl(&self) -> Duration {
        self.opts.entry_timeout.min(self.opts.attr_timeout)
    }

    /// The flags of an open of `fh`: a handle whose close the backend need
    /// not see ([`Backend::needs_flush`]) says `FOPEN_NOFLUSH`, so its close
    /// costs no request.
    fn open_flags(&self, fh: u64) -> FopenFlags {
        let needs_flush = self.guarded(|b| b.needs_flush(fh)).unwrap_or(true);
        let no_flush = if !needs_flush {
            FopenFlags::FOPEN_NOFLUSH
        } else {
            FopenFlags::empty()
        };
        no_flush | self.cache_flags()
    }

    fn cache_flags(&self) -> FopenFlags {
        if self.opts.direct_io {
            // Parallel direct writes: the backend serialises what it must, the kernel need not
            // hold the inode lock across a network round trip.
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
        } else if self.opts.keep_cache {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        }
    }

    fn reply_attr(&self, reply: ReplyAttr, attr: Result<Attr, Errno>) {
        match attr {
            Ok(a) => reply.attr(&self.opts.attr_timeout, &to_fuse_attr(&a)),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn reply_entry(&self, reply: ReplyEntry, entry: Result<Entry, Errno>) {
        match entry {
            Ok(e) => reply.entry_with_ttls(
                &self.opts.attr_timeout,
                &self.opts.entry_timeout,
                &to_fuse_attr(&e.attr),
                Generation(e.generation),
            ),
            Err(e) => reply.error(fe(e)),
        }
    }

    /// Gives back the lookup counts of readdir entries the kernel never received.
    fn forget_undelivered(&self, entries: &[DirEntryPlus]) {
        for e in entries.iter().filter(|e| !is_dot(&e.name)) {
            self.guarded(|b| b.forget(e.entry.attr.ino, 1));
        }
    }
}

impl Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        negotiate(&self.opts, self.backend.kills_privileges(), config);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self.call(|b| b.lookup(parent.0, name, &self.cred(req)));
        if r == Err(Errno::ENOENT) && !self.opts.negative_timeout.is_zero() {
            // An entry with node id 0 is the protocol's cacheable "no such name".
            let mut none = to_fuse_attr(&NEGATIVE_ATTR);
            none.ino = INodeNo(0);
            return reply.entry_with_ttls(
                &Duration::ZERO,
                &self.opts.negative_timeout,
                &none,
                Generation(0),
            );
        }
        self.reply_entry(reply, r);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.guarded(|b| b.forget(ino.0, nlookup));
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.reply_attr(
            reply,
            self.call(|b| b.getattr(ino.0, fh.map(|f| f.0), &self.cred(req))),
        )
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<fuser::TimeOrNow>,
        mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if let Err(e) = self.writable() {
            return reply.error(e);
        }
        let changes = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(to_time),
            mtime: mtime.map(to_time),
            fh: fh.map(|f| f.0),
        };
        self.reply_attr(
            reply,
            self.call(|b| b.setattr(ino.0, &changes, &self.cred(req))),
        )
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        use std::os::unix::ffi::OsStrExt;
        match self.call(|b| b.readlink(ino.0, &self.cred(req))) {
            Ok(target) => reply.data(target.as_bytes()),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        if let Err(e) = self.writable() {
            return reply.error(e);
        }
        let r = self.call(|b| b.mknod(parent.0, name, mode, umask, rdev, &self.cred(req)));
        self.reply_entry(reply, r);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        if let Err(e) = self.writable() {
            return reply.error(e);
        }
        let r = self.call(|b| b.mkdir(parent.0, name, mode, umask, &self.cred(req)));
        self.reply_entry(reply, r);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if let Err(e) = self.writable() {
            return reply.error(e);
        }
        reply_empty(
            reply,
            self.call(|b| b.unlink(parent.0, name, &self.cred(req))),
        )
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if let Err(e) = self.writable() {
            return reply.error(e);
        }
        reply_empty(
            reply,
            self.call(|b| b.rmdir(parent.0, name, &self.cred(req))),
        )
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        if let Err(e) = self.writable() {
            return reply.error(e);
        }
        let r = self.call(|b| b.symlink(parent.0, link_name, target, &self.cred(req)));
        self.reply_entry(reply, r);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if let Err(e) = self.writable() {
            return reply.error(e);
        }
        let r = self.call(|b| {
            b.rename(
                parent.0,
                name,
                newparent.0,
                newname,
                flags.bits(),
                &self.cred(req),
            )
        });
        reply_empty(reply, r)
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        if let Err(e) = self.writable() {
            return reply.error(e);
        }
        let r = self.call(|b| b.link(ino.0, newparent.0, newname, &self.cred(req)));
        self.reply_entry(reply, r);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let wants_write =
            (flags.0 & libc::O_ACCMODE) != libc::O_RDONLY || (flags.0 & libc::O_TRUNC) != 0;
        if wants_write {
            if let Err(e) = self.writable() {
                return reply.error(e);
            }
        }
        match self.call(|b| b.open(ino.0, flags.0, &self.cred(req))) {
            Ok(fh) => reply.opened(FileHandle(fh), self.open_flags(fh)),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.call(|b| b.read(ino.0, fh.0, offset, size, &self.cred(req))) {
            Ok(data) if data.len() <= size as usize => reply.data(&data),
            Ok(data) => {
                // More than asked would overrun the kernel's buffer: a backend bug, not data.
                warn!(
                    "backend returned {} bytes for a {size}-byte read",
                    data.len()
                );
                reply.error(fuser::Errno::from_i32(libc::EIO))
            }
            Err(e) => reply.error(fe(e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if let Err(e) = self.writable() {
            return reply.error(e);
        }
        match self.call(|b| b.write(ino.0, fh.0, offset, data, &self.cred(req))) {
            Ok(n) if n <= data.len() => reply.written(n as u32),
            Ok(n) => {
                warn!("backend claims {n} bytes written of {}", data.len());
                reply.error(fuser::Errno::from_i32(libc::EIO))
            }
            Err(e) => reply.error(fe(e)),
        }
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply_empty(
            reply,
            self.call(|b| b.flush(ino.0, fh.0, lock_owner.0, &self.cred(req))),
        )
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(
            reply,
            self.call(|b| b.release(ino.0, fh.0, flags.0, &self.cred(req))),
        )
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(
            reply,
            self.call(|b| b.fsync(ino.0, fh.0, datasync, &self.cred(req))),
        )
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.call(|b| b.opendir(ino.0, flags.0, &self.cred(req))) {
            Ok(fh) => reply.opened(
                FileHandle(fh),
                if self.opts.cache_dir {
                    FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
                } else {
                    FopenFlags::empty()
                },
            ),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = match self.call(|b| b.readdir(ino.0, fh.0, offset, &self.cred(req))) {
            Ok(entries) => entries,
            Err(e) => return reply.error(fe(e)),
        };
        fill_readdir(&mut reply, &entries);
        // Plain readdir hands the kernel no inode references, so none of the lookups the
        // backend counted for these entries are kept.
        self.forget_undelivered(&entries);
        reply.ok();
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let entries = match self.call(|b| b.readdir(ino.0, fh.0, offset, &self.cred(req))) {
            Ok(entries) => entries,
            Err(e) => return reply.error(fe(e)),
        };
        let delivered = fill_readdirplus(&mut reply, &entries, self.combined_ttl());
        self.forget_undelivered(&entries[delivered..]);
        reply.ok();
    }

    fn releasedir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply_empty(
            reply,
            self.call(|b| b.releasedir(ino.0, fh.0, &self.cred(req))),
        )
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(
            reply,
            self.call(|b| b.fsyncdir(ino.0, fh.0, datasync, &self.cred(req))),
        )
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        match self.call(|b| b.statfs(ino.0, &self.cred(req))) {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            ),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        if let Err(e) = self.writable() {
            return reply.error(e);
        }
        reply_empty(
            reply,
            self.call(|b| b.setxattr(ino.0, name, value, flags, &self.cred(req))),
        )
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.call(|b| b.getxattr(ino.0, name, &self.cred(req))) {
            Ok(value) => reply_xattr(reply, size, &value),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        use std::os::unix::ffi::OsStrExt;
        match self.call(|b| b.listxattr(ino.0, &self.cred(req))) {
            Ok(names) => {
                let mut buf = Vec::new();
                for n in &names {
                    buf.extend_from_slice(n.as_bytes());
                    buf.push(0);
                }
                reply_xattr(reply, size, &buf)
            }
            Err(e) => reply.error(fe(e)),
        }
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if let Err(e) = self.writable() {
            return reply.error(e);
        }
        reply_empty(
            reply,
            self.call(|b| b.removexattr(ino.0, name, &self.cred(req))),
        )
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        if mask.contains(AccessFlags::W_OK) {
            if let Err(e) = self.writable() {
                return reply.error(e);
            }
        }
        reply_empty(
            reply,
            self.call(|b| b.access(ino.0, mask.bits(), &self.cred(req))),
        )
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        if let Err(e) = self.writable() {
            return reply.error(e);
        }
        match self.call(|b| b.create(parent.0, name, mode, umask, flags, &self.cred(req))) {
            Ok((e, fh)) => reply.created(
                &self.combined_ttl(),
                &to_fuse_attr(&e.attr),
                Generation(e.generation),
                FileHandle(fh),
                self.open_flags(fh),
            ),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn ioctl(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        let answer = match ioctl_request(cmd, in_data, out_size) {
            Ok(IoctlRequest::Identify(purpose)) => {
                identify_reply(|| self.guarded(|b| b.identify(ino.0, fh.0, purpose)).flatten())
            }
            Ok(IoctlRequest::Invalidate { offset, len }) => self
                .invalidate_inode(ino.0, offset, len)
                .map(|()| Vec::new()),
            Err(code) => Err(code),
        };
        match answer {
            Ok(buf) => reply.ioctl(0, &buf),
            Err(code) => reply.error(fuser::Errno::from_i32(code)),
        }
    }
}
