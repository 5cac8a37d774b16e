//! The remote filesystem's error type.

use super::proto::ProtoError;

/// What can go wrong serving, mounting or talking to a hipfs server.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("{0}")]
    /// Bad configuration.
    Config(String),
    #[error("I/O error: {0}")]
    /// A system call failed.
    Io(#[from] std::io::Error),
    #[error("transport: {0}")]
    /// The transport failed.
    Transport(#[from] hipfs_rdma::Error),
    #[error("protocol: {0}")]
    /// The peer broke the protocol.
    Proto(#[from] ProtoError),
    #[error("the server refused the connection: {0}")]
    /// The server refused the request.
    Refused(String),
    #[error("authentication failed: {0}")]
    /// Authentication failed.
    Auth(String),
    #[error("mount: {0}")]
    /// The FUSE mount failed.
    Mount(#[from] hipfs_fusefs::FuseError),
}

impl From<RemoteError> for crate::Error {
    fn from(e: RemoteError) -> crate::Error {
        let op = match &e {
            RemoteError::Config(_) => crate::OpError::InvalidValue,
            RemoteError::Auth(_) | RemoteError::Refused(_) => crate::OpError::PermissionDenied,
            _ => crate::OpError::InternalError,
        };
        crate::Error::new(op, format!("hipfs remote: {e}"))
    }
}
