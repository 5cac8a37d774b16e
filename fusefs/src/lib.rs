//! hipfs-fusefs: the FUSE adapter.
//!
//! [`Backend`] is the narrow, inode-based interface a filesystem implements (the hipfs remote
//! client in the root crate, [`MemFs`] in tests and the `memfs` example); [`mount`] serves it
//! through the kernel's FUSE protocol with `fuser`, on several threads each reading its own
//! cloned `/dev/fuse` descriptor. [`identify_fd`] asks a mount what an open file is.

mod adapter;
mod backend;
mod caller;
mod credentials;
mod error;
mod host;
mod identify;
mod memfs;
mod mount;
mod mountinfo;

pub use backend::{
    Attr, Backend, Credentials, DirEntryPlus, Entry, Errno, FileKind, Ino, Result, SetAttr, StatFs,
    TimeOrNow, ROOT_INO,
};
pub use caller::{caller_killed, caller_pid};
pub use error::FuseError;
pub use host::wake_here;
pub use identify::{
    identify_fd, identify_fd_for, invalidate_fd, IdentifyPurpose, HIPFS_IOC_IDENTIFY,
    HIPFS_IOC_IDENTIFY_OPAQUE, HIPFS_IOC_INVALIDATE, IDENTIFY_BUF_LEN, IDENTIFY_MAX_PAYLOAD,
};
pub use memfs::MemFs;
pub use mount::{
    mount, mount_foreground, unmount_path, Invalidator, MountConfig, MountHandle, DEFAULT_MAX_IO,
    DEFAULT_MAX_READAHEAD, FS_SUBTYPE,
};
pub use mountinfo::{is_hipfs_fd, is_mounted, mount_at, HIPFS_FS_TYPE};
