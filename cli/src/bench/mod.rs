//! Every benchmark of the `hipfs` command, each beside a ceiling measured
//! in the same run: `read` (host memory), `gpu` (device memory),
//! `remote` (mount and UserspaceFs over loopback) and `transport`.

pub mod gpu;
pub mod lanelike;
pub mod meta;
pub mod read;
pub mod remote;
pub mod spread;
pub mod tls;
pub mod transport;

use hipfs::{Error, Result};
use std::os::unix::fs::FileExt;
use std::path::Path;

pub use hipfs::units::parse_size;

/// Writes a file of pseudo-random bytes (never zeros: compression or
/// zero-page tricks must not flatter a result).
pub fn generate_file(path: &Path, size: u64, progress: bool) -> Result<()> {
    let f = std::fs::File::create(path)
        .map_err(|e| Error::from(e).with_context(format!("create {}", path.display())))?;
    let bar = progress_bar(size, progress, "generating");
    let mut block = vec![0u8; 8 << 20];
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ size;
    let mut off = 0u64;
    while off < size {
        for w in block.chunks_exact_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            w.copy_from_slice(&state.to_le_bytes());
        }
        let n = (size - off).min(block.len() as u64) as usize;
        f.write_all_at(&block[..n], off)?;
        off += n as u64;
        bar.set_position(off);
    }
    bar.finish_and_clear();
    f.sync_all()?;
    Ok(())
}

pub(crate) fn progress_bar(len: u64, on: bool, msg: &'static str) -> indicatif::ProgressBar {
    if !on {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{msg:>10} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(msg);
    bar
}

/// The median of a benchmark's repetitions (the default value when there are none).
pub fn median<T: Copy + PartialOrd + Default>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// One row of a result table: what was measured, its throughput and its
/// share of the ceiling (the first row, 1.0).
#[derive(Debug, Clone)]
pub struct BenchRow {
    pub name: String,
    pub gib_per_s: f64,
    pub ratio: f64,
}

/// Prints rows as a table.
pub fn print_table(title: &str, rows: &[BenchRow]) {
    println!("{title}");
    println!("{:<48} {:>10} {:>10}", "path", "GiB/s", "ratio");
    for r in rows {
        println!(
            "{:<48} {:>10.2} {:>9.0}%",
            r.name,
            r.gib_per_s,
            r.ratio * 100.0
        );
    }
}
