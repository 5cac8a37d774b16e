//! `hipfs mount` as library calls: option parsing, the in-process mount,
//! and the daemonizing wrapper.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hipfs_fusefs::{MountConfig, MountHandle};
use hipfs_rdma::TransportKind;

use super::auth::Token;
use super::client::backend::RemoteFs;
use super::client::cluster::Cluster;
use super::client::{ClientConfig, RemoteClient};
use super::server::{ServeConfig, Server};
use super::RemoteError;

/// The `-o` options of `hipfs mount` (and of `mount -t fuse.hipfs`).
#[derive(Clone, Debug, PartialEq)]
pub struct MountOptions {
    /// Refuse writes.
    pub read_only: bool,
    /// Let other users in (`allow_other`): on by default for a mount made by
    /// root, like an NFS mount (the server's permission checks decide, as
    /// the caller, with the kernel's mode checks in front); `private` turns
    /// it off. Off by default for other users (FUSE lets only root allow
    /// other users through `user_allow_other`).
    pub allow_other: bool,
    /// `private`: only the mounting user (and no one else, root included
    /// for a non-root mount) may use the mount.
    pub private: bool,
    /// File holding the token.
    pub token_file: Option<PathBuf>,
    /// The server's local ticket socket (`local_socket=PATH`); `None`: the
    /// default one for a loopback server.
    pub local_socket: Option<PathBuf>,
    /// How long the kernel caches attributes.
    pub attr_timeout: Option<Duration>,
    /// How long the kernel caches names.
    pub entry_timeout: Option<Duration>,
    /// How long the kernel caches "no such name".
    pub negative_timeout: Option<Duration>,
    /// `nowatch`: ask the server for no change notices, and cache for
    /// short times only (1 s attributes and names, no missing names).
    pub no_watch: bool,
    /// Bypass the page cache.
    pub direct_io: bool,
    /// How long a call waits for an absent server before failing.
    pub timeout: Duration,
    /// Which transport to use.
    pub transport: TransportKind,
    /// FUSE worker threads.
    pub threads: Option<usize>,
    /// Page-cache readahead window in bytes (`max_readahead=SIZE`); `None` keeps
    /// [`MountConfig`]'s default.
    pub max_readahead: Option<u32>,
    /// Answer extended-attribute calls with ENOSYS (faster `ls -l`).
    pub no_xattr: bool,
    /// No POSIX ACLs through this mount (`noacl`, as NFS's): their
    /// attributes are answered "not supported" and the kernel checks mode
    /// bits only (the server still applies ACLs as the caller). `ls -l`
    /// then stops asking for every file's ACL; other xattrs stay.
    pub no_acl: bool,
    /// `nohold`: files made through the mount send every write and
    /// attribute change at once instead of at the close (see
    /// docs/CONSISTENCY.md, "Files this mount creates").
    pub no_hold: bool,
    /// `hard` (the default) retries a request until the server answers or
    /// the caller is killed; `soft` fails it after `timeout` (see
    /// [`ClientConfig::hard`] and README "Mount options").
    pub hard: bool,
    /// TLS on TCP (`tls`, `ca=FILE` or `tls_ca=FILE`, optional
    /// `tls_name=NAME`): the CA that signed the server's certificate.
    pub tls_ca: Option<PathBuf>,
    /// `tls_name=NAME`: the name the server's certificate must carry (the
    /// server's host part by default).
    pub tls_name: Option<String>,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            read_only: false,
            allow_other: false,
            private: false,
            token_file: None,
            local_socket: None,
            attr_timeout: None,
            entry_timeout: None,
            negative_timeout: None,
            no_watch: false,
            direct_io: false,
            timeout: Duration::from_secs(30),
            transport: TransportKind::Auto,
            threads: None,
            max_readahead: None,
            no_xattr: false,
            no_acl: false,
            no_hold: false,
            hard: true,
            tls_ca: None,
            tls_name: None,
        }
    }
}

/// How long a mount whose server pushes change notices lets the kernel
/// cache names and attributes. The notices, not this lifetime, keep the
/// caches fresh; it bounds how long a notice lost without the server
/// noticing (none is known) could leave something stale.
pub const NOTIFIED_TTL: Duration = Duration::from_secs(60);

/// How long "no such extended attribute" answers are kept on a mount with
/// change notices: until a notice for the inode, in practice.
const NOTIFIED_XATTR_TTL: Duration = Duration::from_secs(24 * 3600);

/// Options `mount(8)` and fstab pass that mean nothing to a FUSE mount, or
/// that the kernel already applies.
const IGNORED: &[&str] = &[
    "rw",
    "defaults",
    "auto",
    "noauto",
    "user",
    "users",
    "nouser",
    "nofail",
    "_netdev",
    "dev",
    "nodev",
    "suid",
    "nosuid",
    "exec",
    "noexec",
    "atime",
    "noatime",
    "relatime",
    "strictatime",
    "default_permissions",
    "async",
    "sync",
];

fn secs(key: &str, v: &str) -> Result<Duration, RemoteError> {
    let f: f64 = v.parse().map_err(|_| {
        RemoteError::Config(format!("-o {key}={v}: expected seconds, e.g. {key}=1.5"))
    })?;
    if !(0.0..=86400.0).contains(&f) {
        return Err(RemoteError::Config(format!(
            "-o {key}={v}: must be 0..=86400 seconds"
        )));
    }
    Ok(Duration::from_secs_f64(f))
}

impl MountOptions {
    /// Parses a comma-separated `-o` list (several `-o` may be joined with commas).
    pub fn parse(list: &str) -> Result<MountOptions, RemoteError> {
        let mut o = MountOptions::default();
        let mut tls = false;
        for opt in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = opt
                .split_once('=')
                .map_or((opt, None), |(k, v)| (k, Some(v)));
            let need = |v: Option<&str>| {
                v.filter(|v| !v.is_empty())
                    .ok_or_else(|| RemoteError::Config(format!("-o {k} needs a value ({k}=...)")))
                    .map(str::to_string)
            };
            match k {
                "ro" => o.read_only = true,
                "allow_other" => {
                    o.allow_other = true;
                    o.private = false;
                }
                "private" => {
                    o.private = true;
                    o.allow_other = false;
                }
                "direct_io" => o.direct_io = true,
                "noxattr" => o.no_xattr = true,
                "noacl" => o.no_acl = true,
                "nohold" => o.no_hold = true,
                "hard" => o.hard = true,
                "soft" => o.hard = false,
                "token_file" => o.token_file = Some(PathBuf::from(need(v)?)),
                "local_socket" => o.local_socket = Some(PathBuf::from(need(v)?)),
                "tls" => tls = true,
                "ca" | "tls_ca" => o.tls_ca = Some(PathBuf::from(need(v)?)),
                "tls_name" => o.tls_name = Some(need(v)?),
                "attr_timeout" => o.attr_timeout = Some(secs(k, &need(v)?)?),
                "entry_timeout" => o.entry_timeout = Some(secs(k, &need(v)?)?),
                "negative_timeout" => o.negative_timeout = Some(secs(k, &need(v)?)?),
                "nowatch" => o.no_watch = true,
                "timeout" => o.timeout = secs(k, &need(v)?)?.max(Duration::from_millis(100)),
                "transport" => {
                    o.transport = need(v)?
                        .parse()
                        .map_err(|e: hipfs_rdma::Error| RemoteError::Config(e.to_string()))?
                }
                "threads" => {
                    let n: usize = need(v)?
                        .parse()
                        .map_err(|_| RemoteError::Config("-o threads=N needs a number".into()))?;
                    o.threads = Some(n);
                }
                "max_readahead" => {
                    let n = crate::units::parse_size(&need(v)?)
                        .ok()
                        .and_then(|n| u32::try_from(n).ok())
                        .filter(|n| (4096..=16 << 20).contains(n))
                        .ok_or_else(|| {
                            RemoteError::Config(
                                "-o max_readahead=SIZE needs 4K..16M, e.g. max_readahead=8M".into(),
                            )
                        })?;
                    o.max_readahead = Some(n);
                }
                k if IGNORED.contains(&k) || k.starts_with("x-") || k.starts_with("comment=") => {}
                _ => {
                    return Err(RemoteError::Config(format!(
                        "unknown mount option '{opt}' (known: ro, allow_other, private, direct_io, noxattr, noacl, nohold, hard, soft, token_file=FILE, local_socket=PATH, tls, ca=FILE, tls_name=NAME, attr_timeout=S, entry_timeout=S, negative_timeout=S, nowatch, timeout=S, transport=auto|tcp|verbs, threads=N, max_readahead=SIZE)"
                    )))
                }
            }
        }
        if tls && o.tls_ca.is_none() {
            return Err(RemoteError::Config(
                "-o tls needs the CA that signed the server's certificate: -o tls,ca=FILE".into(),
            ));
        }
        if o.tls_name.is_some() && o.tls_ca.is_none() {
            return Err(RemoteError::Config(
                "-o tls_name=NAME needs -o tls,ca=FILE".into(),
            ));
        }
        Ok(o)
    }

    /// The client settings for `server`.
    pub fn client_config(&self, server: &str) -> Result<ClientConfig, RemoteError> {
        let mut c = ClientConfig::new(server);
        c.transport = self.transport;
        c.timeout = self.timeout;
        c.hard = self.hard;
        if let Some(t) = &self.token_file {
            c.token = Some(Token::from_file(t)?);
            c.token_file = Some(t.canonicalize().unwrap_or_else(|_| t.clone()));
        }
        if let Some(p) = &self.local_socket {
            c.local_ticket = super::client::LocalTicket::At(p.clone());
        }
        if let Some(ca) = &self.tls_ca {
            // Absolute: UserspaceFs processes get this path from the mount
            // and may run in another directory.
            c.tls = Some(hipfs_rdma::TlsConfig {
                server_name: self.tls_name.clone(),
                ..hipfs_rdma::TlsConfig::client(ca.canonicalize().unwrap_or_else(|_| ca.clone()))
            });
        }
        Ok(c)
    }

    /// The FUSE settings for a mount on `mountpoint`; `notified`: the
    /// server pushes change notices, so names, attributes, missing names
    /// and directory listings are cached for [`NOTIFIED_TTL`] (each change
    /// invalidates them at once) unless the options say otherwise.
    pub fn mount_config(
        &self,
        mountpoint: &Path,
        fs_name: &str,
        server_ro: bool,
        notified: bool,
    ) -> MountConfig {
        let mut m = MountConfig::new(mountpoint);
        if notified {
            m.attr_timeout = NOTIFIED_TTL;
            m.entry_timeout = NOTIFIED_TTL;
            m.negative_timeout = NOTIFIED_TTL;
            m.cache_dir = true;
            // The kernel keeps ACLs until the inode is invalidated (not
            // for a lifetime), so only a notified mount may let it.
            m.posix_acl = !self.no_xattr && !self.no_acl;
        }
        if let Some(t) = self.negative_timeout {
            m.negative_timeout = t;
        }
        m.fs_name = fs_name.replace([',', ' ', '\n'], "_");
        m.read_only = self.read_only || server_ro;
        m.allow_other = self.allow_other || (hipfs_sys::process::euid() == 0 && !self.private);
        m.owner_only = self.private;
        m.direct_io = self.direct_io;
        if let Some(t) = self.attr_timeout {
            m.attr_timeout = t;
        }
        if let Some(t) = self.entry_timeout {
            m.entry_timeout = t;
        }
        if let Some(n) = self.threads {
            m.threads = n.clamp(1, 64);
        }
        if let Some(n) = self.max_readahead {
            m.max_readahead = n;
        }
        m
    }
}

/// A mounted export and, for `--local`, the in-process server behind it.
pub struct LocalMount {
    /// The FUSE mount.
    pub handle: Option<MountHandle>,
    /// The client serving it.
    pub client: Arc<RemoteClient>,
    /// The local server of a `--local` mount.
    pub server: Option<Server>,
}

impl LocalMount {
    /// Whether the FUSE session of this mount has ended (unmounted from
    /// outside, or the connection aborted).
    pub fn session_ended(&self) -> bool {
        self.handle.as_ref().is_none_or(MountHandle::session_ended)
    }

    /// Unmounts, then stops the in-process server (if any).
    pub fn unmount(mut self) -> Result<(), RemoteError> {
        if let Some(h) = self.handle.take() {
            h.unmount()?;
        }
        if let Some(s) = self.server.take() {
            s.shutdown(Duration::from_secs(5));
        }
        Ok(())
    }
}

/// Connects to `server` and mounts its export on `mountpoint`, served by
/// background threads of this process.
///
/// `server` may name several servers of one export, comma-separated
/// (`s1:7471,s2:7471,s3:7471`): a multi-server mount (see
/// [`super::client::cluster`]), which refuses to start when the servers
/// that answer say different export ids.
pub fn mount_remote(
    server: &str,
    mountpoint: &Path,
    opts: &MountOptions,
) -> Result<LocalMount, RemoteError> {
    let servers = split_servers(server)?;
    let (client, cluster) = if servers.len() == 1 {
        (RemoteClient::connect(opts.client_config(server)?)?, None)
    } else {
        if opts.local_socket.is_some() {
            return Err(RemoteError::Config(
                "-o local_socket=PATH names one server's socket; a multi-server mount gets each loopback server's ticket from its default socket, or uses -o token_file=FILE".into(),
            ));
        }
        let cfgs = servers
            .iter()
            .map(|s| opts.client_config(s))
            .collect::<Result<Vec<_>, _>>()?;
        let cluster = Cluster::connect(&cfgs)?;
        let mut main = cfgs[0].clone();
        main.failover = servers[1..].to_vec();
        main.export_id = Some(cluster.export_id().to_string());
        (RemoteClient::connect(main)?, Some(cluster))
    };
    let fs_name = format!("{}:{}", servers.join(","), client.export_name());
    let handle = mount_client(
        &client,
        cluster,
        mountpoint,
        opts,
        &fs_name,
        client.read_only(),
    )?;
    Ok(LocalMount {
        handle: Some(handle),
        client,
        server: None,
    })
}

/// Serves `dir` on a loopback port inside this process (with a fresh random
/// token that only this process holds) and mounts it on `mountpoint`.
pub fn mount_local(
    dir: &Path,
    mountpoint: &Path,
    opts: &MountOptions,
) -> Result<LocalMount, RemoteError> {
    let token = Token::from_bytes(hex_token(&super::auth::random_nonce()?).as_bytes());
    let mut scfg = ServeConfig::new(dir, "127.0.0.1:0");
    scfg.token = Some(token.clone());
    // The token never leaves this process: its only holder is this mount
    // daemon, on this host, so its root is not squashed.
    scfg.policy.no_root_squash = true;
    scfg.read_only = opts.read_only;
    scfg.transport = TransportKind::Tcp;
    let server = Server::start(scfg)?;
    let mut ccfg = opts.client_config(server.local_addr())?;
    ccfg.token = Some(token.clone());
    ccfg.transport = TransportKind::Tcp;
    let client = RemoteClient::connect(ccfg)?;
    let fs_name = format!("local:{}", dir.display());
    let handle = mount_client(&client, None, mountpoint, opts, &fs_name, false)?;
    Ok(LocalMount {
        handle: Some(handle),
        client,
        server: Some(server),
    })
}

/// Mounts `client`'s export: subscribed to change notices unless
/// `nowatch` (or the server cannot send them), caching accordingly.
fn mount_client(
    client: &Arc<RemoteClient>,
    cluster: Option<Arc<Cluster>>,
    mountpoint: &Path,
    opts: &MountOptions,
    fs_name: &str,
    server_ro: bool,
) -> Result<MountHandle, RemoteError> {
    let mut fs = RemoteFs::new(client.clone())
        .without_xattrs(opts.no_xattr)
        .without_acls(opts.no_acl)
        .without_holding(opts.no_hold);
    if let Some(c) = cluster {
        fs = fs.with_cluster(c);
    }
    let feed = if opts.no_watch { None } else { fs.subscribe() };
    let cfg = opts.mount_config(mountpoint, fs_name, server_ro, feed.is_some());
    // With notices, "no such xattr" holds until a notice names the inode
    // (setting one is a change inotify reports).
    let xattr_ttl = if feed.is_some() {
        NOTIFIED_XATTR_TTL
    } else {
        cfg.attr_timeout
    };
    let fs = Arc::new(fs.with_xattr_ttl(xattr_ttl));
    let handle = hipfs_fusefs::mount(fs.clone(), cfg)?;
    if let (Some(feed), Some(inv)) = (feed, handle.invalidator()) {
        fs.apply_changes(feed, inv);
    }
    Ok(handle)
}

/// The servers of a mount source: one, or several comma-separated
/// (duplicates refused: each server is one connection and one share).
pub fn split_servers(source: &str) -> Result<Vec<String>, RemoteError> {
    let servers: Vec<String> = source
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(super::client::with_default_port)
        .collect();
    if servers.is_empty() {
        return Err(RemoteError::Config(format!(
            "mount source {source:?} names no server (SERVER[:PORT], or several: s1:7471,s2:7471)"
        )));
    }
    for (i, s) in servers.iter().enumerate() {
        if servers[..i].contains(s) {
            return Err(RemoteError::Config(format!(
                "mount source names server {s} twice"
            )));
        }
    }
    Ok(servers)
}

fn hex_token(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_with_commas_names_several_servers_each_with_its_port() {
        assert_eq!(split_servers("a").unwrap(), ["a:7471"]);
        assert_eq!(
            split_servers("a:1,b,[::1]:3").unwrap(),
            ["a:1", "b:7471", "[::1]:3"]
        );
        assert!(split_servers(",").is_err());
        assert!(split_servers("a:1,a:1").is_err());
    }

    #[test]
    fn mounts_are_hard_unless_soft_is_asked_for_and_the_last_of_the_two_wins() {
        assert!(MountOptions::default().hard);
        assert!(MountOptions::parse("ro").unwrap().hard);
        assert!(!MountOptions::parse("soft,timeout=2").unwrap().hard);
        assert!(MountOptions::parse("soft,hard").unwrap().hard);
        let soft = MountOptions::parse("hard,soft").unwrap();
        assert!(!soft.hard);
        assert!(!soft.client_config("h").unwrap().hard);
        assert!(MountOptions::default().client_config("h").unwrap().hard);
    }

    #[test]
    fn max_readahead_option_sets_the_window_and_rejects_sizes_out_of_range() {
        let o = MountOptions::parse("ro,max_readahead=4M").unwrap();
        assert_eq!(o.max_readahead, Some(4 << 20));
        let cfg = o.mount_config(Path::new("/mnt"), "x", false, false);
        assert_eq!(cfg.max_readahead, 4 << 20);
        let default = MountOptions::default().mount_config(Path::new("/mnt"), "x", false, false);
        assert_eq!(
            default.max_readahead,
            MountConfig::new("/mnt").max_readahead
        );
        for bad in [
            "max_readahead=1K",
            "max_readahead=32M",
            "max_readahead=x",
            "max_readahead",
        ] {
            assert!(MountOptions::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn tls_options_name_the_ca_and_tls_without_a_ca_is_refused() {
        for list in [
            "tls,ca=/etc/hipfs/ca.pem",
            "tls_ca=/etc/hipfs/ca.pem",
            "ro,tls,tls_ca=/etc/hipfs/ca.pem",
        ] {
            let o = MountOptions::parse(list).unwrap();
            assert_eq!(o.tls_ca, Some(PathBuf::from("/etc/hipfs/ca.pem")), "{list}");
            let c = o.client_config("storage1").unwrap();
            let t = c.tls.expect("TLS on");
            assert_eq!(t.ca, Some(PathBuf::from("/etc/hipfs/ca.pem")));
            assert_eq!(t.server_name, None);
        }
        let o = MountOptions::parse("tls,ca=/x.pem,tls_name=storage1.example").unwrap();
        assert_eq!(o.tls_name.as_deref(), Some("storage1.example"));
        assert!(MountOptions::parse("ro")
            .unwrap()
            .client_config("h")
            .unwrap()
            .tls
            .is_none());
        for bad in ["tls", "tls,ca=", "tls_name=x"] {
            assert!(MountOptions::parse(bad).is_err(), "{bad} accepted");
        }
    }
}
