//! hipfs-fusefs: the FUSE adapter.
//!
//! [`Backend`] is the narrow, inode-based interface a filesystem implements (the hipfs remote
//! client in the root crate, [`MemFs`] in tests); [`mount`] serves it through the kernel's FUSE
//! protocol with `fuser`.

mod backend;
mod identify;

pub use backend::{
    Attr, Backend, Credentials, DirEntryPlus, Entry, Errno, FileKind, Ino, Result, SetAttr, StatFs,
    TimeOrNow, ROOT_INO,
};
pub use identify::{identify_fd, HIPFS_IOC_IDENTIFY, IDENTIFY_BUF_LEN, IDENTIFY_MAX_PAYLOAD};
