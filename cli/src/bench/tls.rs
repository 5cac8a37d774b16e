//! A throwaway certificate authority for measuring TLS (and for tests):
//! a CA and a server certificate it signs for `localhost` and 127.0.0.1,
//! written as PEM files into a fresh directory that is removed on drop.
//! Nothing here is for production: the keys live only as long as the value.

use std::io;
use std::path::{Path, PathBuf};

use hipfs_rdma::TlsConfig;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// The PEM files of a throwaway CA and the server certificate it signed.
pub struct ThrowawayPki {
    dir: PathBuf,
    /// The CA certificate (what clients trust: `-o tls,ca=FILE`).
    pub ca: PathBuf,
    /// The server's certificate chain (`--tls-cert`).
    pub cert: PathBuf,
    /// The server's private key (`--tls-key`).
    pub key: PathBuf,
}

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("generating a throwaway certificate: {e}"))
}

impl ThrowawayPki {
    /// Generates a CA and a server certificate for `names` (DNS names or IP
    /// addresses) in a new directory under the system's temporary directory.
    pub fn new(names: &[&str]) -> io::Result<ThrowawayPki> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let tag = format!(
            "{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let dir = std::env::temp_dir().join(format!("hipfs-pki-{tag}"));
        std::fs::create_dir_all(&dir)?;
        let pki = ThrowawayPki {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            dir,
        };
        let ca_key = KeyPair::generate().map_err(other)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(other)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("hipfs throwaway CA {tag}"));
        let ca_cert = ca_params.self_signed(&ca_key).map_err(other)?;
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().map_err(other)?;
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .map_err(other)?;
        let cert = params.signed_by(&key, &issuer).map_err(other)?;
        std::fs::write(&pki.ca, ca_cert.pem())?;
        std::fs::write(&pki.cert, cert.pem())?;
        std::fs::write(&pki.key, key.serialize_pem())?;
        Ok(pki)
    }

    /// For loopback: `localhost` and 127.0.0.1.
    pub fn localhost() -> io::Result<ThrowawayPki> {
        ThrowawayPki::new(&["localhost", "127.0.0.1"])
    }

    /// Settings for both ends in one value (an in-process pair).
    pub fn both(&self) -> TlsConfig {
        TlsConfig {
            ca: Some(self.ca.clone()),
            ..TlsConfig::server(&self.cert, &self.key)
        }
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for ThrowawayPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
