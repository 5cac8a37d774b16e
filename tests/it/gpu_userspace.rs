//! UserspaceFs into device memory: a real `hipfs serve` on loopback and a
//! real FUSE mount; a handle on the mounted file reads from the server
//! straight into GPU memory (over TCP: pinned bounce, then the copy engine;
//! with HIPFS_TCP_LANE_STAGING each lane's own pinned buffers)
//! and writes back from it, checked byte for byte against the exported
//! file. Runs where a GPU runtime finds a device (the device machine,
//! through scripts/gpu/on-device.sh) and says why it skips elsewhere.

use crate::gpu_common::{gpu, Dev};
use crate::remote_common;
use crate::remote_common::{lcg, open_us, pattern, Fixture};
use hipfs::Driver;
use std::fs;

/// The GPU runtime when there is a device and FUSE mounts work here;
/// otherwise prints why the test skips.
fn gpu_and_fuse() -> &'static dyn hipfs::gpu::GpuRuntime {
    let rt = gpu();
    if let Some(why) = remote_common::fuse_missing() {
        panic!("{why}; this test is ignored without FUSE unless HIPFS_REQUIRE_FUSE=1");
    }
    rt
}

/// Held by each test of this module for its whole run: they all read
/// through the process-wide readahead and lane staging, and some assert on
/// those counters, so another test's bytes must not count for them even
/// when the harness runs tests in parallel.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// `HIPFS_TCP_LANE_STAGING` of this run (scripts/test.d/15 runs these
/// tests in each mode): `direct` reads place every byte through the TCP
/// lanes' pinned staging and bypass the staged pipeline, so nothing is
/// fetched ahead; `pipeline` places every chunk of the staged pipeline,
/// readahead included, through that staging; otherwise nothing goes
/// through it.
fn lane_staging() -> String {
    std::env::var("HIPFS_TCP_LANE_STAGING").unwrap_or_default()
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn userspace_reads_into_device_memory_match_the_exported_file() {
    let _one = one_at_a_time();
    let rt = gpu_and_fuse();
    let _d = Driver::open().unwrap();
    let fx = Fixture::new();
    let size = (40 << 20) + 4321;
    let data = pattern(7, size);
    fs::write(fx.e("shard"), &data).unwrap();
    let fh = open_us(&fx.m("shard"), libc::O_RDONLY);
    let dev = Dev::filled(rt, 24 << 20, 0xa5);
    let mut buf = dev.buffer();
    let mut x = 5u64;
    for round in 0..2 {
        if round == 1 {
            buf.register().unwrap();
        }
        for i in 0..40 {
            let len = if i % 8 == 0 {
                16 << 20
            } else {
                (lcg(&mut x) % (6 << 20)) as usize + 1
            };
            let boff = (lcg(&mut x) as usize) % (dev.len - len + 1);
            let off = lcg(&mut x) % (size as u64 + 8192);
            // SAFETY: the test's own live device allocation, in range.
            unsafe { rt.device_memset(hipfs::gpu::DevicePtr::from_addr(dev.ptr), 0x5a, dev.len) }
                .unwrap();
            let n = fh.read(&mut buf, len, off as i64, boff as i64).unwrap();
            let want = (size as u64).saturating_sub(off).min(len as u64) as usize;
            assert_eq!(n, want, "round {round}: read {len} at {off} into +{boff}");
            let got = dev.fetch_at(boff, n);
            assert!(
                got == data[off as usize..off as usize + n],
                "round {round}: bytes of read {len} at {off} into +{boff}"
            );
            // Bytes past the read are untouched (still the poison).
            if boff + n < dev.len {
                assert_eq!(dev.fetch_at(boff + n, 1)[0], 0x5a, "byte after the read");
            }
        }
    }
    buf.deregister().unwrap();
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn userspace_writes_from_device_memory_land_in_the_exported_file() {
    let _one = one_at_a_time();
    let rt = gpu_and_fuse();
    let _d = Driver::open().unwrap();
    let fx = Fixture::new();
    let size = (20 << 20) + 777;
    let data = pattern(11, size);
    let dev = Dev::new(rt, size);
    // SAFETY: the test's own live device allocation, in range.
    unsafe { rt.copy_to_device(hipfs::gpu::DevicePtr::from_addr(dev.ptr), &data) }.unwrap();
    let fh = open_us(&fx.m("out"), libc::O_RDWR | libc::O_CREAT);
    let buf = dev.buffer();
    buf.register().unwrap();
    // Out of order, odd pieces: the file must end up equal to the device bytes.
    let cuts = [0usize, 3 << 20, (3 << 20) + 1, 9 << 20, 17 << 20, size];
    for w in cuts.windows(2).rev() {
        let n = fh
            .write(&buf, w[1] - w[0], w[0] as i64, w[0] as i64)
            .unwrap();
        assert_eq!(n, w[1] - w[0]);
    }
    buf.deregister().unwrap();
    drop(fh);
    assert!(fs::read(fx.e("out")).unwrap() == data);
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn threads_read_disjoint_pieces_into_one_device_buffer() {
    let _one = one_at_a_time();
    let rt = gpu_and_fuse();
    let _d = Driver::open().unwrap();
    let fx = Fixture::new();
    let size = 48 << 20;
    let data = pattern(13, size);
    fs::write(fx.e("big"), &data).unwrap();
    let fh = open_us(&fx.m("big"), libc::O_RDONLY);
    let dev = Dev::new(rt, size);
    let mut buf = dev.buffer();
    buf.register().unwrap();
    let piece = size / 8;
    std::thread::scope(|s| {
        for (t, mut view) in buf.chunks_mut(piece).unwrap().into_iter().enumerate() {
            let fh = &fh;
            s.spawn(move || {
                let o = t * piece;
                assert_eq!(fh.read(&mut view, piece, o as i64, 0).unwrap(), piece);
            });
        }
    });
    buf.deregister().unwrap();
    assert!(dev.fetch() == data);
}

/// Reads `len` bytes at `off` of `fh` into the start of `dev` and checks
/// them against `want`.
fn read_checked(
    fh: &hipfs::FileHandle,
    dev: &Dev,
    off: usize,
    len: usize,
    want: &[u8],
    what: &str,
) {
    let mut buf = dev.buffer();
    let n = fh.read(&mut buf, len, off as i64, 0).unwrap();
    assert_eq!(n, want.len(), "{what}: bytes read at {off}");
    assert!(dev.fetch_at(0, n) == want, "{what}: bytes at {off}");
}

/// Reads all of `data` (the file `fh` is a handle on) in reads of `step`
/// bytes from its start, each into the start of `dev`, checks each, and
/// then reads past the end: nothing, not stale readahead.
fn read_through(fh: &hipfs::FileHandle, dev: &Dev, data: &[u8], step: usize) {
    for off in (0..data.len()).step_by(step) {
        let want = &data[off..(off + step).min(data.len())];
        read_checked(fh, dev, off, step, want, "sequential read");
    }
    read_checked(fh, dev, data.len(), step, &[], "read past the end");
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn sequential_reads_into_device_memory_are_fetched_ahead_and_match_the_file() {
    let _one = one_at_a_time();
    let rt = gpu_and_fuse();
    let _d = Driver::open().unwrap();
    let fx = Fixture::new();
    let step = 8 << 20;
    let size = 5 * step + 1234;
    let data = pattern(17, size);
    fs::write(fx.e("seq"), &data).unwrap();
    let fh = open_us(&fx.m("seq"), libc::O_RDONLY);
    let dev = Dev::filled(rt, step, 0x3c);
    let before = hipfs::stats::snapshot();
    read_through(&fh, &dev, &data, step);
    let after = hipfs::stats::snapshot();
    let used = after.readahead_used - before.readahead_used;
    let staged = after.lane_staged - before.lane_staged;
    let mode = lane_staging();
    if mode == "direct" {
        // Every byte placed through the lanes' staging, none staged here.
        assert!(
            staged >= size as u64,
            "bytes through lane staging: {staged}, want at least {size}"
        );
    } else {
        // Each read from the second on was fetched while the one before it
        // ended (the last is short: only its 1234 bytes count).
        assert!(
            used >= 4 * step as u64,
            "bytes fetched ahead and used: {used}, want at least {}",
            4 * step
        );
        if mode == "pipeline" {
            assert!(
                staged >= size as u64,
                "bytes through lane staging: {staged}, want at least {size}"
            );
        } else {
            assert_eq!(staged, 0, "lane staging is off");
        }
    }
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn small_sequential_reads_are_fetched_several_reads_ahead() {
    let _one = one_at_a_time();
    let rt = gpu_and_fuse();
    let _d = Driver::open().unwrap();
    let fx = Fixture::new();
    let step = 2 << 20;
    let size = 24 * step + 999;
    let data = pattern(37, size);
    fs::write(fx.e("small"), &data).unwrap();
    let dev = Dev::filled(rt, step, 0x11);
    // A whole pass: the window slides along the file one read at a time.
    let fh = open_us(&fx.m("small"), libc::O_RDONLY);
    let before = hipfs::stats::snapshot();
    read_through(&fh, &dev, &data, step);
    if lane_staging() == "direct" {
        // Nothing is fetched ahead on the direct path; the bytes were checked.
        return;
    }
    let used = hipfs::stats::snapshot().readahead_used - before.readahead_used;
    // Every read from the second on found its bytes fetched (the last
    // one's 999 bytes count too).
    assert!(
        used >= 23 * step as u64,
        "bytes fetched ahead and used: {used}, want at least {}",
        23 * step
    );
    // Another handle reads a few steps and then starts a new run: what its
    // window fetched is dropped, and by then it reached more than one read
    // ahead (one when the run began, doubling with each read since).
    let fh = open_us(&fx.m("small"), libc::O_RDONLY);
    let before = hipfs::stats::snapshot();
    for k in 0..4 {
        let at = k * step;
        read_checked(
            &fh,
            &dev,
            at,
            step,
            &data[at..at + step],
            "a read of the run",
        );
    }
    read_checked(
        &fh,
        &dev,
        20 * step,
        step,
        &data[20 * step..21 * step],
        "a read elsewhere",
    );
    // Pieces still being fetched count once their fetch ends.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let dropped = loop {
        let d = hipfs::stats::snapshot().readahead_dropped - before.readahead_dropped;
        if d >= 3 * step as u64 || std::time::Instant::now() > deadline {
            break d;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(
        dropped >= 3 * step as u64,
        "bytes fetched ahead of one read and dropped: {dropped}, want at least {}",
        3 * step
    );
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn bytes_fetched_ahead_are_not_used_after_a_write_or_once_too_old() {
    let _one = one_at_a_time();
    let rt = gpu_and_fuse();
    let _d = Driver::open().unwrap();
    let fx = Fixture::new();
    let step = 4 << 20;
    let size = 8 * step;
    let mut data = pattern(19, size);
    fs::write(fx.e("rw"), &data).unwrap();
    let fh = open_us(&fx.m("rw"), libc::O_RDWR);
    let other = open_us(&fx.m("rw"), libc::O_RDWR);
    let dev = Dev::new(rt, step);
    let src = Dev::new(rt, step);
    let before = hipfs::stats::snapshot();
    read_checked(&fh, &dev, 0, step, &data[..step], "first read");
    // This read fetches [2 step, 3 step) ahead; a write through the same
    // handle then changes those bytes.
    read_checked(&fh, &dev, step, step, &data[step..2 * step], "second read");
    let new = pattern(23, step);
    // SAFETY: the test's own live device allocation, in range.
    unsafe { rt.copy_to_device(hipfs::gpu::DevicePtr::from_addr(src.ptr), &new) }.unwrap();
    assert_eq!(
        fh.write(&src.buffer(), step, 2 * step as i64, 0).unwrap(),
        step
    );
    data[2 * step..3 * step].copy_from_slice(&new);
    read_checked(
        &fh,
        &dev,
        2 * step,
        step,
        &data[2 * step..3 * step],
        "after a write through the handle",
    );
    // The same through another handle of the file.
    read_checked(
        &fh,
        &dev,
        3 * step,
        step,
        &data[3 * step..4 * step],
        "fourth read",
    );
    let new = pattern(29, step);
    // SAFETY: as above.
    unsafe { rt.copy_to_device(hipfs::gpu::DevicePtr::from_addr(src.ptr), &new) }.unwrap();
    assert_eq!(
        other
            .write(&src.buffer(), step, 4 * step as i64, 0)
            .unwrap(),
        step
    );
    data[4 * step..5 * step].copy_from_slice(&new);
    read_checked(
        &fh,
        &dev,
        4 * step,
        step,
        &data[4 * step..5 * step],
        "after a write through another handle",
    );
    // A change made on the server, seen once the reader paused longer than
    // fetched bytes are kept.
    let new = pattern(31, step);
    {
        use std::os::unix::fs::FileExt;
        let f = fs::OpenOptions::new().write(true).open(fx.e("rw")).unwrap();
        f.write_all_at(&new, 5 * step as u64).unwrap();
    }
    data[5 * step..6 * step].copy_from_slice(&new);
    std::thread::sleep(hipfs::io::readahead::MAX_AGE + std::time::Duration::from_millis(300));
    read_checked(
        &fh,
        &dev,
        5 * step,
        step,
        &data[5 * step..6 * step],
        "after a pause",
    );
    if lane_staging() == "direct" {
        // Nothing is fetched ahead on the direct path; the bytes were checked.
        return;
    }
    let after = hipfs::stats::snapshot();
    assert!(
        after.readahead_dropped - before.readahead_dropped >= 3 * step as u64,
        "three windows were dropped: {} bytes",
        after.readahead_dropped - before.readahead_dropped
    );
}

/// A userspace filesystem of one generated file that lets the library read
/// ahead, and whose reads from the library's readahead threads fail (with
/// an error or a panic) when asked to.
struct FlakyAheadFs {
    data: Vec<u8>,
    /// 0: every read works; 1: readahead reads fail; 2: they panic.
    ahead_mode: std::sync::atomic::AtomicU8,
    ahead_calls: std::sync::atomic::AtomicUsize,
}

impl hipfs::userspace::UserspaceFs for FlakyAheadFs {
    fn fs_type(&self) -> String {
        "flaky-ahead".into()
    }
    fn reads_ahead(&self) -> bool {
        true
    }
    fn parallelism(&self) -> usize {
        4
    }
    fn read(&self, buf: hipfs::userspace::UserspaceBuf, offset: u64) -> hipfs::Result<usize> {
        use std::sync::atomic::Ordering;
        if std::thread::current().name() == Some("hipfs-ahead") {
            self.ahead_calls.fetch_add(1, Ordering::SeqCst);
            match self.ahead_mode.load(Ordering::SeqCst) {
                1 => {
                    return Err(hipfs::Error::new(
                        hipfs::OpError::DriverError,
                        "readahead refused",
                    ))
                }
                2 => panic!("readahead read panics"),
                _ => {}
            }
        }
        let hipfs::userspace::UserspaceMem::Host { ptr, len } = *buf.mem() else {
            panic!("host memory expected");
        };
        let off = (offset as usize).min(self.data.len());
        let n = len.min(self.data.len() - off);
        // SAFETY: the library lends this host range for the call.
        unsafe { std::ptr::copy_nonoverlapping(self.data[off..].as_ptr(), ptr, n) };
        Ok(n)
    }
    fn write(&self, _: hipfs::userspace::UserspaceBuf, _: u64) -> hipfs::Result<usize> {
        Err(hipfs::Error::new(
            hipfs::OpError::PermissionDenied,
            "read-only",
        ))
    }
}

#[test]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn readahead_that_fails_or_panics_costs_the_reader_only_a_read_of_its_own() {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::Ordering;
    let _one = one_at_a_time();
    let rt = gpu();
    let _d = Driver::open().unwrap();
    let step = 8 << 20;
    let fs = std::sync::Arc::new(FlakyAheadFs {
        data: pattern(37, 4 * step + 99),
        ahead_mode: Default::default(),
        ahead_calls: Default::default(),
    });
    let key = tempfile::tempfile().unwrap();
    let id = hipfs::handle::handle_register(
        key.as_raw_fd(),
        hipfs::FileHandleType::UserspaceFs,
        Some(fs.clone()),
    )
    .unwrap();
    let file = hipfs::handle::lookup(id).unwrap();
    let dev = Dev::new(rt, step);
    for mode in [1u8, 2, 0] {
        fs.ahead_mode.store(mode, Ordering::SeqCst);
        let calls = fs.ahead_calls.load(Ordering::SeqCst);
        for off in (0..fs.data.len()).step_by(step) {
            // SAFETY: the test's own live device allocation of `step` bytes.
            let n = unsafe { hipfs::handle::read(&file, dev.ptr, step, off as i64, 0) }.unwrap();
            let want = &fs.data[off..(off + step).min(fs.data.len())];
            assert_eq!(n, want.len(), "mode {mode}: read at {off}");
            assert!(dev.fetch_at(0, n) == want, "mode {mode}: bytes at {off}");
        }
        assert!(
            fs.ahead_calls.load(Ordering::SeqCst) > calls,
            "mode {mode}: the library read ahead"
        );
    }
    hipfs::handle::handle_deregister(id);
}
