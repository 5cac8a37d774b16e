//! Per-library I/O statistics in the layout hipFile 0.5 and cuFile 1.15
//! share (`hipFileStatsLevel1..3_t` = `CUfileStatsLevel1..3_t`).
//!
//! The C shells count what passes through them (operations, errors, bytes,
//! latency, sizes); averages and rates are computed when a snapshot is
//! taken. Counting happens while the level is 1..=3 and collection has not
//! been stopped ([`stop`]); the level starts at `HIPFILE_STATS_LEVEL`.
//! Per-GPU figures (level 3) are kept for the process as a whole and
//! reported as GPU 0's when the runtime has a GPU.

use crate::invalid;
use hipfs::error::Result;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// `HIPFILE_MAX_GPUS` / the cuFile per-GPU array length.
pub const MAX_GPUS: usize = 16;
/// `HIPFILE_GPU_UUID_LEN` / `CUFILE_GPU_UUID_LEN`.
pub const GPU_UUID_LEN: usize = 16;
/// Histogram buckets of levels 2 and 3.
pub const HIST_BUCKETS: usize = 32;

/// `hipFileOpCounter_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounter {
    /// Operations that succeeded.
    pub ok: u64,
    /// Operations that failed.
    pub err: u64,
}

/// `hipFileStatsLevel1_t` (512 bytes); fields as named in the headers.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct StatsLevel1 {
    pub read_ops: OpCounter,
    pub write_ops: OpCounter,
    pub hdl_register_ops: OpCounter,
    pub hdl_deregister_ops: OpCounter,
    pub buf_register_ops: OpCounter,
    pub buf_deregister_ops: OpCounter,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_bw_bytes_per_sec: u64,
    pub write_bw_bytes_per_sec: u64,
    pub read_lat_avg_us: u64,
    pub write_lat_avg_us: u64,
    pub read_ops_per_sec: u64,
    pub write_ops_per_sec: u64,
    pub read_lat_sum_us: u64,
    pub write_lat_sum_us: u64,
    pub batch_submit_ops: OpCounter,
    pub batch_complete_ops: OpCounter,
    pub batch_setup_ops: OpCounter,
    pub batch_cancel_ops: OpCounter,
    pub batch_destroy_ops: OpCounter,
    pub batch_enqueued_ops: OpCounter,
    pub batch_posix_enqueued_ops: OpCounter,
    pub batch_processed_ops: OpCounter,
    pub batch_posix_processed_ops: OpCounter,
    pub batch_nvfs_submit_ops: OpCounter,
    pub batch_p2p_submit_ops: OpCounter,
    pub batch_aio_submit_ops: OpCounter,
    pub batch_iouring_submit_ops: OpCounter,
    pub batch_mixed_io_submit_ops: OpCounter,
    pub batch_total_submit_ops: OpCounter,
    pub batch_read_bytes: u64,
    pub batch_write_bytes: u64,
    pub batch_read_bw_bytes: u64,
    pub batch_write_bw_bytes: u64,
    pub batch_submit_lat_avg_us: u64,
    pub batch_completion_lat_avg_us: u64,
    pub batch_submit_ops_per_sec: u64,
    pub batch_complete_ops_per_sec: u64,
    pub batch_submit_lat_sum_us: u64,
    pub batch_completion_lat_sum_us: u64,
    pub last_batch_read_bytes: u64,
    pub last_batch_write_bytes: u64,
}

/// `hipFileStatsLevel2_t` (1024 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct StatsLevel2 {
    pub basic: StatsLevel1,
    /// Bucket 0: under 1 KiB; bucket i: 2^(i-1) KiB up to 2^i KiB; the last
    /// bucket takes everything larger.
    pub read_size_kb_hist: [u64; HIST_BUCKETS],
    pub write_size_kb_hist: [u64; HIST_BUCKETS],
}

/// `hipFilePerGpuStats_t` (248 bytes; cuFile spells `write_bytes` as `writes_bytes`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct PerGpuStats {
    pub uuid: [u8; GPU_UUID_LEN],
    pub read_bytes: u64,
    pub read_bw_bytes_per_sec: u64,
    pub read_utilization: u64,
    pub read_duration_us: u64,
    pub n_total_reads: u64,
    pub n_p2p_reads: u64,
    pub n_nvfs_reads: u64,
    pub n_posix_reads: u64,
    pub n_unaligned_reads: u64,
    pub n_dr_reads: u64,
    pub n_sparse_regions: u64,
    pub n_inline_regions: u64,
    pub n_reads_err: u64,
    pub write_bytes: u64,
    pub write_bw_bytes_per_sec: u64,
    pub write_utilization: u64,
    pub write_duration_us: u64,
    pub n_total_writes: u64,
    pub n_p2p_writes: u64,
    pub n_nvfs_writes: u64,
    pub n_posix_writes: u64,
    pub n_unaligned_writes: u64,
    pub n_dr_writes: u64,
    pub n_writes_err: u64,
    pub n_mmap: u64,
    pub n_mmap_ok: u64,
    pub n_mmap_err: u64,
    pub n_mmap_free: u64,
    pub reg_bytes: u64,
}

/// `hipFileStatsLevel3_t` (5000 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct StatsLevel3 {
    pub detailed: StatsLevel2,
    pub num_gpus: u32,
    pub per_gpu_stats: [PerGpuStats; MAX_GPUS],
}

/// What the shells count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Op {
    Read,
    Write,
    HandleRegister,
    HandleDeregister,
    BufRegister,
    BufDeregister,
    BatchSubmit,
    BatchComplete,
    BatchSetup,
    BatchCancel,
    BatchDestroy,
}

const OPS: usize = 11;

struct Counters {
    ops: [[AtomicU64; 2]; OPS],
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    read_lat_us: AtomicU64,
    write_lat_us: AtomicU64,
    batch_read_bytes: AtomicU64,
    batch_write_bytes: AtomicU64,
    last_batch_read: AtomicU64,
    last_batch_write: AtomicU64,
    read_hist: [AtomicU64; HIST_BUCKETS],
    write_hist: [AtomicU64; HIST_BUCKETS],
}

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const PAIR: [AtomicU64; 2] = [ZERO; 2];

static C: Counters = Counters {
    ops: [PAIR; OPS],
    read_bytes: ZERO,
    write_bytes: ZERO,
    read_lat_us: ZERO,
    write_lat_us: ZERO,
    batch_read_bytes: ZERO,
    batch_write_bytes: ZERO,
    last_batch_read: ZERO,
    last_batch_write: ZERO,
    read_hist: [ZERO; HIST_BUCKETS],
    write_hist: [ZERO; HIST_BUCKETS],
};

/// -1 until first asked: then `HIPFILE_STATS_LEVEL` (clamped to 0..=3).
static LEVEL: AtomicI32 = AtomicI32::new(-1);
static STOPPED: AtomicBool = AtomicBool::new(false);
/// When counting (re)started: the base of the per-second rates.
static SINCE: OnceLock<Mutex<Instant>> = OnceLock::new();

fn since() -> &'static Mutex<Instant> {
    SINCE.get_or_init(|| Mutex::new(Instant::now()))
}

/// The statistics level (0 = off, 1..=3).
pub fn level() -> i32 {
    let l = LEVEL.load(Relaxed);
    if l >= 0 {
        return l;
    }
    let from_env = hipfs::driver::current_config().stats_level.min(3) as i32;
    let _ = LEVEL.compare_exchange(-1, from_env, Relaxed, Relaxed);
    since();
    LEVEL.load(Relaxed)
}

/// Sets the level; outside 0..=3 is `InvalidValue`.
pub fn set_level(l: i32) -> Result<()> {
    if !(0..=3).contains(&l) {
        return Err(invalid("stats level must be 0..=3"));
    }
    LEVEL.store(l, Relaxed);
    Ok(())
}

/// Resumes counting (it starts running).
pub fn start() {
    since();
    STOPPED.store(false, Relaxed);
}

/// Stops counting; the counters keep their values.
pub fn stop() {
    STOPPED.store(true, Relaxed);
}

/// Zeroes every counter and restarts the rate clock.
pub fn reset() {
    for pair in &C.ops {
        for c in pair {
            c.store(0, Relaxed);
        }
    }
    for c in [
        &C.read_bytes,
        &C.write_bytes,
        &C.read_lat_us,
        &C.write_lat_us,
        &C.batch_read_bytes,
        &C.batch_write_bytes,
        &C.last_batch_read,
        &C.last_batch_write,
    ] {
        c.store(0, Relaxed);
    }
    for c in C.read_hist.iter().chain(&C.write_hist) {
        c.store(0, Relaxed);
    }
    *since().lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
}

fn collecting() -> bool {
    level() > 0 && !STOPPED.load(Relaxed)
}

/// Counts one call of `op`.
pub fn count(op: Op, ok: bool) {
    if collecting() {
        C.ops[op as usize][usize::from(!ok)].fetch_add(1, Relaxed);
    }
}

/// Counts the bytes of one submitted batch operation.
pub fn batch_bytes(read: bool, size: usize) {
    if !collecting() {
        return;
    }
    let (total, last) = if read {
        (&C.batch_read_bytes, &C.last_batch_read)
    } else {
        (&C.batch_write_bytes, &C.last_batch_write)
    };
    total.fetch_add(size as u64, Relaxed);
    last.store(size as u64, Relaxed);
}

fn bucket(bytes: usize) -> usize {
    let kb = bytes / 1024;
    if kb == 0 {
        0
    } else {
        ((usize::BITS - kb.leading_zeros()) as usize).min(HIST_BUCKETS - 1)
    }
}

/// Times one synchronous read or write while counting is on.
pub struct Timer(Option<Instant>);

impl Timer {
    /// Starts timing (a no-op when not collecting).
    pub fn start() -> Timer {
        Timer(collecting().then(Instant::now))
    }

    /// Records the outcome of a read (`Op::Read`) or write.
    pub fn finish(self, op: Op, r: &Result<usize>) {
        let Some(t0) = self.0 else { return };
        let us = t0.elapsed().as_micros() as u64;
        count(op, r.is_ok());
        let Ok(n) = r else { return };
        let (bytes, lat, hist) = if op == Op::Read {
            (&C.read_bytes, &C.read_lat_us, &C.read_hist)
        } else {
            (&C.write_bytes, &C.write_lat_us, &C.write_hist)
        };
        bytes.fetch_add(*n as u64, Relaxed);
        lat.fetch_add(us, Relaxed);
        hist[bucket(*n)].fetch_add(1, Relaxed);
    }
}

fn pair(op: Op) -> OpCounter {
    let p = &C.ops[op as usize];
    OpCounter {
        ok: p[0].load(Relaxed),
        err: p[1].load(Relaxed),
    }
}

fn per(num: u64, den: u64) -> u64 {
    num.checked_div(den).unwrap_or(0)
}

fn level1() -> StatsLevel1 {
    let secs = since()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .elapsed()
        .as_secs()
        .max(1);
    let (reads, writes) = (pair(Op::Read), pair(Op::Write));
    let (rb, wb) = (C.read_bytes.load(Relaxed), C.write_bytes.load(Relaxed));
    let (rl, wl) = (C.read_lat_us.load(Relaxed), C.write_lat_us.load(Relaxed));
    let submits = pair(Op::BatchSubmit);
    let completes = pair(Op::BatchComplete);
    StatsLevel1 {
        read_ops: reads,
        write_ops: writes,
        hdl_register_ops: pair(Op::HandleRegister),
        hdl_deregister_ops: pair(Op::HandleDeregister),
        buf_register_ops: pair(Op::BufRegister),
        buf_deregister_ops: pair(Op::BufDeregister),
        read_bytes: rb,
        write_bytes: wb,
        read_bw_bytes_per_sec: per(rb.saturating_mul(1_000_000), rl),
        write_bw_bytes_per_sec: per(wb.saturating_mul(1_000_000), wl),
        read_lat_avg_us: per(rl, reads.ok),
        write_lat_avg_us: per(wl, writes.ok),
        read_ops_per_sec: per(reads.ok, secs),
        write_ops_per_sec: per(writes.ok, secs),
        read_lat_sum_us: rl,
        write_lat_sum_us: wl,
        batch_submit_ops: submits,
        batch_complete_ops: completes,
        batch_setup_ops: pair(Op::BatchSetup),
        batch_cancel_ops: pair(Op::BatchCancel),
        batch_destroy_ops: pair(Op::BatchDestroy),
        batch_total_submit_ops: submits,
        batch_read_bytes: C.batch_read_bytes.load(Relaxed),
        batch_write_bytes: C.batch_write_bytes.load(Relaxed),
        batch_submit_ops_per_sec: per(submits.ok, secs),
        batch_complete_ops_per_sec: per(completes.ok, secs),
        last_batch_read_bytes: C.last_batch_read.load(Relaxed),
        last_batch_write_bytes: C.last_batch_write.load(Relaxed),
        ..StatsLevel1::default()
    }
}

fn level2() -> StatsLevel2 {
    let hist = |h: &[AtomicU64; HIST_BUCKETS]| std::array::from_fn(|i| h[i].load(Relaxed));
    StatsLevel2 {
        basic: level1(),
        read_size_kb_hist: hist(&C.read_hist),
        write_size_kb_hist: hist(&C.write_hist),
    }
}

fn level3() -> StatsLevel3 {
    let detailed = level2();
    let b = &detailed.basic;
    let mut out = StatsLevel3 {
        detailed,
        ..StatsLevel3::default()
    };
    if hipfs::gpu::runtime().device_count() > 0 {
        out.num_gpus = 1;
        let s = hipfs::stats::snapshot();
        out.per_gpu_stats[0] = PerGpuStats {
            read_bytes: b.read_bytes,
            read_bw_bytes_per_sec: b.read_bw_bytes_per_sec,
            read_duration_us: b.read_lat_sum_us,
            n_total_reads: b.read_ops.ok,
            n_p2p_reads: s.direct.read_ops,
            n_posix_reads: s.buffered.read_ops + s.staged.read_ops,
            n_reads_err: b.read_ops.err,
            write_bytes: b.write_bytes,
            write_bw_bytes_per_sec: b.write_bw_bytes_per_sec,
            write_duration_us: b.write_lat_sum_us,
            n_total_writes: b.write_ops.ok,
            n_p2p_writes: s.direct.write_ops,
            n_posix_writes: s.buffered.write_ops + s.staged.write_ops,
            n_writes_err: b.write_ops.err,
            ..PerGpuStats::default()
        };
    }
    out
}

fn need(l: i32) -> Result<()> {
    if level() < l {
        return Err(invalid(&format!(
            "statistics level {} is below the {l} this query needs",
            level()
        )));
    }
    Ok(())
}

/// Writes the level-1 snapshot; the level must be at least 1.
///
/// # Safety
/// `out` is NULL or points to a writable `StatsLevel1`.
pub unsafe fn get_l1(out: *mut StatsLevel1) -> Result<()> {
    need(1)?;
    // SAFETY: forwarded caller guarantee.
    unsafe { crate::write_out(out, level1(), "stats") }
}

/// Writes the level-2 snapshot; the level must be at least 2.
///
/// # Safety
/// `out` is NULL or points to a writable `StatsLevel2`.
pub unsafe fn get_l2(out: *mut StatsLevel2) -> Result<()> {
    need(2)?;
    // SAFETY: forwarded caller guarantee.
    unsafe { crate::write_out(out, level2(), "stats") }
}

/// Writes the level-3 snapshot; the level must be 3.
///
/// # Safety
/// `out` is NULL or points to a writable `StatsLevel3`.
pub unsafe fn get_l3(out: *mut StatsLevel3) -> Result<()> {
    need(3)?;
    // SAFETY: forwarded caller guarantee.
    unsafe { crate::write_out(out, level3(), "stats") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_are_those_of_hipfile_0_5_and_cufile_1_15() {
        assert_eq!(size_of::<OpCounter>(), 16);
        assert_eq!(size_of::<StatsLevel1>(), 512);
        assert_eq!(offset_of!(StatsLevel1, read_bytes), 96);
        assert_eq!(offset_of!(StatsLevel1, batch_submit_ops), 176);
        assert_eq!(offset_of!(StatsLevel1, batch_read_bytes), 416);
        assert_eq!(offset_of!(StatsLevel1, last_batch_write_bytes), 504);
        assert_eq!(size_of::<StatsLevel2>(), 1024);
        assert_eq!(size_of::<PerGpuStats>(), 248);
        assert_eq!(offset_of!(PerGpuStats, write_bytes), 16 + 13 * 8);
        assert_eq!(size_of::<StatsLevel3>(), 5000);
        assert_eq!(offset_of!(StatsLevel3, per_gpu_stats), 1032);
    }

    #[test]
    fn sizes_fall_in_power_of_two_kib_buckets() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1023), 0);
        assert_eq!(bucket(1024), 1);
        assert_eq!(bucket(4096), 3);
        assert_eq!(bucket(4096 + 1024), 3);
        assert_eq!(bucket(usize::MAX), HIST_BUCKETS - 1);
    }
}
