//! A throwaway certificate authority made at test time (rcgen): a CA, a
//! server certificate it signs for `localhost` and 127.0.0.1, and the PEM
//! files a [`TlsConfig`] names. The files live in a fresh directory that
//! is removed on drop.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use hipfs_rdma::TlsConfig;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

pub struct Pki {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn unique_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "hipfs-rdma-pki-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

impl Pki {
    /// A CA and a server certificate for `names`, written under a new directory.
    pub fn new(tag: &str, names: &[&str]) -> Pki {
        let dir = unique_dir(tag);
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("hipfs test CA {tag}"));
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        let write = |name: &str, text: String| -> PathBuf {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        Pki {
            ca: write("ca.pem", ca_cert.pem()),
            cert: write("cert.pem", cert.pem()),
            key: write("key.pem", key.serialize_pem()),
            dir,
        }
    }

    /// The usual one: `localhost` and 127.0.0.1.
    pub fn localhost(tag: &str) -> Pki {
        Pki::new(tag, &["localhost", "127.0.0.1"])
    }

    /// Both sides' settings in one value.
    pub fn both(&self) -> TlsConfig {
        TlsConfig {
            ca: Some(self.ca.clone()),
            ..TlsConfig::server(&self.cert, &self.key)
        }
    }

    pub fn server(&self) -> TlsConfig {
        TlsConfig::server(&self.cert, &self.key)
    }

    pub fn client(&self) -> TlsConfig {
        TlsConfig::client(&self.ca)
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
