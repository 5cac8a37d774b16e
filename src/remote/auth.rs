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

    fn mac(&self, label: &[u8], a: &[u8], b: &[u8]) -> HmacSha256 {
        // A key of any length is valid for HMAC, so this cannot fail.
        let mut m = <HmacSha256 as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        m.update(label);
        m.update(a);
        m.update(b);
        m
    }

    /// The client's proof for this pair of nonces.
    pub fn client_proof(&self, server: &[u8; NONCE_LEN], client: &[u8; NONCE_LEN]) -> [u8; 32] {
        self.mac(b"hipfs-v1 client", server, client)
            .finalize()
            .into_bytes()
            .into()
    }

    /// The server's proof (different label, so one cannot be replayed as the other).
    pub fn server_proof(&self, server: &[u8; NONCE_LEN], client: &[u8; NONCE_LEN]) -> [u8; 32] {
        self.mac(b"hipfs-v1 server", server, client)
            .finalize()
            .into_bytes()
            .into()
    }

    /// Checks a client's proof in constant time.
    pub fn verify_client(
        &self,
        server: &[u8; NONCE_LEN],
        client: &[u8; NONCE_LEN],
        proof: &[u8; 32],
    ) -> bool {
        self.mac(b"hipfs-v1 client", server, client)
            .verify_slice(proof)
            .is_ok()
    }

    /// Checks the server's proof in constant time.
    pub fn verify_server(
        &self,
        server: &[u8; NONCE_LEN],
        client: &[u8; NONCE_LEN],
        proof: &[u8; 32],
    ) -> bool {
        self.mac(b"hipfs-v1 server", server, client)
            .verify_slice(proof)
            .is_ok()
    }
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
    fn proofs_verify_only_with_the_same_token_and_nonces() {
        let t = Token::from_bytes(b"0123456789abcdef");
        let other = Token::from_bytes(b"0123456789abcdeX");
        let (s, c) = (random_nonce().unwrap(), random_nonce().unwrap());
        let p = t.client_proof(&s, &c);
        assert!(t.verify_client(&s, &c, &p));
        assert!(!other.verify_client(&s, &c, &p));
        assert!(!t.verify_client(&c, &s, &p));
        assert!(
            !t.verify_server(&s, &c, &p),
            "client proof is not a server proof"
        );
    }
}
