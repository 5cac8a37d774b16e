//! The exported directory and the metadata operations on it.

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use hipfs_fusefs::{Attr, Entry, FileKind, StatFs};

use super::super::proto::{DirItem, WireSetAttr, WireTime};
use super::resolve::{
    cstr, open_beneath, open_node, open_parent, proc_path, stat_at, stat_fd, Errno, ToErrno,
};
use crate::remote::RemoteError;
use hipfs_sys::dirent::{getdents64, Dirents};
use hipfs_sys::{fs as sysfs, xattr};

/// High bit marking inode numbers of files on other filesystems mounted
/// inside the export (their own numbers could collide with the export's).
const FOREIGN_INO: u64 = 1 << 63;

/// A directory being served.
pub struct Export {
    root: OwnedFd,
    root_dev: u64,
    root_ino: u64,
    pub(crate) path: PathBuf,
}

impl Export {
    /// Opens `dir` for serving.
    pub fn open(dir: &Path) -> Result<Export, RemoteError> {
        let canon = dir
            .canonicalize()
            .map_err(|e| RemoteError::Config(format!("export {}: {e}", dir.display())))?;
        let c = cstr(canon.as_os_str().as_encoded_bytes())
            .map_err(|_| RemoteError::Config("export path contains NUL".into()))?;
        let root = sysfs::open(&c, libc::O_PATH | libc::O_DIRECTORY, 0)
            .map_err(|e| RemoteError::Config(format!("export {}: {e}", canon.display())))?;
        let st =
            stat_fd(&root).map_err(|e| RemoteError::Io(std::io::Error::from_raw_os_error(e)))?;
        Ok(Export {
            root,
            root_dev: st.st_dev,
            root_ino: st.st_ino,
            path: canon,
        })
    }

    pub(crate) fn root_fd(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// The inode number clients see: the real one, the root as 1, and files
    /// of nested filesystems marked so they never collide with the export's.
    pub fn wire_ino(&self, st: &libc::stat) -> u64 {
        if st.st_dev == self.root_dev {
            if st.st_ino == self.root_ino {
                1
            } else if st.st_ino == 1 {
                FOREIGN_INO | 1
            } else {
                st.st_ino
            }
        } else {
            let mixed = st.st_ino ^ st.st_dev.rotate_left(40);
            FOREIGN_INO | (mixed & !FOREIGN_INO)
        }
    }

    pub(crate) fn attr(&self, st: &libc::stat) -> Attr {
        let t = |s: i64, n: i64| {
            if s >= 0 {
                UNIX_EPOCH + Duration::new(s as u64, n.clamp(0, 999_999_999) as u32)
            } else {
                UNIX_EPOCH - Duration::from_secs(s.unsigned_abs())
                    + Duration::from_nanos(n.clamp(0, 999_999_999) as u64)
            }
        };
        Attr {
            ino: self.wire_ino(st),
            size: st.st_size.max(0) as u64,
            blocks: st.st_blocks.max(0) as u64,
            atime: t(st.st_atime, st.st_atime_nsec),
            mtime: t(st.st_mtime, st.st_mtime_nsec),
            ctime: t(st.st_ctime, st.st_ctime_nsec),
            kind: FileKind::from_mode(st.st_mode).unwrap_or(FileKind::Regular),
            perm: (st.st_mode & 0o7777) as u16,
            nlink: st.st_nlink as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            rdev: st.st_rdev as u32,
            blksize: st.st_blksize.clamp(0, 1 << 20) as u32,
        }
    }

    pub(crate) fn entry(&self, st: &libc::stat) -> Entry {
        // Generation 0: with path-based requests a reused inode number never
        // reaches an old handle (requests name paths, the client checks the
        // inode number it gets back).
        Entry {
            attr: self.attr(st),
            generation: 0,
        }
    }

    /// The entry at `rel` (empty: the root).
    pub fn lookup(&self, rel: &[u8]) -> Result<Entry, Errno> {
        let st = if rel.is_empty() {
            stat_fd(self.root_fd())?
        } else {
            let (dir, name) = open_parent(self.root_fd(), rel)?;
            stat_at(dir.as_fd(), &name)?
        };
        Ok(self.entry(&st))
    }

    /// The attributes of the directory holding `rel` (the root's for a
    /// name in it).
    pub fn parent_attr(&self, rel: &[u8]) -> Result<Attr, Errno> {
        let dir = rel
            .iter()
            .rposition(|&b| b == b'/')
            .map_or(&b""[..], |i| &rel[..i]);
        let d = open_node(self.root_fd(), dir, libc::O_PATH | libc::O_DIRECTORY)?;
        self.getattr_fd(d.as_fd())
    }

    /// The attributes of an open file (or O_PATH node).
    pub fn getattr_fd(&self, fd: BorrowedFd<'_>) -> Result<Attr, Errno> {
        Ok(self.attr(&stat_fd(fd)?))
    }

    /// Changes what `set` names; returns the new attributes.
    pub fn setattr(
        &self,
        rel: &[u8],
        open_file: Option<&OwnedFd>,
        set: &WireSetAttr,
    ) -> Result<Attr, Errno> {
        let node = open_node(self.root_fd(), rel, libc::O_PATH)?;
        let p = proc_path(&node);
        if let Some(mode) = set.mode {
            sysfs::chmod(&p, mode & 0o7777).errno()?;
        }
        if set.uid.is_some() || set.gid.is_some() {
            // An empty path with AT_EMPTY_PATH acts on the O_PATH fd.
            sysfs::fchownat(
                node.as_fd(),
                c"",
                set.uid.unwrap_or(u32::MAX),
                set.gid.unwrap_or(u32::MAX),
                libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            )
            .errno()?;
        }
        if let Some(size) = set.size {
            let size = i64::try_from(size).map_err(|_| libc::EFBIG)?;
            match open_file {
                Some(f) => sysfs::ftruncate(f.as_fd(), size).errno()?,
                None => {
                    // Through open_file: truncating must not open a FIFO
                    // or a device either.
                    let f = self.open_file(rel, libc::O_WRONLY)?;
                    sysfs::ftruncate(f.as_fd(), size).errno()?
                }
            };
        }
        if set.atime.is_some() || set.mtime.is_some() {
            let times = [utime(set.atime), utime(set.mtime)];
            sysfs::utimensat(&p, &times, 0).errno()?;
        }
        self.getattr_fd(node.as_fd())
    }

    /// Attribute changes through an open file (`fchmod`, `fchown`,
    /// `ftruncate`, `futimens`): they reach the inode the handle has, even
    /// when its name has changed or gone since it was opened.
    pub fn setattr_open(&self, f: BorrowedFd<'_>, set: &WireSetAttr) -> Result<(), Errno> {
        use rustix::fs::{Gid, Mode, Timespec, Timestamps, Uid};
        let err = |e: rustix::io::Errno| e.raw_os_error();
        if let Some(mode) = set.mode {
            rustix::fs::fchmod(f, Mode::from_raw_mode(mode & 0o7777)).map_err(err)?;
        }
        if set.uid.is_some() || set.gid.is_some() {
            rustix::fs::fchown(f, set.uid.map(Uid::from_raw), set.gid.map(Gid::from_raw))
                .map_err(err)?;
        }
        if let Some(size) = set.size {
            let size = i64::try_from(size).map_err(|_| libc::EFBIG)?;
            sysfs::ftruncate(f, size).errno()?;
        }
        if set.atime.is_some() || set.mtime.is_some() {
            let ts = |t: Option<WireTime>| {
                let t = utime(t);
                Timespec {
                    tv_sec: t.tv_sec,
                    tv_nsec: t.tv_nsec,
                }
            };
            let times = Timestamps {
                last_access: ts(set.atime),
                last_modification: ts(set.mtime),
            };
            rustix::fs::futimens(f, &times).map_err(err)?;
        }
        Ok(())
    }

    /// Entries after `cookie`, with attributes; at most `max`.
    pub fn readdir(&self, rel: &[u8], cookie: u64, max: usize) -> Result<Vec<DirItem>, Errno> {
        let dir = open_node(self.root_fd(), rel, libc::O_RDONLY | libc::O_DIRECTORY)?;
        let dfd = dir.as_fd();
        let own = stat_fd(dfd)?;
        let mut buf = vec![0u8; 64 * 1024];
        // The cookie came from an earlier getdents d_off.
        let names = read_names(dfd, rel, cookie, max, &mut buf)?;
        // Statting is most of a listing's cost when the inodes are not
        // cached (a cold `ls -lR` or `find`), and the client waits for it:
        // large batches are statted by two threads.
        let mut items = if names.len() >= PARALLEL_STAT_MIN {
            let (a, b) = names.split_at(names.len() / 2);
            std::thread::scope(|sc| {
                let second = sc.spawn(|| self.dir_items(dfd, &own, b));
                let first = self.dir_items(dfd, &own, a);
                let second = second.join().unwrap_or(Err(libc::EIO));
                let mut v = first?;
                v.extend(second?);
                Ok::<_, Errno>(v)
            })?
        } else {
            self.dir_items(dfd, &own, &names)?
        };
        // A full batch must stay full (a short one tells the client the
        // listing ended): make up for names removed since the getdents.
        let mut last = names.last().map(|n| n.2);
        while names.len() == max && items.len() < max {
            let Some(from) = last else { break };
            let more = read_names(dfd, rel, from, max - items.len(), &mut buf)?;
            if more.is_empty() {
                break;
            }
            last = more.last().map(|n| n.2);
            items.extend(self.dir_items(dfd, &own, &more)?);
        }
        Ok(items)
    }

    /// Up to `max` entries of directory `rel` from `cookie` on, dots left
    /// out: (name, `DT_*` type, cookie that resumes after it).
    pub fn list_names(
        &self,
        rel: &[u8],
        cookie: u64,
        max: usize,
    ) -> Result<Vec<(Vec<u8>, u8, u64)>, Errno> {
        let dir = open_node(self.root_fd(), rel, libc::O_RDONLY | libc::O_DIRECTORY)?;
        let mut buf = vec![0u8; 64 * 1024];
        // Two more than asked: the dots, when the listing starts with them.
        let mut names = read_names(dir.as_fd(), rel, cookie, max + 2, &mut buf)?;
        names.retain(|(n, _, _)| n != b"." && n != b"..");
        names.truncate(max);
        Ok(names)
    }

    /// The listing items of `names` in directory `dfd` (`own`: its stat);
    /// names gone since the `getdents` are left out.
    fn dir_items(
        &self,
        dfd: BorrowedFd<'_>,
        own: &libc::stat,
        names: &[(Vec<u8>, u8, u64)],
    ) -> Result<Vec<DirItem>, Errno> {
        let mut out = Vec::with_capacity(names.len());
        for (name, _, off) in names {
            let dots = name == b"." || name == b"..";
            let st = if dots {
                // ".." of the root must not reveal what lies above it.
                *own
            } else {
                match cstr(name).and_then(|c| stat_at(dfd, &c)) {
                    Ok(st) => st,
                    Err(libc::ENOENT) => continue,
                    Err(e) => return Err(e),
                }
            };
            out.push(DirItem {
                name: name.clone(),
                cookie: *off,
                entry: self.entry(&st),
                no_xattrs: !dots && !has_xattrs(dfd, name),
            });
        }
        Ok(out)
    }

    /// Makes a directory.
    pub fn mkdir(&self, rel: &[u8], mode: u32) -> Result<Entry, Errno> {
        let (dir, name) = open_parent(self.root_fd(), rel)?;
        sysfs::mkdirat(dir.as_fd(), &name, mode & 0o7777).errno()?;
        Ok(self.entry(&stat_at(dir.as_fd(), &name)?))
    }

    /// Removes a file or (with `is_dir`) an empty directory.
    pub fn remove(&self, rel: &[u8], is_dir: bool) -> Result<(), Errno> {
        let (dir, name) = open_parent(self.root_fd(), rel)?;
        let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
        sysfs::unlinkat(dir.as_fd(), &name, flags).errno()
    }

    /// Renames (`RENAME_*` flags).
    pub fn rename(&self, from: &[u8], to: &[u8], flags: u32) -> Result<(), Errno> {
        let (d1, n1) = open_parent(self.root_fd(), from)?;
        let (d2, n2) = open_parent(self.root_fd(), to)?;
        sysfs::renameat2(d1.as_fd(), &n1, d2.as_fd(), &n2, flags).errno()
    }

    /// Makes a symbolic link to `target`.
    pub fn symlink(&self, rel: &[u8], target: &[u8]) -> Result<Entry, Errno> {
        let (dir, name) = open_parent(self.root_fd(), rel)?;
        let t = cstr(target)?;
        // The target is stored, not followed: later resolutions go through
        // RESOLVE_BENEATH.
        sysfs::symlinkat(&t, dir.as_fd(), &name).errno()?;
        Ok(self.entry(&stat_at(dir.as_fd(), &name)?))
    }

    /// The target of a symbolic link.
    pub fn readlink(&self, rel: &[u8]) -> Result<Vec<u8>, Errno> {
        let (dir, name) = open_parent(self.root_fd(), rel)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        let n = sysfs::readlinkat(dir.as_fd(), &name, &mut buf).errno()?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Makes a hard link.
    pub fn link(&self, from: &[u8], to: &[u8]) -> Result<Entry, Errno> {
        let (d1, n1) = open_parent(self.root_fd(), from)?;
        let (d2, n2) = open_parent(self.root_fd(), to)?;
        // Flags 0 never follows a symlink.
        sysfs::linkat(d1.as_fd(), &n1, d2.as_fd(), &n2, 0).errno()?;
        Ok(self.entry(&stat_at(d2.as_fd(), &n2)?))
    }

    /// Makes a FIFO, socket, empty file or, with `devices`, a block or
    /// character device node.
    pub fn mknod(&self, rel: &[u8], mode: u32, rdev: u32, devices: bool) -> Result<Entry, Errno> {
        match mode & libc::S_IFMT {
            libc::S_IFIFO | libc::S_IFREG | libc::S_IFSOCK => {}
            libc::S_IFBLK | libc::S_IFCHR if devices => {}
            // A device node is a way around the server's permissions for
            // whoever may open it there; only a trusted root makes one.
            libc::S_IFBLK | libc::S_IFCHR => return Err(libc::EPERM),
            _ => return Err(libc::EINVAL),
        }
        let (dir, name) = open_parent(self.root_fd(), rel)?;
        sysfs::mknodat(dir.as_fd(), &name, mode, u64::from(rdev)).errno()?;
        Ok(self.entry(&stat_at(dir.as_fd(), &name)?))
    }

    /// Filesystem statistics.
    pub fn statfs(&self, rel: &[u8]) -> Result<StatFs, Errno> {
        let node = open_node(self.root_fd(), rel, libc::O_PATH)?;
        let s = sysfs::fstatfs(node.as_raw_fd()).errno()?;
        Ok(StatFs {
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: s.f_bavail,
            files: s.f_files,
            ffree: s.f_ffree,
            bsize: s.f_bsize as u32,
            namelen: s.f_namelen as u32,
            frsize: s.f_frsize as u32,
        })
    }

    /// Opens a regular file for I/O (`O_NOFOLLOW`, beneath the export).
    ///
    /// Only regular files: opening a FIFO blocks until a writer comes, and
    /// opening a device or socket acts on something outside the export's
    /// data, so one client could stop a worker for good or reach the
    /// server's hardware. The name is first opened `O_PATH` (which opens no
    /// driver and never blocks), its type checked, then that very inode is
    /// reopened for I/O through its `/proc/self/fd` link (no second lookup
    /// a rename could race). Clients handle FIFOs and devices themselves,
    /// as the kernel does for every network filesystem.
    pub fn open_file(&self, rel: &[u8], flags: i32) -> Result<OwnedFd, Errno> {
        let keep = libc::O_ACCMODE
            | libc::O_APPEND
            | libc::O_TRUNC
            | libc::O_NONBLOCK
            | libc::O_SYNC
            | libc::O_DSYNC;
        let node = open_node(self.root_fd(), rel, libc::O_PATH)?;
        only_regular(&stat_fd(&node)?)?;
        let flags = flags & keep;
        let access = flags & libc::O_ACCMODE;
        let file = std::fs::OpenOptions::new()
            .read(access != libc::O_WRONLY)
            .write(access != libc::O_RDONLY)
            // std masks the access mode out of these and adds O_CLOEXEC.
            .custom_flags(flags | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(format!("/proc/self/fd/{}", node.as_raw_fd()))
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        let fd = OwnedFd::from(file);
        only_regular(&stat_fd(&fd)?)?;
        Ok(fd)
    }

    /// Creates (or, without `O_EXCL`, opens) a regular file. An existing
    /// FIFO or device under the name is refused as in [`Export::open_file`]:
    /// `O_NONBLOCK` keeps the open itself from blocking, the type check
    /// after it from doing I/O on it. With `ask`, also says whether the file
    /// has no extended attributes at all now (`false`: not asked, or not
    /// sure).
    pub fn create(
        &self,
        rel: &[u8],
        mode: u32,
        flags: i32,
        ask: bool,
    ) -> Result<(Entry, OwnedFd, bool), Errno> {
        let (dir, name) = open_parent(self.root_fd(), rel)?;
        let keep = libc::O_ACCMODE | libc::O_APPEND | libc::O_TRUNC | libc::O_EXCL;
        let flags = (flags & keep) | libc::O_CREAT | libc::O_NONBLOCK | libc::O_NOCTTY;
        let fd = open_beneath(dir.as_fd(), &name, flags, mode)?;
        let st = stat_fd(&fd)?;
        only_regular(&st)?;
        let none = ask && !has_xattrs(dir.as_fd(), name.as_bytes());
        Ok((self.entry(&st), fd, none))
    }

    /// An extended attribute's value.
    pub fn xattr_get(&self, rel: &[u8], name: &CStr) -> Result<Vec<u8>, Errno> {
        let node = open_node(self.root_fd(), rel, libc::O_PATH)?;
        let p = proc_path(&node);
        let mut buf = vec![0u8; super::super::proto::MAX_XATTR];
        let n = xattr::get(&p, name, &mut buf).errno()?;
        buf.truncate(n);
        Ok(buf)
    }

    /// The names of the extended attributes.
    pub fn xattr_list(&self, rel: &[u8]) -> Result<Vec<Vec<u8>>, Errno> {
        let node = open_node(self.root_fd(), rel, libc::O_PATH)?;
        let p = proc_path(&node);
        let mut buf = vec![0u8; super::super::proto::MAX_XATTR];
        let n = xattr::list(&p, &mut buf).errno()?;
        Ok(buf[..n]
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .map(<[u8]>::to_vec)
            .collect())
    }

    /// Sets an extended attribute.
    pub fn xattr_set(
        &self,
        rel: &[u8],
        name: &CStr,
        value: &[u8],
        flags: i32,
    ) -> Result<(), Errno> {
        let node = open_node(self.root_fd(), rel, libc::O_PATH)?;
        let p = proc_path(&node);
        xattr::set(&p, name, value, flags).errno()
    }

    /// Removes an extended attribute.
    pub fn xattr_remove(&self, rel: &[u8], name: &CStr) -> Result<(), Errno> {
        let node = open_node(self.root_fd(), rel, libc::O_PATH)?;
        let p = proc_path(&node);
        xattr::remove(&p, name).errno()
    }
}

/// A time to set as `utimensat(2)` takes it (`UTIME_OMIT` when absent).
fn utime(t: Option<WireTime>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(WireTime::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(WireTime::At(s, n)) => libc::timespec {
            tv_sec: s,
            tv_nsec: i64::from(n),
        },
    }
}

/// Refuses I/O on anything but a regular file: `EISDIR` for a directory,
/// `ELOOP` for a symlink (what `O_NOFOLLOW` answers; `O_PATH` opens the
/// link itself), `ENXIO` (what opening a socket gives) for FIFOs, sockets
/// and devices.
fn only_regular(st: &libc::stat) -> Result<(), Errno> {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => Ok(()),
        libc::S_IFDIR => Err(libc::EISDIR),
        libc::S_IFLNK => Err(libc::ELOOP),
        _ => Err(libc::ENXIO),
    }
}

/// The path of `name` in directory `dir` (both relative to the export).
pub(crate) fn child_path(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        name.to_vec()
    } else {
        [dir, b"/", name].concat()
    }
}

/// Up to `max` (name, `DT_*` type, cookie) of directory `dfd` from `cookie` on.
fn read_names(
    dfd: BorrowedFd<'_>,
    rel: &[u8],
    cookie: u64,
    max: usize,
    buf: &mut [u8],
) -> Result<Vec<(Vec<u8>, u8, u64)>, Errno> {
    sysfs::lseek(dfd, cookie as i64, libc::SEEK_SET).errno()?;
    let mut names = Vec::new();
    while names.len() < max {
        let n = getdents64(dfd, buf).errno()?;
        if n == 0 {
            break;
        }
        for d in Dirents::new(&buf[..n]) {
            let d = d.map_err(|e| {
                log::warn!("readdir {}: {e}", String::from_utf8_lossy(rel));
                libc::EIO
            })?;
            names.push((d.name.to_vec(), d.kind, d.off as u64));
            if names.len() >= max {
                return Ok(names);
            }
        }
    }
    Ok(names)
}

/// Listing batches at least this long are statted by two threads.
const PARALLEL_STAT_MIN: usize = 128;

/// Set once `listxattrat(2)` answered `ENOSYS` (a kernel before 6.13).
static NO_LISTXATTRAT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether `dir/name` has extended attributes (false only when the server
/// is sure it has none). The name is not followed. Asked with
/// `listxattrat(2)` where the kernel has it: the `/proc/self/fd/N/name`
/// path of older kernels walks procfs for every entry of a listing, which
/// cost as much as the entry's `stat`.
fn has_xattrs(dir: BorrowedFd<'_>, name: &[u8]) -> bool {
    use std::sync::atomic::Ordering;
    if !NO_LISTXATTRAT.load(Ordering::Relaxed) {
        let Ok(c) = cstr(name) else {
            return true;
        };
        match xattr::list_len_at(dir, &c) {
            Ok(n) => return n != 0,
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                NO_LISTXATTRAT.store(true, Ordering::Relaxed);
            }
            // An error (no xattr support, a vanished name) is not "sure it has none".
            Err(_) => return true,
        }
    }
    let dir: RawFd = dir.as_raw_fd();
    let Ok(p) = cstr(
        format!("/proc/self/fd/{dir}/")
            .as_bytes()
            .iter()
            .chain(name)
            .copied()
            .collect::<Vec<u8>>()
            .as_slice(),
    ) else {
        return true;
    };
    !matches!(xattr::llist_len(&p), Ok(0))
}
