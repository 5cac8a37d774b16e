//! `hipfs bench read FILE --gpu` and `hipfs bench write FILE --gpu`: file
//! to device memory (and back) beside, from the same run, the pinned copy
//! ceiling and a plain single-thread pread + copy loop; `--direct` reads
//! cold (page cache dropped) and adds `dd iflag=direct` of the same file.
//! Every timed transfer is checked byte for byte afterwards (outside the
//! timed region): the device data is copied back and hashed per chunk
//! against the file.

use super::{median, parse_size};
use hipfs::gpu::{self, DeviceAllocation, GpuRuntime, PinnedHost, Stream};
use hipfs::io::bounce_pool;
use hipfs::{Buffer, Error, FileHandle, FileHandleType, OpError, Result, SizeTParam};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Options of the GPU benchmark.
#[derive(clap::Args, Debug, Clone)]
pub struct GpuBenchArgs {
    /// The file to read (or, with `write`, to read once and then write to FILE.out).
    pub file: PathBuf,
    /// Generate FILE with this size first if it does not exist (e.g. 8G).
    #[arg(long, value_parser = parse_size)]
    pub create: Option<u64>,
    /// Read cold: drop the page cache before each timed read, and add `dd iflag=direct`.
    #[arg(long)]
    pub direct: bool,
    /// Repetitions of each timed row; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// hipfs configurations to measure, as THREADSxCHUNK (e.g. "16x4M,16x8M");
    /// default: the library's parameters as they are.
    #[arg(long, value_delimiter = ',')]
    pub configs: Vec<String>,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: i32,
    /// Measure writes from device memory instead of reads (set by `bench write`).
    #[arg(skip)]
    pub write: bool,
}

const CHUNK: usize = 16 << 20;

fn gib(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / (1u64 << 30) as f64
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get())
}

/// Hash of one CHUNK-sized piece: position-dependent, so a misplaced
/// block changes it; 4 lanes so it runs near memory speed.
fn hash_piece(data: &[u8]) -> u64 {
    let mut h = [
        0x9E37_79B9_7F4A_7C15u64,
        0xC2B2_AE3D_27D4_EB4F,
        0x1656_67B1_9E37_79F9,
        0x27D4_EB2F_1656_67C5,
    ];
    let mut words = data.chunks_exact(32);
    for (i, w) in words.by_ref().enumerate() {
        for (l, hl) in h.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(&w[l * 8..l * 8 + 8]);
            *hl = (*hl ^ u64::from_le_bytes(b) ^ i as u64)
                .wrapping_mul(0x0100_0000_01b3)
                .rotate_left(29);
        }
    }
    let mut tail = h[0] ^ data.len() as u64;
    for &b in words.remainder() {
        tail = (tail ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h[1] ^ h[2].rotate_left(17) ^ h[3].rotate_left(41) ^ tail
}

fn hash_parallel(data: &[u8]) -> Vec<u64> {
    let pieces: Vec<&[u8]> = data.chunks(CHUNK).collect();
    let mut out = vec![0u64; pieces.len()];
    let per = pieces.len().div_ceil(threads()).max(1);
    std::thread::scope(|s| {
        for (ps, os) in pieces.chunks(per).zip(out.chunks_mut(per)) {
            s.spawn(move || {
                for (p, o) in ps.iter().zip(os.iter_mut()) {
                    *o = hash_piece(p);
                }
            });
        }
    });
    out
}

/// Per-CHUNK hashes of the file, read with all cores (this also brings it
/// into the page cache).
fn hash_file(path: &Path, size: usize) -> Result<Vec<u64>> {
    let f = std::fs::File::open(path)?;
    let n = size.div_ceil(CHUNK);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let out: Vec<std::sync::Mutex<u64>> = (0..n).map(|_| std::sync::Mutex::new(0)).collect();
    let failed = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads() {
            s.spawn(|| {
                let mut buf = vec![0u8; CHUNK];
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let len = (size - i * CHUNK).min(CHUNK);
                    if let Err(e) = f.read_exact_at(&mut buf[..len], (i * CHUNK) as u64) {
                        *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                        break;
                    }
                    *out[i].lock().unwrap_or_else(|p| p.into_inner()) = hash_piece(&buf[..len]);
                }
            });
        }
    });
    if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e.into());
    }
    Ok(out
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
        .collect())
}

struct Bench<'a> {
    rt: &'static dyn GpuRuntime,
    args: &'a GpuBenchArgs,
    size: usize,
    /// Device memory for the duration of the benchmark.
    dev: DeviceAllocation<'static>,
    /// 256 MiB of pinned memory for checking and for the baselines.
    stage: PinnedHost,
    reference: Vec<u64>,
}

impl Bench<'_> {
    /// Copies the device buffer back and compares it with the file's hashes.
    fn verify(&mut self, what: &str) -> Result<()> {
        let mut got = Vec::with_capacity(self.reference.len());
        let piece = self.stage.len();
        let mut off = 0;
        while off < self.size {
            let n = (self.size - off).min(piece);
            let host = &mut self.stage.as_mut_slice()[..n];
            self.dev.read(off, host)?;
            got.extend(hash_parallel(host));
            off += n;
        }
        if got != self.reference {
            let bad = got
                .iter()
                .zip(&self.reference)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Err(Error::new(
                OpError::InternalError,
                format!(
                    "{what}: device data differs from the file (first bad 16 MiB piece: {bad})"
                ),
            ));
        }
        Ok(())
    }

    fn poison(&mut self) -> Result<()> {
        self.dev.fill(0xA5)
    }

    /// Pinned host → device copies of 16 MiB on one stream: the copy ceiling.
    fn ceiling(&mut self, to_device: bool) -> Result<Duration> {
        let _g = self.rt.bind(self.args.device)?;
        let stream = Stream::new(self.rt, self.args.device)?;
        let (dev, size) = (&self.dev, self.size);
        let stage = &mut self.stage.as_mut_slice()[..CHUNK];
        let t = Instant::now();
        // The scope synchronises the stream before it returns, so the
        // time covers every copy.
        stream.scope(move |s| {
            let mut off = 0;
            if to_device {
                let src: &[u8] = stage;
                while off < size {
                    let n = (size - off).min(CHUNK);
                    s.copy_to_device(dev, off, &src[..n])?;
                    off += n;
                }
            } else {
                let dst = s.lend_mut(stage);
                while off < size {
                    let n = (size - off).min(CHUNK);
                    s.copy_from_device(&dst, 0, dev, off, n)?;
                    off += n;
                }
            }
            Ok(())
        })?;
        Ok(t.elapsed())
    }

    /// One thread: pread 16 MiB into pinned memory, copy it, repeat.
    fn single_thread_read(&mut self, direct: bool) -> Result<Duration> {
        let f = open(&self.args.file, direct, false)?;
        let t = Instant::now();
        let mut off = 0;
        while off < self.size {
            let n = (self.size - off).min(CHUNK);
            let host = &mut self.stage.as_mut_slice()[..CHUNK];
            let got = f.read_at(host, off as u64)?;
            if got == 0 {
                break;
            }
            self.dev.write(off, &host[..got.min(n)])?;
            off += got;
        }
        Ok(t.elapsed())
    }

    /// One thread: copy 16 MiB from the device, pwrite it, repeat.
    fn single_thread_write(&mut self, out: &Path) -> Result<Duration> {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(out)?;
        let t = Instant::now();
        let mut off = 0;
        while off < self.size {
            let n = (self.size - off).min(CHUNK);
            let host = &mut self.stage.as_mut_slice()[..n];
            self.dev.read(off, host)?;
            f.write_all_at(host, off as u64)?;
            off += n;
        }
        f.sync_data()?;
        Ok(t.elapsed())
    }

    /// The library, with the parameters of `cfg` (or as they are).
    fn hipfs(
        &mut self,
        cfg: Option<(usize, usize)>,
        write_to: Option<&Path>,
        cold: bool,
        compat: bool,
    ) -> Result<Duration> {
        if let Some((threads, chunk)) = cfg {
            hipfs::set_parameter_size(SizeTParam::ExecutionMaxIOThreads, threads)?;
            hipfs::set_parameter_size(SizeTParam::ExecutionMaxRequestParallelism, threads)?;
            hipfs::set_parameter_size(SizeTParam::PropertiesMaxDirectIOSizeKB, chunk / 1024)?;
            // Room for every worker's two slabs.
            hipfs::set_parameter_size(
                SizeTParam::PropertiesMaxDeviceCacheSizeKB,
                threads * chunk * 4 / 1024,
            )?;
        }
        hipfs::set_parameter_bool(hipfs::BoolParam::ForceCompatMode, compat)?;
        let drv = hipfs::Driver::open()?;
        let (path, flags) = match write_to {
            Some(p) => (p.to_path_buf(), libc::O_WRONLY | libc::O_CREAT),
            None => (self.args.file.clone(), libc::O_RDONLY),
        };
        let mut fh = FileHandle::new(&path, flags, 0o644, FileHandleType::OpaqueFd);
        fh.open()?;
        let mut buf = Buffer::from_device(&self.dev, 0);
        buf.register()?;
        if cold {
            drop_cache(&self.args.file)?;
        }
        bounce_pool::take_profile();
        let t = Instant::now();
        let n = if write_to.is_some() {
            let n = fh.write(&buf, self.size, 0, 0)?;
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)?
                .sync_data()?;
            n
        } else {
            fh.read(&mut buf, self.size, 0, 0)?
        };
        let d = t.elapsed();
        buf.deregister()?;
        fh.close();
        drv.close()?;
        if n != self.size {
            return Err(Error::new(
                OpError::InternalError,
                format!("hipfs moved {n} of {} bytes", self.size),
            ));
        }
        Ok(d)
    }
}

fn open(path: &Path, direct: bool, write: bool) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut o = std::fs::OpenOptions::new();
    o.read(!write).write(write);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    Ok(o.open(path)?)
}

/// Drops the file's cached pages: all caches where we may (root), else
/// `posix_fadvise(DONTNEED)` on the file.
fn drop_cache(path: &Path) -> Result<()> {
    rustix::fs::sync();
    if std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok() {
        return Ok(());
    }
    let f = std::fs::File::open(path)?;
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)
        .map_err(|e| Error::system(e.raw_os_error(), "posix_fadvise(DONTNEED)"))?;
    Ok(())
}

/// `dd if=FILE of=/dev/null bs=16M iflag=direct`, timed.
fn dd_direct(path: &Path) -> Result<Duration> {
    let t = Instant::now();
    let st = std::process::Command::new("dd")
        .arg(format!("if={}", path.display()))
        .args(["of=/dev/null", "bs=16M", "iflag=direct", "status=none"])
        .status()?;
    if !st.success() {
        return Err(Error::new(
            OpError::InternalError,
            format!("dd failed: {st}"),
        ));
    }
    Ok(t.elapsed())
}

fn parse_config(s: &str) -> Result<(usize, usize)> {
    let bad = || {
        Error::new(
            OpError::InvalidValue,
            format!("{s:?} is not THREADSxCHUNK like 16x4M"),
        )
    };
    let (t, c) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let t: usize = t.trim().parse().map_err(|_| bad())?;
    let c = parse_size(c).map_err(|_| bad())? as usize;
    if t == 0 || c < 4096 {
        return Err(bad());
    }
    Ok((t, c))
}

struct Row {
    name: String,
    gib: f64,
    note: String,
}

fn print_rows(title: &str, rows: &[Row], ceiling: f64) {
    println!("{title}");
    println!("{:<58} {:>8} {:>9}", "path", "GiB/s", "of ceil");
    for r in rows {
        println!(
            "{:<58} {:>8.2} {:>8.0}%  {}",
            r.name,
            r.gib,
            r.gib / ceiling * 100.0,
            r.note
        );
    }
}

fn profile_note() -> String {
    let p = bounce_pool::take_profile();
    let total = (p.file_ns + p.wait_ns + p.enqueue_ns).max(1) as f64;
    format!(
        "worker time: file {:.0}%, GPU wait {:.0}%, enqueue {:.0}%",
        p.file_ns as f64 / total * 100.0,
        p.wait_ns as f64 / total * 100.0,
        p.enqueue_ns as f64 / total * 100.0
    )
}

/// Runs the GPU benchmark and prints its table.
pub fn run_gpu_bench(args: GpuBenchArgs) -> Result<()> {
    let rt = gpu::runtime();
    if rt.device_count() == 0 {
        return Err(Error::new(
            OpError::DeviceNotFound,
            format!("no GPU to benchmark: {}", gpu::selection_message()),
        ));
    }
    if !args.file.exists() {
        match args.create {
            Some(n) => super::generate_file(&args.file, n, false)?,
            None => {
                return Err(Error::new(
                    OpError::InvalidValue,
                    format!(
                        "{} does not exist (pass --create SIZE)",
                        args.file.display()
                    ),
                ))
            }
        }
    }
    let size = std::fs::metadata(&args.file)?.len() as usize;
    if size == 0 {
        return Err(Error::new(OpError::InvalidValue, "the file is empty"));
    }
    let configs: Vec<Option<(usize, usize)>> = if args.configs.is_empty() {
        vec![None]
    } else {
        args.configs
            .iter()
            .map(|c| parse_config(c).map(Some))
            .collect::<Result<_>>()?
    };
    let repeats = args.repeats.max(1);
    let reference = hash_file(&args.file, size)?;
    let dev = DeviceAllocation::new(rt, args.device, size)?;
    let stage = PinnedHost::alloc(rt, 256 << 20)?;
    let mut b = Bench {
        rt,
        args: &args,
        size,
        dev,
        stage,
        reference,
    };
    let mut rows = Vec::new();
    let label = |cfg: &Option<(usize, usize)>| match cfg {
        Some((t, c)) => format!("{t} workers, {} KiB chunks", c / 1024),
        None => "library parameters".to_string(),
    };
    let time = |b: &mut Bench,
                f: &mut dyn FnMut(&mut Bench) -> Result<Duration>,
                check: bool,
                what: &str|
     -> Result<Duration> {
        let mut v = Vec::new();
        for _ in 0..repeats {
            if check {
                b.poison()?;
            }
            v.push(f(b)?);
            if check {
                b.verify(what)?;
            }
        }
        Ok(median(v))
    };
    let ceiling_d = time(&mut b, &mut |b| b.ceiling(!args.write), false, "ceiling")?;
    let ceiling = gib(size, ceiling_d);
    let dir = if args.write {
        "device → host"
    } else {
        "host → device"
    };
    rows.push(Row {
        name: format!("copy ceiling: pinned {dir}, 16 MiB copies, 1 stream"),
        gib: ceiling,
        note: String::new(),
    });
    if args.write {
        // Fill the device with the file first (checked), then write it out.
        b.hipfs(None, None, false, false)?;
        b.verify("initial fill")?;
        let out = PathBuf::from(format!("{}.out", args.file.display()));
        let reference = b.reference.clone();
        let check_out = |out: &Path| -> Result<()> {
            if hash_file(out, size)? != reference {
                return Err(Error::new(
                    OpError::InternalError,
                    format!("{} differs from the device data", out.display()),
                ));
            }
            Ok(())
        };
        let mut v = Vec::new();
        for _ in 0..repeats {
            v.push(b.single_thread_write(&out)?);
            check_out(&out)?;
        }
        rows.push(Row {
            name: "1 thread: copy 16 MiB + pwrite (page cache) + fsync".to_string(),
            gib: gib(size, median(v)),
            note: String::new(),
        });
        for compat in [false, true] {
            for cfg in &configs {
                let mut v = Vec::new();
                for _ in 0..repeats {
                    let _ = std::fs::remove_file(&out);
                    v.push(b.hipfs(*cfg, Some(&out), false, compat)?);
                    check_out(&out)?;
                }
                let how = if compat { "page cache" } else { "O_DIRECT" };
                rows.push(Row {
                    name: format!("hipfs write ({how}) + fsync, {}", label(cfg)),
                    gib: gib(size, median(v)),
                    note: profile_note(),
                });
            }
        }
        let _ = std::fs::remove_file(&out);
        hipfs::set_parameter_bool(hipfs::BoolParam::ForceCompatMode, false)?;
    } else {
        if args.direct {
            let mut v = Vec::new();
            for _ in 0..repeats {
                drop_cache(&args.file)?;
                v.push(dd_direct(&args.file)?);
            }
            let dd = gib(size, median(v));
            rows.push(Row {
                name: "dd if=FILE bs=16M iflag=direct (the disk)".to_string(),
                gib: dd,
                note: String::new(),
            });
        }
        let d = time(
            &mut b,
            &mut |b| {
                if args.direct {
                    drop_cache(&args.file)?;
                }
                b.single_thread_read(args.direct)
            },
            true,
            "single-thread baseline",
        )?;
        rows.push(Row {
            name: format!(
                "1 thread: pread 16 MiB{} + copy",
                if args.direct { " O_DIRECT" } else { "" }
            ),
            gib: gib(size, d),
            note: String::new(),
        });
        for cfg in &configs {
            let d = time(
                &mut b,
                &mut |b| b.hipfs(*cfg, None, args.direct, false),
                true,
                "hipfs read",
            )?;
            rows.push(Row {
                name: format!(
                    "hipfs read{}, {}",
                    if args.direct { " cold" } else { "" },
                    label(cfg)
                ),
                gib: gib(size, d),
                note: profile_note(),
            });
        }
    }
    let what = if args.write { "write" } else { "read" };
    let state = if args.direct {
        "cold, page cache dropped"
    } else {
        "page-cache resident"
    };
    print_rows(
        &format!(
            "hipfs bench {what} {} --gpu ({} MiB, {state}, runtime {}, device {}, median of {repeats}, every byte checked)",
            args.file.display(),
            size >> 20,
            rt.name(),
            args.device
        ),
        &rows,
        ceiling,
    );
    if let Some(dd) = rows.iter().find(|r| r.name.starts_with("dd ")) {
        for r in rows.iter().filter(|r| r.name.starts_with("hipfs")) {
            println!(
                "{}: {:.0}% of dd iflag=direct",
                r.name,
                r.gib / dd.gib * 100.0
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_parse_as_threads_by_chunk() {
        assert_eq!(parse_config("16x4M").unwrap(), (16, 4 << 20));
        assert_eq!(parse_config("8X512K").unwrap(), (8, 512 << 10));
        assert!(parse_config("0x4M").is_err());
        assert!(parse_config("16").is_err());
        assert!(parse_config("16x1").is_err());
    }

    #[test]
    fn the_piece_hash_notices_a_moved_block() {
        let a: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut b = a.clone();
        b[..64].rotate_left(32);
        assert_ne!(hash_piece(&a), hash_piece(&b));
        assert_eq!(hash_piece(&a), hash_piece(&a.clone()));
    }
}
