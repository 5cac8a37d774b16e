//! Shared-token authentication: both sides prove they hold the token by
//! HMAC-SHA256 over both nonces, so neither the token nor a replayable
//! answer ever crosses the wire.

use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::proto::NONCE_LEN;
use super::RemoteError;

type HmacSha256 = Hmac<Sha256>;

/// A shared secret read from a token file. Equality compares the secrets
/// (the client cache keys clients by the token they authenticate with).
#[derive(Clone, PartialEq, Eq)]
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<hidden>)")
    }
}

impl Token {
    /// Reads a token file: its content without surrounding whitespace, at
    /// least 16 bytes. Warns when other users may read it.
    pub fn from_file(path: &Path) -> Result<Token, RemoteError> {
        let bad =
            |why: String| RemoteError::Config(format!("token file {}: {why}", path.display()));
        let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
        {
            use std::os::unix::fs::PermissionsExt;
            if meta.permissions().mode() & 0o077 != 0 {
                log::warn!(
                    "token file {} is readable by other users; chmod 600 it",
                    path.display()
                );
            }
        }
        let raw = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        let t = raw.trim_ascii();
        if t.len() < 16 {
            return Err(bad(format!(
                "the token is {} bytes; use at least 16 (e.g. `head -c 32 /dev/urandom | base64 > FILE`)",
                t.len()
            )));
        }
        Ok(Token(t.to_vec()))
    }

    /// A token from bytes (tests, in-process mounts).
    pub fn from_bytes(b: &[u8]) -> Token {
        Token(b.to_vec())
    }

    /// The secret itself (for writing a token file).
    pub(crate) fn expose(&self) -> &[u8] {
        &self.0
    }

    fn mac(&self, label: &[u8], parts: &[&[u8]]) -> HmacSha256 {
        // A key of any length is valid for HMAC, so this cannot fail.
        let mut m = <HmacSha256 as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        m.update(label);
        for p in parts {
            m.update(p);
        }
        m
    }

    /// HMAC-SHA256 of `transcript` under this secret, for `label`.
    pub fn proof(&self, label: &[u8], transcript: &[u8]) -> [u8; 32] {
        self.mac(label, &[transcript])
            .finalize()
            .into_bytes()
            .into()
    }

    /// Checks a proof made by [`Token::proof`] in constant time.
    pub fn verify(&self, label: &[u8], transcript: &[u8], proof: &[u8; 32]) -> bool {
        self.mac(label, &[transcript]).verify_slice(proof).is_ok()
    }

    /// The per-direction message keys of one connection (client to
    /// server, server to client), derived from this secret and the
    /// handshake transcript (both nonces, the credential's kind and id).
    /// Someone who watched the handshake but lacks the secret cannot
    /// compute them, so a proxy cannot forge messages after it.
    pub fn session_keys(&self, transcript: &[u8]) -> ([u8; 32], [u8; 32]) {
        (
            self.proof(b"hipfs-v2 key client-to-server", transcript),
            self.proof(b"hipfs-v2 key server-to-client", transcript),
        )
    }
}

/// Label of the client's handshake proof.
pub const CLIENT_PROOF: &[u8] = b"hipfs-v2 client";
/// Label of the server's handshake proof (different, so one cannot be
/// replayed as the other).
pub const SERVER_PROOF: &[u8] = b"hipfs-v2 server";

/// What both proofs and the message keys of a connection cover: the
/// credential's kind, the handshake flags, the credential's id and both
/// nonces.
pub fn transcript(
    kind: u8,
    flags: u8,
    id: &[u8; 32],
    server: &[u8; NONCE_LEN],
    client: &[u8; NONCE_LEN],
) -> Vec<u8> {
    let mut t = Vec::with_capacity(2 + 32 + 2 * NONCE_LEN);
    t.push(kind);
    t.push(flags);
    t.extend_from_slice(id);
    t.extend_from_slice(server);
    t.extend_from_slice(client);
    t
}

/// The public name of a ticket's or file capability's secret: what the
/// handshake carries instead of the secret itself.
pub fn secret_id(secret: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    let mut h = Sha256::new();
    h.update(b"hipfs-v2 id");
    h.update(secret);
    h.finalize().into()
}

/// Where a server listening on `addr` (`host:port`) takes local ticket
/// requests unless told otherwise (`hipfs serve --local-socket`).
pub fn default_local_socket(port: u16) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/run/hipfs/serve-{port}.sock"))
}

/// The port of `host:port` / `[v6]:port`.
pub fn port_of(addr: &str) -> Option<u16> {
    addr.rsplit_once(':')?.1.parse().ok()
}

/// Whether `addr`'s host is this machine's loopback.
pub fn is_loopback(addr: &str) -> bool {
    let host = addr
        .rsplit_once(':')
        .map_or(addr, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Random bytes from the kernel.
pub fn random_nonce() -> Result<[u8; NONCE_LEN], RemoteError> {
    let mut n = [0u8; NONCE_LEN];
    hipfs_sys::rand::fill(&mut n).map_err(RemoteError::Io)?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_verify_only_with_the_same_secret_and_transcript() {
        let t = Token::from_bytes(b"0123456789abcdef");
        let other = Token::from_bytes(b"0123456789abcdeX");
        let (s, c) = (random_nonce().unwrap(), random_nonce().unwrap());
        let tr = transcript(1, 0, &[0; 32], &s, &c);
        let p = t.proof(CLIENT_PROOF, &tr);
        assert!(t.verify(CLIENT_PROOF, &tr, &p));
        assert!(!other.verify(CLIENT_PROOF, &tr, &p));
        assert!(!t.verify(CLIENT_PROOF, &transcript(1, 0, &[0; 32], &c, &s), &p));
        assert!(!t.verify(CLIENT_PROOF, &transcript(1, 1, &[0; 32], &s, &c), &p));
        assert!(
            !t.verify(SERVER_PROOF, &tr, &p),
            "client proof is not a server proof"
        );
        let (a, b) = t.session_keys(&tr);
        assert_ne!(a, b);
    }
}
