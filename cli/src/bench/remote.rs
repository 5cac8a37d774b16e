//! `hipfs bench mount`: sequential 1 MiB reads of one file through a FUSE
//! mount beside the same reads through the remote client directly, in the
//! same run, against the same in-process server.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hipfs::remote::client::{ClientConfig, RemoteClient};
use hipfs::remote::mount::{mount_remote, MountOptions};
use hipfs::remote::proto::{Op, Payload, WireCred, MAX_IO};
use hipfs::remote::server::{ServeConfig, Server};
use hipfs::remote::RemoteError;

use super::lanelike::LaneLikeListener;
use super::median;

/// One row of the result table.
#[derive(Clone, Debug)]
pub struct MountBenchRow {
    /// The path measured.
    pub path: String,
    /// Throughput.
    pub gib_per_s: f64,
    /// Throughput over the reference row.
    pub ratio: f64,
}

/// Options of [`bench_mount`].
#[derive(Clone, Debug)]
pub struct MountBenchOptions {
    /// The file to read; it is served from its own directory.
    pub file: PathBuf,
    /// Creates the file with this many bytes of pseudo-random data first when it is missing.
    pub create_size: Option<u64>,
    /// Runs per row.
    pub repeats: usize,
    /// How the FUSE mount is set up (`-o` of the bench).
    pub mount: MountOptions,
    /// The server sends placed reads from the file (`ServeConfig::send_from_file`).
    pub server_sendfile: bool,
    /// `bench userspace`: also measure UserspaceFs reads over TLS (a second
    /// server and mount, throwaway certificate), in the same rounds.
    pub tls: bool,
    /// `bench userspace`: two more N-socket ceilings that take the hot
    /// buffer and the file ceiling apart (which side's memory costs what).
    pub more_ceilings: bool,
}

/// A quick checksum of every byte: four independent lanes of 8 bytes so
/// the multiplications overlap (several GB/s), so checking the data costs
/// little beside the transfer being measured.
fn fnv(h: u64, b: &[u8]) -> u64 {
    const P: u64 = 0x100000001b3;
    let mut lanes = [h, h ^ 1, h ^ 2, h ^ 3];
    let mut chunks = b.chunks_exact(32);
    for c in &mut chunks {
        for (k, lane) in lanes.iter_mut().enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(&c[k * 8..k * 8 + 8]);
            *lane = (*lane ^ u64::from_le_bytes(w))
                .wrapping_mul(P)
                .rotate_left(29);
        }
    }
    let mut h = lanes.iter().fold(0u64, |acc, l| (acc ^ l).wrapping_mul(P));
    for &x in chunks.remainder() {
        h = (h ^ u64::from(x)).wrapping_mul(P);
    }
    h
}

/// Reads the whole file through the mount, 1 MiB per read(2), after
/// dropping the mount's cached pages; returns (bytes, checksum, seconds).
fn read_via_mount(path: &Path) -> Result<(u64, u64, f64), RemoteError> {
    let mut f = std::fs::File::open(path)?;
    // Drops cached pages of the FUSE file (advice: a failure only warms the run).
    let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
    let mut buf = vec![0u8; MAX_IO];
    let (mut total, mut sum) = (0u64, 0xcbf29ce484222325u64);
    let t = Instant::now();
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        sum = fnv(sum, &buf[..n]);
        total += n as u64;
    }
    Ok((total, sum, t.elapsed().as_secs_f64()))
}

/// The same reads through the client: one request in flight, as FUSE does
/// for a single sequential reader without readahead.
/// Reads `name` in 1 MiB requests: placed in a registered buffer, or
/// (`inline`) carried in the replies, so that the replies' message
/// authentication covers every byte.
fn read_via_client(
    client: &RemoteClient,
    name: &[u8],
    inline: bool,
) -> Result<(u64, u64, f64), RemoteError> {
    let cred = WireCred::default();
    let proto = |e: i32| RemoteError::Io(std::io::Error::from_raw_os_error(e));
    let fh = match client
        .call(
            &cred,
            Op::Open {
                path: name.to_vec(),
                flags: libc::O_RDONLY,
            },
        )
        .map_err(proto)?
    {
        Payload::Opened { fh } => fh,
        _ => return Err(RemoteError::Config("unexpected reply to open".into())),
    };
    let (mut total, mut sum) = (0u64, 0xcbf29ce484222325u64);
    let t = Instant::now();
    loop {
        // The checksum of an empty read would still change `sum`: only
        // bytes that arrived count, as in the mount's loop.
        let n = if inline {
            let p = client
                .call(
                    &cred,
                    Op::Read {
                        fh,
                        offset: total,
                        len: MAX_IO as u32,
                        dest: None,
                    },
                )
                .map_err(proto)?;
            let Payload::Read { n, data } = p else {
                return Err(RemoteError::Config("unexpected reply to read".into()));
            };
            if n > 0 {
                sum = fnv(sum, &data[..n as usize]);
            }
            n as usize
        } else {
            client.read_placed(&cred, fh, total, MAX_IO as u32, |bytes| {
                if !bytes.is_empty() {
                    sum = fnv(sum, bytes);
                }
                bytes.len()
            })?
        };
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    let secs = t.elapsed().as_secs_f64();
    let _ = client.call(&cred, Op::Release { fh });
    Ok((total, sum, secs))
}

/// The first `n` bytes of a host buffer made with `Buffer::from_slice`,
/// read while the buffer stays registered.
fn read_back<'b>(buf: &'b hipfs::Buffer<'_>, n: usize) -> Result<&'b [u8], RemoteError> {
    buf.as_host_slice()
        .and_then(|b| b.get(..n))
        .ok_or_else(|| RemoteError::Config(format!("read back {n} bytes past the buffer")))
}

/// Runs the benchmark; rows: direct client (the reference), mount.
pub fn bench_mount(opts: &MountBenchOptions) -> Result<Vec<MountBenchRow>, RemoteError> {
    if !opts.file.exists() {
        match opts.create_size {
            Some(n) => super::generate_file(&opts.file, n, false)
                .map_err(|e| RemoteError::Config(e.to_string()))?,
            None => {
                return Err(RemoteError::Config(format!(
                    "{} does not exist (pass --create SIZE to generate it)",
                    opts.file.display()
                )))
            }
        }
    }
    let file = opts.file.canonicalize()?;
    let dir = file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    let name = file
        .file_name()
        .ok_or_else(|| RemoteError::Config("the file needs a name".into()))?
        .as_encoded_bytes()
        .to_vec();
    let size = std::fs::metadata(&file)?.len();
    let server = Server::start(ServeConfig {
        send_from_file: opts.server_sendfile,
        // Only so that the rows below can show what authentication costs;
        // the other clients authenticate every message as always.
        allow_unauthenticated_messages: true,
        ..ServeConfig::new(&dir, "127.0.0.1:0")
    })?;
    let mnt = tempfile_dir()?;
    let mounted = mount_remote(server.local_addr(), &mnt, &opts.mount)?;
    let client = RemoteClient::connect(ClientConfig::new(server.local_addr()))?;
    let bare = RemoteClient::connect(ClientConfig {
        unauthenticated_messages: true,
        ..ClientConfig::new(server.local_addr())
    })?;
    let via_mount = mnt.join(std::ffi::OsStr::from_bytes_compat(&name));
    let mut direct = Vec::new();
    let mut fuse = Vec::new();
    // [placed without MAC, inline with MAC, inline without MAC]
    let mut mac_rows: [Vec<f64>; 3] = Default::default();
    let mut expect = None;
    let gib = |t: f64| size as f64 / t / (1u64 << 30) as f64;
    for i in 0..=opts.repeats.max(1) {
        let (n1, s1, t1) = read_via_client(&client, &name, false)?;
        let (n2, s2, t2) = read_via_mount(&via_mount)?;
        let others = [
            read_via_client(&bare, &name, false)?,
            read_via_client(&client, &name, true)?,
            read_via_client(&bare, &name, true)?,
        ];
        let others_ok = others.iter().all(|&(n, s, _)| n == size && s == s1);
        if n1 != size || n2 != size || s1 != s2 || !others_ok || expect.is_some_and(|e| e != s1) {
            return Err(RemoteError::Config(format!(
                "data mismatch: client read {n1} bytes (sum {s1:x}), mount {n2} (sum {s2:x}), file has {size}"
            )));
        }
        expect = Some(s1);
        if i > 0 {
            // The first round warms the server's page cache.
            direct.push(gib(t1));
            fuse.push(gib(t2));
            for (row, (_, _, t)) in mac_rows.iter_mut().zip(others) {
                row.push(gib(t));
            }
        }
    }
    drop(bare);
    mounted.unmount()?;
    server.shutdown(Duration::from_secs(2));
    let _ = std::fs::remove_dir(&mnt);
    let d = median(direct);
    let f = median(fuse);
    let [m0, m1, m2] = mac_rows.map(median);
    Ok(vec![
        MountBenchRow {
            path: "remote client directly, 1 MiB sequential".into(),
            gib_per_s: d,
            ratio: 1.0,
        },
        MountBenchRow {
            path: "through the FUSE mount, 1 MiB read(2)".into(),
            gib_per_s: f,
            ratio: if d > 0.0 { f / d } else { 0.0 },
        },
        MountBenchRow {
            path: "client directly, no message MAC".into(),
            gib_per_s: m0,
            ratio: if d > 0.0 { m0 / d } else { 0.0 },
        },
        MountBenchRow {
            path: "client, data inline in MAC'd replies".into(),
            gib_per_s: m1,
            ratio: if d > 0.0 { m1 / d } else { 0.0 },
        },
        MountBenchRow {
            path: "client, data inline, no MAC".into(),
            gib_per_s: m2,
            ratio: if d > 0.0 { m2 / d } else { 0.0 },
        },
    ])
}

trait FromBytesCompat {
    fn from_bytes_compat(b: &[u8]) -> &Self;
}
impl FromBytesCompat for std::ffi::OsStr {
    fn from_bytes_compat(b: &[u8]) -> &Self {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::OsStr::from_bytes(b)
    }
}

fn tempfile_dir() -> Result<PathBuf, RemoteError> {
    tempfile_dir_tagged("")
}

/// A second mountpoint of the same run (`tag` keeps it apart from the first).
fn tempfile_dir_tagged(tag: &str) -> Result<PathBuf, RemoteError> {
    let p = std::env::temp_dir().join(format!("hipfs-bench-mnt-{}{tag}", std::process::id()));
    std::fs::create_dir_all(&p)?;
    Ok(p)
}

/// The loopback ceiling: `size` bytes through `sockets` plain TCP sockets
/// on 127.0.0.1 at once (each: write(2) of a 4 MiB buffer on one thread,
/// read(2) into a reused 4 MiB buffer on another), in GiB/s.
pub fn loopback_tcp_ceiling(size: u64, sockets: usize) -> Result<f64, RemoteError> {
    loopback_hot_send_ceiling(size, sockets, 4 << 20)
}

/// [`loopback_tcp_ceiling`] with each receiver reading into its own
/// `recv_mem` bytes in turn.
fn loopback_hot_send_ceiling(
    size: u64,
    sockets: usize,
    recv_mem: usize,
) -> Result<f64, RemoteError> {
    use std::io::Write;
    let share = size.div_ceil(sockets.max(1) as u64);
    loopback_ceiling("hot", size, sockets, recv_mem, move |i, mut s| {
        let block = vec![0x5au8; 4 << 20];
        let mut left = share.min(size.saturating_sub(i * share));
        while left > 0 {
            let n = left.min(block.len() as u64) as usize;
            s.write_all(&block[..n])?;
            left -= n as u64;
        }
        Ok(())
    })
}

/// The loopback ceiling for this file's bytes: `sockets` plain TCP sockets
/// at once, each sender `sendfile`-ing its share of `file` (page-cache
/// pages, as `hipfs serve` sends them) and each receiver reading into its
/// own 64 MiB of memory in turn (as the client's slabs take them), in
/// GiB/s. Unlike [`loopback_tcp_ceiling`], whose 4 MiB buffers stay in the
/// CPU caches, this moves the bytes the direct path moves.
pub fn loopback_file_ceiling(file: &Path, sockets: usize) -> Result<f64, RemoteError> {
    loopback_sendfile_ceiling(file, sockets, 64 << 20)
}

/// [`loopback_file_ceiling`] with each receiver reading into its own
/// `recv_mem` bytes in turn.
fn loopback_sendfile_ceiling(
    file: &Path,
    sockets: usize,
    recv_mem: usize,
) -> Result<f64, RemoteError> {
    let size = std::fs::metadata(file)?.len();
    let share = size.div_ceil(sockets.max(1) as u64);
    let file = file.to_path_buf();
    loopback_ceiling("sendfile", size, sockets, recv_mem, move |i, s| {
        let f = std::fs::File::open(&file)?;
        let mut at = (i * share).min(size);
        let end = ((i + 1) * share).min(size);
        while at < end {
            let want = (end - at).min(64 << 20) as usize;
            let mut off = at;
            let n = rustix::fs::sendfile(&s, &f, Some(&mut off), want)?;
            if n == 0 {
                break;
            }
            at += n as u64;
        }
        Ok(())
    })
}

/// `size` bytes through `sockets` loopback TCP sockets at once, in GiB/s:
/// sender `i` runs `send(i, socket)` on its own thread; each receiver reads
/// into its own `recv_mem` bytes in turn (touched before the clock starts).
/// Fails unless exactly `size` bytes arrived.
fn loopback_ceiling<F>(
    kind: &str,
    size: u64,
    sockets: usize,
    recv_mem: usize,
    send: F,
) -> Result<f64, RemoteError>
where
    F: Fn(u64, std::net::TcpStream) -> std::io::Result<()> + Clone + Send + 'static,
{
    let sockets = sockets.max(1);
    let l = LaneLikeListener::bind()?;
    // Named apart from the client's and server's threads for thread-cpu.py.
    let writers = (0..sockets as u64)
        .map(|i| {
            let send = send.clone();
            let to = l.connector();
            std::thread::Builder::new()
                .name("ceiling-tx".into())
                .spawn(move || send(i, to.connect()?))
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut streams = Vec::with_capacity(sockets);
    for _ in 0..sockets {
        streams.push(l.accept()?);
    }
    let mut bufs: Vec<Vec<u8>> = (0..sockets).map(|_| vec![1u8; recv_mem]).collect();
    // The timed part is a bench phase of its own (see [`Phase`]).
    let phase = Phase::begin(format!(
        "ceiling-{kind}-{sockets}x-into-{}m",
        recv_mem >> 20
    ));
    let t = Instant::now();
    let got: u64 = std::thread::scope(|scope| {
        let readers: Vec<_> = streams
            .into_iter()
            .zip(bufs.iter_mut())
            .map(|(mut r, buf)| {
                std::thread::Builder::new()
                    .name("ceiling-rx".into())
                    .spawn_scoped(scope, move || -> std::io::Result<u64> {
                        let (mut got, mut at) = (0u64, 0usize);
                        loop {
                            if at == buf.len() {
                                at = 0;
                            }
                            let end = (at + (4 << 20)).min(buf.len());
                            let n = r.read(&mut buf[at..end])?;
                            if n == 0 {
                                break;
                            }
                            got += n as u64;
                            at += n;
                        }
                        Ok(got)
                    })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let mut got = 0u64;
        for r in readers {
            got += r
                .join()
                .map_err(|_| RemoteError::Config("ceiling reader panicked".into()))??;
        }
        Ok::<u64, RemoteError>(got)
    })?;
    let secs = t.elapsed().as_secs_f64();
    drop(phase);
    for w in writers {
        w.join()
            .map_err(|_| RemoteError::Config("ceiling writer panicked".into()))??;
    }
    if got != size {
        return Err(RemoteError::Config(format!(
            "loopback ceiling moved {got} of {size} bytes"
        )));
    }
    Ok(got as f64 / secs / (1u64 << 30) as f64)
}

/// A timed part of a bench run, logged at its start and end (target
/// `hipfs_bench_phase`, info) so that `scripts/gpu/thread-cpu.py` can charge
/// each thread's CPU time to the part it was spent in.
struct Phase(String);

impl Phase {
    fn begin(name: impl Into<String>) -> Phase {
        let name = name.into();
        log::info!(target: "hipfs_bench_phase", "begin {name}");
        Phase(name)
    }
}

impl Drop for Phase {
    fn drop(&mut self) {
        log::info!(target: "hipfs_bench_phase", "end {}", self.0);
    }
}

/// Where [`read_with_handle`] puts the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchMemory {
    /// One `request`-byte host buffer, reused by every call.
    Host,
    /// Device memory of GPU `device` holding the whole file (each call at
    /// its own buffer offset), checked after the timed read.
    Gpu {
        /// The GPU's ordinal.
        device: i32,
    },
}

/// Reads `path` with a hipfs `FileHandle` of `kind` in `request`-byte calls
/// into `memory`; returns (bytes, checksum, seconds). The checksum covers
/// every byte that arrived and is taken with the clock stopped (host: after
/// each call; device: after the whole read, copied back in 64 MiB pieces),
/// so the timed part is the transfer alone, as in the ceiling beside it.
/// The reads are logged as the bench phase `phase` (see [`Phase`]).
fn read_with_handle(
    path: &Path,
    kind: hipfs::FileHandleType,
    request: usize,
    memory: BenchMemory,
    phase: &'static str,
) -> Result<(u64, u64, f64), RemoteError> {
    let to_remote = |e: hipfs::Error| RemoteError::Config(e.to_string());
    if let Ok(f) = std::fs::File::open(path) {
        // Drop the mount's cached pages (advice: a failure only warms the run).
        let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
    }
    let size = std::fs::metadata(path)?.len() as usize;
    let mut fh = hipfs::FileHandle::new(path, libc::O_RDONLY, 0, kind);
    fh.open().map_err(to_remote)?;
    let (mut total, mut sum) = (0u64, 0xcbf29ce484222325u64);
    let secs = match memory {
        BenchMemory::Host => {
            let mut mem = vec![0u8; request];
            let mut buf = hipfs::Buffer::from_slice(&mut mem, 0);
            buf.register().map_err(to_remote)?;
            // Only the read calls are timed: the checksum of each request
            // runs between them with the clock stopped. One registration
            // for the whole loop: the client registers a buffer with each
            // lane's connection on first use, which must not be timed again
            // for every request.
            let mut secs = 0.0;
            // The phase spans the checksums too (this thread's CPU time).
            let _phase = Phase::begin(phase);
            loop {
                let t = Instant::now();
                let n = fh
                    .read(&mut buf, request, total as i64, 0)
                    .map_err(to_remote)?;
                secs += t.elapsed().as_secs_f64();
                if n == 0 {
                    break;
                }
                sum = fnv(sum, read_back(&buf, n)?);
                total += n as u64;
            }
            let _ = buf.deregister();
            secs
        }
        BenchMemory::Gpu { device } => {
            let rt = hipfs::gpu::runtime();
            let len = size.max(1);
            let mut dev = hipfs::gpu::DeviceAllocation::new(rt, device, len).map_err(to_remote)?;
            // Poisoned, so bytes that never arrived cannot pass the check.
            dev.fill(0xa5).map_err(to_remote)?;
            let mut buf = hipfs::Buffer::from_device(&dev, 0);
            buf.register().map_err(to_remote)?;
            let phase = Phase::begin(phase);
            let t = Instant::now();
            while (total as usize) < size {
                let want = request.min(size - total as usize);
                let n = fh
                    .read(&mut buf, want, total as i64, total as i64)
                    .map_err(to_remote)?;
                if n == 0 {
                    break;
                }
                total += n as u64;
            }
            let secs = t.elapsed().as_secs_f64();
            drop(phase);
            let _ = buf.deregister();
            let mut host = vec![0u8; MAX_IO * 64];
            let mut off = 0usize;
            while off < total as usize {
                let n = host.len().min(total as usize - off);
                dev.read(off, &mut host[..n]).map_err(to_remote)?;
                sum = fnv(sum, &host[..n]);
                off += n;
            }
            secs
        }
    };
    fh.close();
    Ok((total, sum, secs))
}

/// Reopens the driver with OPAQUE_FD handles on hipfs mounts taking the
/// direct path (`on`) or FUSE: the parameter is read when the driver opens.
fn reopen_with_opaque_direct(
    driver: &mut Option<hipfs::Driver>,
    on: bool,
) -> Result<(), RemoteError> {
    let to_remote = |e: hipfs::Error| RemoteError::Config(e.to_string());
    *driver = None;
    hipfs::set_parameter_bool(hipfs::BoolParam::HipfsOpaqueFdDirect, on).map_err(to_remote)?;
    *driver = Some(hipfs::Driver::open().map_err(to_remote)?);
    Ok(())
}

/// `hipfs bench userspace`: a large file read with UserspaceFs handles
/// (server → caller's memory, no FUSE) beside the loopback TCP ceilings,
/// the same read with an OpaqueFd handle (which takes the same direct path)
/// and with an OpaqueFd handle through FUSE (the direct path switched off).
pub fn bench_userspace(
    opts: &MountBenchOptions,
    request: usize,
    memory: BenchMemory,
) -> Result<Vec<MountBenchRow>, RemoteError> {
    if !opts.file.exists() {
        match opts.create_size {
            Some(n) => super::generate_file(&opts.file, n, false)
                .map_err(|e| RemoteError::Config(e.to_string()))?,
            None => {
                return Err(RemoteError::Config(format!(
                    "{} does not exist (pass --create SIZE to generate it)",
                    opts.file.display()
                )))
            }
        }
    }
    let mut driver = Some(hipfs::Driver::open().map_err(|e| RemoteError::Config(e.to_string()))?);
    let file = opts.file.canonicalize()?;
    let dir = file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    let size = std::fs::metadata(&file)?.len();
    let mut serve = ServeConfig {
        send_from_file: opts.server_sendfile,
        ..ServeConfig::new(&dir, "127.0.0.1:0")
    };
    // For measuring: the server's bytes in flight per connection (MiB),
    // as `hipfs serve --max-bytes-in-flight` sets it.
    if let Some(mb) = std::env::var("HIPFS_BENCH_SERVER_INFLIGHT_MB")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&mb| mb > 0)
    {
        serve.limits.max_bytes_in_flight = mb << 20;
    }
    let server = Server::start(serve)?;
    let mnt = tempfile_dir()?;
    let mounted = mount_remote(server.local_addr(), &mnt, &opts.mount)?;
    let via_mount = mnt.join(file.file_name().unwrap_or_default());
    // --tls: the same export through a TLS server and mount, read in the
    // same rounds as the plaintext rows.
    let tls = if opts.tls {
        let pki = super::tls::ThrowawayPki::localhost()?;
        let server = Server::start(ServeConfig {
            send_from_file: opts.server_sendfile,
            transport: hipfs_rdma::TransportKind::Tcp,
            tls: Some(hipfs_rdma::TlsConfig::server(&pki.cert, &pki.key)),
            ..ServeConfig::new(&dir, "127.0.0.1:0")
        })?;
        let mnt = tempfile_dir_tagged("-tls")?;
        let mount_opts = MountOptions {
            tls_ca: Some(pki.ca.clone()),
            transport: hipfs_rdma::TransportKind::Tcp,
            ..opts.mount.clone()
        };
        let mounted = mount_remote(server.local_addr(), &mnt, &mount_opts)?;
        Some((pki, server, mnt, mounted))
    } else {
        None
    };
    let lanes = hipfs::remote::client::userspace_lanes();
    let (mut us, mut opaque, mut ceil, mut multi, mut file_ceil) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // --more-ceilings: hot sends into cold memory, file pages into a hot buffer.
    let (mut hot_to_cold, mut file_to_hot) = (Vec::new(), Vec::new());
    let mut fuse = Vec::new();
    let mut us_tls = Vec::new();
    let mut expect = None;
    // Where the UserspaceFs rounds' staging workers spent their time
    // (device memory only: host reads need no bounce slabs).
    let mut us_prof = hipfs::io::bounce_pool::Profile::default();
    let mut us_secs = 0.0f64;
    let result = (|| {
        for i in 0..=opts.repeats.max(1) {
            hipfs::io::bounce_pool::take_profile();
            let (n1, s1, t1) = read_with_handle(
                &via_mount,
                hipfs::FileHandleType::UserspaceFs,
                request,
                memory,
                "userspace",
            )?;
            let p = hipfs::io::bounce_pool::take_profile();
            if i > 0 {
                us_prof.file_ns += p.file_ns;
                us_prof.wait_ns += p.wait_ns;
                us_prof.enqueue_ns += p.enqueue_ns;
                us_prof.chunks += p.chunks;
                us_prof.ahead += p.ahead;
                us_secs += t1;
            }
            let (n2, s2, t2) = read_with_handle(
                &via_mount,
                hipfs::FileHandleType::OpaqueFd,
                request,
                memory,
                "opaque-direct",
            )?;
            reopen_with_opaque_direct(&mut driver, false)?;
            let through_fuse = read_with_handle(
                &via_mount,
                hipfs::FileHandleType::OpaqueFd,
                request,
                memory,
                "opaque-fuse",
            );
            reopen_with_opaque_direct(&mut driver, true)?;
            let (n4, s4, t4) = through_fuse?;
            let c = loopback_tcp_ceiling(size, 1)?;
            let m = loopback_tcp_ceiling(size, lanes)?;
            let fc = loopback_file_ceiling(&file, lanes)?;
            let more = if opts.more_ceilings {
                Some((
                    loopback_hot_send_ceiling(size, lanes, 64 << 20)?,
                    loopback_sendfile_ceiling(&file, lanes, 4 << 20)?,
                ))
            } else {
                None
            };
            if n1 != size
                || n2 != size
                || n4 != size
                || s1 != s2
                || s1 != s4
                || expect.is_some_and(|e| e != s1)
            {
                return Err(RemoteError::Config(format!(
                    "data mismatch: UserspaceFs read {n1} bytes (sum {s1:x}), OpaqueFd {n2} (sum {s2:x}), OpaqueFd through FUSE {n4} (sum {s4:x}), file has {size}"
                )));
            }
            expect = Some(s1);
            if let Some((_, _, tmnt, _)) = &tls {
                let via = tmnt.join(file.file_name().unwrap_or_default());
                let (n3, s3, t3) = read_with_handle(
                    &via,
                    hipfs::FileHandleType::UserspaceFs,
                    request,
                    memory,
                    "userspace-tls",
                )?;
                if n3 != size || s3 != s1 {
                    return Err(RemoteError::Config(format!(
                        "data mismatch over TLS: read {n3} bytes (sum {s3:x}), expected {size} (sum {s1:x})"
                    )));
                }
                if i > 0 {
                    us_tls.push(size as f64 / t3 / (1u64 << 30) as f64);
                }
            }
            if i > 0 {
                us.push(size as f64 / t1 / (1u64 << 30) as f64);
                opaque.push(size as f64 / t2 / (1u64 << 30) as f64);
                fuse.push(size as f64 / t4 / (1u64 << 30) as f64);
                ceil.push(c);
                multi.push(m);
                file_ceil.push(fc);
                if let Some((a, b)) = more {
                    hot_to_cold.push(a);
                    file_to_hot.push(b);
                }
            }
        }
        Ok(())
    })();
    mounted.unmount()?;
    server.shutdown(Duration::from_secs(2));
    let _ = std::fs::remove_dir(&mnt);
    if let Some((_pki, server, mnt, mounted)) = tls {
        mounted.unmount()?;
        server.shutdown(Duration::from_secs(2));
        let _ = std::fs::remove_dir(&mnt);
    }
    result?;
    if us_prof.chunks > 0 {
        let per = |ns: u64| ns as f64 / us_prof.chunks as f64 / 1e3;
        let busy = (us_prof.file_ns + us_prof.wait_ns + us_prof.enqueue_ns) as f64 / 1e9;
        println!(
            "UserspaceFs staging: {} chunks ({} fetched ahead); per chunk {:.0} us network, {:.0} us GPU wait, {:.0} us enqueue; workers busy {:.0}% of the timed rounds x {lanes}",
            us_prof.chunks,
            us_prof.ahead,
            per(us_prof.file_ns),
            per(us_prof.wait_ns),
            per(us_prof.enqueue_ns),
            100.0 * busy / (us_secs * lanes as f64).max(1e-9),
        );
    }
    let c = median(ceil);
    let (u, o, f, mc, fc) = (
        median(us),
        median(opaque),
        median(fuse),
        median(multi),
        median(file_ceil),
    );
    let ratio = |x: f64| if c > 0.0 { x / c } else { 0.0 };
    let mut rows = vec![
        MountBenchRow {
            path: "loopback TCP, one socket (ceiling)".into(),
            gib_per_s: c,
            ratio: 1.0,
        },
        MountBenchRow {
            path: format!("loopback TCP, {lanes} sockets at once"),
            gib_per_s: mc,
            ratio: ratio(mc),
        },
        MountBenchRow {
            path: format!("loopback TCP, {lanes} sockets, sendfile of this file"),
            gib_per_s: fc,
            ratio: ratio(fc),
        },
    ];
    if !hot_to_cold.is_empty() {
        let (a, b) = (median(hot_to_cold), median(file_to_hot));
        rows.push(MountBenchRow {
            path: format!("loopback TCP, {lanes} sockets, hot buffer into 64 MiB each"),
            gib_per_s: a,
            ratio: ratio(a),
        });
        rows.push(MountBenchRow {
            path: format!("loopback TCP, {lanes} sockets, sendfile of this file into 4 MiB each"),
            gib_per_s: b,
            ratio: ratio(b),
        });
    }
    rows.extend([
        MountBenchRow {
            path: format!(
                "UserspaceFs handle, {} MiB requests, {lanes} lanes: {:.0}% of {lanes} sockets",
                request >> 20,
                if mc > 0.0 { 100.0 * u / mc } else { 0.0 }
            ),
            gib_per_s: u,
            ratio: ratio(u),
        },
        MountBenchRow {
            path: format!(
                "OpaqueFd handle (direct path), {} MiB requests: {:.0}% of UserspaceFs",
                request >> 20,
                if u > 0.0 { 100.0 * o / u } else { 0.0 }
            ),
            gib_per_s: o,
            ratio: ratio(o),
        },
        MountBenchRow {
            path: format!(
                "OpaqueFd through FUSE (HIPFS_OPAQUE_FD_DIRECT=0), {} MiB requests",
                request >> 20
            ),
            gib_per_s: f,
            ratio: ratio(f),
        },
    ]);
    if !us_tls.is_empty() {
        let t = median(us_tls);
        rows.push(MountBenchRow {
            path: format!(
                "UserspaceFs + TLS, {} MiB requests, {lanes} lanes",
                request >> 20
            ),
            gib_per_s: t,
            ratio: ratio(t),
        });
    }
    Ok(rows)
}

/// Prints the rows as a table.
pub fn print_mount_table(title: &str, rows: &[MountBenchRow]) {
    println!("{title}");
    let w = rows.iter().map(|r| r.path.len()).max().unwrap_or(0).max(44);
    println!("{:<w$} {:>9} {:>8}", "path", "GiB/s", "ratio");
    for r in rows {
        println!(
            "{:<w$} {:>9.2} {:>7.0}%",
            r.path,
            r.gib_per_s,
            r.ratio * 100.0
        );
    }
}
