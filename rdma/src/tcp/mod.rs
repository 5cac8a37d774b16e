//! The TCP transport: the same semantics as verbs for hosts without an
//! RDMA NIC. One-sided operations are frames the peer applies to its
//! registered regions; see [`frame`] for the wire format.

mod conn;
pub mod frame;
mod gate;
mod listener;
mod regions;
mod sock;

pub use conn::TcpConnection;
pub use listener::TcpListener;

/// 64 random bits from the kernel (connection tokens, key seeds); falls
/// back to time and pid, which only need to be unlikely to collide.
pub(crate) fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: writes at most 8 bytes into v.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, 0) };
    if n == 8 {
        return v;
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ (u64::from(std::process::id()) << 32)
}
