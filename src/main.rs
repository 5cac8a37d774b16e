//! `hipfs`: the command-line face of the library.

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
    /// Print the per-path I/O counters of this process (mostly useful after a bench).
    ///
    /// Example: HIPFS_STATS=1 hipfs bench read /data/big.bin
    Stats,
    /// Export a directory to hipfs clients.
    Serve(hipfs::cli::remote_cmds::ServeArgs),
    /// Mount a hipfs export (or serve and mount a local directory with --local).
    Mount(hipfs::cli::remote_cmds::MountArgs),
    /// Unmount a hipfs mount.
    Umount(hipfs::cli::remote_cmds::UmountArgs),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Read FILE through the library into host memory, beside a parallel pread.
    ///
    /// Example: hipfs bench read /tmp/hipfs-2g.bin --create 2G
    Read {
        file: PathBuf,
        /// Generate FILE with this size first if it does not exist (e.g. 2G, 512M).
        #[arg(long, value_parser = parse_size)]
        create: Option<u64>,
        /// Bytes per library call (0 = the whole file in one call).
        #[arg(long, default_value = "0", value_parser = parse_size)]
        request: u64,
        /// Threads of the parallel-pread ceiling (default: CPUs).
        #[arg(long)]
        threads: Option<usize>,
        /// Repetitions; the median is reported.
        #[arg(long, default_value_t = 5)]
        repeats: usize,
        /// Hide the progress bar.
        #[arg(long)]
        quiet: bool,
    },
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = s[i..].to_ascii_uppercase();
            let m = match unit.trim_end_matches("IB").trim_end_matches('B') {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1u64 << 40,
                _ => return Err(format!("unknown size unit in {s:?} (use K, M, G, T)")),
            };
            (&s[..i], m)
        }
        None => (s, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a size like 4096, 64K, 2G"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
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
            let findings = hipfs::cli::check::run_checks(&dir);
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
        Cmd::Serve(a) => hipfs::cli::remote_cmds::run_serve(&a),
        Cmd::Mount(a) => hipfs::cli::remote_cmds::run_mount(&a),
        Cmd::Umount(a) => hipfs::cli::remote_cmds::run_umount(&a),
        Cmd::Stats => {
            println!("{}", hipfs::stats::snapshot());
            Ok(())
        }
        Cmd::Bench(BenchCmd::Read {
            file,
            create,
            request,
            threads,
            repeats,
            quiet,
        }) => {
            let threads = threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get()));
            let opts = hipfs::cli::bench::ReadBenchOptions {
                file: file.clone(),
                request_size: request as usize,
                threads,
                repeats,
                create_size: create,
                progress: !quiet,
            };
            hipfs::cli::bench::run_read_bench(&opts).map(|rows| {
                hipfs::cli::bench::print_table(
                    &format!("hipfs bench read {} (host memory, page-cache resident, median of {repeats})", file.display()),
                    &rows,
                );
                if std::env::var_os("HIPFS_STATS").is_some_and(|v| v == "1") {
                    println!("\n{}", hipfs::stats::snapshot());
                }
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hipfs: {e}");
            ExitCode::FAILURE
        }
    }
}
