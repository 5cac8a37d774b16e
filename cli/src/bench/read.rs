//! `hipfs bench read FILE`: the library's read into host memory beside the
//! ceiling measured in the same run (a plain parallel `pread` of the file).

use super::{generate_file, median, progress_bar, BenchRow};
use hipfs::{Buffer, Error, FileHandle, FileHandleType, OpError, Result};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Options of `hipfs bench read`.
#[derive(Debug, Clone)]
pub struct ReadBenchOptions {
    pub file: PathBuf,
    /// Bytes per request the library is given (the whole file when 0).
    pub request_size: usize,
    /// Threads of the ceiling's parallel pread.
    pub threads: usize,
    pub repeats: usize,
    /// Create the file with this many bytes when it does not exist.
    pub create_size: Option<u64>,
    pub progress: bool,
}

fn checksum(data: &[u8]) -> u64 {
    // FNV-1a over 8-byte words: cheap, and any misplaced block changes it.
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for (i, w) in data.chunks(8).enumerate() {
        let mut b = [0u8; 8];
        b[..w.len()].copy_from_slice(w);
        h ^= u64::from_le_bytes(b) ^ i as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn parallel_pread(path: &Path, dst: &mut [u8], threads: usize) -> Result<()> {
    let f = std::fs::File::open(path)?;
    let chunk = dst.len().div_ceil(threads.max(1)).max(1);
    let errors = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for (i, part) in dst.chunks_mut(chunk).enumerate() {
            let f = &f;
            let errors = &errors;
            s.spawn(move || {
                let mut off = 0;
                while off < part.len() {
                    let n = (part.len() - off).min(16 << 20);
                    match f.read_at(&mut part[off..off + n], (i * chunk + off) as u64) {
                        Ok(0) => break,
                        Ok(got) => off += got,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            errors.lock().unwrap_or_else(|p| p.into_inner()).push(e);
                            break;
                        }
                    }
                }
            });
        }
    });
    match errors.into_inner().unwrap_or_else(|p| p.into_inner()).pop() {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Runs the benchmark and returns the table rows (ceiling first).
pub fn run_read_bench(opts: &ReadBenchOptions) -> Result<Vec<BenchRow>> {
    if !opts.file.exists() {
        match opts.create_size {
            Some(size) => generate_file(&opts.file, size, opts.progress)?,
            None => {
                return Err(Error::new(
                    OpError::InvalidValue,
                    format!(
                        "{} does not exist (pass --create SIZE to generate it)",
                        opts.file.display()
                    ),
                ))
            }
        }
    }
    let size = std::fs::metadata(&opts.file)?.len() as usize;
    if size == 0 {
        return Err(Error::new(OpError::InvalidValue, "the file is empty"));
    }
    let mut mem = vec![0u8; size];
    // Warm up: bring the file into the page cache and fault the buffer in.
    parallel_pread(&opts.file, &mut mem, opts.threads)?;
    let reference = checksum(&mem);
    let repeats = opts.repeats.max(1);
    let bar = progress_bar((repeats * 2) as u64 * size as u64, opts.progress, "reading");

    let drv = hipfs::Driver::open()?;
    let mut fh = FileHandle::new(&opts.file, libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
    fh.open()?;
    let req = if opts.request_size == 0 {
        size
    } else {
        opts.request_size
    };
    let mut ceiling = Vec::new();
    let mut ours = Vec::new();
    for _ in 0..repeats {
        mem.fill(0xA5);
        let t = Instant::now();
        parallel_pread(&opts.file, &mut mem, opts.threads)?;
        ceiling.push(t.elapsed());
        bar.inc(size as u64);
        if checksum(&mem) != reference {
            return Err(Error::new(
                OpError::InternalError,
                "ceiling read returned wrong bytes",
            ));
        }

        mem.fill(0x5A);
        let mut buf = Buffer::from_slice(&mut mem, 0);
        buf.register()?;
        let t = Instant::now();
        let mut off = 0;
        while off < size {
            let n = (size - off).min(req);
            let got = fh.read(&mut buf, n, off as i64, off as i64)?;
            if got == 0 {
                break;
            }
            off += got;
        }
        ours.push(t.elapsed());
        buf.deregister()?;
        drop(buf);
        bar.inc(size as u64);
        if off != size || checksum(&mem) != reference {
            return Err(Error::new(
                OpError::InternalError,
                format!("hipfs read {off} of {size} bytes or wrong bytes"),
            ));
        }
    }
    bar.finish_and_clear();
    fh.close();
    drv.close()?;
    let gib = |d: Duration| size as f64 / d.as_secs_f64() / (1u64 << 30) as f64;
    let c = gib(median(ceiling));
    let o = gib(median(ours));
    Ok(vec![
        BenchRow {
            name: format!("ceiling: parallel pread, {} threads", opts.threads),
            gib_per_s: c,
            ratio: 1.0,
        },
        BenchRow {
            name: "hipfs FileHandle::read -> host memory".to_string(),
            gib_per_s: o,
            ratio: o / c,
        },
    ])
}
