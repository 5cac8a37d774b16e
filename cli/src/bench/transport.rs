//! `hipfs bench transport` and `hipfs bench transport-ops`: a transport's
//! one-sided operations against a plain-socket ceiling, measured in the
//! same run.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hipfs_rdma::{Error, OwnedRegion, Result, TlsConfig, TransportConfig, TransportKind};

use super::lanelike::LaneLikeListener;
use super::{median, print_table, BenchRow};

/// Which one-sided operation a benchmark drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchOp {
    /// RDMA WRITE from the client into the server's region.
    Write,
    /// RDMA READ by the client from the server's region.
    Read,
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchSpec {
    /// Transport (`Auto` resolves as in [`hipfs_rdma::connect`]).
    pub kind: TransportKind,
    /// Listen address of the in-process server; `127.0.0.1:0` for loopback.
    /// Verbs needs the IP of an RDMA-capable interface.
    pub addr: String,
    /// Bytes moved in total.
    pub total_bytes: u64,
    /// Bytes per `write_remote` / `read_remote` call (striped across lanes
    /// in `chunk_size` pieces).
    pub block_size: usize,
    /// Lanes of the connection.
    pub lanes: usize,
    /// Calls in flight at once (threads issuing operations).
    pub depth: usize,
    /// Operation.
    pub op: BenchOp,
    /// TLS on both ends (TCP only).
    pub tls: Option<TlsConfig>,
}

/// One measured line of the table.
#[derive(Debug, Clone)]
pub struct BenchResult {
    /// What was measured, e.g. `tcp write 4 lanes` or `plain socket`.
    pub name: String,
    /// Bytes moved.
    pub bytes: u64,
    /// Wall time.
    pub elapsed: Duration,
}

impl BenchResult {
    /// Throughput in bytes per second.
    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
    /// Throughput in GB/s (10^9).
    pub fn gbytes_per_sec(&self) -> f64 {
        self.bytes_per_sec() / 1e9
    }
}

/// RDMA WRITE throughput of `kind` over loopback: `size` bytes in 4 MiB
/// blocks, `lanes` lanes, over TLS when `tls` is given.
pub fn transport_throughput(
    kind: TransportKind,
    size: u64,
    lanes: usize,
    tls: Option<TlsConfig>,
) -> Result<BenchResult> {
    run(&BenchSpec {
        kind,
        addr: "127.0.0.1:0".into(),
        total_bytes: size,
        block_size: 4 << 20,
        lanes,
        depth: lanes.max(1),
        op: BenchOp::Write,
        tls,
    })
}

/// Runs one benchmark spec: an in-process server shares a region, the
/// client moves `total_bytes` with `depth` threads.
pub fn run(spec: &BenchSpec) -> Result<BenchResult> {
    if spec.block_size == 0 || spec.depth == 0 || spec.total_bytes == 0 {
        return Err(Error::InvalidArgument(
            "bench: block size, depth and total must be > 0".into(),
        ));
    }
    let cfg = TransportConfig {
        kind: spec.kind,
        lanes: spec.lanes,
        tls: spec.tls.clone(),
        congestion: hipfs::remote::server::tcp_congestion(),
        ..TransportConfig::default()
    };
    let listener = hipfs_rdma::listen(&spec.addr, &cfg)?;
    let addr = listener.local_addr();
    let span = spec.block_size * spec.depth;
    let (server, client) = std::thread::scope(|s| {
        let acc = s.spawn(|| listener.accept());
        let client = hipfs_rdma::connect(&addr, &cfg);
        let server = acc
            .join()
            .map_err(|_| Error::Protocol("accept thread panicked".into()))?;
        Ok::<_, Error>((server?, client?))
    })?;
    // Every byte written: untouched zeroed memory maps the one shared zero
    // page, which would make the sender's reads look cheaper than the
    // plain-socket ceiling's.
    let mut sr = OwnedRegion::new(server.as_ref(), span)?;
    sr.bytes_mut().fill(0x5a);
    let mut cr = OwnedRegion::new(client.as_ref(), span)?;
    cr.bytes_mut().fill(0x5a);
    let desc = sr.region().descriptor();
    let blocks = spec.total_bytes.div_ceil(spec.block_size as u64);
    let next = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..spec.depth)
            .map(|t| {
                let (client, cr, next, desc) = (&client, cr.region(), &next, &desc);
                s.spawn(move || -> Result<()> {
                    let off = t * spec.block_size;
                    while next.fetch_add(1, Ordering::Relaxed) < blocks {
                        match spec.op {
                            BenchOp::Write => {
                                client.write_remote(cr, off, spec.block_size, desc, off as u64)?
                            }
                            BenchOp::Read => {
                                client.read_remote(cr, off, spec.block_size, desc, off as u64)?
                            }
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join()
                .map_err(|_| Error::Protocol("bench worker panicked".into()))??;
        }
        Ok::<_, Error>(())
    })?;
    let elapsed = start.elapsed();
    let kind = client.kind();
    client.close();
    server.close();
    drop((cr, sr));
    Ok(BenchResult {
        name: format!(
            "{kind}{} {} {} lanes {} KiB x{}",
            if spec.tls.is_some() { "+tls" } else { "" },
            match spec.op {
                BenchOp::Write => "write",
                BenchOp::Read => "read",
            },
            spec.lanes,
            spec.block_size / 1024,
            spec.depth
        ),
        bytes: blocks * spec.block_size as u64,
        elapsed,
    })
}

/// The ceiling: `size` bytes copied through one plain loopback TCP socket
/// (write() from a 4 MiB buffer on one thread, read() into a 4 MiB buffer
/// on another), measured the same way as [`run`].
pub fn plain_socket_copy(size: u64) -> Result<BenchResult> {
    const BUF: usize = 4 << 20;
    let l = LaneLikeListener::bind()?;
    let to = l.connector();
    let writer = std::thread::spawn(move || -> Result<()> {
        let mut s = to.connect()?;
        s.set_nodelay(true)?;
        let buf = vec![0x5au8; BUF];
        let mut left = size;
        while left > 0 {
            let n = left.min(BUF as u64) as usize;
            s.write_all(&buf[..n])?;
            left -= n as u64;
        }
        Ok(())
    });
    let mut s = l.accept()?;
    let mut buf = vec![0u8; BUF];
    let start = Instant::now();
    let mut got = 0u64;
    while got < size {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(Error::Disconnected(
                "plain socket writer stopped early".into(),
            ));
        }
        got += n as u64;
    }
    let elapsed = start.elapsed();
    writer
        .join()
        .map_err(|_| Error::Protocol("writer thread panicked".into()))??;
    Ok(BenchResult {
        name: "plain socket copy (1 stream)".into(),
        bytes: got,
        elapsed,
    })
}

/// `hipfs bench transport`: the transport's one-sided writes on loopback
/// beside a plain socket copy of the same bytes, both measured now.
pub fn run_transport_bench(
    kind: &str,
    size: u64,
    lanes: usize,
    repeats: usize,
    tls: bool,
) -> hipfs::Result<()> {
    let kind: TransportKind = kind
        .parse()
        .map_err(|e| hipfs::Error::new(hipfs::OpError::InvalidValue, format!("{e}")))?;
    let err = |e: Error| hipfs::Error::new(hipfs::OpError::DriverError, e.to_string());
    // With --tls: a throwaway CA for this run, and a TLS row measured in
    // the same loop as the plaintext one (same machine state, same run).
    let pki = if tls {
        Some(super::tls::ThrowawayPki::localhost().map_err(|e| err(Error::Io(e)))?)
    } else {
        None
    };
    let mut ceiling = Vec::new();
    let mut ours = Vec::new();
    let mut secured = Vec::new();
    let mut name = String::new();
    let mut tls_name = String::new();
    for _ in 0..repeats.max(1) {
        let c = plain_socket_copy(size).map_err(err)?;
        ceiling.push(c.elapsed);
        let t = transport_throughput(kind, size, lanes, None).map_err(err)?;
        name = t.name.clone();
        ours.push(t.elapsed);
        if let Some(p) = &pki {
            let t = transport_throughput(kind, size, lanes, Some(p.both())).map_err(err)?;
            tls_name = t.name.clone();
            secured.push(t.elapsed);
        }
    }
    let gib = |d: Duration| size as f64 / d.as_secs_f64() / (1u64 << 30) as f64;
    let c = gib(median(ceiling));
    let o = gib(median(ours));
    let mut rows = vec![
        BenchRow {
            name: "ceiling: plain socket copy".to_string(),
            gib_per_s: c,
            ratio: 1.0,
        },
        BenchRow {
            name,
            gib_per_s: o,
            ratio: o / c,
        },
    ];
    let s = (!secured.is_empty()).then(|| gib(median(secured)));
    if let Some(s) = s {
        rows.push(BenchRow {
            name: tls_name,
            gib_per_s: s,
            ratio: s / c,
        });
    }
    print_table(
        &format!(
            "hipfs bench transport: {} per run on loopback, median of {}",
            size,
            repeats.max(1)
        ),
        &rows,
    );
    if let Some(s) = s {
        println!(
            "TLS / plaintext transport: {:.0}% ({s:.2} vs {o:.2} GiB/s)",
            s / o * 100.0
        );
    }
    Ok(())
}

/// `hipfs bench transport-ops`: RDMA WRITE and READ throughput with a
/// chosen block size and depth (and, for verbs, the IP of an RDMA
/// interface), beside the plain-socket ceiling for TCP/auto. Was the
/// `transport_bench` example of hipfs-rdma; the table is the same.
pub fn run_transport_ops(
    kind: TransportKind,
    mib: u64,
    lanes: usize,
    ip: &str,
    block_kib: usize,
    depth: Option<usize>,
) -> hipfs::Result<()> {
    let err = |e: Error| hipfs::Error::new(hipfs::OpError::DriverError, e.to_string());
    let depth = depth.unwrap_or(lanes);
    let size = mib << 20;
    println!(
        "{:<44} {:>12} {:>9} {:>7}",
        "what", "bytes", "GB/s", "ratio"
    );
    let ceiling = if kind == TransportKind::Verbs {
        None
    } else {
        let c = plain_socket_copy(size).map_err(err)?;
        println!(
            "{:<44} {:>12} {:>9.3} {:>7}",
            c.name,
            c.bytes,
            c.gbytes_per_sec(),
            "1.00"
        );
        Some(c.gbytes_per_sec())
    };
    for op in [BenchOp::Write, BenchOp::Read] {
        let r = run(&BenchSpec {
            kind,
            addr: format!("{ip}:0"),
            total_bytes: size,
            block_size: block_kib << 10,
            lanes,
            depth,
            op,
            tls: None,
        })
        .map_err(err)?;
        let ratio = ceiling
            .map(|c| format!("{:.2}", r.gbytes_per_sec() / c))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<44} {:>12} {:>9.3} {:>7}",
            r.name,
            r.bytes,
            r.gbytes_per_sec(),
            ratio
        );
    }
    Ok(())
}
