//! Message authentication after the handshake.
//!
//! Every control message a side sends after `Welcome` ends with a 16-byte
//! tag: keyed BLAKE3 over the direction's sequence number and the message,
//! under a key only the two ends can derive (see
//! [`super::auth::Token::session_keys`]). The receiver counts the messages
//! it got the same way, so a message that was injected, modified, replayed,
//! dropped or reordered fails its tag and the connection is dropped. Control
//! messages travel in order on one stream or QP (the transport's lane 0), so
//! a strict counter is enough. Sending takes a lock so that the number a
//! message is tagged with is the order in which it enters the transport.
//!
//! Bytes a server places in a client's memory (`write_remote`) are not
//! control messages; over TCP the authenticated reply carries their hash
//! ([`placed_digest`]), over verbs nothing (`docs/SECURITY.md`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use hipfs_rdma::Connection;

/// Bytes of the tag appended to each message.
pub const TAG_LEN: usize = 16;

fn tag(key: &[u8; 32], seq: u64, body: &[u8]) -> [u8; TAG_LEN] {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(&seq.to_le_bytes());
    h.update(body);
    let mut out = [0u8; TAG_LEN];
    h.finalize_xof().fill(&mut out);
    out
}

/// The hash a server sends with bytes it placed in a client's memory over
/// an authenticated TCP connection (`Payload::Placed`), and the client
/// checks them against. A plain hash is enough: the reply carrying it is
/// authenticated.
pub fn placed_digest(bytes: &[u8]) -> [u8; 32] {
    *blake3::hash(bytes).as_bytes()
}

/// The sending half: tags and sends, one message at a time.
pub struct Sealer {
    /// `None`: authentication was turned off for this connection (only
    /// where both ends allowed it, for measuring its cost).
    key: Option<[u8; 32]>,
    next: Mutex<u64>,
}

impl Sealer {
    /// A sealer tagging with `key`; `None` sends untagged (only where both
    /// ends agreed, for measuring the cost).
    pub fn new(key: Option<[u8; 32]>) -> Sealer {
        Sealer {
            key,
            next: Mutex::new(0),
        }
    }

    /// Whether messages are authenticated on this connection.
    pub fn is_on(&self) -> bool {
        self.key.is_some()
    }

    /// Tags `msg` with the next sequence number and sends it on `conn`.
    pub fn send(&self, conn: &dyn Connection, msg: Vec<u8>) -> hipfs_rdma::Result<()> {
        // Held across the send: the transport queues messages in the order
        // `send` is called, which must be the order of the numbers.
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let msg = self.seal_as(*next, msg);
        *next += 1;
        conn.send(&msg)
    }

    /// `msg` tagged as message number `seq` (what [`Sealer::send`] sends;
    /// for tests that play a man in the middle).
    pub fn seal_as(&self, seq: u64, mut msg: Vec<u8>) -> Vec<u8> {
        if let Some(key) = &self.key {
            let t = tag(key, seq, &msg);
            msg.extend_from_slice(&t);
        }
        msg
    }
}

/// The receiving half (one reader thread per connection).
pub struct Opener {
    key: Option<[u8; 32]>,
    next: AtomicU64,
}

/// A received message failed authentication.
#[derive(Debug, thiserror::Error)]
#[error("message {seq} failed authentication (injected, modified, replayed or reordered)")]
pub struct BadTag {
    /// The sequence number the message should have had.
    pub seq: u64,
}

impl Opener {
    /// An opener checking tags under `key`; `None` accepts untagged messages.
    pub fn new(key: Option<[u8; 32]>) -> Opener {
        Opener {
            key,
            next: AtomicU64::new(0),
        }
    }

    /// Checks and strips the tag of the next received message. After an
    /// error the connection must be dropped: the counter no longer matches.
    pub fn open(&self, msg: Vec<u8>) -> Result<Vec<u8>, BadTag> {
        self.open_as(self.reserve(), msg)
    }

    /// The sequence number of the next received message, for
    /// [`Opener::open_as`]: the message is checked later, possibly on
    /// another thread, while the ones after it are opened meanwhile.
    pub fn reserve(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst)
    }

    /// Checks and strips the tag of the message received as number `seq`
    /// (from [`Opener::reserve`]).
    pub fn open_as(&self, seq: u64, mut msg: Vec<u8>) -> Result<Vec<u8>, BadTag> {
        let Some(key) = &self.key else {
            return Ok(msg);
        };
        if msg.len() < TAG_LEN {
            return Err(BadTag { seq });
        }
        let body_len = msg.len() - TAG_LEN;
        let want = tag(key, seq, &msg[..body_len]);
        if !constant_time_eq(&want, &msg[body_len..]) {
            return Err(BadTag { seq });
        }
        msg.truncate(body_len);
        Ok(msg)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether this process asks for (client) or allows (server) connections
/// without message authentication: `HIPFS_UNAUTHENTICATED_MESSAGES=1`. Only
/// for measuring what authentication costs (`hipfs bench`); both ends must
/// set it, and the handshake itself is authenticated either way.
pub fn unauthenticated_messages_requested() -> bool {
    std::env::var("HIPFS_UNAUTHENTICATED_MESSAGES").is_ok_and(|v| v.trim() == "1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_checks_only_for_the_same_key_sequence_and_bytes() {
        let k = [7u8; 32];
        let o = Opener::new(Some(k));
        let mut m = b"hello".to_vec();
        m.extend_from_slice(&tag(&k, 0, b"hello"));
        assert_eq!(o.open(m.clone()).unwrap(), b"hello");
        // The same message again (a replay) is number 1 now.
        assert!(o.open(m).is_err());
        let o = Opener::new(Some(k));
        let mut bad = b"hellO".to_vec();
        bad.extend_from_slice(&tag(&k, 0, b"hello"));
        assert!(o.open(bad).is_err());
        assert!(Opener::new(Some(k)).open(vec![1, 2]).is_err());
        assert_eq!(Opener::new(None).open(vec![1, 2]).unwrap(), vec![1, 2]);
    }

    #[test]
    fn a_message_opened_later_under_its_reserved_number_checks_and_others_go_on_meanwhile() {
        let k = [7u8; 32];
        let sealed = |seq, body: &[u8]| {
            let mut m = body.to_vec();
            m.extend_from_slice(&tag(&k, seq, body));
            m
        };
        let o = Opener::new(Some(k));
        let first = o.reserve();
        assert_eq!(o.open(sealed(1, b"second")).unwrap(), b"second");
        assert!(o.open_as(first, sealed(1, b"first")).is_err());
        assert_eq!(o.open_as(first, sealed(0, b"first")).unwrap(), b"first");
    }
}
