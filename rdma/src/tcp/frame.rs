//! Wire format of the TCP transport.
//!
//! Every frame starts with a fixed [`HEADER_LEN`]-byte little-endian header;
//! `MSG`, `WRITE` and successful `READ_RESP` frames are followed by `len`
//! payload bytes. Each lane begins with a [`Hello`] from the connecting side
//! and a hello answer (`encode_hello_ack`) from the listener.
//!
//! Header layout: `kind u8, version u8, reserved u16 (0), rkey u32,
//! status u32, reserved u32 (0), op_id u64, addr u64, len u64`.

use crate::error::{Error, Result};

/// Size of an encoded [`Header`].
pub const HEADER_LEN: usize = 40;
/// Wire format version carried in every header and hello.
pub const VERSION: u8 = 1;
/// Largest payload of one WRITE / READ frame; transfers are chunked far
/// below this, so anything bigger is a corrupt or hostile stream.
pub const MAX_DATA_FRAME: u64 = 1 << 30;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// Control message; payload = the message.
    Msg = 1,
    /// One-sided write: payload goes to `addr` in the region `rkey`.
    Write = 2,
    /// Answer to a WRITE: `status` says whether it was applied.
    WriteAck = 3,
    /// One-sided read request of `len` bytes at `addr` in region `rkey`.
    ReadReq = 4,
    /// Answer to a READ_REQ: payload (if `status` is OK) = the bytes.
    ReadResp = 5,
}

impl FrameKind {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => FrameKind::Msg,
            2 => FrameKind::Write,
            3 => FrameKind::WriteAck,
            4 => FrameKind::ReadReq,
            5 => FrameKind::ReadResp,
            _ => return None,
        })
    }
}

/// Outcome of a one-sided operation as reported by the applying side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Applied.
    Ok = 0,
    /// No region with that key is registered on this connection (wrong or
    /// stale key).
    UnknownKey = 1,
    /// The range is not inside the region.
    OutOfRange = 2,
    /// The bytes arrived but could not be put in place (a device region
    /// whose copy failed).
    NotApplied = 3,
}

impl Status {
    fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Status::Ok,
            1 => Status::UnknownKey,
            2 => Status::OutOfRange,
            3 => Status::NotApplied,
            _ => return None,
        })
    }

    /// The error the issuing side reports for a refusal.
    pub fn into_result(self, rkey: u32, addr: u64, len: u64) -> Result<()> {
        match self {
            Status::Ok => Ok(()),
            Status::UnknownKey => Err(Error::RemoteRejected(format!(
                "rkey {rkey:#x} is not registered on this connection (wrong or stale key)"
            ))),
            Status::OutOfRange => Err(Error::RemoteRejected(format!(
                "range {addr:#x}+{len} is outside the region of rkey {rkey:#x}"
            ))),
            Status::NotApplied => Err(Error::RemoteRejected(format!(
                "the peer could not copy {len} bytes into device memory at {addr:#x} (rkey {rkey:#x})"
            ))),
        }
    }
}

/// A frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the frame is.
    pub kind: FrameKind,
    /// Key of the region the frame addresses.
    pub rkey: u32,
    /// Outcome (replies only).
    pub status: Status,
    /// Matches a reply to its request.
    pub op_id: u64,
    /// Address inside the region.
    pub addr: u64,
    /// Payload (or requested) length in bytes.
    pub len: u64,
}

impl Header {
    /// A header with every field but `kind` zero / OK.
    pub fn new(kind: FrameKind) -> Self {
        Header {
            kind,
            rkey: 0,
            status: Status::Ok,
            op_id: 0,
            addr: 0,
            len: 0,
        }
    }

    /// Number of payload bytes that follow this header on the wire.
    pub fn payload_len(&self) -> u64 {
        match self.kind {
            FrameKind::Msg | FrameKind::Write => self.len,
            FrameKind::ReadResp if self.status == Status::Ok => self.len,
            _ => 0,
        }
    }

    /// The header as sent on the wire.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = self.kind as u8;
        b[1] = VERSION;
        b[4..8].copy_from_slice(&self.rkey.to_le_bytes());
        b[8..12].copy_from_slice(&(self.status as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.op_id.to_le_bytes());
        b[24..32].copy_from_slice(&self.addr.to_le_bytes());
        b[32..40].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Decodes and checks a header; `max_message` bounds MSG payloads.
    pub fn decode(b: &[u8; HEADER_LEN], max_message: usize) -> Result<Self> {
        let bad = |why: String| Error::Protocol(format!("bad frame header: {why}"));
        let kind = FrameKind::from_u8(b[0]).ok_or_else(|| bad(format!("unknown kind {}", b[0])))?;
        if b[1] != VERSION {
            return Err(bad(format!("version {} (expected {VERSION})", b[1])));
        }
        if b[2..4] != [0, 0] || b[12..16] != [0, 0, 0, 0] {
            return Err(bad("reserved bytes are not zero".into()));
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let status = Status::from_u32(u32_at(8))
            .ok_or_else(|| bad(format!("unknown status {}", u32_at(8))))?;
        let h = Header {
            kind,
            rkey: u32_at(4),
            status,
            op_id: u64_at(16),
            addr: u64_at(24),
            len: u64_at(32),
        };
        match kind {
            FrameKind::Msg if h.len > max_message as u64 => {
                return Err(bad(format!(
                    "message of {} bytes exceeds the limit of {max_message}",
                    h.len
                )))
            }
            FrameKind::Write | FrameKind::ReadReq | FrameKind::ReadResp
                if h.len > MAX_DATA_FRAME =>
            {
                return Err(bad(format!("data frame of {} bytes is too large", h.len)))
            }
            FrameKind::WriteAck if h.len != 0 => {
                return Err(bad("WRITE_ACK with a payload".into()))
            }
            _ => {}
        }
        if kind != FrameKind::WriteAck && kind != FrameKind::ReadResp && status != Status::Ok {
            return Err(bad("status set on a request".into()));
        }
        if h.addr.checked_add(h.len).is_none() {
            return Err(bad("address range wraps around".into()));
        }
        Ok(h)
    }
}

/// Size of an encoded [`Hello`].
pub const HELLO_LEN: usize = 32;
const HELLO_MAGIC: [u8; 8] = *b"HIPFSTCP";

/// First bytes on every lane, from the connecting side: which connection
/// (token) and which lane this stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Connection token shared by every lane of one connection.
    pub token: u64,
    /// This lane's index.
    pub lane: u16,
    /// Lanes the connection has.
    pub lanes: u16,
    /// Largest control message the sender accepts.
    pub max_message: u32,
}

impl Hello {
    /// The hello as sent on the wire.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..8].copy_from_slice(&HELLO_MAGIC);
        b[8] = VERSION;
        b[10..12].copy_from_slice(&self.lane.to_le_bytes());
        b[12..14].copy_from_slice(&self.lanes.to_le_bytes());
        b[16..20].copy_from_slice(&self.max_message.to_le_bytes());
        b[24..32].copy_from_slice(&self.token.to_le_bytes());
        b
    }

    /// Parses a hello, refusing a bad magic or version.
    pub fn decode(b: &[u8; HELLO_LEN]) -> Result<Self> {
        let bad = |why: &str| Error::Protocol(format!("bad hello: {why}"));
        if b[0..8] != HELLO_MAGIC {
            return Err(bad("not a hipfs-rdma TCP peer (magic)"));
        }
        if b[8] != VERSION {
            return Err(bad("unsupported version"));
        }
        let lane = u16::from_le_bytes([b[10], b[11]]);
        let lanes = u16::from_le_bytes([b[12], b[13]]);
        if lanes == 0 || lanes > 64 || lane >= lanes {
            return Err(bad("lane index or count out of range"));
        }
        let max_message = u32::from_le_bytes([b[16], b[17], b[18], b[19]]);
        if max_message == 0 || max_message > 1 << 30 {
            return Err(bad("max_message out of range"));
        }
        let mut t = [0u8; 8];
        t.copy_from_slice(&b[24..32]);
        Ok(Hello {
            token: u64::from_le_bytes(t),
            lane,
            lanes,
            max_message,
        })
    }
}

/// The listener's answer to a [`Hello`]: accepted, with its own
/// `max_message` (the connection uses the smaller of the two).
pub const HELLO_ACK_LEN: usize = 16;

/// The listener's answer to a complete set of lanes.
pub fn encode_hello_ack(max_message: u32) -> [u8; HELLO_ACK_LEN] {
    let mut b = [0u8; HELLO_ACK_LEN];
    b[0..8].copy_from_slice(&HELLO_MAGIC);
    b[8] = VERSION;
    b[12..16].copy_from_slice(&max_message.to_le_bytes());
    b
}

/// Byte 9 of a hello answer from a TLS listener to a plaintext hello: it
/// refuses, and says why, in the one format a plaintext peer can read.
const REFUSED_NEEDS_TLS: u8 = 1;

/// Whether `b` starts like a [`Hello`] (a plaintext peer), as opposed to a
/// TLS record.
pub fn is_plain_hello(b: &[u8]) -> bool {
    b.starts_with(&HELLO_MAGIC)
}

/// A TLS listener's answer to a plaintext hello.
pub fn encode_hello_refusal_needs_tls() -> [u8; HELLO_ACK_LEN] {
    let mut b = [0u8; HELLO_ACK_LEN];
    b[0..8].copy_from_slice(&HELLO_MAGIC);
    b[8] = VERSION;
    b[9] = REFUSED_NEEDS_TLS;
    b
}

/// Parses the answer: the listener's largest control message.
pub fn decode_hello_ack(b: &[u8; HELLO_ACK_LEN]) -> Result<u32> {
    if b[0..8] == HELLO_MAGIC && b[9] == REFUSED_NEEDS_TLS {
        return Err(Error::Tls(
            "the listener requires TLS and this side connected in plaintext: \
             configure the CA that signed the listener's certificate \
             (hipfs: mount -o tls,ca=FILE)"
                .into(),
        ));
    }
    if b[0..8] != HELLO_MAGIC || b[8] != VERSION {
        return Err(Error::Protocol("bad hello answer from listener".into()));
    }
    let m = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
    if m == 0 || m > 1 << 30 {
        return Err(Error::Protocol(
            "listener's max_message out of range".into(),
        ));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_header() -> impl Strategy<Value = Header> {
        (
            1u8..=5,
            any::<u32>(),
            0u32..=2,
            any::<u64>(),
            any::<u64>(),
            0u64..=(1 << 16),
        )
            .prop_map(|(k, rkey, st, op_id, addr, len)| {
                let kind = FrameKind::from_u8(k).unwrap();
                let status = match kind {
                    FrameKind::WriteAck | FrameKind::ReadResp => Status::from_u32(st).unwrap(),
                    _ => Status::Ok,
                };
                let len = if kind == FrameKind::WriteAck { 0 } else { len };
                Header {
                    kind,
                    rkey,
                    status,
                    op_id,
                    addr: addr.min(u64::MAX - len),
                    len,
                }
            })
    }

    proptest! {
        #[test]
        fn headers_round_trip(h in any_header()) {
            prop_assert_eq!(Header::decode(&h.encode(), 1 << 16).unwrap(), h);
        }

        #[test]
        fn decoding_arbitrary_header_bytes_never_panics_and_respects_limits(
            bytes in proptest::array::uniform32(any::<u8>()), tail in proptest::array::uniform8(any::<u8>())
        ) {
            let mut b = [0u8; HEADER_LEN];
            b[..32].copy_from_slice(&bytes);
            b[32..].copy_from_slice(&tail);
            if let Ok(h) = Header::decode(&b, 4096) {
                prop_assert!(h.addr.checked_add(h.len).is_some());
                if h.kind == FrameKind::Msg { prop_assert!(h.len <= 4096); }
                prop_assert!(h.len <= MAX_DATA_FRAME);
                prop_assert_eq!(h.encode(), b);
            }
        }

        #[test]
        fn hellos_round_trip(token in any::<u64>(), lanes in 1u16..=64, lane_seed in any::<u16>(), m in 1u32..=(1 << 30)) {
            let h = Hello { token, lane: lane_seed % lanes, lanes, max_message: m };
            prop_assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        }

        #[test]
        fn decoding_arbitrary_hello_bytes_never_panics(bytes in proptest::array::uniform32(any::<u8>())) {
            if let Ok(h) = Hello::decode(&bytes) {
                prop_assert!(h.lane < h.lanes && h.lanes <= 64);
            }
        }
    }

    #[test]
    fn oversized_message_and_data_frames_are_rejected() {
        let mut h = Header::new(FrameKind::Msg);
        h.len = 4097;
        assert!(Header::decode(&h.encode(), 4096).is_err());
        let mut w = Header::new(FrameKind::Write);
        w.len = MAX_DATA_FRAME + 1;
        assert!(Header::decode(&w.encode(), 4096).is_err());
    }

    #[test]
    fn a_request_carrying_a_status_is_rejected() {
        let mut h = Header::new(FrameKind::Write);
        h.status = Status::OutOfRange;
        assert!(Header::decode(&h.encode(), 4096).is_err());
    }
}
