//! Multi-server mounts: one namespace exported by several `hipfs serve`
//! processes (on nodes of a shared or distributed filesystem), used by a
//! mount all at once (`hipfs mount s1:7471,s2:7471,s3:7471:/ MNT`).
//!
//! - Metadata, writes and everything else go to one server at a time:
//!   the mount's [`RemoteClient`] with the others as
//!   [`ClientConfig::failover`], which moves on when its server cannot be
//!   reached or leaves a request unanswered, and reopens its files there.
//! - Reads of files opened read-only are spread (the `spread` module): each
//!   server of the [`Cluster`] has its own connection and its own handle
//!   of the file, opened as the file's opener on first use. A file opened
//!   for writing is read through the server that takes its writes, so a
//!   process always reads what it wrote.
//! - All servers must say the same export id ([`Cluster::connect`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::super::proto::{Op, Payload, ReadDest, WireCred, MAX_IO};
use super::super::RemoteError;
use super::spread::{self, Member, Plan};
use super::{ClientConfig, Link, RemoteClient};

/// Bytes per extent of a FUSE read (at most 1 MiB): four extents of one
/// request go to up to four servers at once.
const FUSE_EXTENT: usize = 256 << 10;
/// Extents in flight per server for one request.
const PER_SERVER: usize = 4;

/// One server of a cluster.
struct Node {
    client: Arc<RemoteClient>,
    member: Member,
}

impl spread::Probed for Node {
    fn member(&self) -> &Member {
        &self.member
    }

    /// A getattr of the export root.
    fn probe(&self, stall: Duration) -> bool {
        let c = &self.client;
        let r = c.within(Some(Instant::now() + stall), false, false, || {
            c.call(
                &super::own_cred(),
                Op::Getattr {
                    path: Vec::new(),
                    fh: None,
                },
            )
        });
        let answered = spread::answered(&r);
        if answered {
            log::info!("server {} answers again: back in the spread", c.server());
        } else {
            c.drop_link();
        }
        answered
    }
}

/// One open file's handles on each server: (connection epoch, handle).
struct Handles {
    ino: u64,
    cred: WireCred,
    fhs: Vec<Mutex<(u64, u64)>>,
}

/// The servers of a multi-server mount, for spread reads.
pub struct Cluster {
    nodes: Vec<Arc<Node>>,
    export_id: String,
    timeout: Duration,
    stall: Duration,
    /// Mount file handle → its handles on the servers.
    files: Mutex<HashMap<u64, Arc<Handles>>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("servers", &self.servers())
            .field("export_id", &self.export_id)
            .finish()
    }
}

/// The export id most of `ids` say (the first server's on a tie), and a
/// refusal naming every server that says another.
fn agree(ids: &[(String, Option<String>)]) -> Result<String, RemoteError> {
    if let Some((s, _)) = ids.iter().find(|(_, id)| id.is_none()) {
        return Err(RemoteError::Config(format!(
            "server {s} says no export id (it runs an older hipfs): a multi-server mount needs hipfs serve of this release on every server"
        )));
    }
    let mut best: Option<(&str, usize)> = None;
    for (_, id) in ids {
        let id = id.as_deref().unwrap_or_default();
        let n = ids.iter().filter(|(_, o)| o.as_deref() == Some(id)).count();
        if best.is_none_or(|(_, b)| n > b) {
            best = Some((id, n));
        }
    }
    let Some((want, _)) = best else {
        return Err(RemoteError::Config("no server answered".into()));
    };
    let (same, differ): (Vec<_>, Vec<_>) =
        ids.iter().partition(|(_, id)| id.as_deref() == Some(want));
    if let Some((s, id)) = differ.first() {
        let same: Vec<&str> = same.iter().map(|(s, _)| s.as_str()).collect();
        return Err(RemoteError::Config(format!(
            "server {s} exports id {}, but {} export{} id {want}: they do not serve the same namespace (start them over the same shared directory, or with the same hipfs serve --export-id)",
            id.as_deref().unwrap_or_default(),
            same.join(", "),
            if same.len() == 1 { "s" } else { "" },
        )));
    }
    Ok(want.to_string())
}

impl Cluster {
    /// Connects to every server of `cfgs` (one per server) and checks they
    /// say the same export id: a server that says another is named in the
    /// error. Servers that do not answer now are used once they do (and
    /// refused then if their id differs). Fails when none answers.
    pub fn connect(cfgs: &[ClientConfig]) -> Result<Arc<Cluster>, RemoteError> {
        let probes: Vec<(String, Result<Option<String>, RemoteError>)> = std::thread::scope(|s| {
            let hs: Vec<_> = cfgs
                .iter()
                .map(|c| {
                    s.spawn(move || {
                        let r = RemoteClient::connect(c.clone()).map(|cl| cl.export_id());
                        (c.server.clone(), r)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        (
                            String::new(),
                            Err(RemoteError::Config("probe panicked".into())),
                        )
                    })
                })
                .collect()
        });
        let mut answered = Vec::new();
        let mut first_err = None;
        for (server, r) in probes {
            match r {
                Ok(id) => answered.push((server, id)),
                // A refusal (authentication) is a configuration error.
                Err(e @ (RemoteError::Refused(_) | RemoteError::Auth(_))) => {
                    return Err(RemoteError::Config(format!("server {server}: {e}")))
                }
                Err(e) => {
                    log::warn!("server {server} does not answer ({e}); it joins when it does");
                    first_err.get_or_insert(RemoteError::Config(format!("server {server}: {e}")));
                }
            }
        }
        if answered.is_empty() {
            return Err(first_err.unwrap_or_else(|| RemoteError::Config("no servers given".into())));
        }
        let export_id = agree(&answered)?;
        let timeout = cfgs.first().map_or(Duration::from_secs(30), |c| c.timeout);
        let stall = cfgs
            .first()
            .map_or(Duration::from_secs(10), ClientConfig::failover_after);
        let nodes = cfgs
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c.export_id = Some(export_id.clone());
                // Bounded by the spread (which moves a failed extent to
                // another server), never waiting on one server.
                c.hard = false;
                c.failover.clear();
                c.connect_timeout = stall;
                c.connect_once = true;
                // Every call of a server's client runs within the spread's
                // bounds; this also bounds setting up its connection.
                c.timeout = stall;
                Arc::new(Node {
                    client: RemoteClient::unconnected(c),
                    member: Member::default(),
                })
            })
            .collect();
        Ok(Arc::new(Cluster {
            nodes,
            export_id,
            timeout,
            stall,
            files: Mutex::new(HashMap::new()),
        }))
    }

    /// The servers, as configured.
    pub fn servers(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| n.client.server().to_string())
            .collect()
    }

    /// The export id every server says.
    pub fn export_id(&self) -> &str {
        &self.export_id
    }

    /// Per-server lines for `hipfs stats`.
    pub fn stats_text(&self) -> String {
        let mut s = format!(
            "  spread reads over {} servers (export id {}):\n",
            self.nodes.len(),
            self.export_id
        );
        for n in &self.nodes {
            s.push_str("    ");
            s.push_str(&n.member.line(n.client.server()));
            s.push('\n');
        }
        s
    }

    fn handles(&self, key: u64, ino: u64, cred: &WireCred) -> Arc<Handles> {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        files
            .entry(key)
            .or_insert_with(|| {
                Arc::new(Handles {
                    ino,
                    cred: cred.clone(),
                    fhs: self.nodes.iter().map(|_| Mutex::new((0, 0))).collect(),
                })
            })
            .clone()
    }

    /// Closes the handles of mount file `key` on every server.
    pub(crate) fn release(&self, key: u64) {
        let h = self
            .files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
        let Some(h) = h else { return };
        for (n, slot) in self.nodes.iter().zip(&h.fhs) {
            let (epoch, fh) = *slot.lock().unwrap_or_else(|p| p.into_inner());
            if epoch != 0 {
                n.client.post(&h.cred, Op::Release { fh }, epoch);
            }
        }
    }

    /// The handle of the file on server `m` valid on `link`, opened (read
    /// only, as the file's opener) if that connection has none yet; ESTALE
    /// when the path there names another file than the mount's.
    fn server_fh(&self, m: usize, h: &Handles, path: &[u8], link: &Arc<Link>) -> Result<u64, i32> {
        let c = &self.nodes[m].client;
        let mut slot = h.fhs[m].lock().unwrap_or_else(|p| p.into_inner());
        if slot.0 == link.epoch {
            return Ok(slot.1);
        }
        let Payload::Opened { fh } = c.call(
            &h.cred,
            Op::Open {
                path: path.to_vec(),
                flags: libc::O_RDONLY,
            },
        )?
        else {
            return Err(libc::EIO);
        };
        if let Ok(Payload::Attr(a)) = c.call(
            &h.cred,
            Op::Getattr {
                path: path.to_vec(),
                fh: Some(fh),
            },
        ) {
            if a.ino != h.ino {
                let _ = c.call(&h.cred, Op::Release { fh });
                return Err(libc::ESTALE);
            }
        }
        *slot = (link.epoch, fh);
        Ok(fh)
    }

    /// One extent from server `m`, placed straight into `dst`.
    fn read_extent(
        &self,
        m: usize,
        h: &Handles,
        path: &[u8],
        dst: &mut [u8],
        at: u64,
    ) -> Result<usize, i32> {
        let c = &self.nodes[m].client;
        let len = dst.len();
        // Kept registered while the request is in flight.
        let mut regions = Vec::new();
        let p = c.call_with(
            &h.cred,
            |link| {
                let fh = self.server_fh(m, h, path, link)?;
                let (region, off) = super::direct::destination(link, dst)?;
                let op = Op::Read {
                    fh,
                    offset: at,
                    len: len as u32,
                    dest: Some(ReadDest {
                        region: region.descriptor(),
                        offset: off,
                    }),
                };
                regions.push(region);
                Ok(op)
            },
            |_, _| {},
        );
        drop(regions);
        c.finish_placed_read(p?, dst)
    }

    /// Reads `size` bytes (at most MAX_IO) of mount file `key` (`path`,
    /// inode `ino`, opened by `cred`) at `offset`, spread over the servers.
    pub(crate) fn read(
        &self,
        key: u64,
        path: &[u8],
        ino: u64,
        cred: &WireCred,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, i32> {
        let h = self.handles(key, ino, cred);
        for n in &self.nodes {
            spread::probe_if_due(n, self.stall);
        }
        let mut buf = vec![0u8; (size as usize).min(MAX_IO)];
        let members: Vec<&Member> = self.nodes.iter().map(|n| &n.member).collect();
        let plan = Plan {
            extent: FUSE_EXTENT,
            per_server: PER_SERVER,
            deadline: Instant::now() + self.timeout,
            stall: self.stall,
        };
        let n = spread::read(&members, &mut buf, offset, plan, &|m, dst, at, until| {
            let c = &self.nodes[m].client;
            let r = c.within(Some(until), false, false, || {
                self.read_extent(m, &h, path, dst, at)
            });
            if r == Err(libc::ETIMEDOUT) {
                // Abandoned: no late placement may land in `dst` later.
                c.drop_link();
            }
            r
        })?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Capabilities for the direct path, one per server that answers:
    /// (server, capability for its read-only handle of mount file `key`).
    pub(crate) fn grants(
        &self,
        key: u64,
        path: &[u8],
        ino: u64,
        cred: &WireCred,
    ) -> Vec<(String, [u8; 32])> {
        let h = self.handles(key, ino, cred);
        let until = Instant::now() + self.stall;
        let mut out = Vec::new();
        for (m, n) in self.nodes.iter().enumerate() {
            let r = n.client.within(Some(until), false, false, || {
                n.client.call_with(
                    &h.cred,
                    |link| {
                        Ok(Op::GrantFile {
                            fh: self.server_fh(m, &h, path, link)?,
                            write: false,
                        })
                    },
                    |_, _| {},
                )
            });
            match r {
                Ok(Payload::Bytes(b)) => {
                    if let Ok(cap) = <[u8; 32]>::try_from(b.as_slice()) {
                        out.push((n.client.server().to_string(), cap));
                    }
                }
                other => log::info!(
                    "{}: no direct-path capability ({other:?}); the direct path leaves it out",
                    n.client.server()
                ),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        v.iter()
            .map(|(s, i)| (s.to_string(), i.map(str::to_string)))
            .collect()
    }

    #[test]
    fn the_server_whose_export_id_differs_is_named() {
        assert_eq!(
            agree(&ids(&[("a:1", Some("x")), ("b:1", Some("x"))])).unwrap(),
            "x"
        );
        let e = agree(&ids(&[
            ("a:1", Some("x")),
            ("b:1", Some("y")),
            ("c:1", Some("x")),
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("server b:1 exports id y"), "{e}");
        assert!(e.contains("a:1, c:1 export id x"), "{e}");
        let e = agree(&ids(&[("a:1", Some("x")), ("b:1", None)]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("b:1") && e.contains("older"), "{e}");
    }
}
