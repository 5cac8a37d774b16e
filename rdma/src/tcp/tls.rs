//! TLS set-up for the TCP transport: rustls configurations built from the
//! PEM files of a [`TlsConfig`] (ring provider, TLS 1.3 only), and the
//! handshake of one lane.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::{Error, Result, TlsConfig};

/// ring's provider, with AES-128-GCM first: with AES-NI it is the
/// cheapest TLS 1.3 suite per byte, and the lanes carry bulk data. The
/// others stay available for peers that prefer them.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    use rustls::crypto::ring::cipher_suite as cs;
    Arc::new(rustls::crypto::CryptoProvider {
        cipher_suites: vec![
            cs::TLS13_AES_128_GCM_SHA256,
            cs::TLS13_AES_256_GCM_SHA384,
            cs::TLS13_CHACHA20_POLY1305_SHA256,
        ],
        ..rustls::crypto::ring::default_provider()
    })
}

fn certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let bad = |e: &dyn std::fmt::Display| {
        Error::Tls(format!("cannot read {what} from {}: {e}", path.display()))
    };
    let v = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(&e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    if v.is_empty() {
        return Err(bad(&"no PEM certificate in it"));
    }
    Ok(v)
}

/// The listener's rustls configuration.
pub(crate) fn server_config(t: &TlsConfig) -> Result<Arc<rustls::ServerConfig>> {
    let (Some(cert), Some(key)) = (&t.cert_chain, &t.key) else {
        return Err(Error::InvalidArgument(
            "a TLS listener needs a certificate chain and a key".into(),
        ));
    };
    let chain = certs(cert, "the certificate chain")?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        Error::Tls(format!(
            "cannot read the private key from {}: {e}",
            key.display()
        ))
    })?;
    let mut c = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| Error::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| {
            Error::Tls(format!(
                "certificate {} and its key do not fit together: {e}",
                cert.display()
            ))
        })?;
    // No session tickets: lanes never resume, and a ticket would be a
    // write the server makes on its own after the handshake.
    c.send_tls13_tickets = 0;
    Ok(Arc::new(c))
}

/// The connecting side's rustls configuration.
pub(crate) fn client_config(t: &TlsConfig) -> Result<Arc<rustls::ClientConfig>> {
    let Some(ca) = &t.ca else {
        return Err(Error::InvalidArgument(
            "a TLS connection needs the CA certificate that signed the server's".into(),
        ));
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(ca, "the CA certificate")? {
        roots.add(c).map_err(|e| {
            Error::Tls(format!(
                "CA certificate in {} is unusable: {e}",
                ca.display()
            ))
        })?;
    }
    let mut c = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| Error::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.resumption = rustls::client::Resumption::disabled();
    Ok(Arc::new(c))
}

/// The name the server's certificate must carry: the configured one, or
/// the host part of `addr` (`host:port`, `[v6]:port`).
pub(crate) fn server_name(t: &TlsConfig, addr: &str) -> Result<ServerName<'static>> {
    let host = match &t.server_name {
        Some(n) => n.as_str(),
        None => host_of(addr),
    };
    ServerName::try_from(host.to_string()).map_err(|e| {
        Error::InvalidArgument(format!("'{host}' is not a server name TLS can check: {e}"))
    })
}

fn host_of(addr: &str) -> &str {
    if let Some(rest) = addr.strip_prefix('[') {
        if let Some(end) = rest.find(']') {
            return &rest[..end];
        }
    }
    match addr.rsplit_once(':') {
        Some((h, _)) if !h.contains(':') => h,
        _ => addr,
    }
}

/// Runs the handshake of one lane on a blocking stream (whose read
/// timeout bounds each wait). `peer` names the other side in errors.
pub(crate) fn handshake(
    conn: &mut rustls::Connection,
    s: &mut TcpStream,
    peer: &str,
    timeout: std::time::Duration,
) -> Result<()> {
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(s) {
            return Err(handshake_error(e, peer, timeout));
        }
    }
    Ok(())
}

/// Writes all of `b` through the session during set-up (blocking).
pub(crate) fn write_all(
    conn: &mut rustls::Connection,
    s: &mut TcpStream,
    b: &[u8],
) -> std::io::Result<()> {
    conn.writer().write_all(b)?;
    while conn.wants_write() {
        conn.write_tls(s)?;
    }
    Ok(())
}

/// Fills `b` from the session during set-up (blocking, bounded by the
/// stream's read timeout).
pub(crate) fn read_exact(
    conn: &mut rustls::Connection,
    s: &mut TcpStream,
    b: &mut [u8],
) -> std::io::Result<()> {
    let mut off = 0;
    while off < b.len() {
        match conn.reader().read(&mut b[off..]) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "peer closed the TLS session",
                ))
            }
            Ok(n) => off += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                conn.complete_io(s)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Says what went wrong in terms of certificates where rustls knows.
pub(crate) fn handshake_error(
    e: std::io::Error,
    peer: &str,
    timeout: std::time::Duration,
) -> Error {
    use std::io::ErrorKind;
    if let Some(t) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        let hint = match t {
            // BadSignature: a CA of the same name as the trusted one, but
            // another key, signed it.
            rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer | rustls::CertificateError::BadSignature,
            ) => " (its certificate is not signed by the CA this side trusts)",
            rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName)
            | rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            ) => " (its certificate does not carry the server name asked for)",
            rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
                " (is it speaking TLS?)"
            }
            _ => "",
        };
        return Error::Tls(format!("handshake with {peer} failed: {t}{hint}"));
    }
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => Error::Timeout(timeout),
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => {
            Error::Tls(format!(
                "handshake with {peer} failed: the peer closed the connection ({e}); \
                 is it serving TLS?"
            ))
        }
        _ => Error::Tls(format!("handshake with {peer} failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn the_host_part_of_an_address_is_what_the_certificate_must_name() {
        assert_eq!(host_of("server.example:7471"), "server.example");
        assert_eq!(host_of("127.0.0.1:0"), "127.0.0.1");
        assert_eq!(host_of("[::1]:7471"), "::1");
        assert_eq!(host_of("::1"), "::1");
        assert_eq!(host_of("name"), "name");
    }
}
