//! UserspaceFs on hipfs mounts: reads and writes that bypass FUSE.
//!
//! The application opens a file through the mount (so the kernel checks
//! permissions and resolves the name); registration asks the mount with the
//! identify ioctl which server and remote file the fd is, and binds the
//! handle to the process-wide client for that server. Reads then travel as
//! protocol requests whose destination is the caller's own memory,
//! registered with the transport: the server places the bytes there with
//! `write_remote` (RDMA WRITE on verbs; applied by the receiving thread
//! straight from the socket on TCP), so no FUSE, no kernel page cache and no
//! extra copy on this side. Large requests are split into pieces kept in
//! flight together. Device memory is placed by verbs (`device_reg`), or over
//! TCP through each lane's pinned staging when `HIPFS_TCP_LANE_STAGING` asks
//! for it (`lane_staging`); otherwise the library stages it.

mod multi;

use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use hipfs_fusefs::IdentifyPurpose;
use hipfs_rdma::TransportKind;

use super::super::proto::{Op, Payload, ReadDest, WireCred, MAX_IO};
use super::{ClientConfig, Link, RemoteClient};
use crate::error::{Error, OpError, Result};
use crate::gpu::MemoryKind;
use crate::lent;
use crate::registry::{buffer_containing, RDMA_REGISTER};
use crate::userspace::{UserspaceBuf, UserspaceFs, UserspaceMem};

/// What the mount tells a process about an open file (the identify ioctl's payload).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileIdentity {
    /// The server's `host:port`.
    pub server: String,
    /// The exported directory on the server.
    pub export: String,
    /// Path relative to the export.
    pub path: Vec<u8>,
    /// Inode number the server reported.
    pub ino: u64,
    /// The capability for this one open file, from the server through the
    /// mount daemon. Payloads of older mounts carried a `token_file` line
    /// instead; it is ignored (a process never gets the host's token).
    pub capability: Option<[u8; 32]>,
    /// Whether the capability allows writing (the file was opened for it).
    pub write: bool,
    /// The mount's `timeout=` in milliseconds (0: not said).
    pub timeout_ms: u64,
    /// The mount's `transport=` (payloads from older mounts say nothing: Auto).
    pub transport: TransportKind,
    /// The mount's TLS CA file (`-o tls,ca=FILE`): a process's own
    /// connection uses TLS too. None: plaintext.
    pub tls_ca: Option<PathBuf>,
    /// The server name the mount checks the certificate for, if not the host.
    pub tls_name: Option<String>,
    /// A read-only open on a multi-server mount: every server that
    /// granted a capability for its own handle of the file, so that the
    /// direct path spreads its reads over them (`member=SERVER,HEX` lines;
    /// older readers ignore them and use `server` alone).
    pub members: Vec<(String, [u8; 32])>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl FileIdentity {
    const HEADER: &'static str = "hipfs-file v1";

    /// Text form: a header line, then `key=value` lines (binary values hex).
    pub fn encode(&self) -> Vec<u8> {
        let mut s = format!(
            "{}\nserver={}\nexport={}\nino={}\npath={}\ntransport={}\n",
            Self::HEADER,
            self.server,
            hex(self.export.as_bytes()),
            self.ino,
            hex(&self.path),
            self.transport
        );
        if let Some(c) = &self.capability {
            s.push_str(&format!("capability={}\nwrite={}\n", hex(c), self.write));
        }
        if self.timeout_ms > 0 {
            s.push_str(&format!("timeout_ms={}\n", self.timeout_ms));
        }
        if let Some(t) = &self.tls_ca {
            s.push_str(&format!(
                "tls_ca={}\n",
                hex(t.as_os_str().as_encoded_bytes())
            ));
        }
        if let Some(n) = &self.tls_name {
            s.push_str(&format!("tls_name={}\n", hex(n.as_bytes())));
        }
        for (server, cap) in &self.members {
            s.push_str(&format!("member={server},{}\n", hex(cap)));
        }
        s.into_bytes()
    }

    /// Parses an identify payload (`None`: not one of ours).
    pub fn decode(b: &[u8]) -> Option<FileIdentity> {
        let s = std::str::from_utf8(b).ok()?;
        let mut lines = s.lines();
        if lines.next()? != Self::HEADER {
            return None;
        }
        let mut id = FileIdentity {
            server: String::new(),
            export: String::new(),
            path: Vec::new(),
            ino: 0,
            capability: None,
            write: false,
            timeout_ms: 0,
            transport: TransportKind::Auto,
            tls_ca: None,
            tls_name: None,
            members: Vec::new(),
        };
        for l in lines {
            let (k, v) = l.split_once('=')?;
            match k {
                "server" => id.server = v.to_string(),
                "export" => id.export = String::from_utf8(unhex(v)?).ok()?,
                "ino" => id.ino = v.parse().ok()?,
                "path" => id.path = unhex(v)?,
                "transport" => id.transport = v.parse().ok()?,
                "capability" => id.capability = Some(unhex(v)?.try_into().ok()?),
                "write" => id.write = v.parse().ok()?,
                "timeout_ms" => id.timeout_ms = v.parse().ok()?,
                // "token_file" of older mounts is deliberately not read.
                "tls_ca" => {
                    use std::os::unix::ffi::OsStringExt;
                    id.tls_ca = Some(PathBuf::from(std::ffi::OsString::from_vec(unhex(v)?)));
                }
                "tls_name" => id.tls_name = Some(String::from_utf8(unhex(v)?).ok()?),
                "member" => {
                    let (server, cap) = v.split_once(',')?;
                    id.members
                        .push((server.to_string(), unhex(cap)?.try_into().ok()?));
                }
                _ => {}
            }
        }
        super::super::proto::validate_rel_path(&id.path).ok()?;
        (!id.server.is_empty()).then_some(id)
    }
}

/// A file of a hipfs server opened for direct I/O.
pub struct RemoteFile {
    client: Arc<RemoteClient>,
    /// A duplicate of the caller's fd on the mount: keeps the mount's open
    /// (and so the capability) alive while this handle lives, and lets a
    /// reconnect ask the mount for a new capability.
    _mount_fd: Option<Arc<std::os::fd::OwnedFd>>,
    id: FileIdentity,
    flags: i32,
    cred: WireCred,
    /// (connection epoch, server handle)
    server: Mutex<(u64, u64)>,
}

fn io_err(errno: i32, what: &str) -> Error {
    Error::system(
        errno,
        format!(
            "hipfs remote {what}: {}",
            std::io::Error::from_raw_os_error(errno)
        ),
    )
}

fn process_cred() -> WireCred {
    use hipfs_sys::process::{egid, euid, getgroups};
    // A failed query sends no supplementary groups (as before: the server
    // then checks the primary ids only).
    let groups = getgroups().unwrap_or_default();
    WireCred {
        uid: euid(),
        gid: egid(),
        groups,
    }
}

impl RemoteFile {
    /// Opens `id` on `client` as this process's user.
    pub fn open(client: Arc<RemoteClient>, id: FileIdentity, flags: i32) -> Result<RemoteFile> {
        let cred = process_cred();
        let f = RemoteFile {
            client,
            _mount_fd: None,
            id,
            flags: flags & (libc::O_ACCMODE | libc::O_APPEND),
            cred,
            server: Mutex::new((0, 0)),
        };
        let link = f.client.link().map_err(Error::from)?;
        f.server_fh(&link).map_err(|e| io_err(e, "open"))?;
        Ok(f)
    }

    /// Tells the mount this file was written past it, so readers through
    /// the mount do not see stale cached pages or size. A mount that cannot
    /// (an older one) is logged once: its caches expire on their timeouts.
    fn invalidate_mount_cache(&self, offset: u64, len: u64) {
        use std::os::fd::AsRawFd;
        let Some(fd) = &self._mount_fd else { return };
        if let Err(e) = hipfs_fusefs::invalidate_fd(fd.as_raw_fd(), offset, len) {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                log::warn!(
                    "hipfs mount did not take the invalidation after a direct write ({e}); readers through the mount may see old data until its cache times out"
                )
            });
        }
    }

    fn server_fh(&self, link: &Arc<Link>) -> std::result::Result<u64, i32> {
        let mut s = self.server.lock().unwrap_or_else(|p| p.into_inner());
        if s.0 == link.epoch {
            return Ok(s.1);
        }
        let p = self.client.call(
            &self.cred,
            Op::Open {
                path: self.id.path.clone(),
                flags: self.flags,
            },
        )?;
        let Payload::Opened { fh } = p else {
            return Err(libc::EIO);
        };
        if let Ok(Payload::Attr(a)) = self.client.call(
            &self.cred,
            Op::Getattr {
                path: self.id.path.clone(),
                fh: Some(fh),
            },
        ) {
            if a.ino != self.id.ino {
                let _ = self.client.call(&self.cred, Op::Release { fh });
                return Err(libc::ESTALE);
            }
        }
        *s = (link.epoch, fh);
        Ok(fh)
    }

    /// The request for `len` bytes at `offset`, placed by the server at
    /// `at` in `region` (registered on `link`).
    fn placed_read(
        &self,
        link: &Arc<Link>,
        offset: u64,
        len: usize,
        region: &hipfs_rdma::LocalRegion,
        at: u64,
    ) -> std::result::Result<Op, i32> {
        Ok(Op::Read {
            fh: self.server_fh(link)?,
            offset,
            len: len as u32,
            dest: Some(ReadDest {
                region: region.descriptor(),
                offset: at,
            }),
        })
    }

    /// Reads `dst.len()` bytes at `offset` into `dst` (one request, at most READ_PIECE).
    fn read_piece(&self, dst: &mut [u8], offset: u64) -> std::result::Result<usize, i32> {
        let len = dst.len();
        // Regions lent to this request's attempts; they must outlive the
        // call (a retry lends a new one on its new link).
        let mut regions: Vec<Arc<hipfs_rdma::LocalRegion>> = Vec::new();
        let p = self.client.call_with(
            &self.cred,
            |link| {
                let (region, at) = destination(link, dst)?;
                let op = self.placed_read(link, offset, len, &region, at)?;
                // Keep the region registered while the request is in flight.
                regions.push(region);
                Ok(op)
            },
            |_, _| {},
        );
        drop(regions);
        self.client.finish_placed_read(p?, dst)
    }

    /// Reads into device memory the server places bytes in (RDMA WRITE
    /// into a dmabuf or peer-memory registration, see `device_reg`; over
    /// TCP through the lanes' pinned staging, see `lane_staging`): no host
    /// copy on this side. Pieces of up to [`read_piece_len`] kept in flight
    /// together as `read` does, on one deadline; the answer is the
    /// contiguous prefix.
    fn read_into_device(&self, addr: usize, len: usize, offset: u64) -> Result<usize> {
        let deadline = std::time::Instant::now() + self.client.cfg.timeout;
        let piece_len = read_piece_len();
        let results = in_flight(0..len.div_ceil(piece_len), self.parallel(), |i| {
            let at = i * piece_len;
            let n = piece_len.min(len - at);
            let r = self.client.within(Some(deadline), false, false, || {
                self.read_device_piece(addr + at, n, offset + at as u64)
            });
            (r, n)
        });
        contiguous_prefix(results, "read into device memory")
    }

    fn read_device_piece(
        &self,
        addr: usize,
        len: usize,
        offset: u64,
    ) -> std::result::Result<usize, i32> {
        let mut keep: Vec<Arc<dyn std::any::Any + Send + Sync>> = Vec::new();
        let p = self.client.call_with(
            &self.cred,
            |link| {
                let (region, at, owner) =
                    device_destination(link, addr, len).ok_or(libc::EOPNOTSUPP)?;
                let op = self.placed_read(link, offset, len, &region, at)?;
                keep.push(owner);
                Ok(op)
            },
            |_, _| {},
        );
        drop(keep);
        match p? {
            // The server placed nothing (it could not reach the region):
            // bytes came inline, which device memory cannot take here.
            Payload::Read { n, data } if data.is_empty() => Ok((n as usize).min(len)),
            Payload::Placed { n, digest } => {
                let n = n as usize;
                if n > len {
                    return Err(libc::EIO);
                }
                // Checking the hash needs the bytes on the host: copy back.
                let mut host = vec![0u8; n];
                lent::copy_back_device(lent::LentSpan::of_request(addr, n), &mut host)
                    .map_err(|_| libc::EIO)?;
                self.client.check_placed(&host, &digest)?;
                Ok(n)
            }
            _ => Err(libc::EIO),
        }
    }

    fn write_piece(&self, data: &[u8], offset: u64) -> std::result::Result<usize, i32> {
        let p = self.client.call_with(
            &self.cred,
            |link| {
                Ok(Op::Write {
                    fh: self.server_fh(link)?,
                    offset,
                    data: data.to_vec(),
                })
            },
            |_, _| {},
        )?;
        match p {
            Payload::Written(n) => Ok(n as usize),
            _ => Err(libc::EIO),
        }
    }
}

impl Drop for RemoteFile {
    fn drop(&mut self) {
        let (epoch, fh) = *self.server.lock().unwrap_or_else(|p| p.into_inner());
        if epoch != 0 {
            self.client.post(&self.cred, Op::Release { fh }, epoch);
        }
    }
}

/// Where the server places a read into `dst`: the region and
/// the offset in it. A buffer registered with `RDMA_REGISTER` uses its own
/// registration on `link` (made on first use if the buffer was registered
/// before this link existed); other memory is registered for this request.
pub(crate) fn destination(
    link: &Arc<Link>,
    dst: &mut [u8],
) -> std::result::Result<(Arc<hipfs_rdma::LocalRegion>, u64), i32> {
    let (ptr, len) = (dst.as_mut_ptr() as usize, dst.len());
    let reg = buffer_containing(ptr, len)
        .filter(|b| b.flags & RDMA_REGISTER != 0 && b.info.kind != MemoryKind::Device);
    if let Some(b) = reg {
        match link.buffer_region(&b) {
            Ok(region) => {
                // Registered lazily: from now on the buffer carries this
                // transport's descriptor (unless it already had one).
                let _ = b.rdma_desc.set(region.descriptor().to_desc_string());
                return Ok((region, (ptr - b.base) as u64));
            }
            Err(e) => log::warn!(
                "cannot register buffer {:#x} with {}: {e}; registering per request",
                b.base,
                link.conn.peer_addr()
            ),
        }
    }
    // The region dies when this request returns (`read_piece` holds it
    // only until then), inside the borrow of `dst`.
    let region = lent::register_with(&*link.conn, dst).map_err(|e| {
        log::warn!("cannot register the destination buffer: {e}");
        libc::ENOMEM
    })?;
    Ok((region, 0))
}

/// Runs `f` on every piece, up to `threads` at once, and returns the
/// results in the pieces' order. Each piece is handed out once, so the
/// threads own disjoint memory. Scoped threads, not the I/O pool: a staged
/// worker of that pool may be the caller, and waiting there for more of
/// its jobs could deadlock. The caller takes pieces too: one thread fewer
/// to start, and where none can start the call still completes, on the
/// caller alone.
fn in_flight<T: Send, R: Send>(
    pieces: impl ExactSizeIterator<Item = T> + Send,
    threads: usize,
    f: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    let count = pieces.len();
    if count <= 1 || threads <= 1 {
        return pieces.map(f).collect();
    }
    let pieces = Mutex::new(pieces.enumerate());
    let out: Mutex<Vec<Option<R>>> = Mutex::new((0..count).map(|_| None).collect());
    let work = || loop {
        let next = pieces.lock().unwrap_or_else(|p| p.into_inner()).next();
        let Some((i, piece)) = next else { break };
        let r = f(piece);
        out.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(r);
    };
    std::thread::scope(|s| {
        for _ in 1..threads.min(count) {
            let started = std::thread::Builder::new()
                .name("hipfs-piece".into())
                .spawn_scoped(s, work);
            if let Err(e) = started {
                log::debug!("no thread for more pieces in flight: {e}");
                break;
            }
        }
        work();
    });
    // Every piece ran (a panicking thread would have ended the scope with it).
    out.into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .flatten()
        .collect()
}

/// The bytes of a call made of pieces, from each piece's result and length:
/// the contiguous prefix, up to the first short piece; an error before it
/// fails the call.
fn contiguous_prefix(
    results: Vec<(std::result::Result<usize, i32>, usize)>,
    what: &str,
) -> Result<usize> {
    let mut total = 0;
    for (r, len) in results {
        let n = r.map_err(|e| io_err(e, what))?;
        total += n;
        if n < len {
            break;
        }
    }
    Ok(total)
}

/// A registration a read into device memory is placed in: the region, the
/// offset of the read's first byte in it, and what keeps the region alive
/// for the request.
type DevicePlace = (
    Arc<hipfs_rdma::LocalRegion>,
    u64,
    Arc<dyn std::any::Any + Send + Sync>,
);

/// Where the server places a read into device memory `[addr, addr + len)`
/// on `link`: a driver registration of the buffer, else the allocation's
/// cached registration; with what keeps the registration alive for the
/// request. `None`: not registrable here (the caller stages).
fn device_destination(link: &Arc<Link>, addr: usize, len: usize) -> Option<DevicePlace> {
    match link.conn.kind() {
        TransportKind::Verbs => {}
        TransportKind::Tcp if super::lane_staging::mode() != super::lane_staging::Mode::Off => {
            return tcp_device_destination(link, addr, len);
        }
        _ => return None,
    }
    if let Some(b) = buffer_containing(addr, len).filter(|b| b.info.kind == MemoryKind::Device) {
        if let Ok(region) = link.buffer_region(&b) {
            let _ = b.rdma_desc.set(region.descriptor().to_desc_string());
            let at = (addr - b.base) as u64;
            return Some((region.clone(), at, region));
        }
        return None;
    }
    let (dev, at) = link
        .device_allocs
        .region_for(&*link.conn, crate::gpu::runtime(), addr, len)?;
    Some((dev.region.clone(), at, dev))
}

/// A TCP registration of device memory `[addr, addr + len)` for one read,
/// received through the lanes' pinned staging (`lane_staging`).
fn tcp_device_destination(link: &Arc<Link>, addr: usize, len: usize) -> Option<DevicePlace> {
    let rt = crate::gpu::runtime();
    let device = crate::gpu::classify(addr).device.max(0);
    let sink = super::lane_staging::sink(rt, device);
    match lent::register_device_staged_with(
        &*link.conn,
        lent::LentSpan::of_request(addr, len),
        sink,
    ) {
        Ok(region) => Some((region.clone(), 0, region)),
        Err(e) => {
            log::warn!("cannot register device memory for lane staging: {e}");
            None
        }
    }
}

/// Bytes per read request (every read is placed, so up to
/// MAX_PLACED_READ). 4 MiB: on a 16-CPU loopback run into GPU memory,
/// 1/2/4/8 MiB pieces with the server's sendfile gave 9.4/14.3/16.2-17.2/
/// 15.2-16.8 GiB/s (the 2-core test host preferred 1 MiB).
const READ_PIECE: usize = 4 << 20;

/// The bytes per read request: [`READ_PIECE`], or `HIPFS_REMOTE_PIECE_KB`
/// (64 KiB to MAX_PLACED_READ; reads are always placed) for measuring.
fn read_piece_len() -> usize {
    static V: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        std::env::var("HIPFS_REMOTE_PIECE_KB")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map(|kb| (kb << 10).clamp(64 << 10, super::super::proto::MAX_PLACED_READ))
            .unwrap_or(READ_PIECE)
    })
}

/// Pieces kept in flight at once for one large request: at least this,
/// and one per lane of the client's connection when it has more.
const PARALLEL: usize = 4;

/// `HIPFS_REMOTE_INFLIGHT`: pieces one call keeps in flight (1..=256),
/// for measuring; read once.
fn inflight_override() -> Option<usize> {
    static V: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *V.get_or_init(|| crate::config::env_usize("HIPFS_REMOTE_INFLIGHT", 1..=256))
}

fn no_host_alias() -> Error {
    Error::new(
        OpError::IoNotSupported,
        "hipfs remote: device memory without a host alias needs the verbs transport",
    )
}

impl RemoteFile {
    /// Pieces in flight for one call.
    fn parallel(&self) -> usize {
        inflight_override().unwrap_or_else(|| self.client.cfg.lanes.max(PARALLEL))
    }
}

impl UserspaceFs for RemoteFile {
    fn fs_type(&self) -> String {
        "hipfs".into()
    }

    fn reads_ahead(&self) -> bool {
        true
    }

    fn parallelism(&self) -> usize {
        self.parallel()
    }

    fn identify(&self) -> String {
        format!(
            "hipfs://{}/{}",
            self.id.server,
            String::from_utf8_lossy(&self.id.path)
        )
    }

    fn places_device(&self, addr: usize, len: usize) -> bool {
        let Some(link) = self.client.current() else {
            return false;
        };
        match link.conn.kind() {
            TransportKind::Verbs => device_destination(&link, addr, len).is_some(),
            TransportKind::Tcp => super::lane_staging::mode() == super::lane_staging::Mode::Direct,
            _ => false,
        }
    }

    fn places_device_chunks(&self) -> bool {
        super::lane_staging::mode() != super::lane_staging::Mode::Off
            && self
                .client
                .current()
                .is_some_and(|l| l.conn.kind() == TransportKind::Tcp)
    }

    fn read(&self, mut buf: UserspaceBuf, offset: u64) -> Result<usize> {
        if let UserspaceMem::Rdma {
            addr,
            len,
            host_ptr: None,
            ..
        } = *buf.mem()
        {
            return self.read_into_device(addr as usize, len, offset);
        }
        let mem = lent::host_bytes_mut(&mut buf).ok_or_else(no_host_alias)?;
        let piece_len = read_piece_len();
        // One deadline for the whole call: pieces queued behind others (more
        // pieces than lanes) or retried after a reconnect get what is left
        // of it, so `timeout` bounds the hipFile read, not each piece.
        let deadline = std::time::Instant::now() + self.client.cfg.timeout;
        let results = in_flight(
            mem.chunks_mut(piece_len).enumerate(),
            self.parallel(),
            |(i, p)| {
                let at = offset + (i * piece_len) as u64;
                let r = self
                    .client
                    .within(Some(deadline), false, false, || self.read_piece(p, at));
                (r, p.len())
            },
        );
        contiguous_prefix(results, "read")
    }

    fn write(&self, buf: UserspaceBuf, offset: u64) -> Result<usize> {
        let data = lent::host_bytes(&buf).ok_or_else(no_host_alias)?;
        let len = data.len();
        // All pieces share one deadline (see `read`).
        let deadline = std::time::Instant::now() + self.client.cfg.timeout;
        let positional = self.flags & libc::O_APPEND == 0;
        let written = self.client.within(Some(deadline), false, positional, || {
            let mut done = 0;
            while done < len {
                let piece = &data[done..(done + MAX_IO).min(len)];
                let n = self
                    .write_piece(piece, offset + done as u64)
                    .map_err(|e| io_err(e, "write"))?;
                done += n;
                if n < piece.len() {
                    break;
                }
            }
            Ok::<usize, Error>(done)
        })?;
        if written > 0 {
            // An appending write lands wherever the end was: drop it all.
            let (at, n) = if positional {
                (offset, written as u64)
            } else {
                (0, 0)
            };
            self.invalidate_mount_cache(at, n);
        }
        Ok(written)
    }
}

/// Binds `fd` to a remote file when it is on a hipfs mount; `None` when
/// it is not (`handle_register` of a `UserspaceFs` handle asks here).
pub fn resolve(fd: RawFd) -> Option<Result<Arc<dyn UserspaceFs>>> {
    resolve_for(fd, IdentifyPurpose::UserspaceFs)
}

/// [`resolve`] for the kind of handle `purpose` names (the mount counts
/// OPAQUE_FD handles it hands to the direct path apart).
pub fn resolve_for(fd: RawFd, purpose: IdentifyPurpose) -> Option<Result<Arc<dyn UserspaceFs>>> {
    match hipfs_fusefs::is_hipfs_fd(fd) {
        Ok(true) => {}
        _ => return None,
    }
    Some(bind(fd, purpose))
}

fn bind(fd: RawFd, purpose: IdentifyPurpose) -> Result<Arc<dyn UserspaceFs>> {
    let payload = hipfs_fusefs::identify_fd_for(fd, purpose).map_err(|e| {
        Error::new(
            OpError::IoNotSupported,
            format!("hipfs mount did not identify the file: {e}"),
        )
    })?;
    let id = FileIdentity::decode(&payload).ok_or_else(|| {
        Error::new(
            OpError::IoNotSupported,
            "hipfs mount answered an unknown identify format",
        )
    })?;
    let mut cfg = ClientConfig::new(&id.server);
    cfg.transport = id.transport;
    cfg.lanes = super::userspace_lanes();
    if id.timeout_ms > 0 {
        cfg.timeout = std::time::Duration::from_millis(id.timeout_ms);
    }
    // How long a direct read waits for an absent server (default 30 s).
    if let Some(secs) = std::env::var("HIPFS_REMOTE_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86400.0)
    {
        cfg.timeout = std::time::Duration::from_secs_f64(secs);
    }
    let Some(cap) = id.capability else {
        return Err(Error::new(
            OpError::IoNotSupported,
            "hipfs mount gave no capability for the file (an older mount: remount with this release)",
        ));
    };
    if let Some(ca) = &id.tls_ca {
        cfg.tls = Some(hipfs_rdma::TlsConfig {
            server_name: id.tls_name.clone(),
            ..hipfs_rdma::TlsConfig::client(ca)
        });
    }
    let flags = hipfs_sys::fs::get_status_flags(fd)
        .map_err(|e| Error::system(e.raw_os_error().unwrap_or(libc::EIO), "fcntl(F_GETFL)"))?;
    let mount_fd = Arc::new(hipfs_sys::fs::dup_cloexec(fd).map_err(|e| {
        Error::system(e.raw_os_error().unwrap_or(libc::EIO), "dup of the mount fd")
    })?);
    if !id.members.is_empty() {
        // A read-only open on a multi-server mount: spread over them all.
        return multi::bind(cfg, id, flags, mount_fd, purpose);
    }
    let renew_fd = mount_fd.clone();
    let renew = move || -> Option<[u8; 32]> {
        use std::os::fd::AsRawFd;
        let payload = hipfs_fusefs::identify_fd_for(renew_fd.as_raw_fd(), purpose).ok()?;
        FileIdentity::decode(&payload)?.capability
    };
    // Its own connection: the capability is the connection's credential,
    // good for this one file only, so it cannot be shared with other files.
    cfg.capability = Some(super::FileCapability::new(cap, Some(Arc::new(renew))));
    let client = RemoteClient::connect(cfg).map_err(Error::from)?;
    super::add_direct_client(&client);
    let mut f = RemoteFile::open(client, id, flags)?;
    f._mount_fd = Some(mount_fd);
    Ok(Arc::new(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_round_trips_and_refuses_escaping_paths() {
        let id = FileIdentity {
            server: "127.0.0.1:7471".into(),
            export: "/srv/data".into(),
            path: b"a/b c".to_vec(),
            ino: 42,
            capability: Some([0xab; 32]),
            write: true,
            timeout_ms: 2500,
            transport: TransportKind::Tcp,
            tls_ca: Some("/etc/hipfs/ca.pem".into()),
            tls_name: Some("storage1".into()),
            members: vec![
                ("10.0.0.2:7471".into(), [7; 32]),
                ("[::1]:7471".into(), [8; 32]),
            ],
        };
        assert_eq!(FileIdentity::decode(&id.encode()), Some(id.clone()));
        let evil = FileIdentity {
            path: b"../etc".to_vec(),
            ..id
        };
        assert_eq!(FileIdentity::decode(&evil.encode()), None);
        assert_eq!(FileIdentity::decode(b"garbage"), None);
    }

    #[test]
    fn an_old_payload_with_a_token_file_gives_no_token_and_no_capability() {
        let old = format!(
            "hipfs-file v1\nserver=127.0.0.1:7471\nexport={}\nino=7\npath={}\ntoken_file={}\n",
            hex(b"/srv"),
            hex(b"f"),
            hex(b"/etc/hipfs/token")
        );
        let id = FileIdentity::decode(old.as_bytes()).unwrap();
        assert_eq!((id.capability, id.write), (None, false));
        assert!(!String::from_utf8(id.encode()).unwrap().contains("token"));
    }

    #[test]
    fn identity_from_a_mount_without_a_transport_line_decodes_as_auto() {
        // The payload mounts sent before the transport line existed.
        let old = format!(
            "hipfs-file v1\nserver=127.0.0.1:7471\nexport={}\nino=7\npath={}\n",
            hex(b"/srv"),
            hex(b"f")
        );
        let id = FileIdentity::decode(old.as_bytes()).unwrap();
        assert_eq!(id.transport, TransportKind::Auto);
        assert_eq!((id.ino, id.path.as_slice()), (7, &b"f"[..]));
        let verbs = FileIdentity {
            transport: TransportKind::Verbs,
            ..id
        };
        let enc = String::from_utf8(verbs.encode()).unwrap();
        assert!(enc.contains("\ntransport=verbs\n"), "{enc}");
        assert_eq!(FileIdentity::decode(enc.as_bytes()), Some(verbs));
        let bad = enc.replace("transport=verbs", "transport=carrier-pigeon");
        assert_eq!(FileIdentity::decode(bad.as_bytes()), None);
    }

    fn tcp_server() -> (tempfile::TempDir, crate::remote::server::Server) {
        let export = tempfile::tempdir().unwrap();
        let mut cfg = crate::remote::server::ServeConfig::new(export.path(), "127.0.0.1:0");
        cfg.transport = TransportKind::Tcp;
        let server = crate::remote::server::Server::start(cfg).unwrap();
        (export, server)
    }

    fn tcp_client(addr: &str) -> Arc<RemoteClient> {
        use super::super::shared_client;
        let mut cc = ClientConfig::new(addr);
        cc.transport = TransportKind::Tcp;
        shared_client(cc).unwrap()
    }

    #[test]
    fn placed_bytes_that_do_not_match_their_authenticated_hash_fail_and_drop_the_link() {
        let (_export, server) = tcp_server();
        let mut cc = ClientConfig::new(server.local_addr());
        cc.transport = TransportKind::Tcp;
        let client = RemoteClient::connect(cc).unwrap();
        let link = client.link().unwrap();
        let good = crate::remote::seal::placed_digest(b"placed");
        assert_eq!(client.check_placed(b"placed", &good), Ok(()));
        assert!(!link.is_dead());
        assert_eq!(client.check_placed(b"plaCed", &good), Err(libc::EIO));
        assert!(link.is_dead(), "an altered stream is not used again");
    }

    #[test]
    fn rdma_registered_buffers_are_registered_once_per_link_and_reads_target_them() {
        let (_export, server) = tcp_server();
        let mut early = vec![0u8; 1 << 20];
        let early_base = early.as_mut_ptr() as usize;
        // Registered before this server's client exists: nothing on its link yet.
        let early_reg =
            crate::buffer::buf_register(early_base, early.len(), RDMA_REGISTER).unwrap();
        let client = tcp_client(server.local_addr());
        let link = client.link().unwrap();
        // The first read into it registers the whole buffer on this link...
        let (r1, at1) = destination(&link, &mut early[4096..4096 + 8192]).unwrap();
        assert_eq!(
            (r1.addr(), r1.len(), at1),
            (early_base as u64, 1 << 20, 4096)
        );
        // ...and later reads reuse that registration.
        let (r2, at2) = destination(&link, &mut early[100..110]).unwrap();
        assert!(Arc::ptr_eq(&r1, &r2));
        assert_eq!(at2, 100);
        assert!(early_reg.rdma_desc.get().is_some());

        // Registered while the client is connected: the hook registers it now
        // and the descriptor is this transport's.
        let mut late = vec![0u8; 65536];
        let late_base = late.as_mut_ptr() as usize;
        let late_reg = crate::buffer::buf_register(late_base, late.len(), RDMA_REGISTER).unwrap();
        let d = hipfs_rdma::RemoteDescriptor::parse(late_reg.rdma_desc.get().unwrap()).unwrap();
        assert_eq!((d.addr, d.len), (late_base as u64, 65536));
        assert_eq!(d.transport, hipfs_rdma::DescriptorTransport::Tcp);
        let (r3, _) = destination(&link, &mut late[..]).unwrap();
        assert_eq!(r3.descriptor().addr, d.addr);
        assert!(!late_reg.rdma_keepalive.lock().unwrap().is_empty());

        // Memory not registered with RDMA_REGISTER is registered per request.
        let mut plain = vec![0u8; 8192];
        let plain_base = plain.as_mut_ptr() as usize;
        crate::buffer::buf_register(plain_base, plain.len(), 0).unwrap();
        let (r4, at4) = destination(&link, &mut plain[10..110]).unwrap();
        assert_eq!((r4.addr(), r4.len(), at4), (plain_base as u64 + 10, 100, 0));

        for b in [early_base, late_base, plain_base] {
            crate::buffer::buf_deregister(b).unwrap();
        }
    }

    #[test]
    fn device_memory_a_link_refused_is_remembered_there_and_not_offered_again() {
        let (_export, server) = tcp_server();
        let client = tcp_client(server.local_addr());
        let link = client.link().unwrap();
        // Host bytes posing as device memory: TCP refuses device memory
        // whatever it is (see device_reg), without touching it.
        let mut mem = vec![0u8; 65536];
        let base = mem.as_mut_ptr() as usize;
        let info = crate::gpu::PointerInfo {
            kind: MemoryKind::Device,
            base,
            size: mem.len(),
            device: 0,
        };
        let reg = crate::registry::insert_buffer(base, mem.len(), RDMA_REGISTER, info).unwrap();
        let remembered = |reg: &crate::registry::RegisteredBuffer| {
            let keep = reg.rdma_keepalive.lock().unwrap();
            keep.iter()
                .filter_map(|k| (**k).downcast_ref::<super::super::link::BufferRegion>())
                .map(|r| r.is_refusal())
                .collect::<Vec<_>>()
        };
        assert!(link.buffer_region(&reg).is_err());
        assert_eq!(remembered(&reg), [true], "the refusal is kept");
        assert!(link.buffer_region(&reg).is_err());
        assert_eq!(remembered(&reg), [true], "and answers the second ask");
        // Another link asks its own NIC.
        let mut cc = ClientConfig::new(server.local_addr());
        cc.transport = TransportKind::Tcp;
        let other = RemoteClient::connect(cc).unwrap();
        let other_link = other.link().unwrap();
        assert!(other_link.buffer_region(&reg).is_err());
        assert_eq!(remembered(&reg), [true, true]);
        crate::registry::remove_buffer(base).unwrap();
        drop(mem);
    }
}
