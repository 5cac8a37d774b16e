//! `MemFs`: a complete in-memory [`Backend`], for tests and the `memfs` example.
//!
//! It keeps POSIX semantics the kernel cannot supply itself (link counts, rename rules,
//! unlink-while-open, xattr create/replace flags) and leaves permission checks to the kernel's
//! `default_permissions`. One `RwLock` guards the tree: reads of file data share it, so
//! concurrent readers really run in parallel (what the multi-threaded session tests measure).
//! It also counts what it served, so tests can see what reached the backend.

mod rename;
mod tree;

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime};

use rename::rename_in;
use tree::{check_name, Content, Dir, Tree, MAX_FILE_SIZE};

use crate::{
    Attr, Backend, Credentials, DirEntryPlus, Entry, Errno, FileKind, Ino, Result, SetAttr, StatFs,
    TimeOrNow,
};

/// Capacity reported by `statfs` (MemFs has no real limit below [`tree::MAX_FILE_SIZE`] per file).
const CAPACITY_BYTES: u64 = 64 << 30;
const CAPACITY_FILES: u64 = 1 << 20;
const XATTR_VALUE_MAX: usize = 64 * 1024;

/// An in-memory filesystem implementing [`Backend`].
///
/// ```
/// use hipfs_fusefs::{Backend, Credentials, MemFs, ROOT_INO};
/// let fs = MemFs::new();
/// let cred = Credentials::root();
/// let (entry, fh) = fs.create(ROOT_INO, "a".as_ref(), 0o644, 0o022, libc::O_RDWR, &cred)?;
/// fs.write(entry.attr.ino, fh, 0, b"hello", &cred)?;
/// assert_eq!(fs.read(entry.attr.ino, fh, 1, 3, &cred)?, b"ell");
/// # Ok::<(), hipfs_fusefs::Errno>(())
/// ```
pub struct MemFs {
    tree: RwLock<Tree>,
    read_delay: Option<Duration>,
    reads_in_flight: AtomicU64,
    max_reads_in_flight: AtomicU64,
    largest_read: AtomicU64,
    largest_write: AtomicU64,
    lookups: AtomicU64,
    flushes: AtomicU64,
    /// Answer `needs_flush` with `false` (see [`MemFs::without_flush`]).
    no_flush: bool,
}

impl Default for MemFs {
    fn default() -> MemFs {
        MemFs::new()
    }
}

impl std::fmt::Debug for MemFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemFs").finish_non_exhaustive()
    }
}

impl MemFs {
    /// An empty filesystem: a root directory (mode 0755, owned by root).
    pub fn new() -> MemFs {
        MemFs {
            tree: RwLock::new(Tree::new()),
            read_delay: None,
            reads_in_flight: AtomicU64::new(0),
            max_reads_in_flight: AtomicU64::new(0),
            largest_read: AtomicU64::new(0),
            largest_write: AtomicU64::new(0),
            lookups: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            no_flush: false,
        }
    }

    /// Tells the adapter that closes need not reach it (`needs_flush` answers `false`; its
    /// flush has nothing to do either way), as a backend whose writes are stored when
    /// acknowledged does.
    pub fn without_flush(mut self) -> MemFs {
        self.no_flush = true;
        self
    }

    /// How many `flush` calls (one per close of a handle the kernel flushes) reached the
    /// backend.
    pub fn flush_calls(&self) -> u64 {
        self.flushes.load(Ordering::SeqCst)
    }

    /// Makes every `read` take at least `delay`, standing in for a network round trip (lets
    /// tests observe whether reads overlap).
    pub fn with_read_delay(mut self, delay: Duration) -> MemFs {
        self.read_delay = Some(delay);
        self
    }

    /// The most `read` calls that were in progress at one time.
    pub fn max_concurrent_reads(&self) -> u64 {
        self.max_reads_in_flight.load(Ordering::SeqCst)
    }

    /// The largest `size` a `read` call asked for.
    pub fn largest_read(&self) -> u64 {
        self.largest_read.load(Ordering::SeqCst)
    }

    /// The largest buffer a `write` call carried.
    pub fn largest_write(&self) -> u64 {
        self.largest_write.load(Ordering::SeqCst)
    }

    /// How many `lookup` calls reached the backend.
    pub fn lookup_calls(&self) -> u64 {
        self.lookups.load(Ordering::SeqCst)
    }

    /// Number of inodes alive (root included): shows that forgets balance lookups.
    pub fn inode_count(&self) -> usize {
        self.read_tree().map_or(0, |t| t.nodes.len())
    }

    fn read_tree(&self) -> Result<RwLockReadGuard<'_, Tree>> {
        // A poisoned lock means a panic mid-update; refuse rather than serve a torn tree.
        self.tree.read().map_err(|_| Errno::EIO)
    }

    fn write_tree(&self) -> Result<RwLockWriteGuard<'_, Tree>> {
        self.tree.write().map_err(|_| Errno::EIO)
    }

    /// Creates a node named `name` in `parent` and returns its entry (one lookup counted).
    fn make_node(
        &self,
        parent: Ino,
        name: &OsStr,
        kind: FileKind,
        perm: u32,
        cred: &Credentials,
        content: Content,
    ) -> Result<Entry> {
        check_name(name)?;
        let mut t = self.write_tree()?;
        if t.child(parent, name)?.is_some() {
            return Err(Errno::EEXIST);
        }
        if t.nodes.len() as u64 >= CAPACITY_FILES {
            return Err(Errno::ENOSPC);
        }
        let gid = setgid_inherited_gid(t.node(parent)?, cred);
        let is_dir = kind == FileKind::Directory;
        let ino = t.alloc(kind, (perm & 0o7777) as u16, cred.uid, gid, content);
        if is_dir {
            t.node_mut(ino)?.nlink = 2;
        }
        let p = t.node_mut(parent)?;
        p.dir_mut()?.insert(name, ino);
        if is_dir {
            p.nlink += 1;
        }
        p.touch_modified();
        t.lookup_entry(ino)
    }
}

/// New files take the directory's group when it is setgid (BSD semantics), else the caller's.
fn setgid_inherited_gid(parent: &tree::Node, cred: &Credentials) -> u32 {
    if parent.perm & (libc::S_ISGID as u16) != 0 {
        parent.gid
    } else {
        cred.gid
    }
}

fn apply_time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::Now => SystemTime::now(),
        TimeOrNow::At(t) => t,
    }
}

impl Backend for MemFs {
    fn lookup(&self, parent: Ino, name: &OsStr, _cred: &Credentials) -> Result<Entry> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        if name.len() > tree::NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let mut t = self.write_tree()?;
        let ino = t.child(parent, name)?.ok_or(Errno::ENOENT)?;
        t.lookup_entry(ino)
    }

    fn forget(&self, ino: Ino, nlookup: u64) {
        if let Ok(mut t) = self.write_tree() {
            if let Ok(n) = t.node_mut(ino) {
                n.lookups = n.lookups.saturating_sub(nlookup);
            }
            t.maybe_free(ino);
        }
    }

    fn getattr(&self, ino: Ino, _fh: Option<u64>, _cred: &Credentials) -> Result<Attr> {
        Ok(self.read_tree()?.node(ino)?.attr())
    }

    fn setattr(&self, ino: Ino, ch: &SetAttr, _cred: &Credentials) -> Result<Attr> {
        let mut t = self.write_tree()?;
        let n = t.node_mut(ino)?;
        if let Some(size) = ch.size {
            match &mut n.content {
                Content::File(data) => {
                    if size > MAX_FILE_SIZE {
                        return Err(Errno::EFBIG);
                    }
                    data.resize(size as usize, 0);
                    n.touch_modified();
                }
                Content::Dir(_) => return Err(Errno::EISDIR),
                _ => return Err(Errno::EINVAL),
            }
        }
        if let Some(mode) = ch.mode {
            n.perm = (mode & 0o7777) as u16;
        }
        if let Some(uid) = ch.uid {
            n.uid = uid;
        }
        if let Some(gid) = ch.gid {
            n.gid = gid;
        }
        if let Some(a) = ch.atime {
            n.atime = apply_time(a);
        }
        if let Some(m) = ch.mtime {
            n.mtime = apply_time(m);
        }
        n.ctime = SystemTime::now();
        Ok(n.attr())
    }

    fn readdir(
        &self,
        ino: Ino,
        _fh: u64,
        offset: u64,
        _c: &Credentials,
    ) -> Result<Vec<DirEntryPlus>> {
        self.write_tree()?.list(ino, offset)
    }

    fn open(&self, ino: Ino, flags: i32, _cred: &Credentials) -> Result<u64> {
        let mut t = self.write_tree()?;
        let n = t.node_mut(ino)?;
        match &mut n.content {
            Content::Dir(_) if flags & libc::O_ACCMODE != libc::O_RDONLY => {
                return Err(Errno::EISDIR)
            }
            Content::File(data) if flags & libc::O_TRUNC != 0 => {
                data.clear();
                n.touch_modified();
            }
            _ => {}
        }
        t.new_fh(ino)
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
        // The kernel looked the name up first, but another client may have created it since.
        let existing = self.read_tree()?.child(parent, name)?;
        if let Some(ino) = existing {
            if flags & libc::O_EXCL != 0 {
                return Err(Errno::EEXIST);
            }
            let fh = self.open(ino, flags, cred)?;
            return Ok((self.write_tree()?.lookup_entry(ino)?, fh));
        }
        let perm = mode & !umask;
        let content = Content::File(Vec::new());
        let e = self.make_node(parent, name, FileKind::Regular, perm, cred, content)?;
        let fh = self.write_tree()?.new_fh(e.attr.ino)?;
        Ok((e, fh))
    }

    fn read(
        &self,
        ino: Ino,
        _fh: u64,
        offset: u64,
        size: u32,
        _c: &Credentials,
    ) -> Result<Vec<u8>> {
        let now = self.reads_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_reads_in_flight.fetch_max(now, Ordering::SeqCst);
        self.largest_read.fetch_max(size as u64, Ordering::SeqCst);
        if let Some(d) = self.read_delay {
            std::thread::sleep(d);
        }
        let result = (|| {
            let t = self.read_tree()?;
            match &t.node(ino)?.content {
                Content::File(data) => {
                    let start = (offset.min(data.len() as u64)) as usize;
                    let end = start.saturating_add(size as usize).min(data.len());
                    Ok(data[start..end].to_vec())
                }
                Content::Dir(_) => Err(Errno::EISDIR),
                _ => Err(Errno::EINVAL),
            }
        })();
        self.reads_in_flight.fetch_sub(1, Ordering::SeqCst);
        result
    }

    fn write(
        &self,
        ino: Ino,
        _fh: u64,
        offset: u64,
        buf: &[u8],
        _c: &Credentials,
    ) -> Result<usize> {
        self.largest_write
            .fetch_max(buf.len() as u64, Ordering::SeqCst);
        let end = offset.checked_add(buf.len() as u64).ok_or(Errno::EFBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let mut t = self.write_tree()?;
        let n = t.node_mut(ino)?;
        let Content::File(data) = &mut n.content else {
            return Err(Errno::EINVAL);
        };
        if data.len() < end as usize {
            data.resize(end as usize, 0);
        }
        data[offset as usize..end as usize].copy_from_slice(buf);
        n.touch_modified();
        Ok(buf.len())
    }

    fn flush(&self, _ino: Ino, _fh: u64, _owner: u64, _cred: &Credentials) -> Result<()> {
        // Nothing is buffered: every write is already in the tree.
        self.flushes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn needs_flush(&self, _fh: u64) -> bool {
        !self.no_flush
    }

    fn fsync(&self, _ino: Ino, _fh: u64, _datasync: bool, _cred: &Credentials) -> Result<()> {
        Ok(())
    }

    fn release(&self, ino: Ino, fh: u64, _flags: i32, _cred: &Credentials) -> Result<()> {
        let mut t = self.write_tree()?;
        if t.handles.remove(&fh) != Some(ino) {
            return Err(Errno::EBADF);
        }
        if let Ok(n) = t.node_mut(ino) {
            n.open = n.open.saturating_sub(1);
        }
        t.maybe_free(ino);
        Ok(())
    }

    fn mkdir(
        &self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        cred: &Credentials,
    ) -> Result<Entry> {
        let content = Content::Dir(Dir::new(parent));
        self.make_node(
            parent,
            name,
            FileKind::Directory,
            mode & !umask,
            cred,
            content,
        )
    }

    fn rmdir(&self, parent: Ino, name: &OsStr, _cred: &Credentials) -> Result<()> {
        if name == "." {
            return Err(Errno::EINVAL);
        }
        if name == ".." {
            return Err(Errno::ENOTEMPTY);
        }
        let mut t = self.write_tree()?;
        let ino = t.child(parent, name)?.ok_or(Errno::ENOENT)?;
        if !t.node(ino)?.dir()?.entries.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        let p = t.node_mut(parent)?;
        p.dir_mut()?.remove(name);
        p.nlink -= 1;
        p.touch_modified();
        t.node_mut(ino)?.nlink = 0;
        t.maybe_free(ino);
        Ok(())
    }

    fn unlink(&self, parent: Ino, name: &OsStr, _cred: &Credentials) -> Result<()> {
        let mut t = self.write_tree()?;
        let ino = t.child(parent, name)?.ok_or(Errno::ENOENT)?;
        if t.node(ino)?.kind == FileKind::Directory {
            return Err(Errno::EISDIR);
        }
        let p = t.node_mut(parent)?;
        p.dir_mut()?.remove(name);
        p.touch_modified();
        let n = t.node_mut(ino)?;
        n.nlink = n.nlink.saturating_sub(1);
        n.ctime = SystemTime::now();
        t.maybe_free(ino);
        Ok(())
    }

    fn rename(
        &self,
        parent: Ino,
        name: &OsStr,
        newparent: Ino,
        newname: &OsStr,
        flags: u32,
        _cred: &Credentials,
    ) -> Result<()> {
        check_name(newname)?;
        let mut t = self.write_tree()?;
        rename_in(&mut t, parent, name, newparent, newname, flags)
    }

    fn symlink(
        &self,
        parent: Ino,
        name: &OsStr,
        target: &Path,
        cred: &Credentials,
    ) -> Result<Entry> {
        if target.as_os_str().len() > libc::PATH_MAX as usize {
            return Err(Errno::ENAMETOOLONG);
        }
        let content = Content::Symlink(target.as_os_str().to_owned());
        self.make_node(parent, name, FileKind::Symlink, 0o777, cred, content)
    }

    fn readlink(&self, ino: Ino, _cred: &Credentials) -> Result<OsString> {
        match &self.read_tree()?.node(ino)?.content {
            Content::Symlink(target) => Ok(target.clone()),
            _ => Err(Errno::EINVAL),
        }
    }

    fn link(
        &self,
        ino: Ino,
        newparent: Ino,
        newname: &OsStr,
        _cred: &Credentials,
    ) -> Result<Entry> {
        check_name(newname)?;
        let mut t = self.write_tree()?;
        if t.node(ino)?.kind == FileKind::Directory {
            return Err(Errno::EPERM);
        }
        if t.child(newparent, newname)?.is_some() {
            return Err(Errno::EEXIST);
        }
        let p = t.node_mut(newparent)?;
        p.dir_mut()?.insert(newname, ino);
        p.touch_modified();
        let n = t.node_mut(ino)?;
        n.nlink += 1;
        n.ctime = SystemTime::now();
        t.lookup_entry(ino)
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
        let kind = FileKind::from_mode(mode).ok_or(Errno::EINVAL)?;
        let content = match kind {
            FileKind::Regular => Content::File(Vec::new()),
            FileKind::Directory | FileKind::Symlink => return Err(Errno::EINVAL),
            _ => Content::Special,
        };
        let e = self.make_node(parent, name, kind, mode & !umask, cred, content)?;
        let mut t = self.write_tree()?;
        let n = t.node_mut(e.attr.ino)?;
        n.rdev = rdev;
        Ok(Entry {
            attr: n.attr(),
            generation: e.generation,
        })
    }

    fn statfs(&self, _ino: Ino, _cred: &Credentials) -> Result<StatFs> {
        let t = self.read_tree()?;
        let used: u64 = t.nodes.values().map(|n| n.attr().size).sum();
        let bsize = 4096u64;
        let blocks = CAPACITY_BYTES / bsize;
        let free = blocks.saturating_sub(used.div_ceil(bsize));
        Ok(StatFs {
            blocks,
            bfree: free,
            bavail: free,
            files: CAPACITY_FILES,
            ffree: CAPACITY_FILES.saturating_sub(t.nodes.len() as u64),
            bsize: bsize as u32,
            namelen: tree::NAME_MAX as u32,
            frsize: bsize as u32,
        })
    }

    fn getxattr(&self, ino: Ino, name: &OsStr, _cred: &Credentials) -> Result<Vec<u8>> {
        let t = self.read_tree()?;
        t.node(ino)?.xattrs.get(name).cloned().ok_or(Errno::ENODATA)
    }

    fn listxattr(&self, ino: Ino, _cred: &Credentials) -> Result<Vec<OsString>> {
        Ok(self
            .read_tree()?
            .node(ino)?
            .xattrs
            .keys()
            .cloned()
            .collect())
    }

    fn setxattr(
        &self,
        ino: Ino,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _c: &Credentials,
    ) -> Result<()> {
        if name.is_empty() || name.len() > tree::NAME_MAX {
            return Err(Errno::ERANGE);
        }
        if value.len() > XATTR_VALUE_MAX {
            return Err(Errno::new(libc::E2BIG));
        }
        let mut t = self.write_tree()?;
        let n = t.node_mut(ino)?;
        let exists = n.xattrs.contains_key(name);
        if flags & libc::XATTR_CREATE != 0 && exists {
            return Err(Errno::EEXIST);
        }
        if flags & libc::XATTR_REPLACE != 0 && !exists {
            return Err(Errno::ENODATA);
        }
        n.xattrs.insert(name.to_owned(), value.to_vec());
        n.ctime = SystemTime::now();
        Ok(())
    }

    fn removexattr(&self, ino: Ino, name: &OsStr, _cred: &Credentials) -> Result<()> {
        let mut t = self.write_tree()?;
        let n = t.node_mut(ino)?;
        n.xattrs.remove(name).ok_or(Errno::ENODATA)?;
        n.ctime = SystemTime::now();
        Ok(())
    }

    fn identify(&self, ino: Ino, fh: u64, _purpose: crate::IdentifyPurpose) -> Option<Vec<u8>> {
        let t = self.read_tree().ok()?;
        (t.handles.get(&fh) == Some(&ino)).then(|| format!("memfs:ino={ino}:fh={fh}").into_bytes())
    }
}
