//! The GPU benchmark as a stand-alone program, for machines where only the
//! example is carried: `gpu_bench read FILE [--direct] [--configs 16x4M,...]`
//! and `gpu_bench write FILE`. `hipfs bench read FILE --gpu` runs the same code.

use clap::{Parser, Subcommand};
use hipfs::cli::bench_gpu::{run_gpu_bench, GpuBenchArgs};
use std::process::ExitCode;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// File → device memory.
    Read(GpuBenchArgs),
    /// Device memory → file.
    Write(GpuBenchArgs),
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args = match Cli::parse().cmd {
        Cmd::Read(a) => a,
        Cmd::Write(a) => GpuBenchArgs { write: true, ..a },
    };
    match run_gpu_bench(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpu_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
