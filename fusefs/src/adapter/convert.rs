//! Translations between the backend's types and fuser's.

use std::ffi::OsStr;
use std::time::SystemTime;

use fuser::{INodeNo, ReplyXattr};

use crate::{Attr, Errno, FileKind};

/// Attributes sent with a negative entry; the kernel ignores them.
pub(super) const NEGATIVE_ATTR: Attr = Attr {
    ino: 0,
    size: 0,
    blocks: 0,
    atime: SystemTime::UNIX_EPOCH,
    mtime: SystemTime::UNIX_EPOCH,
    ctime: SystemTime::UNIX_EPOCH,
    kind: FileKind::Regular,
    perm: 0,
    nlink: 0,
    uid: 0,
    gid: 0,
    rdev: 0,
    blksize: 0,
};

pub(super) fn fe(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.code())
}

pub(super) fn is_dot(name: &OsStr) -> bool {
    name == "." || name == ".."
}

pub(super) fn to_fuse_kind(kind: FileKind) -> fuser::FileType {
    match kind {
        FileKind::Regular => fuser::FileType::RegularFile,
        FileKind::Directory => fuser::FileType::Directory,
        FileKind::Symlink => fuser::FileType::Symlink,
        FileKind::Fifo => fuser::FileType::NamedPipe,
        FileKind::Socket => fuser::FileType::Socket,
        FileKind::CharDevice => fuser::FileType::CharDevice,
        FileKind::BlockDevice => fuser::FileType::BlockDevice,
    }
}

pub(super) fn to_fuse_attr(a: &Attr) -> fuser::FileAttr {
    fuser::FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: a.ctime,
        kind: to_fuse_kind(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

pub(super) fn to_time(t: fuser::TimeOrNow) -> crate::TimeOrNow {
    match t {
        fuser::TimeOrNow::Now => crate::TimeOrNow::Now,
        fuser::TimeOrNow::SpecificTime(t) => crate::TimeOrNow::At(t),
    }
}

/// Answers a getxattr/listxattr request following the size protocol: size 0 asks for the
/// length, a too-small buffer gets ERANGE.
pub(super) fn reply_xattr(reply: ReplyXattr, size: u32, data: &[u8]) {
    if size == 0 {
        match u32::try_from(data.len()) {
            Ok(len) => reply.size(len),
            Err(_) => reply.error(fuser::Errno::from_i32(libc::E2BIG)),
        }
    } else if data.len() > size as usize {
        reply.error(fuser::Errno::from_i32(libc::ERANGE))
    } else {
        reply.data(data)
    }
}

/// Answers a request whose only result is success or an errno.
pub(super) fn reply_empty(reply: fuser::ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(fe(e)),
    }
}
