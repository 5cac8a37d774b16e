//! The direct path of a read-only open on a multi-server mount: one
//! [`RemoteFile`] per server (each its own connection with its own
//! capability, from that server through the mount), reads spread over
//! them ([`super::super::spread`]), a server that fails left out until a
//! probe finds it answering again.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hipfs_fusefs::IdentifyPurpose;

use super::super::spread::{self, Member, Plan};
use super::{
    io_err, no_host_alias, process_cred, read_piece_len, ClientConfig, FileIdentity, RemoteClient,
    RemoteFile, PARALLEL,
};
use crate::error::{Error, Result};
use crate::lent;
use crate::userspace::{UserspaceBuf, UserspaceFs, UserspaceMem};

/// One server's handle of the file and how it is doing.
struct Part {
    file: RemoteFile,
    member: Member,
}

/// A file read through every server of its multi-server mount.
pub(super) struct SpreadFile {
    parts: Vec<Arc<Part>>,
    timeout: Duration,
    stall: Duration,
}

/// The capability the mount gave for `server`'s handle, asked again (after
/// that server restarted and forgot it).
fn renewed(fd: &OwnedFd, purpose: IdentifyPurpose, server: &str) -> Option<[u8; 32]> {
    use std::os::fd::AsRawFd;
    let payload = hipfs_fusefs::identify_fd_for(fd.as_raw_fd(), purpose).ok()?;
    let id = FileIdentity::decode(&payload)?;
    id.members
        .iter()
        .find(|(s, _)| s == server)
        .map(|(_, cap)| *cap)
}

/// Binds a file whose identity names `members` (see [`super::bind`]):
/// every server connects on first use, so one that is down now joins later.
pub(super) fn bind(
    cfg: ClientConfig,
    id: FileIdentity,
    flags: i32,
    mount_fd: Arc<OwnedFd>,
    purpose: IdentifyPurpose,
) -> Result<Arc<dyn UserspaceFs>> {
    let timeout = cfg.timeout;
    let stall = cfg.failover_after();
    let parts = id
        .members
        .iter()
        .map(|(server, cap)| {
            let mut c = cfg.clone();
            c.server = server.clone();
            // The spread bounds every attempt; this bounds connecting.
            c.timeout = stall;
            c.connect_timeout = stall;
            c.connect_once = true;
            let fd = mount_fd.clone();
            let s = server.clone();
            let renew = move || renewed(&fd, purpose, &s);
            c.capability = Some(super::super::FileCapability::new(
                *cap,
                Some(Arc::new(renew)),
            ));
            let client = RemoteClient::unconnected(c);
            super::super::add_direct_client(&client);
            Arc::new(Part {
                file: RemoteFile {
                    client,
                    _mount_fd: Some(mount_fd.clone()),
                    id: FileIdentity {
                        server: server.clone(),
                        capability: Some(*cap),
                        ..id.clone()
                    },
                    flags: flags & (libc::O_ACCMODE | libc::O_APPEND),
                    cred: process_cred(),
                    server: Mutex::new((0, 0)),
                },
                member: Member::default(),
            })
        })
        .collect();
    Ok(Arc::new(SpreadFile {
        parts,
        timeout,
        stall,
    }))
}

impl spread::Probed for Part {
    fn member(&self) -> &Member {
        &self.member
    }

    /// A one-byte read.
    fn probe(&self, stall: Duration) -> bool {
        let c = &self.file.client;
        let mut one = [0u8; 1];
        let r = c.within(Some(Instant::now() + stall), false, false, || {
            self.file.read_piece(&mut one, 0)
        });
        let answered = spread::answered(&r);
        if !answered {
            c.drop_link();
        }
        answered
    }
}

impl UserspaceFs for SpreadFile {
    fn fs_type(&self) -> String {
        "hipfs".into()
    }

    fn reads_ahead(&self) -> bool {
        true
    }

    fn parallelism(&self) -> usize {
        self.parts.len() * PARALLEL
    }

    fn identify(&self) -> String {
        let first = self.parts.first().map(|p| p.file.identify());
        format!(
            "{} (spread over {} servers)",
            first.unwrap_or_default(),
            self.parts.len()
        )
    }

    fn places_device(&self, _addr: usize, _len: usize) -> bool {
        false
    }

    fn read(&self, mut buf: UserspaceBuf, offset: u64) -> Result<usize> {
        if let UserspaceMem::Rdma { host_ptr: None, .. } = *buf.mem() {
            // Device memory without a host alias: the first server alone.
            return match self.parts.first() {
                Some(p) => p.file.read(buf, offset),
                None => Err(no_host_alias()),
            };
        }
        for p in &self.parts {
            spread::probe_if_due(p, self.stall);
        }
        let mem = lent::host_bytes_mut(&mut buf).ok_or_else(no_host_alias)?;
        let members: Vec<&Member> = self.parts.iter().map(|p| &p.member).collect();
        // Small enough that the last extents of a call, read while other
        // servers may already be idle, are a small part of it (4 per
        // worker), never above the single-server piece.
        let workers = self.parts.len() * PARALLEL;
        let extent = (mem.len() / (workers * 4)).clamp(256 << 10, read_piece_len());
        let plan = Plan {
            extent,
            per_server: PARALLEL,
            deadline: Instant::now() + self.timeout,
            stall: self.stall,
        };
        spread::read(&members, mem, offset, plan, &|m, dst, at, until| {
            let f = &self.parts[m].file;
            let r = f
                .client
                .within(Some(until), false, false, || f.read_piece(dst, at));
            if r == Err(libc::ETIMEDOUT) {
                // Abandoned: no late placement may land in `dst` later.
                f.client.drop_link();
            }
            r
        })
        .map_err(|e| io_err(e, "read"))
    }

    fn write(&self, buf: UserspaceBuf, offset: u64) -> Result<usize> {
        // Only read-only opens are spread: the server refuses (EBADF).
        match self.parts.first() {
            Some(p) => p.file.write(buf, offset),
            None => Err(Error::system(libc::EBADF, "hipfs remote write")),
        }
    }
}
