//! Prints transport throughput beside the plain-socket ceiling.
//!
//! ```text
//! cargo run --release -p hipfs-rdma --example transport_bench -- [tcp|verbs|auto] [MiB] [lanes] [bind-ip]
//! ```
//! With `verbs`, give the IP of an RDMA interface (e.g. the rxe VM's 10.99.0.1).

use hipfs_rdma::bench::{self, BenchOp, BenchSpec};
use hipfs_rdma::TransportKind;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind: TransportKind = args
        .first()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(TransportKind::Tcp);
    let mib: u64 = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(1024);
    let lanes: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(4);
    let ip = args.get(3).cloned().unwrap_or_else(|| "127.0.0.1".into());
    let size = mib << 20;
    println!(
        "{:<44} {:>12} {:>10} {:>8}",
        "what", "bytes", "GB/s", "ratio"
    );
    let ceiling = if kind == TransportKind::Verbs {
        None
    } else {
        let c = bench::plain_socket_copy(size)?;
        println!(
            "{:<44} {:>12} {:>10.3} {:>8}",
            c.name,
            c.bytes,
            c.gbytes_per_sec(),
            "1.00"
        );
        Some(c.gbytes_per_sec())
    };
    for op in [BenchOp::Write, BenchOp::Read] {
        let block = if mib < 64 { 1 << 20 } else { 4 << 20 };
        let r = bench::run(&BenchSpec {
            kind,
            addr: format!("{ip}:0"),
            total_bytes: size,
            block_size: block,
            lanes,
            depth: lanes,
            op,
        })?;
        let ratio = ceiling
            .map(|c| format!("{:.2}", r.gbytes_per_sec() / c))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<44} {:>12} {:>10.3} {:>8}",
            r.name,
            r.bytes,
            r.gbytes_per_sec(),
            ratio
        );
    }
    Ok(())
}
