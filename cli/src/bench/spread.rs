//! `hipfs bench spread`: one file read through multi-server mounts of 1,
//! 2, ... N of the given servers, in one run, through FUSE and through
//! UserspaceFs handles (the direct path), with the ratio to one server.
//! `scripts/bench-multi.sh` runs it over three servers in their own network
//! namespaces, each link rate-limited with `tc`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;

use hipfs::remote::mount::{mount_remote, split_servers, MountOptions};

/// `hipfs bench spread --servers S1,S2,S3 FILE`.
#[derive(Args, Debug, Clone)]
pub struct SpreadBenchArgs {
    /// The file to read, relative to the export root.
    pub file: PathBuf,
    /// The servers of one export, comma-separated; the run mounts the
    /// first 1, 2, ... of them.
    #[arg(long)]
    pub servers: String,
    /// Mount options, as `hipfs mount -o` takes them (e.g. token_file=F).
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Bytes per UserspaceFs read call.
    #[arg(long, default_value = "64M", value_parser = hipfs::units::parse_size)]
    pub request: u64,
    /// Rounds; the best of them is reported for each row.
    #[arg(long, default_value_t = 2)]
    pub repeats: usize,
    /// Skip the FUSE rows (only UserspaceFs).
    #[arg(long)]
    pub no_fuse: bool,
}

/// One row: servers used, how, GiB/s.
struct Row {
    servers: usize,
    path: &'static str,
    gib_s: f64,
}

fn gib_s(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / secs.max(1e-9) / f64::from(1u32 << 30)
}

/// Reads all of `path` through FUSE in 4 MiB reads; (bytes, seconds).
fn read_fuse(path: &Path) -> std::io::Result<(u64, f64)> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 4 << 20];
    let (mut off, t) = (0u64, Instant::now());
    loop {
        let n = f.read_at(&mut buf, off)?;
        if n == 0 {
            break;
        }
        off += n as u64;
    }
    Ok((off, t.elapsed().as_secs_f64()))
}

/// Reads all of `path` with a UserspaceFs handle; (bytes, seconds).
fn read_userspace(path: &Path, request: usize) -> hipfs::Result<(u64, f64)> {
    let mut fh =
        hipfs::FileHandle::new(path, libc::O_RDONLY, 0, hipfs::FileHandleType::UserspaceFs);
    fh.open()?;
    let mut mem = vec![0u8; request];
    let mut buf = hipfs::Buffer::from_slice(&mut mem, 0);
    let (mut off, t) = (0u64, Instant::now());
    loop {
        let n = fh.read(&mut buf, request, off as i64, 0)?;
        if n == 0 {
            break;
        }
        off += n as u64;
    }
    Ok((off, t.elapsed().as_secs_f64()))
}

/// Runs the benchmark and prints its table.
pub fn run(args: &SpreadBenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let servers = split_servers(&args.servers)?;
    let mut opts = MountOptions::parse(&args.options.join(","))?;
    // Every FUSE read goes to the servers: the client's page cache would
    // serve repeats from memory.
    opts.direct_io = true;
    let request = usize::try_from(args.request)
        .ok()
        .filter(|r| *r > 0)
        .ok_or("--request must be > 0")?;
    let _driver = hipfs::Driver::open()?;
    let mut rows = Vec::new();
    for n in 1..=servers.len() {
        let source = servers[..n].join(",");
        let mnt =
            std::env::temp_dir().join(format!("hipfs-bench-spread-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&mnt)?;
        let m = mount_remote(&source, &mnt, &opts)?;
        let file = mnt.join(&args.file);
        let (mut best_fuse, mut best_us) = (0f64, 0f64);
        for _ in 0..args.repeats.max(1) {
            if !args.no_fuse {
                let (b, s) = read_fuse(&file)?;
                best_fuse = best_fuse.max(gib_s(b, s));
            }
            let (b, s) = read_userspace(&file, request)?;
            best_us = best_us.max(gib_s(b, s));
        }
        if let Ok(text) = crate::remote_cmds::mount_stats(&mnt) {
            for l in text.lines().filter(|l| l.contains("extents")) {
                println!("  [{n} server(s)] {}", l.trim());
            }
        }
        m.unmount()?;
        let _ = std::fs::remove_dir(&mnt);
        if !args.no_fuse {
            rows.push(Row {
                servers: n,
                path: "FUSE (direct_io, 4 MiB reads)",
                gib_s: best_fuse,
            });
        }
        rows.push(Row {
            servers: n,
            path: "UserspaceFs",
            gib_s: best_us,
        });
    }
    println!(
        "hipfs bench spread {} over {} (best of {}):",
        args.file.display(),
        servers.join(","),
        args.repeats.max(1)
    );
    println!(
        "{:>8}  {:<32} {:>10} {:>10}",
        "servers", "path", "MiB/s", "x 1 server"
    );
    for r in &rows {
        let one = rows
            .iter()
            .find(|o| o.servers == 1 && o.path == r.path)
            .map_or(0.0, |o| o.gib_s);
        println!(
            "{:>8}  {:<32} {:>10.1} {:>10.2}",
            r.servers,
            r.path,
            r.gib_s * 1024.0,
            if one > 0.0 { r.gib_s / one } else { 0.0 }
        );
    }
    Ok(())
}
