//! Per-path counters: which path moved every byte. Process-wide, lock-free.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// The data paths bytes can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoPath {
    /// O_DIRECT into the destination (or its aligned bounce).
    Direct,
    /// Through the page cache (`pread`/`pwrite`, including page-cache hits).
    Buffered,
    /// Through host bounce buffers and a GPU copy.
    Staged,
    /// From or to a remote server (UserspaceFs).
    Remote,
}

const PATHS: [IoPath; 4] = [
    IoPath::Direct,
    IoPath::Buffered,
    IoPath::Staged,
    IoPath::Remote,
];

struct Counter {
    read_bytes: AtomicU64,
    read_ops: AtomicU64,
    write_bytes: AtomicU64,
    write_ops: AtomicU64,
}

impl Counter {
    const fn new() -> Counter {
        Counter {
            read_bytes: AtomicU64::new(0),
            read_ops: AtomicU64::new(0),
            write_bytes: AtomicU64::new(0),
            write_ops: AtomicU64::new(0),
        }
    }
}

static COUNTERS: [Counter; 4] = [
    Counter::new(),
    Counter::new(),
    Counter::new(),
    Counter::new(),
];
static FALLBACKS: AtomicU64 = AtomicU64::new(0);

/// What became of an attempt to register device memory with an RDMA NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceRegistration {
    /// Registered as a dmabuf (`ibv_reg_dmabuf_mr`).
    Dmabuf,
    /// The runtime or the NIC refused the dmabuf way.
    DmabufRefused,
    /// Registered by its device address (peer memory).
    PeerMemory,
    /// The NIC refused the device address.
    PeerMemoryRefused,
    /// No way worked (or the transport is TCP): staged through host memory.
    Staged,
}

static DEVICE_REGISTRATIONS: [AtomicU64; 5] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];

/// Counts one outcome of a device memory registration.
pub fn record_device_registration(what: DeviceRegistration) {
    DEVICE_REGISTRATIONS[what as usize].fetch_add(1, Ordering::Relaxed);
}

/// Device memory registrations so far, by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceRegistrations {
    /// Registered as dmabufs.
    pub dmabuf: u64,
    /// dmabuf attempts refused.
    pub dmabuf_refused: u64,
    /// Registered through peer memory.
    pub peer_memory: u64,
    /// Peer-memory attempts refused.
    pub peer_memory_refused: u64,
    /// Staged through host memory instead.
    pub staged: u64,
}

/// Reads the device registration counters.
pub fn device_registrations() -> DeviceRegistrations {
    let get = |w: DeviceRegistration| DEVICE_REGISTRATIONS[w as usize].load(Ordering::Relaxed);
    DeviceRegistrations {
        dmabuf: get(DeviceRegistration::Dmabuf),
        dmabuf_refused: get(DeviceRegistration::DmabufRefused),
        peer_memory: get(DeviceRegistration::PeerMemory),
        peer_memory_refused: get(DeviceRegistration::PeerMemoryRefused),
        staged: get(DeviceRegistration::Staged),
    }
}

fn slot(path: IoPath) -> &'static Counter {
    &COUNTERS[path as usize]
}

/// Records bytes read through a path (one operation).
pub fn record_read(path: IoPath, bytes: usize) {
    let c = slot(path);
    c.read_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    c.read_ops.fetch_add(1, Ordering::Relaxed);
}

/// Records bytes written through a path (one operation).
pub fn record_write(path: IoPath, bytes: usize) {
    let c = slot(path);
    c.write_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    c.write_ops.fetch_add(1, Ordering::Relaxed);
}

static READAHEAD_USED: AtomicU64 = AtomicU64::new(0);
static READAHEAD_DROPPED: AtomicU64 = AtomicU64::new(0);

/// Records bytes fetched ahead of staged reads: `used` by the read they
/// were fetched for, `dropped` unused (not read, too old, or a write came).
pub fn record_readahead(used: usize, dropped: usize) {
    READAHEAD_USED.fetch_add(used as u64, Ordering::Relaxed);
    READAHEAD_DROPPED.fetch_add(dropped as u64, Ordering::Relaxed);
}

static LANE_STAGED: AtomicU64 = AtomicU64::new(0);

/// Records bytes a TCP lane received into its pinned staging and copied on
/// to device memory (`HIPFS_TCP_LANE_STAGING`).
pub fn record_lane_staged(bytes: usize) {
    LANE_STAGED.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Records that a handle fell back from its preferred path.
pub fn record_fallback() {
    FALLBACKS.fetch_add(1, Ordering::Relaxed);
}

/// Counters of one path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathStats {
    /// Bytes read.
    pub read_bytes: u64,
    /// Reads.
    pub read_ops: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Writes.
    pub write_ops: u64,
}

/// A snapshot of every counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// O_DIRECT into the destination (or GPU peer-to-peer).
    pub direct: PathStats,
    /// Through the page cache.
    pub buffered: PathStats,
    /// Through pinned bounce buffers.
    pub staged: PathStats,
    /// Through the remote client.
    pub remote: PathStats,
    /// Times a path fell back to another.
    pub fallbacks: u64,
    /// Bytes fetched ahead of staged reads and used by them (counted in
    /// `remote` too when read).
    pub readahead_used: u64,
    /// Bytes fetched ahead and dropped unused.
    pub readahead_dropped: u64,
    /// Bytes TCP lanes received into their own pinned staging and copied
    /// to device memory (`HIPFS_TCP_LANE_STAGING`).
    pub lane_staged: u64,
}

impl Stats {
    /// The counters of one path.
    pub fn path(&self, p: IoPath) -> PathStats {
        match p {
            IoPath::Direct => self.direct,
            IoPath::Buffered => self.buffered,
            IoPath::Staged => self.staged,
            IoPath::Remote => self.remote,
        }
    }
}

/// Reads every counter.
pub fn snapshot() -> Stats {
    let get = |p: IoPath| {
        let c = slot(p);
        PathStats {
            read_bytes: c.read_bytes.load(Ordering::Relaxed),
            read_ops: c.read_ops.load(Ordering::Relaxed),
            write_bytes: c.write_bytes.load(Ordering::Relaxed),
            write_ops: c.write_ops.load(Ordering::Relaxed),
        }
    };
    Stats {
        direct: get(IoPath::Direct),
        buffered: get(IoPath::Buffered),
        staged: get(IoPath::Staged),
        remote: get(IoPath::Remote),
        fallbacks: FALLBACKS.load(Ordering::Relaxed),
        readahead_used: READAHEAD_USED.load(Ordering::Relaxed),
        readahead_dropped: READAHEAD_DROPPED.load(Ordering::Relaxed),
        lane_staged: LANE_STAGED.load(Ordering::Relaxed),
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<10} {:>16} {:>10} {:>16} {:>10}",
            "path", "read bytes", "read ops", "write bytes", "write ops"
        )?;
        for p in PATHS {
            let s = self.path(p);
            writeln!(
                f,
                "{:<10} {:>16} {:>10} {:>16} {:>10}",
                format!("{p:?}").to_lowercase(),
                s.read_bytes,
                s.read_ops,
                s.write_bytes,
                s.write_ops
            )?;
        }
        writeln!(f, "fallbacks  {}", self.fallbacks)?;
        writeln!(
            f,
            "readahead  {} bytes used, {} dropped",
            self.readahead_used, self.readahead_dropped
        )?;
        if self.lane_staged > 0 {
            writeln!(
                f,
                "tcp lanes  {} bytes staged into device memory",
                self.lane_staged
            )?;
        }
        let d = device_registrations();
        write!(
            f,
            "device memory registrations: {} dmabuf, {} peer memory, {} staged (refused: {} dmabuf, {} peer memory)",
            d.dmabuf, d.peer_memory, d.staged, d.dmabuf_refused, d.peer_memory_refused
        )
    }
}
