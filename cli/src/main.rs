//! `hipfs`: the command-line face of the library: flags and dispatch. The
//! subcommands and benchmarks are in the `hipfs_cli` library of this
//! package (so its integration tests can call them too).

#![forbid(unsafe_code)]

use hipfs_cli::{bench, check, remote_cmds};

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "hipfs",
    version,
    about = "GPU-direct storage: the hipFile API and the hipfs remote dataset filesystem"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the library and hipFile API versions.
    ///
    /// Example: hipfs version
    Version,
    /// Report what this host can do: GPU runtimes, RDMA devices, FUSE, O_DIRECT.
    ///
    /// Example: hipfs check /data
    Check {
        /// Directory whose filesystem to test for O_DIRECT (default: current directory).
        dir: Option<PathBuf>,
    },
    /// Measure throughput beside a ceiling measured in the same run.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Print the counters of a hipfs mount's client (requests, failures,
    /// reconnects, bytes), or without MOUNTPOINT this process's per-path I/O
    /// counters (HIPFS_STATS=1 prints them at exit of any hipfs command).
    ///
    /// Example: hipfs stats /mnt/data
    Stats(remote_cmds::StatsArgs),
    /// Export a directory to hipfs clients.
    Serve(remote_cmds::ServeArgs),
    /// Mount a hipfs export (or serve and mount a local directory with --local).
    Mount(remote_cmds::MountArgs),
    /// Unmount a hipfs mount.
    Umount(remote_cmds::UmountArgs),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Read FILE through the library into host memory (or, with --gpu, device
    /// memory), beside the ceiling measured in the same run.
    ///
    /// Example (host memory): hipfs bench read /tmp/hipfs-2g.bin --create 2G
    ///
    /// Example (GPU memory): hipfs bench read /data/8g.bin --gpu --create 8G --configs 16x8M
    Read {
        #[command(flatten)]
        args: bench::gpu::GpuBenchArgs,
        /// Read into GPU memory (table: copy ceiling, single-thread pread+copy, hipfs).
        #[arg(long)]
        gpu: bool,
        /// Bytes per library call for host memory (0 = the whole file in one call).
        #[arg(long, default_value = "0", value_parser = hipfs::units::parse_size)]
        request: u64,
        /// Threads of the host parallel-pread ceiling (default: CPUs).
        #[arg(long)]
        threads: Option<usize>,
        /// Hide the progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// Write FILE from GPU memory beside the device-to-host copy ceiling.
    ///
    /// Example: hipfs bench write /data/8g.bin --gpu --create 8G
    Write {
        #[command(flatten)]
        args: bench::gpu::GpuBenchArgs,
        /// Write from GPU memory (the only mode of this benchmark).
        #[arg(long)]
        gpu: bool,
    },
    /// One-sided transport throughput on loopback beside a plain socket copy.
    ///
    /// Example: hipfs bench transport --size 4G --lanes 4
    Transport {
        /// Transport: auto, tcp or verbs.
        #[arg(long, default_value = "tcp")]
        kind: String,
        /// Bytes moved per measurement.
        #[arg(long, default_value = "2G", value_parser = hipfs::units::parse_size)]
        size: u64,
        /// Lanes (TCP streams or queue pairs) per connection (default: 4, at
        /// most one per CPU: more lanes than cores only add context switches).
        #[arg(long)]
        lanes: Option<usize>,
        /// Repetitions; the median is reported.
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Also measure the transport over TLS (a throwaway certificate
        /// made for the run), in the same loop as the plaintext row.
        #[arg(long)]
        tls: bool,
    },
    /// RDMA WRITE and READ throughput with a chosen block size and depth,
    /// beside the plain-socket ceiling (TCP/auto only); for verbs, IP is an
    /// RDMA interface's address. (The former `transport_bench` example.)
    ///
    /// Example: hipfs bench transport-ops verbs 64 4 10.99.0.1 1024 4
    TransportOps {
        /// Transport: tcp, verbs or auto.
        #[arg(default_value = "tcp")]
        kind: String,
        /// MiB moved per operation.
        #[arg(default_value_t = 1024)]
        mib: u64,
        /// Lanes per connection.
        #[arg(default_value_t = 4)]
        lanes: usize,
        /// IP address the in-process server listens on.
        #[arg(default_value = "127.0.0.1")]
        ip: String,
        /// KiB per one-sided call.
        #[arg(default_value_t = 4096)]
        block_kib: usize,
        /// Calls in flight at once (default: lanes).
        depth: Option<usize>,
    },
    /// Sequential 1 MiB reads through a hipfs mount beside the same reads
    /// through the remote client directly (a local server on loopback).
    ///
    /// Example: hipfs bench mount /tmp/hipfs-1g.bin --create 1G
    Mount(remote_cmds::BenchRemoteArgs),
    /// A large file read with UserspaceFs handles (server straight into the
    /// caller's memory, no FUSE) beside the loopback TCP ceiling and the
    /// same read through the FUSE mount with an OpaqueFd handle.
    ///
    /// Example: hipfs bench userspace /tmp/hipfs-1g.bin --create 1G
    Userspace(remote_cmds::BenchRemoteArgs),
    /// One file read through multi-server mounts of the first 1, 2, ... N
    /// of the given servers (FUSE and UserspaceFs), with the ratio to one
    /// server; `scripts/bench-multi.sh` runs it over rate-limited links.
    ///
    /// Example: hipfs bench spread data/1g.bin --servers s1:7471,s2:7471,s3:7471 -o token_file=/etc/hipfs/token
    Spread(bench::spread::SpreadBenchArgs),
    /// `ls -lR` (cold and repeated), `find`, `cat` of many small files,
    /// `cp -r` out and in, `tar -x` in, `touch -c` of one file 10,000 times
    /// (one request each): on a local directory and through a hipfs mount of it (in-process server on loopback) in one run, with
    /// the ratios; `--peer sshfs=/mnt/x` adds another mount of the same
    /// directory (`--data`). A "FUSE floor" column times the same steps on
    /// an in-memory filesystem behind the same FUSE adapter (no server):
    /// the least any FUSE mount costs here. Root drops caches before the
    /// cold steps.
    ///
    /// Example: hipfs bench meta --tree-files 100000 --small-files 10000
    Meta {
        /// Where the run's directory goes.
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
        /// Files for ls -lR and find (1,000 per directory).
        #[arg(long, default_value_t = 100_000)]
        tree_files: usize,
        /// Small files for cat, cp -r and tar -x.
        #[arg(long, default_value_t = 10_000)]
        small_files: usize,
        /// -o options of the hipfs mount (default: none).
        #[arg(short = 'o', default_value = "")]
        options: String,
        /// A data directory made by an earlier run (or `--generate-only`)
        /// with the same counts, which the peers mount.
        #[arg(long)]
        data: Option<PathBuf>,
        /// Only make the data set in --data and exit.
        #[arg(long, requires = "data")]
        generate_only: bool,
        /// LABEL=MOUNTPOINT of another mount of --data, timed beside.
        #[arg(long, value_name = "LABEL=DIR")]
        peer: Vec<String>,
        /// Repetitions per step (median).
        #[arg(long, default_value_t = 1)]
        repeats: usize,
        /// Leave out the FUSE floor column (the steps on an in-memory
        /// filesystem behind the same FUSE adapter, no server).
        #[arg(long)]
        no_floor: bool,
    },
}

fn run_bench(cmd: BenchCmd) -> remote_cmds::CmdResult {
    match cmd {
        BenchCmd::Read {
            args, gpu: true, ..
        } => Ok(bench::gpu::run_gpu_bench(args)?),
        BenchCmd::Read {
            args,
            gpu: false,
            request,
            threads,
            quiet,
        } => {
            let threads = threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get()));
            let opts = bench::read::ReadBenchOptions {
                file: args.file.clone(),
                request_size: request as usize,
                threads,
                repeats: args.repeats.max(3),
                create_size: args.create,
                progress: !quiet,
            };
            let rows = bench::read::run_read_bench(&opts)?;
            bench::print_table(
                &format!(
                    "hipfs bench read {} (host memory, page-cache resident, median of {})",
                    args.file.display(),
                    opts.repeats
                ),
                &rows,
            );
            Ok(())
        }
        BenchCmd::Write { mut args, gpu } => {
            if !gpu {
                return Err(hipfs::Error::new(
                    hipfs::OpError::InvalidValue,
                    "bench write measures writes from GPU memory: pass --gpu",
                )
                .into());
            }
            args.write = true;
            Ok(bench::gpu::run_gpu_bench(args)?)
        }
        BenchCmd::Transport {
            kind,
            size,
            lanes,
            repeats,
            tls,
        } => {
            let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
            let lanes = lanes.unwrap_or(cpus.min(4));
            Ok(bench::transport::run_transport_bench(
                &kind, size, lanes, repeats, tls,
            )?)
        }
        BenchCmd::TransportOps {
            kind,
            mib,
            lanes,
            ip,
            block_kib,
            depth,
        } => {
            let kind: hipfs_rdma::TransportKind = kind.parse()?;
            Ok(bench::transport::run_transport_ops(
                kind, mib, lanes, &ip, block_kib, depth,
            )?)
        }
        BenchCmd::Userspace(a) => remote_cmds::run_bench_userspace(&a),
        BenchCmd::Mount(a) => remote_cmds::run_bench_mount(&a),
        BenchCmd::Spread(a) => bench::spread::run(&a),
        BenchCmd::Meta {
            dir,
            tree_files,
            small_files,
            options,
            data,
            generate_only,
            peer,
            repeats,
            no_floor,
        } => {
            if generate_only {
                let d = data.ok_or("--generate-only needs --data DIR")?;
                std::fs::create_dir_all(&d)?;
                return Ok(bench::meta::generate(&d, tree_files, small_files)?);
            }
            let peers = peer
                .iter()
                .map(|p| {
                    p.split_once('=')
                        .map(|(l, d)| (l.to_string(), PathBuf::from(d)))
                        .ok_or_else(|| format!("--peer {p}: expected LABEL=MOUNTPOINT"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if !peers.is_empty() && data.is_none() {
                return Err("--peer needs --data DIR: the directory the peers mount".into());
            }
            bench::meta::run_meta_bench(&bench::meta::MetaBenchOptions {
                dir,
                tree_files,
                small_files,
                mount_options: options,
                peers,
                data,
                repeats,
                floor: !no_floor,
            })
        }
    }
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Version => {
            let (a, b, c) = hipfs::get_version();
            println!(
                "hipfs {} (hipFile API {a}.{b}.{c})",
                env!("CARGO_PKG_VERSION")
            );
            Ok(())
        }
        Cmd::Check { dir } => {
            let dir = dir.unwrap_or_else(|| PathBuf::from("."));
            let findings = check::run_checks(&dir);
            for f in &findings {
                println!(
                    "{:<16} {:<4} {}",
                    f.what,
                    if f.ok { "ok" } else { "--" },
                    f.detail
                );
            }
            Ok(())
        }
        Cmd::Serve(a) => remote_cmds::run_serve(&a),
        Cmd::Mount(a) => remote_cmds::run_mount(&a),
        Cmd::Umount(a) => remote_cmds::run_umount(&a),
        Cmd::Stats(a) => remote_cmds::run_stats(&a),
        Cmd::Bench(cmd) => run_bench(cmd).map(|()| {
            if std::env::var_os("HIPFS_STATS").is_some_and(|v| v == "1") {
                println!("\n{}", hipfs::stats::snapshot());
            }
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<remote_cmds::AlreadyReported>() => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("hipfs: {e}");
            ExitCode::FAILURE
        }
    }
}
