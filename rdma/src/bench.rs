//! Throughput benchmarks: a transport against a plain-socket ceiling,
//! measured in the same run (printed by `hipfs bench transport`).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::TransportKind;

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
    /// Transport (`Auto` resolves as in [`crate::connect`]).
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
/// blocks, `lanes` lanes.
pub fn transport_throughput(kind: TransportKind, size: u64, lanes: usize) -> Result<BenchResult> {
    run(&BenchSpec {
        kind,
        addr: "127.0.0.1:0".into(),
        total_bytes: size,
        block_size: 4 << 20,
        lanes,
        depth: lanes.max(1),
        op: BenchOp::Write,
    })
}

/// Runs one benchmark spec.
pub fn run(spec: &BenchSpec) -> Result<BenchResult> {
    let _ = spec;
    Err(Error::Unsupported("bench: not implemented yet".into()))
}

/// The ceiling: `size` bytes copied through one plain loopback TCP socket
/// (write() on one side, read() into a buffer on the other).
pub fn plain_socket_copy(size: u64) -> Result<BenchResult> {
    let _ = size;
    Err(Error::Unsupported("bench: not implemented yet".into()))
}
