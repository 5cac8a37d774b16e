//! The `Backend` trait: the narrow interface the FUSE adapter drives.
//!
//! The trait mirrors the FUSE low-level protocol (inode numbers, lookup counts, file handles) so
//! that an implementation can forward each call one-to-one to wherever the data lives (the hipfs
//! remote client sends them over the network; the tests use [`crate::MemFs`]). It deliberately
//! uses its own small types instead of `fuser`'s so implementors never depend on `fuser`.
//!
//! Conventions every implementation follows:
//! - Inode [`ROOT_INO`] (1) is the root directory and exists from the start.
//! - Every [`Entry`] handed out by `lookup`, `create`, `mkdir`, `mknod`, `symlink`, `link` and by
//!   `readdir` (except the `.` and `..` entries) adds one to that inode's lookup count; the kernel
//!   gives the counts back through [`Backend::forget`]. The adapter itself forgets readdir
//!   entries it could not fit in the kernel's buffer, so counts always balance.
//! - Errors are plain errnos ([`Errno`]) so a network client can pass the server's errno through.
//! - Every call carries the calling process's [`Credentials`]; the backend enforces permissions
//!   as that user (the kernel also checks mode bits because mounts use `default_permissions`).
//! - All methods take `&self`: several session threads call into one backend concurrently.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::path::Path;
use std::time::SystemTime;

/// An inode number as the kernel sees it.
pub type Ino = u64;

/// The inode number of the mount's root directory.
pub const ROOT_INO: Ino = 1;

/// A failed operation, as the errno the kernel will hand to the calling process.
///
/// ```
/// use hipfs_fusefs::Errno;
/// let e = Errno::from(std::io::Error::from_raw_os_error(libc::ENOENT));
/// assert_eq!(e, Errno::ENOENT);
/// assert_eq!(e.code(), libc::ENOENT);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(i32);

impl Errno {
    /// Operation not permitted.
    pub const EPERM: Errno = Errno(libc::EPERM);
    /// No such file or directory.
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    /// I/O error.
    pub const EIO: Errno = Errno(libc::EIO);
    /// Bad file handle.
    pub const EBADF: Errno = Errno(libc::EBADF);
    /// Permission denied.
    pub const EACCES: Errno = Errno(libc::EACCES);
    /// File exists.
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    /// Cross-device link.
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    /// Not a directory.
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    /// Is a directory.
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    /// Invalid argument.
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    /// File too large.
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    /// No space left.
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    /// Read-only filesystem.
    pub const EROFS: Errno = Errno(libc::EROFS);
    /// Too many links.
    pub const EMLINK: Errno = Errno(libc::EMLINK);
    /// Result out of range (buffer too small).
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    /// Name too long.
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    /// Not implemented.
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    /// Directory not empty.
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    /// No such attribute.
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    /// Not a supported ioctl.
    pub const ENOTTY: Errno = Errno(libc::ENOTTY);
    /// Transport endpoint not connected.
    pub const ENOTCONN: Errno = Errno(libc::ENOTCONN);
    /// Timed out.
    pub const ETIMEDOUT: Errno = Errno(libc::ETIMEDOUT);
    /// Operation not supported.
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);

    /// Wraps a raw errno. Zero and negative values (never valid errnos) become `EIO`, so a
    /// corrupted code from a peer can never turn a failure into a success.
    pub fn new(code: i32) -> Errno {
        if code > 0 {
            Errno(code)
        } else {
            Errno::EIO
        }
    }

    /// The raw errno value (always positive).
    pub fn code(self) -> i32 {
        self.0
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Errno({}: {})",
            self.0,
            io::Error::from_raw_os_error(self.0)
        )
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}

impl From<io::Error> for Errno {
    /// Errors without an OS code (ours, never the kernel's) become `EIO`.
    fn from(e: io::Error) -> Errno {
        Errno::new(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

impl From<Errno> for io::Error {
    fn from(e: Errno) -> io::Error {
        io::Error::from_raw_os_error(e.0)
    }
}

/// The result type of every backend call.
pub type Result<T> = std::result::Result<T, Errno>;

/// Who is making a request: taken from the FUSE request header; supplementary groups are read
/// from `/proc/<pid>/status` when the process is still there (empty otherwise, e.g. for requests
/// the kernel makes on its own behalf, which carry pid 0).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Credentials {
    /// Effective user id of the calling process.
    pub uid: u32,
    /// Effective group id of the calling process.
    pub gid: u32,
    /// Supplementary groups of the calling process.
    pub groups: Vec<u32>,
    /// Process id of the caller (0 when the kernel does not say).
    pub pid: u32,
}

impl Credentials {
    /// Credentials of root, for calls the adapter makes on its own (and for tests).
    pub fn root() -> Credentials {
        Credentials::default()
    }

    /// Whether `gid` is the primary or one of the supplementary groups.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// The type of an inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A regular file.
    Regular,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A Unix domain socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
}

impl FileKind {
    /// The kind encoded in the `S_IFMT` bits of a mode, if any.
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        match mode & libc::S_IFMT {
            libc::S_IFREG => Some(FileKind::Regular),
            libc::S_IFDIR => Some(FileKind::Directory),
            libc::S_IFLNK => Some(FileKind::Symlink),
            libc::S_IFIFO => Some(FileKind::Fifo),
            libc::S_IFSOCK => Some(FileKind::Socket),
            libc::S_IFCHR => Some(FileKind::CharDevice),
            libc::S_IFBLK => Some(FileKind::BlockDevice),
            _ => None,
        }
    }

    /// The `S_IFMT` bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::Regular => libc::S_IFREG,
            FileKind::Directory => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
            FileKind::CharDevice => libc::S_IFCHR,
            FileKind::BlockDevice => libc::S_IFBLK,
        }
    }
}

/// Attributes of an inode (what `stat` shows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: Ino,
    /// Size in bytes.
    pub size: u64,
    /// Allocated size in 512-byte blocks.
    pub blocks: u64,
    /// Last access.
    pub atime: SystemTime,
    /// Last data change.
    pub mtime: SystemTime,
    /// Last status change.
    pub ctime: SystemTime,
    /// File type.
    pub kind: FileKind,
    /// Permission bits including setuid/setgid/sticky (`mode & 0o7777`).
    pub perm: u16,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number (device nodes only).
    pub rdev: u32,
    /// Preferred I/O size reported to `stat`.
    pub blksize: u32,
}

/// A name resolved to an inode: its attributes and the generation that, with `attr.ino`, names
/// it uniquely over the life of the filesystem (NFS-style: a reused inode number gets a new
/// generation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The attributes.
    pub attr: Attr,
    /// Inode generation (distinguishes reuses of one number).
    pub generation: u64,
}

/// A time to set: a given instant or the server's "now".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeOrNow {
    /// The current time, taken by the backend.
    Now,
    /// This time.
    At(SystemTime),
}

/// Which attributes `setattr` changes; `None` leaves one as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits (`& 0o7777`); the file type bits are ignored.
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// Truncate or extend to this size.
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<TimeOrNow>,
    /// New modification time.
    pub mtime: Option<TimeOrNow>,
    /// The open file the change came through (`ftruncate`, `futimens`), if any.
    pub fh: Option<u64>,
}

/// One directory entry with the attributes of the inode it names (FUSE readdirplus).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntryPlus {
    /// Name inside the directory.
    pub name: OsString,
    /// What the name refers to.
    pub entry: Entry,
    /// The cookie that resumes the listing right after this entry: the kernel passes it back as
    /// `offset` to the next `readdir`. Must be non-zero (0 means "from the start").
    pub offset: u64,
}

/// Filesystem statistics (what `statfs`/`df` shows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatFs {
    /// Total blocks of `frsize` bytes.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks for unprivileged users.
    pub bavail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Preferred I/O block size.
    pub bsize: u32,
    /// Longest name.
    pub namelen: u32,
    /// Fragment size (unit of the block counts).
    pub frsize: u32,
}

/// The filesystem the adapter serves. See the module documentation for the conventions.
///
/// Optional operations have defaults that answer `ENOSYS`, which the kernel understands as
/// "not supported" (for `access`, `fsyncdir` and `flush` it then stops asking).
pub trait Backend: Send + Sync + 'static {
    /// Resolves `name` in directory `parent`; counts one lookup of the result.
    fn lookup(&self, parent: Ino, name: &OsStr, cred: &Credentials) -> Result<Entry>;

    /// The kernel dropped `nlookup` references to `ino`; when its count reaches zero and it has
    /// no links left, the backend may free it.
    fn forget(&self, ino: Ino, nlookup: u64);

    /// Attributes of `ino` (`fh` is set for `fstat` on an open file).
    fn getattr(&self, ino: Ino, fh: Option<u64>, cred: &Credentials) -> Result<Attr>;

    /// Changes attributes (chmod, chown, truncate, utimens) and returns the new ones.
    fn setattr(&self, ino: Ino, changes: &SetAttr, cred: &Credentials) -> Result<Attr>;

    /// Opens directory `ino` for listing; returns a handle passed to `readdir`/`releasedir`.
    fn opendir(&self, _ino: Ino, _flags: i32, _cred: &Credentials) -> Result<u64> {
        Ok(0)
    }

    /// Entries of directory `ino` following the cookie `offset` (0: from the start, including
    /// `.` and `..`). May return fewer than all remaining entries; an empty vector ends the
    /// listing. Each non-dot entry counts one lookup (see the module documentation).
    fn readdir(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        cred: &Credentials,
    ) -> Result<Vec<DirEntryPlus>>;

    /// Closes a directory handle from `opendir`.
    fn releasedir(&self, _ino: Ino, _fh: u64, _cred: &Credentials) -> Result<()> {
        Ok(())
    }

    /// Opens file `ino` with open(2) `flags` (`O_CREAT`/`O_EXCL` already handled by the kernel;
    /// `O_TRUNC` is passed here and the backend truncates, saving a separate `setattr`);
    /// returns a file handle passed to `read`, `write`, `flush`, `fsync`, `release`.
    fn open(&self, ino: Ino, flags: i32, cred: &Credentials) -> Result<u64>;

    /// Creates and opens regular file `name` in `parent` (`mode` before `umask`).
    fn create(
        &self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        cred: &Credentials,
    ) -> Result<(Entry, u64)>;

    /// Up to `size` bytes at `offset`; fewer only at end of file.
    fn read(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        size: u32,
        cred: &Credentials,
    ) -> Result<Vec<u8>>;

    /// Writes `data` at `offset` (for `O_APPEND` opens the kernel already passes the end of file
    /// as `offset`); returns the number of bytes written.
    fn write(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        data: &[u8],
        cred: &Credentials,
    ) -> Result<usize>;

    /// Called on each close(2) of a descriptor for `fh` (may be several per open).
    fn flush(&self, _ino: Ino, _fh: u64, _lock_owner: u64, _cred: &Credentials) -> Result<()> {
        Err(Errno::ENOSYS)
    }

    /// Whether `flush` of the just opened handle `fh` does anything; asked once per open
    /// and create. A backend whose writes are stored before they are acknowledged, and that
    /// keeps no locks, answers `false`: the open then tells the kernel `FOPEN_NOFLUSH` and
    /// each close(2) of it costs no request (on a network filesystem, no round trip per
    /// closed file). Default `true`.
    fn needs_flush(&self, _fh: u64) -> bool {
        true
    }

    /// Makes the file's data (and metadata unless `datasync`) durable.
    fn fsync(&self, ino: Ino, fh: u64, datasync: bool, cred: &Credentials) -> Result<()>;

    /// Makes a directory's entries durable.
    fn fsyncdir(&self, _ino: Ino, _fh: u64, _datasync: bool, _cred: &Credentials) -> Result<()> {
        Err(Errno::ENOSYS)
    }

    /// The last close of an open file: the handle is gone afterwards.
    fn release(&self, ino: Ino, fh: u64, flags: i32, cred: &Credentials) -> Result<()>;

    /// Creates directory `name` in `parent` (`mode` before `umask`).
    fn mkdir(
        &self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        cred: &Credentials,
    ) -> Result<Entry>;

    /// Removes the empty directory `name` from `parent`.
    fn rmdir(&self, parent: Ino, name: &OsStr, cred: &Credentials) -> Result<()>;

    /// Removes the non-directory `name` from `parent`.
    fn unlink(&self, parent: Ino, name: &OsStr, cred: &Credentials) -> Result<()>;

    /// Renames `parent/name` to `newparent/newname`; `flags` are renameat2(2) flags
    /// (`RENAME_NOREPLACE`, `RENAME_EXCHANGE`; answer `EINVAL` for ones not supported).
    #[allow(clippy::too_many_arguments)]
    fn rename(
        &self,
        parent: Ino,
        name: &OsStr,
        newparent: Ino,
        newname: &OsStr,
        flags: u32,
        cred: &Credentials,
    ) -> Result<()>;

    /// Creates symlink `name` in `parent` pointing at `target`.
    fn symlink(
        &self,
        parent: Ino,
        name: &OsStr,
        target: &Path,
        cred: &Credentials,
    ) -> Result<Entry>;

    /// The target of symlink `ino`.
    fn readlink(&self, ino: Ino, cred: &Credentials) -> Result<OsString>;

    /// Creates a hard link `newparent/newname` to `ino`.
    fn link(&self, ino: Ino, newparent: Ino, newname: &OsStr, cred: &Credentials) -> Result<Entry>;

    /// Creates a special file (fifo, socket, device) or regular file; `mode` has the type bits.
    fn mknod(
        &self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        cred: &Credentials,
    ) -> Result<Entry>;

    /// Statistics of the filesystem holding `ino`.
    fn statfs(&self, ino: Ino, cred: &Credentials) -> Result<StatFs>;

    /// The value of extended attribute `name` (`ENODATA` when absent).
    fn getxattr(&self, ino: Ino, name: &OsStr, cred: &Credentials) -> Result<Vec<u8>>;

    /// Names of all extended attributes of `ino`.
    fn listxattr(&self, ino: Ino, cred: &Credentials) -> Result<Vec<OsString>>;

    /// Sets extended attribute `name`; `flags` are `XATTR_CREATE` / `XATTR_REPLACE`.
    fn setxattr(
        &self,
        ino: Ino,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        cred: &Credentials,
    ) -> Result<()>;

    /// Removes extended attribute `name` (`ENODATA` when absent).
    fn removexattr(&self, ino: Ino, name: &OsStr, cred: &Credentials) -> Result<()>;

    /// access(2) check; only asked when the mount lacks `default_permissions`.
    fn access(&self, _ino: Ino, _mask: i32, _cred: &Credentials) -> Result<()> {
        Err(Errno::ENOSYS)
    }

    /// Whether the backend itself clears the setuid and setgid bits when a caller without
    /// the privilege to keep them writes, truncates or chowns a file (its storage does it,
    /// as a local filesystem written as the caller does). When true the adapter asks the
    /// kernel for `FUSE_HANDLE_KILLPRIV_V2`, and the kernel stops sending the `SETATTR`
    /// that clears them as the writer before a write: a non-owner's write to a setuid file
    /// would otherwise fail with `EPERM` there, and the write with it.
    fn kills_privileges(&self) -> bool {
        false
    }

    /// What the open file `(ino, fh)` is, for [`crate::identify_fd`]: an opaque description
    /// (for hipfs: server, export and remote file id) of at most
    /// [`crate::IDENTIFY_MAX_PAYLOAD`] bytes. `None` answers the ioctl with `ENOTTY`.
    /// `purpose` says which kind of handle asks (for the backend's counters).
    fn identify(&self, _ino: Ino, _fh: u64, _purpose: crate::IdentifyPurpose) -> Option<Vec<u8>> {
        None
    }

    /// The file `ino` was written past the mount (the direct path): forget
    /// whatever the backend caches of it. The adapter invalidates the
    /// kernel's caches itself.
    fn written_elsewhere(&self, _ino: Ino) {}
}
