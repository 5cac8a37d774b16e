//! The hipfs wire protocol, version 3 (speaks 2 too).
//!
//! Every message is one transport control message (`Connection::send` /
//! `recv`, which frame it); inside, the first byte says what it is:
//!
//! | kind | direction | body |
//! |---|---|---|
//! | `Hello` | client → server | magic `HIPFS`, supported versions, client nonce |
//! | `Challenge` | server → client | chosen version, server nonce, whether a token is needed |
//! | `Proof` | client → server | credential kind and id, HMAC-SHA256 over the transcript with its secret |
//! | `Welcome` | server → client | export name, read-only flag, the server's own proof, (v3) export id |
//! | `Refused` | server → client | why (version, authentication), then the server closes |
//! | `Request` | client → server | request id, caller's credentials, one operation |
//! | `Reply` | server → client | request id, errno or the operation's result |
//!
//! From `Welcome` on (excluded), every message carries a 16-byte keyed
//! BLAKE3 tag over its direction's sequence number and bytes
//! (`super::seal`).
//!
//! Request ids let many requests be in flight on one connection from many
//! threads; replies come back in any order. Bulk read data is placed by the
//! server with `write_remote` into the client's registered region before the
//! reply is sent (the transport orders the two), so the protocol is the same
//! over TCP and verbs. All integers are little endian; every length and count
//! is checked against a cap on decode.

mod codec;
mod handshake;
mod ops;
mod reply;
mod types;

pub use codec::{Reader, Writer};
pub use handshake::{
    export_id_transcript, Challenge, CredKind, Hello, Proof, Refused, Welcome, FLAG_NO_MAC,
    MAX_EXPORT_ID, NONCE_LEN,
};
pub use ops::{Op, Request, Step, MAX_STEPS};
pub use reply::{ChangedName, Payload, Reply, MAX_CHANGED};

/// The request id of pushed change notices (requests count from 1).
pub const NOTICE_ID: u64 = 0;
pub use types::{validate_rel_path, DirItem, HeadItem, ReadDest, WireCred, WireSetAttr, WireTime};

/// The protocol version this build speaks. 2: credential kinds in `Proof`
/// (token, local ticket, file capability), every message after `Welcome`
/// authenticated (see `super::seal`), `GrantFile`. 3: `Welcome` ends with
/// the export id, which the server's proof covers (multi-server mounts
/// check their servers export the same namespace). A version 2 peer gets
/// (and sends) the version 2 welcome. 4: replies to changes of a
/// directory's entries carry the directory's attributes after the change
/// (`Payload::InDir`); older peers never get them. 5: change notices say
/// which names changed only as inodes (`Payload::ChangedKinds`), so a
/// client keeps the directory's attributes and listing; older peers get
/// `Payload::Changed`. A created file's reply says when the file has no
/// extended attributes (`Payload::Created::no_xattrs`). 6: `Op::Apply`
/// (writes and attribute changes of one open file in one request).
pub const PROTO_VERSION: u16 = 6;
/// The first version whose `Welcome` carries the export id.
pub const EXPORT_ID_VERSION: u16 = 3;
/// The first version whose entry-changing replies may be `Payload::InDir`.
pub const PARENT_ATTR_VERSION: u16 = 4;
/// The first version whose change notices are `Payload::ChangedKinds`.
pub const NOTICE_KIND_VERSION: u16 = 5;
/// The first version told that a created file has no extended attributes.
pub const CREATED_NO_XATTRS_VERSION: u16 = 5;
/// The first version that takes `Op::Apply`.
pub const APPLY_VERSION: u16 = 6;
/// The oldest version this build still speaks: version 1 had no message
/// authentication and let unauthenticated clients in, so it is refused.
pub const PROTO_VERSION_MIN: u16 = 2;

/// Longest symlink target a request may carry (Linux PATH_MAX).
pub const MAX_PATH: usize = 4096;
/// Longest path below the export root a request may carry. The kernel
/// limits only the paths a caller passes (PATH_MAX from its working
/// directory), not how deep a tree is, so this is well above PATH_MAX: a
/// caller inside a deep directory still reaches PATH_MAX further down. It
/// stays below the message's 64 KiB header room with two paths (rename).
pub const MAX_REL_PATH: usize = 28 * 1024;
/// Longest single name component (NAME_MAX).
pub const MAX_NAME: usize = 255;
/// Largest read or write one request may ask for.
pub const MAX_IO: usize = 1 << 20;
/// Largest read whose bytes are placed in the client's memory (`Read` with
/// a destination): they never travel inside a message, so they may exceed
/// [`MAX_IO`]; the transport stripes them over its lanes.
pub const MAX_PLACED_READ: usize = 8 << 20;
/// Largest xattr value (Linux XATTR_SIZE_MAX).
pub const MAX_XATTR: usize = 64 * 1024;
/// Largest file whose contents `Op::OpenHead` returns with the handle.
pub const MAX_HEAD: usize = 64 * 1024;

/// Most bytes of file contents in one `Payload::Heads`.
pub const MAX_HEADS: usize = 768 * 1024;
/// Most supplementary groups a request may carry.
pub const MAX_GROUPS: usize = 1024;
/// Most entries one readdir reply carries.
pub const MAX_DIR_ITEMS: usize = 4096;
/// The transport's message cap both sides configure: a full write plus headers.
pub const MAX_MESSAGE: usize = MAX_IO + 64 * 1024;

/// What the first byte of a message says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Client hello.
    Hello = 1,
    /// Server challenge.
    Challenge = 2,
    /// Client proof.
    Proof = 3,
    /// Server welcome.
    Welcome = 4,
    /// Server refusal.
    Refused = 5,
    /// A request.
    Request = 16,
    /// A reply.
    Reply = 17,
}

impl Kind {
    /// The kind of a received message.
    pub fn of(msg: &[u8]) -> Result<Kind, ProtoError> {
        let b = *msg.first().ok_or(ProtoError::Truncated("message kind"))?;
        Ok(match b {
            1 => Kind::Hello,
            2 => Kind::Challenge,
            3 => Kind::Proof,
            4 => Kind::Welcome,
            5 => Kind::Refused,
            16 => Kind::Request,
            17 => Kind::Reply,
            v => return Err(ProtoError::BadValue("message kind", u64::from(v))),
        })
    }
}

/// A message that does not follow the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("message ends early while reading {0}")]
    /// The message ended inside a field.
    Truncated(&'static str),
    #[error("{what} of {len} exceeds the limit of {max}")]
    /// A field is longer than allowed.
    TooLong {
        /// The field.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    #[error("invalid {0}: {1}")]
    /// A field holds a value it may not.
    BadValue(&'static str, u64),
    #[error("{0} trailing bytes after the message")]
    /// Bytes after the last field.
    TrailingBytes(usize),
    #[error("expected a {expected:?} message, got {got:?}")]
    /// A message of another kind than the exchange expects.
    UnexpectedKind {
        /// The kind expected.
        expected: Kind,
        /// The kind received.
        got: Kind,
    },
    #[error("path refused: {0}")]
    /// A path the protocol refuses (absolute, `..`, NUL).
    BadPath(String),
    #[error("not a hipfs peer (bad magic)")]
    /// Not a hipfs message.
    BadMagic,
}

impl ProtoError {
    /// The errno a server answers a malformed request with.
    pub fn errno(&self) -> i32 {
        match self {
            ProtoError::BadPath(_) => libc::EINVAL,
            ProtoError::TooLong {
                what: "path" | "name" | "symlink target" | "xattr name",
                ..
            } => libc::ENAMETOOLONG,
            ProtoError::TooLong { .. } => libc::EINVAL,
            _ => libc::EPROTO,
        }
    }
}

/// Checks a message's first byte.
pub(crate) fn expect_kind(r: &mut Reader<'_>, expected: Kind) -> Result<(), ProtoError> {
    let b = r.u8("message kind")?;
    let got = Kind::of(&[b])?;
    if got != expected {
        return Err(ProtoError::UnexpectedKind { expected, got });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
