//! Open files: the handles the kernel holds, reopened by path on a new
//! connection, and their reads and writes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hipfs_fusefs::{Credentials, Errno, Ino, Result};

use hipfs_rdma::{OwnedRegion, TransportKind};

use super::super::super::proto::{Op, Payload, ReadDest, WireCred, MAX_IO};
use super::super::{Link, RecvBuf};
use super::{errno, wire_cred, RemoteFs};

/// An open file: enough to reopen it on a new connection.
pub(super) struct OpenFile {
    pub(super) ino: Ino,
    pub(super) path: Mutex<Vec<u8>>,
    pub(super) flags: i32,
    /// (connection epoch, server handle)
    pub(super) server: Mutex<(u64, u64)>,
    /// Who opened it: the identity a direct-path capability for it acts as.
    pub(super) cred: WireCred,
    /// The connection epoch its last write went out on (0: none yet).
    pub(super) written_on: AtomicU64,
}

/// A read or write of a handle that the same process read or wrote
/// successfully less than this ago is taken to continue one system call.
///
/// Why: the kernel splits a large read or write into several FUSE requests
/// (`direct_io` chunks of `max_read`, page-cache readahead windows, write
/// chunks) and, when a later one fails, returns the bytes of the earlier
/// ones as a short count and drops the error (`fuse_direct_io`,
/// `filemap_read`, `fuse_perform_write`): a program that takes a short read
/// for end of file silently truncates. The daemon cannot see where a
/// system call starts, only that requests follow each other this closely,
/// so on a `soft` mount such a continuation is retried as on a `hard` one
/// (until the server answers or the caller is killed) rather than failed.
/// A request after a pause (a new system call) fails after `timeout=S`.
pub(super) const MID_STREAM_GAP: Duration = Duration::from_millis(50);

/// The same for a request that starts exactly where the caller's last one
/// ended, as each piece of a split system call does: on a loaded host the
/// caller may take longer than [`MID_STREAM_GAP`] to be scheduled and send
/// the next piece (seen with 2 vCPUs busier than they have cores: a
/// `direct_io` read came back short, its second piece failed as if new).
/// A sequential reader's next system call within this time waits as a
/// continuation too; one after a longer pause fails after `timeout=S`.
const CONTIGUOUS_GAP: Duration = Duration::from_millis(500);

/// A handle's last successful read or write: by whom, when, and where it
/// ended.
#[derive(Clone, Copy, Debug)]
pub(super) struct Progress {
    pid: u32,
    at: Instant,
    end: u64,
}

impl Progress {
    /// Whether a request by `pid` at `offset`, made `now`, continues the
    /// system call this progress was part of.
    fn continued_by(&self, pid: u32, offset: u64, now: Instant) -> bool {
        let gap = now.saturating_duration_since(self.at);
        self.pid == pid && (gap < MID_STREAM_GAP || (offset == self.end && gap < CONTIGUOUS_GAP))
    }
}

impl RemoteFs {
    /// The current FUSE caller's pid and the last successful read or
    /// write of `fh` (by whichever caller).
    fn last_progress(&self, fh: u64) -> Option<(u32, Progress)> {
        let pid = hipfs_fusefs::caller_pid()?;
        let last = *self
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh)?;
        Some((pid, last))
    }

    /// Whether a read or write of `fh` at `offset` by the current FUSE
    /// caller continues one that just succeeded (see [`MID_STREAM_GAP`]).
    fn mid_stream(&self, fh: u64, offset: u64) -> bool {
        self.last_progress(fh)
            .is_some_and(|(pid, last)| last.continued_by(pid, offset, Instant::now()))
    }

    /// Whether a read or write of `fh` by the current FUSE caller
    /// succeeded after `since` (a sibling request of the same system call).
    fn progressed_since(&self, fh: u64, since: Instant) -> bool {
        self.last_progress(fh)
            .is_some_and(|(pid, last)| last.pid == pid && last.at > since)
    }

    /// Notes that the current FUSE caller's read or write of `fh` succeeded
    /// up to `end`.
    fn note_progress(&self, fh: u64, end: u64) {
        if let Some(pid) = hipfs_fusefs::caller_pid() {
            let at = Instant::now();
            self.streams
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(fh, Progress { pid, at, end });
        }
    }

    pub(super) fn file(&self, fh: u64) -> Result<Arc<OpenFile>> {
        self.files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    /// The server handle of `f` valid on `link`, reopening it there if the
    /// connection changed since it was opened.
    pub(super) fn server_fh(
        &self,
        f: &OpenFile,
        link: &Arc<Link>,
        cred: &WireCred,
    ) -> std::result::Result<u64, i32> {
        let (epoch, fh) = *f.server.lock().unwrap_or_else(|p| p.into_inner());
        if epoch == link.epoch {
            return Ok(fh);
        }
        let path = f.path.lock().unwrap_or_else(|p| p.into_inner()).clone();
        // Reopened as root would bypass the permissions checked at open
        // time; reopen as the caller, without the one-time flags.
        let flags = f.flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
        let reply = self.client.call_with(
            cred,
            |_| {
                Ok(Op::Open {
                    path: path.clone(),
                    flags,
                })
            },
            |_, _| {},
        )?;
        let Payload::Opened { fh: new_fh } = reply else {
            return Err(libc::EIO);
        };
        // Make sure it is still the same file.
        let check = self.client.call(
            cred,
            Op::Getattr {
                path: path.clone(),
                fh: Some(new_fh),
            },
        )?;
        if let Payload::Attr(a) = check {
            if a.ino != f.ino {
                let _ = self.client.call(cred, Op::Release { fh: new_fh });
                return Err(libc::ESTALE);
            }
        }
        log::info!(
            "reopened {} after reconnect",
            String::from_utf8_lossy(&path)
        );
        *f.server.lock().unwrap_or_else(|p| p.into_inner()) = (link.epoch, new_fh);
        Ok(new_fh)
    }

    /// Runs an operation on open file `fh`.
    pub(super) fn file_call(
        &self,
        fh: u64,
        cred: &Credentials,
        make: impl Fn(u64, &Arc<Link>) -> std::result::Result<Op, i32>,
    ) -> Result<Payload> {
        let f = self.file(fh)?;
        let wc = wire_cred(cred);
        self.client
            .call_with(
                &wc,
                |link| {
                    let sfh = self.server_fh(&f, link, &wc)?;
                    make(sfh, link)
                },
                |_, _| {},
            )
            .map_err(errno)
    }

    /// Some open handle of `ino`, if any.
    pub(super) fn open_fh_of(&self, ino: Ino) -> Option<u64> {
        self.files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(_, f)| f.ino == ino)
            .map(|(fh, _)| *fh)
    }

    pub(super) fn add_file(
        &self,
        ino: Ino,
        path: Vec<u8>,
        flags: i32,
        epoch: u64,
        sfh: u64,
        cred: WireCred,
    ) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.files
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                fh,
                Arc::new(OpenFile {
                    ino,
                    path: Mutex::new(path),
                    flags,
                    server: Mutex::new((epoch, sfh)),
                    cred,
                    written_on: AtomicU64::new(0),
                }),
            );
        fh
    }

    /// Opens `path` on the server and returns (epoch, server fh).
    pub(super) fn open_remote(&self, cred: &Credentials, op: Op) -> Result<(u64, Payload)> {
        let epoch = AtomicU64::new(0);
        let p = self.keeping_dir_attrs(|| {
            self.client
                .call_with(
                    &wire_cred(cred),
                    |_| Ok(op.clone()),
                    |link, _| epoch.store(link.epoch, Ordering::SeqCst),
                )
                .map_err(errno)
        })?;
        Ok((epoch.load(Ordering::SeqCst), p))
    }

    /// What [`Backend::identify`] answers for an open file: where it is,
    /// and a capability for this one open (its access mode, revoked when
    /// it is released), never the host's token. The caller holds the fd,
    /// which it opened through the mount with its own credentials.
    pub(super) fn identify_payload(&self, ino: Ino, fh: u64) -> Option<Vec<u8>> {
        let f = self.file(fh).ok()?;
        let path = f.path.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let write = f.flags & libc::O_ACCMODE != libc::O_RDONLY;
        let granted = self.client.call_with(
            &f.cred,
            |link| {
                Ok(Op::GrantFile {
                    fh: self.server_fh(&f, link, &f.cred)?,
                    write,
                })
            },
            |_, _| {},
        );
        let capability = match granted {
            Ok(Payload::Bytes(b)) => <[u8; 32]>::try_from(b.as_slice()).ok()?,
            other => {
                log::warn!(
                    "{}: no direct-path capability for {}: {other:?}",
                    self.client.server(),
                    String::from_utf8_lossy(&path)
                );
                return None;
            }
        };
        // A read-only open of a multi-server mount: the direct path
        // spreads its reads too, with a capability from every server.
        let members = match &self.cluster {
            Some(c) if !write => c.grants(fh, &path, ino, &f.cred),
            _ => Vec::new(),
        };
        let id = super::super::direct::FileIdentity {
            members,
            server: self.client.active_server(),
            export: self.client.export_name(),
            path,
            ino,
            capability: Some(capability),
            write,
            timeout_ms: self.client.cfg.timeout.as_millis() as u64,
            transport: self.client.cfg.transport,
            tls_ca: self.client.cfg.tls.as_ref().and_then(|t| t.ca.clone()),
            tls_name: self
                .client
                .cfg
                .tls
                .as_ref()
                .and_then(|t| t.server_name.clone()),
        };
        Some(id.encode())
    }

    pub(super) fn read_file(
        &self,
        _ino: Ino,
        fh: u64,
        offset: u64,
        size: u32,
        cred: &Credentials,
    ) -> Result<Vec<u8>> {
        let size = size.min(MAX_IO as u32);
        if size == 0 {
            return Ok(Vec::new());
        }
        if let Some(c) = &self.cluster {
            // Spread over the servers, outside this client's scope (each
            // server's attempts have their own bounds).
            let f = self.file(fh)?;
            if f.flags & libc::O_ACCMODE == libc::O_RDONLY {
                let path = f.path.lock().unwrap_or_else(|p| p.into_inner()).clone();
                match c.read(fh, &path, f.ino, &f.cred, offset, size) {
                    Ok(out) => {
                        self.bytes_read
                            .fetch_add(out.len() as u64, Ordering::Relaxed);
                        return Ok(out);
                    }
                    // The path no longer names the open file (unlinked or
                    // replaced since): only this mount's own handle still
                    // reaches it, below.
                    Err(libc::ENOENT | libc::ESTALE) => {}
                    Err(e) => return Err(errno(e)),
                }
            }
        }
        let started = Instant::now();
        let mut r = self
            .client
            .within(None, self.mid_stream(fh, offset), false, || {
                self.read_once(fh, offset, size, cred)
            });
        // Page-cache reads send several requests of one system call at
        // once (readahead): one that timed out while a sibling succeeded
        // would make the kernel return the sibling's bytes as a short
        // count. It is asked again, as a continuation: the server then
        // reads the range twice (the first answer, if it comes, is
        // dropped), a cost paid only when a server stalls past the timeout.
        // Patience is otherwise decided when a request starts
        // (`Scope::patient`), before a sibling's success can be known.
        if matches!(r, Err(e) if e == Errno::ETIMEDOUT) && self.progressed_since(fh, started) {
            r = self
                .client
                .within(None, true, false, || self.read_once(fh, offset, size, cred));
        }
        if let Ok(d) = &r {
            if !d.is_empty() {
                self.note_progress(fh, offset + d.len() as u64);
            }
        }
        r
    }

    /// One read of at most MAX_IO bytes, within the operation's scope.
    fn read_once(&self, fh: u64, offset: u64, size: u32, cred: &Credentials) -> Result<Vec<u8>> {
        let dest: Mutex<Option<(Arc<Link>, ReadTarget)>> = Mutex::new(None);
        let p = self.file_call(fh, cred, |sfh, link| {
            let mut slot = dest.lock().unwrap_or_else(|p| p.into_inner());
            if slot.as_ref().is_none_or(|(l, _)| !Arc::ptr_eq(l, link)) {
                *slot = Some((link.clone(), ReadTarget::new(link, size as usize)?));
            }
            let region = slot
                .as_ref()
                .map(|(_, t)| t.descriptor())
                .ok_or(libc::EIO)?;
            Ok(Op::Read {
                fh: sfh,
                offset,
                len: size,
                dest: Some(ReadDest { region, offset: 0 }),
            })
        });
        let slot = dest.into_inner().unwrap_or_else(|p| p.into_inner());
        match p {
            Ok(Payload::Read { n, data }) => {
                let n = (n as usize).min(size as usize);
                let out = match (data.is_empty(), slot) {
                    (false, _) => data,
                    (true, Some((link, target))) => target.into_data(&link, n),
                    (true, None) => Vec::new(),
                };
                self.bytes_read
                    .fetch_add(out.len() as u64, Ordering::Relaxed);
                Ok(out)
            }
            Ok(Payload::Placed { n, digest }) => {
                let Some((link, target)) = slot else {
                    return Err(Errno::EIO);
                };
                if n > size {
                    return Err(Errno::EIO);
                }
                let out = target.into_data(&link, n as usize);
                self.client.check_placed(&out, &digest).map_err(errno)?;
                self.bytes_read
                    .fetch_add(out.len() as u64, Ordering::Relaxed);
                Ok(out)
            }
            // On failure the buffer is dropped, not reused: a late placement
            // from the server must not land in another read's data.
            Ok(_) => Err(Errno::EIO),
            Err(e) => Err(e),
        }
    }

    pub(super) fn write_file(
        &self,
        _ino: Ino,
        fh: u64,
        offset: u64,
        data: &[u8],
        cred: &Credentials,
    ) -> Result<usize> {
        let positional = self.file(fh)?.flags & libc::O_APPEND == 0;
        let r = self
            .client
            .within(None, self.mid_stream(fh, offset), positional, || {
                self.write_chunks(fh, offset, data, cred)
            });
        if let Ok(n) = r {
            if n > 0 {
                self.note_progress(fh, offset + n as u64);
            }
        }
        r
    }

    /// Writes `data` in MAX_IO requests, all within one scope: one
    /// deadline in soft mode.
    fn write_chunks(&self, fh: u64, offset: u64, data: &[u8], cred: &Credentials) -> Result<usize> {
        let mut done = 0;
        while done < data.len() {
            let chunk = &data[done..(done + MAX_IO).min(data.len())];
            let p = self.file_call(fh, cred, |sfh, link| {
                if let Ok(f) = self.file(fh) {
                    f.written_on.store(link.epoch, Ordering::SeqCst);
                }
                Ok(Op::Write {
                    fh: sfh,
                    offset: offset + done as u64,
                    data: chunk.to_vec(),
                })
            })?;
            let Payload::Written(n) = p else {
                return Err(Errno::EIO);
            };
            done += n as usize;
            if (n as usize) < chunk.len() {
                break;
            }
        }
        self.bytes_written.fetch_add(done as u64, Ordering::Relaxed);
        Ok(done)
    }

    /// Syncs open file `fh`. On a multi-server mount, when its writes went
    /// to a connection (a server) that is no longer the one in use, the
    /// server now in use cannot sync what the old one took: `EIO`, as an
    /// NFS client answers a changed write verifier it cannot resend for.
    pub(super) fn sync_file(&self, fh: u64, datasync: bool, cred: &Credentials) -> Result<()> {
        let f = self.file(fh)?;
        let checked = self.cluster.is_some();
        self.file_call(fh, cred, |sfh, link| {
            let w = f.written_on.load(Ordering::SeqCst);
            if checked && w != 0 && w != link.epoch {
                log::warn!(
                    "{}: written through a server this mount has left; cannot sync it through another",
                    String::from_utf8_lossy(&f.path.lock().unwrap_or_else(|p| p.into_inner()))
                );
                return Err(libc::EIO);
            }
            Ok(Op::Fsync { fh: sfh, datasync })
        })
        .map(|_| ())
    }

    pub(super) fn release_file(
        &self,
        _ino: Ino,
        fh: u64,
        _flags: i32,
        cred: &Credentials,
    ) -> Result<()> {
        let f = self
            .files
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh)
            .ok_or(Errno::EBADF)?;
        self.streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh);
        if let Some(c) = &self.cluster {
            c.release(fh);
        }
        let (epoch, sfh) = *f.server.lock().unwrap_or_else(|p| p.into_inner());
        // Only the connection that opened it knows the handle (a new one
        // never saw it, and a dead one closed it). Nobody waits for the
        // answer: close(2) need not pay a round trip to free a server fd.
        self.client
            .post(&wire_cred(cred), Op::Release { fh: sfh }, epoch);
        Ok(())
    }
}

/// Where the server places one FUSE read.
enum ReadTarget {
    /// Over TCP registering is a table entry, so the reply's own vector is
    /// registered and filled in place: no copy on this side.
    Owned(OwnedRegion),
    /// Over verbs registering pins memory (slow): a pooled buffer, copied out.
    Pooled(RecvBuf),
}

impl ReadTarget {
    fn new(link: &Link, size: usize) -> std::result::Result<ReadTarget, i32> {
        if link.conn.kind() == TransportKind::Tcp {
            // Zeroed, so whatever the server does every byte handed on is initialised.
            OwnedRegion::new(link.conn.as_ref(), size)
                .map(ReadTarget::Owned)
                .map_err(|_| libc::ENOMEM)
        } else {
            link.take_recv_buf()
                .map(ReadTarget::Pooled)
                .map_err(|_| libc::ENOMEM)
        }
    }

    fn descriptor(&self) -> hipfs_rdma::RemoteDescriptor {
        match self {
            ReadTarget::Owned(r) => r.region().descriptor(),
            ReadTarget::Pooled(b) => b.region().descriptor(),
        }
    }

    /// The first `n` bytes; a pooled buffer goes back to its link.
    fn into_data(self, link: &Link, n: usize) -> Vec<u8> {
        match self {
            ReadTarget::Owned(r) => {
                let mut v = r.into_vec();
                v.truncate(n);
                v
            }
            ReadTarget::Pooled(b) => {
                let out = b.bytes(n).to_vec();
                link.put_recv_buf(b);
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(end: u64) -> (Progress, Instant) {
        let at = Instant::now();
        (Progress { pid: 7, at, end }, at)
    }

    #[test]
    fn any_request_by_the_caller_right_after_its_success_continues_it() {
        let (p, at) = progress(4096);
        let soon = at + MID_STREAM_GAP / 2;
        assert!(p.continued_by(7, 4096, soon));
        assert!(p.continued_by(7, 0, soon), "any offset, this close");
        assert!(!p.continued_by(8, 4096, soon), "another caller");
    }

    #[test]
    fn a_request_where_the_last_ended_continues_it_after_a_longer_delay() {
        let (p, at) = progress(3 << 20);
        let late = at + MID_STREAM_GAP * 4;
        assert!(late - at < CONTIGUOUS_GAP);
        assert!(p.continued_by(7, 3 << 20, late), "the next piece, late");
        assert!(!p.continued_by(7, 0, late), "elsewhere, late");
        assert!(!p.continued_by(8, 3 << 20, late), "another caller");
        assert!(
            !p.continued_by(7, 3 << 20, at + CONTIGUOUS_GAP),
            "after a pause it is a new system call"
        );
    }
}
