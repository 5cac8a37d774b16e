//! Prints transport throughput (RDMA WRITE and READ) beside the
//! plain-socket ceiling (TCP/auto only) measured in the same run.
//!
//! ```text
//! transport_bench [tcp|verbs|auto] [total MiB] [lanes] [ip] [block KiB] [depth]
//! cargo run --release -p hipfs-rdma --example transport_bench -- tcp 2048 4
//! transport_bench verbs 64 4 10.99.0.1 1024 4     # in the soft-RoCE VM
//! ```

use hipfs_rdma::bench::{self, BenchOp, BenchSpec};
use hipfs_rdma::TransportKind;

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> Result<T, String> {
    match args.get(i) {
        None => Ok(default),
        Some(s) => s
            .parse()
            .map_err(|_| format!("argument {}: cannot parse '{s}'", i + 1)),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind: TransportKind = args
        .first()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(TransportKind::Tcp);
    let mib: u64 = arg(&args, 1, 1024)?;
    let lanes: usize = arg(&args, 2, 4)?;
    let ip: String = arg(&args, 3, "127.0.0.1".to_string())?;
    let block_kib: usize = arg(&args, 4, 4096)?;
    let depth: usize = arg(&args, 5, lanes)?;
    let size = mib << 20;
    println!(
        "{:<44} {:>12} {:>9} {:>7}",
        "what", "bytes", "GB/s", "ratio"
    );
    let ceiling = if kind == TransportKind::Verbs {
        None
    } else {
        let c = bench::plain_socket_copy(size)?;
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
        let r = bench::run(&BenchSpec {
            kind,
            addr: format!("{ip}:0"),
            total_bytes: size,
            block_size: block_kib << 10,
            lanes,
            depth,
            op,
        })?;
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
