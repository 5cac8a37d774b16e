//! The crate's error type.

use std::io;
use std::path::PathBuf;

/// Why mounting or unmounting failed.
#[derive(Debug, thiserror::Error)]
pub enum FuseError {
    /// A [`crate::MountConfig`] value is out of range.
    #[error("invalid mount configuration: {0}")]
    InvalidConfig(String),
    /// The kernel (or fusermount3) refused the mount.
    #[error("cannot mount on {mountpoint}: {source} (is /dev/fuse present and are you root or is fusermount3 installed?)")]
    Mount {
        /// The mountpoint.
        mountpoint: PathBuf,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// The mount could not be removed.
    #[error("cannot unmount {mountpoint}: {source}")]
    Unmount {
        /// The mountpoint.
        mountpoint: PathBuf,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// The session threads ended with an error or did not end.
    #[error("FUSE session on {mountpoint} failed: {source}")]
    Session {
        /// The mountpoint.
        mountpoint: PathBuf,
        /// What ended the session.
        #[source]
        source: io::Error,
    },
}
