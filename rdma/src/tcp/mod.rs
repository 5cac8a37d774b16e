//! The TCP transport: the same semantics as verbs for hosts without an
//! RDMA NIC. One-sided operations are frames the peer applies to its
//! registered regions; see [`frame`] for the wire format.

pub mod congestion;
mod conn;
pub mod frame;
mod gate;
mod listener;
pub(crate) mod regions;
pub(crate) mod sock;
pub(crate) mod stream;
mod tls;

pub use conn::TcpConnection;
pub use listener::TcpListener;

/// 64 random bits from the kernel (connection tokens, region key seeds).
/// The keys enforce one-sided confinement, so there is no predictable
/// fallback: when the OS random source fails, so does the operation.
pub(crate) fn random_u64() -> crate::error::Result<u64> {
    Ok(hipfs_sys::rand::u64()?)
}
