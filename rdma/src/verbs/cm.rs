//! Connection management with librdmacm: events with deadlines, addresses,
//! and the private data that groups a connection's lanes.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use rdma_sys::*;

use super::result::check;
use super::safe::EventChannel;
use crate::error::{Error, Result};

/// One CM event, copied out (and acked) so nothing points into librdmacm.
pub struct CmEvent {
    pub kind: rdma_cm_event_type::Type,
    pub id: *mut rdma_cm_id,
    pub status: i32,
    pub private: Vec<u8>,
}

pub(super) fn event_name(kind: rdma_cm_event_type::Type) -> String {
    // SAFETY: rdma_event_str returns a static string for any value.
    let p = unsafe { rdma_event_str(kind) };
    if p.is_null() {
        return format!("event {kind}");
    }
    // SAFETY: non-null, NUL-terminated static string.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// The next event of a non-blocking channel, or None after `timeout`.
pub(super) fn next_event(ec: &EventChannel, timeout: Duration) -> Result<Option<CmEvent>> {
    let mut pfd = libc::pollfd {
        fd: ec.fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: pfd is valid for the call.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    if n <= 0 {
        return Ok(None);
    }
    let mut ev: *mut rdma_cm_event = std::ptr::null_mut();
    // SAFETY: ec is live; ev receives an event we must ack.
    let rc = unsafe { rdma_get_cm_event(ec.as_ptr(), &mut ev) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::WouldBlock {
            return Ok(None);
        }
        return Err(Error::Verbs {
            call: "rdma_get_cm_event",
            source: e,
        });
    }
    // SAFETY: ev is a valid event until acked; private data (if any) is
    // private_data_len bytes.
    let out = unsafe {
        let e = &*ev;
        let conn = &e.param.conn;
        let private = if conn.private_data.is_null() || conn.private_data_len == 0 {
            Vec::new()
        } else {
            std::slice::from_raw_parts(
                conn.private_data as *const u8,
                conn.private_data_len as usize,
            )
            .to_vec()
        };
        CmEvent {
            kind: e.event,
            id: e.id,
            status: e.status,
            private,
        }
    };
    // SAFETY: ev came from rdma_get_cm_event and is acked exactly once.
    unsafe { rdma_ack_cm_event(ev) };
    Ok(Some(out))
}

/// Waits for `want` on `id`; any other event for it is an error.
pub(super) fn expect(
    ec: &EventChannel,
    id: *mut rdma_cm_id,
    want: rdma_cm_event_type::Type,
    deadline: Instant,
) -> Result<CmEvent> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout(Duration::ZERO));
        }
        let Some(ev) = next_event(ec, left)? else {
            continue;
        };
        if ev.id != id {
            log::debug!("rdma_cm: ignoring {} for another id", event_name(ev.kind));
            continue;
        }
        if ev.kind == want && ev.status == 0 {
            return Ok(ev);
        }
        let what = event_name(ev.kind);
        return Err(match ev.kind {
            rdma_cm_event_type::RDMA_CM_EVENT_REJECTED => Error::Disconnected(format!(
                "connection rejected by the peer (status {})",
                ev.status
            )),
            rdma_cm_event_type::RDMA_CM_EVENT_UNREACHABLE
            | rdma_cm_event_type::RDMA_CM_EVENT_ADDR_ERROR
            | rdma_cm_event_type::RDMA_CM_EVENT_ROUTE_ERROR => {
                Error::Disconnected(format!("{what} (status {})", ev.status))
            }
            _ => Error::Protocol(format!(
                "rdma_cm: got {what} (status {}) while waiting for {}",
                ev.status,
                event_name(want)
            )),
        });
    }
}

pub(super) fn resolve(addr: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .map_err(|e| Error::InvalidArgument(format!("cannot resolve '{addr}': {e}")))?
        .next()
        .ok_or_else(|| Error::InvalidArgument(format!("'{addr}' resolves to nothing")))
}

/// A C sockaddr for librdmacm.
pub struct RawAddr {
    storage: libc::sockaddr_storage,
}

impl RawAddr {
    pub(super) fn new(sa: SocketAddr) -> Self {
        // SAFETY: all-zero sockaddr_storage is valid.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        match sa {
            SocketAddr::V4(a) => {
                // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
                let sin = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in) };
                sin.sin_family = libc::AF_INET as u16;
                sin.sin_port = a.port().to_be();
                sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
            }
            SocketAddr::V6(a) => {
                // SAFETY: as above for sockaddr_in6.
                let sin6 = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in6) };
                sin6.sin6_family = libc::AF_INET6 as u16;
                sin6.sin6_port = a.port().to_be();
                sin6.sin6_addr.s6_addr = a.ip().octets();
                sin6.sin6_scope_id = a.scope_id();
            }
        }
        RawAddr { storage }
    }
    pub(super) fn as_ptr(&mut self) -> *mut libc::sockaddr {
        (&mut self.storage as *mut libc::sockaddr_storage).cast()
    }
}

pub(super) fn bind_and_listen(id: *mut rdma_cm_id, sa: SocketAddr) -> Result<u16> {
    let mut raw = RawAddr::new(sa);
    // SAFETY: id live; raw is a valid sockaddr for the call.
    check("rdma_bind_addr", unsafe {
        rdma_bind_addr(id, raw.as_ptr())
    })?;
    // SAFETY: id is bound.
    check("rdma_listen", unsafe { rdma_listen(id, 64) })?;
    // SAFETY: id is bound; the port comes back in network order.
    Ok(u16::from_be(unsafe { rdma_get_src_port(id) }))
}

/// Private data of a connect request / accept: which connection and lane,
/// and each side's receive limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneHello {
    pub token: u64,
    pub lane: u16,
    pub lanes: u16,
    pub max_message: u32,
    pub credits: u32,
}

pub const HELLO_LEN: usize = 28;
const MAGIC: [u8; 4] = *b"HRV1";

impl LaneHello {
    pub(super) fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&self.lane.to_le_bytes());
        b[6..8].copy_from_slice(&self.lanes.to_le_bytes());
        b[8..12].copy_from_slice(&self.max_message.to_le_bytes());
        b[12..16].copy_from_slice(&self.credits.to_le_bytes());
        b[16..24].copy_from_slice(&self.token.to_le_bytes());
        b
    }

    /// Private data may come back padded by the CM, so only the prefix counts.
    pub(super) fn decode(b: &[u8]) -> Result<Self> {
        let bad = |w: &str| Error::Protocol(format!("bad verbs lane hello: {w}"));
        if b.len() < HELLO_LEN || b[0..4] != MAGIC {
            return Err(bad("not a hipfs-rdma peer"));
        }
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut t = [0u8; 8];
        t.copy_from_slice(&b[16..24]);
        let h = LaneHello {
            token: u64::from_le_bytes(t),
            lane: u16_at(4),
            lanes: u16_at(6),
            max_message: u32_at(8),
            credits: u32_at(12),
        };
        if h.lanes == 0 || h.lanes > 64 || h.lane >= h.lanes {
            return Err(bad("lane out of range"));
        }
        if h.max_message == 0 || h.max_message > 1 << 30 || h.credits < 2 || h.credits > 4096 {
            return Err(bad("limits out of range"));
        }
        Ok(h)
    }
}

/// Connection parameters for rdma_connect / rdma_accept.
pub(super) fn conn_param(private: &[u8; HELLO_LEN], rd_atomic: u8) -> rdma_conn_param {
    // SAFETY: all-zero rdma_conn_param is valid.
    let mut p: rdma_conn_param = unsafe { std::mem::zeroed() };
    p.private_data = private.as_ptr().cast();
    p.private_data_len = HELLO_LEN as u8;
    p.responder_resources = rd_atomic;
    p.initiator_depth = rd_atomic;
    p.retry_count = 7;
    // RNR retry: never needed thanks to credits, but 7 (= infinite) is the
    // safe value should a RECV be late.
    p.rnr_retry_count = 7;
    p
}

/// How many RDMA READs the device lets one QP have in flight (capped).
pub(super) fn rd_atomic_depth(ctx: *mut ibv_context) -> u8 {
    // SAFETY: all-zero attr is valid output storage; ctx is live.
    let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { ibv_query_device(ctx, &mut attr) } != 0 {
        return 1;
    }
    attr.max_qp_rd_atom.clamp(1, 16) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn lane_hellos_round_trip(token in any::<u64>(), lanes in 1u16..=64, l in any::<u16>(), m in 1u32..=(1<<30), c in 2u32..=4096) {
            let h = LaneHello { token, lane: l % lanes, lanes, max_message: m, credits: c };
            prop_assert_eq!(LaneHello::decode(&h.encode()).unwrap(), h);
        }

        #[test]
        fn decoding_arbitrary_private_data_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(h) = LaneHello::decode(&b) {
                prop_assert!(h.lane < h.lanes);
            }
        }
    }
}
