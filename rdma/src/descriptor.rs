//! The remote descriptor: what one side sends the other so that it can
//! RDMA READ/WRITE a registered region.
//!
//! Two forms, both versioned and both checked on decode:
//! - binary, [`RemoteDescriptor::ENCODED_LEN`] bytes little endian:
//!   `b"HR"`, version `1`, transport tag (1 = verbs, 2 = tcp), rkey u32,
//!   addr u64, len u64;
//! - ASCII, for logs, config files and ioctl strings:
//!   `hipfs-rdma:v1:<tcp|verbs>:addr=0x<hex>,len=<dec>,rkey=0x<hex>`.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// Which transport issued a descriptor. A descriptor is only meaningful on
/// a connection of the same kind (and, for TCP, the same connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DescriptorTransport {
    /// An ibverbs memory region: `rkey` is the MR's rkey, `addr` its
    /// virtual address (or iova for dmabuf regions).
    Verbs,
    /// A TCP-transport region: `rkey` is a per-connection key.
    Tcp,
}

impl DescriptorTransport {
    fn tag(self) -> u8 {
        match self {
            DescriptorTransport::Verbs => 1,
            DescriptorTransport::Tcp => 2,
        }
    }
    fn from_tag(tag: u8) -> Result<Self> {
        match tag {
            1 => Ok(DescriptorTransport::Verbs),
            2 => Ok(DescriptorTransport::Tcp),
            t => Err(Error::Parse {
                what: "remote descriptor",
                why: format!("unknown transport tag {t}"),
            }),
        }
    }
    fn name(self) -> &'static str {
        match self {
            DescriptorTransport::Verbs => "verbs",
            DescriptorTransport::Tcp => "tcp",
        }
    }
}

/// A region of the peer's memory that this side may access with
/// `write_remote` / `read_remote`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteDescriptor {
    /// Address of the region's first byte in the peer's address space
    /// (the peer's virtual address, or the iova of a dmabuf region).
    pub addr: u64,
    /// Length of the region in bytes.
    pub len: u64,
    /// The key that grants access.
    pub rkey: u32,
    /// Which transport issued it.
    pub transport: DescriptorTransport,
}

const MAGIC: [u8; 2] = *b"HR";
const VERSION: u8 = 1;
const TEXT_PREFIX: &str = "hipfs-rdma:v1:";

impl RemoteDescriptor {
    /// Size of [`encode`](Self::encode)'s output.
    pub const ENCODED_LEN: usize = 24;

    /// Fixed little-endian binary form.
    ///
    /// ```
    /// use hipfs_rdma::{RemoteDescriptor, DescriptorTransport};
    /// let d = RemoteDescriptor { addr: 0x1000, len: 4096, rkey: 7, transport: DescriptorTransport::Tcp };
    /// assert_eq!(RemoteDescriptor::decode(&d.encode()).unwrap(), d);
    /// ```
    pub fn encode(&self) -> [u8; Self::ENCODED_LEN] {
        let mut b = [0u8; Self::ENCODED_LEN];
        b[0..2].copy_from_slice(&MAGIC);
        b[2] = VERSION;
        b[3] = self.transport.tag();
        b[4..8].copy_from_slice(&self.rkey.to_le_bytes());
        b[8..16].copy_from_slice(&self.addr.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Inverse of [`encode`](Self::encode); rejects short input, a wrong
    /// magic or version, an unknown transport and a range that wraps.
    /// Trailing bytes after the descriptor are ignored.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let bad = |why: String| Error::Parse {
            what: "remote descriptor",
            why,
        };
        if bytes.len() < Self::ENCODED_LEN {
            return Err(bad(format!(
                "{} bytes, need {}",
                bytes.len(),
                Self::ENCODED_LEN
            )));
        }
        if bytes[0..2] != MAGIC {
            return Err(bad("bad magic".into()));
        }
        if bytes[2] != VERSION {
            return Err(bad(format!("unsupported version {}", bytes[2])));
        }
        let transport = DescriptorTransport::from_tag(bytes[3])?;
        let le32 = |r: std::ops::Range<usize>| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&bytes[r]);
            u32::from_le_bytes(a)
        };
        let le64 = |r: std::ops::Range<usize>| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&bytes[r]);
            u64::from_le_bytes(a)
        };
        let d = RemoteDescriptor {
            rkey: le32(4..8),
            addr: le64(8..16),
            len: le64(16..24),
            transport,
        };
        d.check()?;
        Ok(d)
    }

    /// The documented ASCII form, e.g.
    /// `hipfs-rdma:v1:tcp:addr=0x7f0000001000,len=4096,rkey=0x2a`.
    pub fn to_desc_string(&self) -> String {
        format!(
            "{TEXT_PREFIX}{}:addr={:#x},len={},rkey={:#x}",
            self.transport.name(),
            self.addr,
            self.len,
            self.rkey
        )
    }

    /// Parses [`to_desc_string`](Self::to_desc_string)'s form. The three
    /// fields may come in any order; each must appear exactly once.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = |why: String| Error::Parse {
            what: "remote descriptor string",
            why,
        };
        let rest = s
            .strip_prefix(TEXT_PREFIX)
            .ok_or_else(|| bad(format!("must start with '{TEXT_PREFIX}'")))?;
        let (kind, fields) = rest
            .split_once(':')
            .ok_or_else(|| bad("missing transport name".into()))?;
        let transport = match kind {
            "verbs" => DescriptorTransport::Verbs,
            "tcp" => DescriptorTransport::Tcp,
            other => return Err(bad(format!("unknown transport '{other}'"))),
        };
        let (mut addr, mut len, mut rkey) = (None, None, None);
        for field in fields.split(',') {
            let (k, v) = field
                .split_once('=')
                .ok_or_else(|| bad(format!("field '{field}' is not key=value")))?;
            let num = parse_u64(v).ok_or_else(|| bad(format!("'{v}' is not a number")))?;
            let slot = match k {
                "addr" => &mut addr,
                "len" => &mut len,
                "rkey" => &mut rkey,
                other => return Err(bad(format!("unknown field '{other}'"))),
            };
            if slot.replace(num).is_some() {
                return Err(bad(format!("field '{k}' given twice")));
            }
        }
        let rkey = rkey.ok_or_else(|| bad("missing rkey".into()))?;
        let d = RemoteDescriptor {
            addr: addr.ok_or_else(|| bad("missing addr".into()))?,
            len: len.ok_or_else(|| bad("missing len".into()))?,
            rkey: u32::try_from(rkey)
                .map_err(|_| bad(format!("rkey {rkey:#x} exceeds 32 bits")))?,
            transport,
        };
        d.check()?;
        Ok(d)
    }

    /// Checks that `[off, off+len)` lies inside the region and returns the
    /// absolute remote address of `off`.
    pub fn checked_addr(&self, off: u64, len: u64) -> Result<u64> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.addr + off),
            _ => Err(Error::OutOfRange {
                offset: off,
                len,
                region_len: self.len,
            }),
        }
    }

    fn check(&self) -> Result<()> {
        if self.addr.checked_add(self.len).is_none() {
            return Err(Error::Parse {
                what: "remote descriptor",
                why: format!("range {:#x}+{} wraps around", self.addr, self.len),
            });
        }
        Ok(())
    }
}

fn parse_u64(v: &str) -> Option<u64> {
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

impl fmt::Display for RemoteDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_desc_string())
    }
}

impl FromStr for RemoteDescriptor {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_desc() -> impl Strategy<Value = RemoteDescriptor> {
        (any::<u64>(), any::<u64>(), any::<u32>(), any::<bool>()).prop_map(
            |(addr, len, rkey, v)| RemoteDescriptor {
                addr,
                len: len.min(u64::MAX - addr),
                rkey,
                transport: if v {
                    DescriptorTransport::Verbs
                } else {
                    DescriptorTransport::Tcp
                },
            },
        )
    }

    proptest! {
        #[test]
        fn binary_form_round_trips(d in any_desc()) {
            prop_assert_eq!(RemoteDescriptor::decode(&d.encode()).unwrap(), d);
        }

        #[test]
        fn text_form_round_trips(d in any_desc()) {
            prop_assert_eq!(RemoteDescriptor::parse(&d.to_desc_string()).unwrap(), d);
        }

        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(d) = RemoteDescriptor::decode(&bytes) {
                prop_assert!(d.addr.checked_add(d.len).is_some());
            }
        }

        #[test]
        fn parsing_arbitrary_text_never_panics(s in "\\PC{0,80}") {
            let _ = RemoteDescriptor::parse(&s);
        }

        #[test]
        fn truncated_binary_is_rejected(d in any_desc(), cut in 0usize..RemoteDescriptor::ENCODED_LEN) {
            prop_assert!(RemoteDescriptor::decode(&d.encode()[..cut]).is_err());
        }

        #[test]
        fn checked_addr_accepts_exactly_the_ranges_inside(d in any_desc(), off in any::<u64>(), len in any::<u64>()) {
            let inside = off.checked_add(len).is_some_and(|e| e <= d.len);
            prop_assert_eq!(d.checked_addr(off, len).is_ok(), inside);
        }
    }

    #[test]
    fn wrong_magic_version_and_tag_are_rejected() {
        let d = RemoteDescriptor {
            addr: 1,
            len: 2,
            rkey: 3,
            transport: DescriptorTransport::Tcp,
        };
        for (i, v) in [(0usize, b'X'), (2, 9), (3, 0)] {
            let mut b = d.encode();
            b[i] = v;
            assert!(RemoteDescriptor::decode(&b).is_err(), "byte {i}");
        }
    }

    #[test]
    fn text_form_rejects_missing_duplicate_and_oversized_fields() {
        for s in [
            "hipfs-rdma:v1:tcp:addr=0x10,len=5",
            "hipfs-rdma:v1:tcp:addr=0x10,len=5,rkey=1,rkey=2",
            "hipfs-rdma:v1:tcp:addr=0x10,len=5,rkey=0x100000000",
            "hipfs-rdma:v2:tcp:addr=0x10,len=5,rkey=1",
            "hipfs-rdma:v1:udp:addr=0x10,len=5,rkey=1",
            "hipfs-rdma:v1:tcp:addr=0xffffffffffffffff,len=5,rkey=1",
        ] {
            assert!(RemoteDescriptor::parse(s).is_err(), "{s}");
        }
        let d =
            RemoteDescriptor::parse("hipfs-rdma:v1:verbs:rkey=0x2a,len=4096,addr=0x1000").unwrap();
        assert_eq!((d.addr, d.len, d.rkey), (0x1000, 4096, 42));
    }
}
