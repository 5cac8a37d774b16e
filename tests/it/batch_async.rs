//! Batch I/O and stream-ordered async I/O on host memory, against real
//! files (checked with `std::fs` as the oracle) and, where a test needs an
//! operation that stays in flight, a userspace filesystem whose reads wait
//! at a gate the test opens.

use crate::common;
use crate::common::pattern;
use hipfs::batch::{BatchIo, IoEvent, IoParams, Opcode, Status};
use hipfs::gpu::StreamId;
use hipfs::handle::{handle_deregister, handle_register};
use hipfs::stream::{read_async, stream_deregister, stream_register, write_async, AsyncArgs};
use hipfs::{
    Buffer, FileHandle, FileHandleType, OpError, UserspaceBuf, UserspaceFs, UserspaceMem,
    STREAM_FIXED_BUF_OFFSET, STREAM_FIXED_FILE_OFFSET, STREAM_FIXED_FILE_SIZE,
};
use std::collections::HashSet;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Condvar, Mutex, Once};
use std::time::{Duration, Instant};

/// Opens the driver once for the whole binary and never closes it (tests
/// run in parallel threads and share it). In a build without a GPU
/// (`hipfs_gpu` unset, see build-support/hw_probe.rs) the host runtime is
/// forced, whose emulated streams are plain numbers; in a GPU build (on the
/// GPU machine, or HIPFS_REQUIRE_GPU=1) the real runtime runs everything,
/// streams included, and the device-memory tests run too.
///
/// On a GPU the returned guard serialises the tests: some deliberately hold
/// a stream with a host function, which a device-wide synchronisation (the
/// `cuMemFree` of another test) would wait for.
fn setup() -> Option<std::sync::MutexGuard<'static, ()>> {
    static ONCE: Once = Once::new();
    static GPU_SERIAL: Mutex<()> = Mutex::new(());
    ONCE.call_once(|| {
        let gpu = cfg!(hipfs_gpu);
        if !gpu {
            std::env::set_var("HIPFS_GPU_RUNTIME", "host");
        }
        hipfs::driver_open().unwrap();
        let rt = hipfs::gpu::runtime();
        if gpu {
            assert!(
                rt.device_count() > 0,
                "a GPU build (hipfs_gpu) but {}",
                hipfs::gpu::selection_message()
            );
        } else {
            assert_eq!(rt.name(), "host");
        }
    });
    (hipfs::gpu::runtime().name() != "host")
        .then(|| GPU_SERIAL.lock().unwrap_or_else(|p| p.into_inner()))
}

/// A stream for one test: a number on the host runtime, a real
/// non-blocking stream on a GPU runtime (destroyed on drop).
struct TestStream(usize);

impl TestStream {
    fn new(tag: usize) -> TestStream {
        let rt = hipfs::gpu::runtime();
        if rt.name() == "host" {
            TestStream(tag)
        } else {
            TestStream(rt.stream_create(0).unwrap().0)
        }
    }
}

impl Drop for TestStream {
    fn drop(&mut self) {
        let rt = hipfs::gpu::runtime();
        if rt.name() != "host" {
            // SAFETY: the stream made in new(), destroyed only here.
            unsafe {
                let _ = rt.stream_synchronize(StreamId(self.0));
                rt.stream_destroy(StreamId(self.0));
            }
        }
    }
}

/// A file with `data` in a temp dir on the target's disk (not tmpfs, so
/// the O_DIRECT path is exercised where the filesystem allows it).
fn file_with(tag: &str, data: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = common::scratch_dir(tag);
    let path = common::write_file(dir.path(), "data", data);
    (dir, path)
}

fn open(path: &Path, flags: i32) -> FileHandle {
    let mut fh = FileHandle::new(path, flags, 0o644, FileHandleType::OpaqueFd);
    fh.open().unwrap();
    fh
}

fn op(
    fh: &FileHandle,
    opcode: Opcode,
    mem: &mut [u8],
    boff: i64,
    foff: i64,
    size: usize,
    cookie: usize,
) -> IoParams {
    IoParams {
        handle: fh.handle().unwrap(),
        opcode,
        buf_base: mem.as_mut_ptr() as usize,
        buf_offset: boff,
        file_offset: foff,
        size,
        cookie,
    }
}

/// Reads and writes that wait until the test opens the gate; reads fill
/// the buffer with `fill`.
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
    entered: AtomicUsize,
}

impl Gate {
    fn new() -> Arc<Gate> {
        Arc::new(Gate {
            open: Mutex::new(false),
            cv: Condvar::new(),
            entered: AtomicUsize::new(0),
        })
    }
    /// Waits for the gate; gives up after 30 s so a broken test fails
    /// instead of hanging.
    fn pass(&self) {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let open = self.open.lock().unwrap();
        let _ = self
            .cv
            .wait_timeout_while(open, Duration::from_secs(30), |o| !*o)
            .unwrap();
    }
    /// Opens the gate when the guard drops: declared after the batch, it
    /// runs before the batch's drop waits for the operations at the gate,
    /// so a failing assertion unwinds instead of hanging.
    fn open_on_drop(self: &Arc<Gate>) -> impl Drop {
        struct OpenOnDrop(Arc<Gate>);
        impl Drop for OpenOnDrop {
            fn drop(&mut self) {
                self.0.release();
            }
        }
        OpenOnDrop(Arc::clone(self))
    }
    fn release(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
    fn wait_entered(&self, n: usize) {
        let t0 = Instant::now();
        while self.entered.load(Ordering::SeqCst) < n {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no operation reached the gate"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

struct GatedFs {
    gate: Arc<Gate>,
    fill: u8,
}

impl UserspaceFs for GatedFs {
    fn fs_type(&self) -> String {
        "gated".into()
    }
    fn read(&self, buf: UserspaceBuf, _offset: u64) -> hipfs::Result<usize> {
        self.gate.pass();
        match *buf.mem() {
            UserspaceMem::Host { ptr, len } => {
                // SAFETY: the library hands us its validated host range for this call.
                unsafe { std::ptr::write_bytes(ptr, self.fill, len) };
                Ok(len)
            }
            UserspaceMem::Rdma { .. } => panic!("host memory expected"),
        }
    }
    fn write(&self, buf: UserspaceBuf, _offset: u64) -> hipfs::Result<usize> {
        self.gate.pass();
        match *buf.mem() {
            UserspaceMem::Host { len, .. } => Ok(len),
            UserspaceMem::Rdma { len, .. } => Ok(len),
        }
    }
}

/// A registered handle served by a [`GatedFs`]; the fd only gives it a unique key.
struct GatedHandle {
    _file: std::fs::File,
    _dir: tempfile::TempDir,
    id: u64,
}

impl GatedHandle {
    fn new(gate: &Arc<Gate>, fill: u8) -> GatedHandle {
        let (dir, path) = file_with("gated", b"");
        let file = std::fs::File::open(path).unwrap();
        let fs = Arc::new(GatedFs {
            gate: Arc::clone(gate),
            fill,
        });
        let id = handle_register(file.as_raw_fd(), FileHandleType::UserspaceFs, Some(fs)).unwrap();
        GatedHandle {
            _file: file,
            _dir: dir,
            id,
        }
    }
    fn read(&self, mem: &mut [u8], size: usize, cookie: usize) -> IoParams {
        IoParams {
            handle: self.id,
            opcode: Opcode::Read,
            buf_base: mem.as_mut_ptr() as usize,
            buf_offset: 0,
            file_offset: 0,
            size,
            cookie,
        }
    }
}

impl Drop for GatedHandle {
    fn drop(&mut self) {
        handle_deregister(self.id);
    }
}

fn cookies(events: &[IoEvent]) -> HashSet<usize> {
    events.iter().map(|e| e.cookie).collect()
}

// ---------------------------------------------------------------- batch

#[test]
fn batch_reads_land_at_their_offsets_and_return_their_cookies() {
    let _serial = setup();
    let data = pattern(1, 1 << 20);
    let (_d, path) = file_with("batch-read", &data);
    let fh = open(&path, libc::O_RDONLY);
    let mut mem = vec![0xEEu8; 1 << 20];
    let batch = BatchIo::setup(32).unwrap();
    // 32 reads of odd sizes at scattered, unaligned offsets, landing reversed in memory.
    let ops: Vec<IoParams> = (0..32)
        .map(|i| {
            let foff = i * 30_001 + 7;
            let boff = (31 - i) * 32_768;
            op(
                &fh,
                Opcode::Read,
                &mut mem,
                boff,
                foff,
                20_000 + i as usize,
                1000 + i as usize,
            )
        })
        .collect();
    // SAFETY: mem outlives the batch's I/O: all 32 events are collected below.
    unsafe { batch.submit(&ops, 0).unwrap() };
    let events = batch
        .get_status(32, 32, Some(Duration::from_secs(30)))
        .unwrap();
    assert_eq!(events.len(), 32);
    assert_eq!(cookies(&events), (1000..1032).collect());
    for e in &events {
        let p = ops[e.cookie - 1000];
        assert_eq!(e.status, Status::Complete, "{e:?}");
        assert_eq!(e.ret, p.size as isize);
        let b = p.buf_offset as usize;
        let f = p.file_offset as usize;
        assert_eq!(
            &mem[b..b + p.size],
            &data[f..f + p.size],
            "cookie {}",
            e.cookie
        );
        assert!(mem[b + p.size..b + 32_768].iter().all(|x| *x == 0xEE));
    }
    // Each event is returned once: nothing is left.
    assert!(batch
        .get_status(0, 32, Some(Duration::ZERO))
        .unwrap()
        .is_empty());
}

#[test]
fn batch_writes_reach_the_file_and_a_read_past_the_end_is_short() {
    let _serial = setup();
    let (_d, path) = file_with("batch-write", &vec![0u8; 256 * 1024]);
    let fh = open(&path, libc::O_RDWR);
    let mut src = pattern(2, 256 * 1024);
    let batch = BatchIo::setup(8).unwrap();
    let ops: Vec<IoParams> = (0..8)
        .map(|i| {
            op(
                &fh,
                Opcode::Write,
                &mut src,
                i * 32_768,
                (7 - i) * 32_768,
                32_768,
                i as usize,
            )
        })
        .collect();
    // SAFETY: src outlives the I/O: the 8 events are collected below.
    unsafe { batch.submit(&ops, 0).unwrap() };
    let events = batch.get_status(8, 8, None).unwrap();
    assert!(
        events
            .iter()
            .all(|e| e.status == Status::Complete && e.ret == 32_768),
        "{events:?}"
    );
    let on_disk = std::fs::read(&path).unwrap();
    for i in 0..8usize {
        let f = (7 - i) * 32_768;
        assert_eq!(&on_disk[f..f + 32_768], &src[i * 32_768..(i + 1) * 32_768]);
    }
    // A read that starts 100 bytes before the end completes short.
    let mut dst = vec![0u8; 4096];
    let tail = [op(
        &fh,
        Opcode::Read,
        &mut dst,
        0,
        256 * 1024 - 100,
        4096,
        77,
    )];
    // SAFETY: dst outlives the I/O: the event is collected below.
    unsafe { batch.submit(&tail, 0).unwrap() };
    let ev = batch.get_status(1, 1, None).unwrap();
    assert_eq!(
        (ev[0].cookie, ev[0].status, ev[0].ret),
        (77, Status::Complete, 100)
    );
    assert_eq!(
        &dst[..100],
        &src[32_768 - 100..32_768],
        "the file's last block came from src block 0"
    );
}

#[test]
fn a_batch_holds_at_most_max_operations_until_their_events_are_collected() {
    let _serial = setup();
    let gate = Gate::new();
    let h = GatedHandle::new(&gate, 0x5A);
    let mut mem = vec![0u8; 4 * 4096];
    let batch = BatchIo::setup(4).unwrap();
    let _open_at_exit = gate.open_on_drop();
    let ops: Vec<IoParams> = (0..5)
        .map(|i| h.read(&mut mem[i * 4096..], 1024, i))
        .collect();
    // SAFETY (every submit below): mem outlives the I/O; the batch is dropped first.
    // SAFETY: as the comment above says.
    let err = unsafe { batch.submit(&ops, 0) }.unwrap_err();
    assert_eq!(err.op(), OpError::BatchFull);
    // SAFETY: mem outlives the I/O; the batch is dropped first.
    unsafe { batch.submit(&ops[..4], 0) }.unwrap();
    // The four are in flight (held at the gate): one more does not fit.
    // SAFETY: as above.
    let err = unsafe { batch.submit(&ops[4..], 0) }.unwrap_err();
    assert_eq!(err.op(), OpError::BatchFull);
    gate.release();
    let first = batch.get_status(2, 2, None).unwrap();
    assert_eq!(first.len(), 2);
    // Two finished but uncollected events still hold their slots.
    let mut ops2 = ops.clone();
    for (i, o) in ops2.iter_mut().enumerate() {
        o.cookie = 10 + i;
    }
    // SAFETY: as above.
    let err = unsafe { batch.submit(&ops2[..3], 0) }.unwrap_err();
    assert_eq!(err.op(), OpError::BatchFull);
    // SAFETY: as above.
    unsafe { batch.submit(&ops2[..2], 0) }.unwrap();
    let rest = batch.get_status(4, 4, None).unwrap();
    let all: Vec<IoEvent> = first.into_iter().chain(rest).collect();
    assert_eq!(cookies(&all), [0, 1, 2, 3, 10, 11].into_iter().collect());
    assert!(all
        .iter()
        .all(|e| e.status == Status::Complete && e.ret == 1024));
    assert!(mem[..1024].iter().all(|x| *x == 0x5A));
}

#[test]
fn batch_sizes_outside_1_to_128_are_invalid() {
    let _serial = setup();
    assert_eq!(BatchIo::setup(0).unwrap_err().op(), OpError::InvalidValue);
    assert_eq!(BatchIo::setup(129).unwrap_err().op(), OpError::InvalidValue);
    let b = BatchIo::setup(128).unwrap();
    assert_eq!(
        b.get_status(2, 1, None).unwrap_err().op(),
        OpError::InvalidValue
    );
    // SAFETY: no memory is touched: the flags are refused first.
    let err = unsafe { b.submit(&[], 1) }.unwrap_err();
    assert_eq!(err.op(), OpError::InvalidValue);
    let id = b.id();
    drop(b);
    assert_eq!(
        hipfs::batch::batch_get_status(id, 0, 1, None)
            .unwrap_err()
            .op(),
        OpError::InvalidValue,
        "a destroyed batch is gone"
    );
}

#[test]
fn one_bad_operation_fails_the_whole_submit_and_nothing_runs() {
    let _serial = setup();
    let data = pattern(3, 64 * 1024);
    let (_d, path) = file_with("batch-all-or-nothing", &data);
    let fh = open(&path, libc::O_RDONLY);
    let mut mem = vec![0xEEu8; 64 * 1024];
    let batch = BatchIo::setup(16).unwrap();
    let good: Vec<IoParams> = (0..8)
        .map(|i| {
            op(
                &fh,
                Opcode::Read,
                &mut mem,
                i * 4096,
                i * 4096,
                4096,
                i as usize,
            )
        })
        .collect();
    type Spoil = fn(&mut IoParams);
    let cases: [(usize, Spoil, OpError); 5] = [
        (0, |p| p.file_offset = -1, OpError::InvalidValue),
        (3, |p| p.buf_offset = -4096, OpError::InvalidValue),
        (7, |p| p.buf_base = 0, OpError::InvalidValue),
        (5, |p| p.handle = u64::MAX, OpError::HandleNotRegistered),
        (2, |p| p.file_offset = i64::MAX, OpError::InvalidValue),
    ];
    for (at, spoil, want) in cases {
        let mut ops = good.clone();
        spoil(&mut ops[at]);
        // SAFETY: mem outlives the batch.
        let err = unsafe { batch.submit(&ops, 0) }.unwrap_err();
        assert_eq!(err.op(), want, "bad op at {at}: {err}");
    }
    std::thread::sleep(Duration::from_millis(50));
    assert!(batch
        .get_status(0, 16, Some(Duration::from_millis(50)))
        .unwrap()
        .is_empty());
    assert!(
        mem.iter().all(|x| *x == 0xEE),
        "no operation of a refused submit ran"
    );
    // The refused submits took no slots: the full good set still fits twice over.
    // SAFETY: mem outlives the batch: the events are collected below.
    unsafe { batch.submit(&good, 0) }.unwrap();
    // SAFETY: as above.
    unsafe { batch.submit(&good, 0) }.unwrap();
    let ev = batch.get_status(16, 16, None).unwrap();
    assert!(ev.iter().all(|e| e.status == Status::Complete));
    assert_eq!(&mem[..32_768], &data[..32_768]);
}

#[test]
fn a_failing_operation_is_reported_in_its_own_event_as_minus_errno() {
    let _serial = setup();
    let data = pattern(4, 16 * 1024);
    let (_d, path) = file_with("batch-fail", &data);
    let wo = open(&path, libc::O_WRONLY);
    let ro = open(&path, libc::O_RDONLY);
    let mut mem = vec![0u8; 8192];
    let (a, b) = mem.split_at_mut(4096);
    let batch = BatchIo::setup(4).unwrap();
    let ops = [
        op(&wo, Opcode::Read, a, 0, 0, 4096, 1),
        op(&ro, Opcode::Read, b, 0, 4096, 4096, 2),
        op(&ro, Opcode::Write, b, 0, 0, 4096, 3),
    ];
    // SAFETY: mem outlives the batch: the events are collected below.
    unsafe { batch.submit(&ops, 0) }.unwrap();
    let mut ev = batch.get_status(3, 3, None).unwrap();
    ev.sort_by_key(|e| e.cookie);
    assert_eq!(
        (ev[0].status, ev[0].ret),
        (Status::Failed, -(libc::EBADF as isize)),
        "read on O_WRONLY"
    );
    assert_eq!((ev[1].status, ev[1].ret), (Status::Complete, 4096));
    assert_eq!(
        (ev[2].status, ev[2].ret),
        (Status::Failed, -(libc::EBADF as isize)),
        "write on O_RDONLY"
    );
    assert_eq!(&mem[4096..], &data[4096..8192]);
    assert_eq!(std::fs::read(&path).unwrap(), data, "the file is unchanged");
}

#[test]
fn get_status_returns_fewer_than_min_nr_once_the_timeout_passes() {
    let _serial = setup();
    let (gate_a, gate_b) = (Gate::new(), Gate::new());
    let ha = GatedHandle::new(&gate_a, 0x11);
    let hb = GatedHandle::new(&gate_b, 0x22);
    let mut mem = vec![0u8; 8192];
    let (a, b) = mem.split_at_mut(4096);
    let batch = BatchIo::setup(2).unwrap();
    let _open_a = gate_a.open_on_drop();
    let _open_b = gate_b.open_on_drop();
    let ops = [ha.read(a, 4096, 1), hb.read(b, 4096, 2)];
    // SAFETY: mem outlives the batch (dropped, so waited for, first).
    unsafe { batch.submit(&ops, 0) }.unwrap();
    // Both are running, each held at its own gate; only the second may finish.
    gate_a.wait_entered(1);
    gate_b.wait_entered(1);
    gate_b.release();
    let t0 = Instant::now();
    let ev = batch
        .get_status(2, 2, Some(Duration::from_millis(200)))
        .unwrap();
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(200),
        "returned after {waited:?}"
    );
    assert!(waited < Duration::from_secs(5), "returned after {waited:?}");
    assert_eq!(ev.len(), 1, "only the second read can finish: {ev:?}");
    assert_eq!(
        (ev[0].cookie, ev[0].status, ev[0].ret),
        (2, Status::Complete, 4096)
    );
    // A zero timeout polls.
    assert!(batch
        .get_status(1, 2, Some(Duration::ZERO))
        .unwrap()
        .is_empty());
    gate_a.release();
    let ev = batch.get_status(1, 2, None).unwrap();
    assert_eq!(
        (ev[0].cookie, ev[0].status, ev[0].ret),
        (1, Status::Complete, 4096)
    );
    assert!(mem[..4096].iter().all(|x| *x == 0x11));
    assert!(mem[4096..].iter().all(|x| *x == 0x22));
    // Asking for more than the batch can still produce does not hang.
    assert!(batch.get_status(2, 2, None).unwrap().is_empty());
}

#[test]
fn cancel_stops_queued_operations_and_waits_for_running_ones() {
    let _serial = setup();
    let gate = Gate::new();
    let h = GatedHandle::new(&gate, 0x77);
    const N: usize = 64;
    let mut mem = vec![0u8; N * 512];
    let batch = Arc::new(BatchIo::setup(N as u32).unwrap());
    let _open_at_exit = gate.open_on_drop();
    let ops: Vec<IoParams> = (0..N)
        .map(|i| h.read(&mut mem[i * 512..], 512, 500 + i))
        .collect();
    // SAFETY: mem outlives the batch: cancel waits for the running reads and
    // the batch is dropped before mem.
    unsafe { batch.submit(&ops, 0) }.unwrap();
    gate.wait_entered(1);
    let (tx, rx) = channel();
    let b2 = Arc::clone(&batch);
    let canceller = std::thread::spawn(move || {
        b2.cancel().unwrap();
        tx.send(()).unwrap();
    });
    // The running reads are held at the gate, so cancel must still be waiting.
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "cancel returned while reads ran"
    );
    gate.release();
    rx.recv_timeout(Duration::from_secs(10))
        .expect("cancel returned after the reads ended");
    canceller.join().unwrap();
    let ran = gate.entered.load(Ordering::SeqCst);
    let ev = batch.get_status(0, N, Some(Duration::ZERO)).unwrap();
    assert_eq!(ev.len(), N, "every operation has exactly one event");
    assert_eq!(cookies(&ev), (500..500 + N).collect());
    let done: Vec<&IoEvent> = ev.iter().filter(|e| e.status == Status::Complete).collect();
    let canceled = ev.iter().filter(|e| e.status == Status::Canceled).count();
    assert_eq!(
        done.len(),
        ran,
        "exactly the operations that started completed"
    );
    assert_eq!(done.len() + canceled, N);
    assert!(canceled > 0 && canceled < N, "{canceled} canceled of {N}");
    for e in &ev {
        let i = e.cookie - 500;
        let fill = if e.status == Status::Complete {
            0x77
        } else {
            0
        };
        assert!(
            mem[i * 512..(i + 1) * 512].iter().all(|x| *x == fill),
            "cookie {}",
            e.cookie
        );
    }
    // After cancel the batch is reusable.
    // SAFETY: as above.
    unsafe { batch.submit(&ops[..1], 0) }.unwrap();
    assert_eq!(
        batch.get_status(1, 1, None).unwrap()[0].status,
        Status::Complete
    );
}

#[test]
fn the_c_style_id_functions_drive_the_same_batches() {
    let _serial = setup();
    use hipfs::batch::{batch_cancel, batch_destroy, batch_get_status, batch_setup, batch_submit};
    let data = pattern(6, 8192);
    let (_d, path) = file_with("batch-ids", &data);
    let fh = open(&path, libc::O_RDONLY);
    let mut mem = vec![0u8; 8192];
    let id = batch_setup(2).unwrap();
    let ops = [op(&fh, Opcode::Read, &mut mem, 0, 0, 8192, 0xC0FFEE)];
    // SAFETY: mem outlives the batch: the event is collected below.
    unsafe { batch_submit(id, &ops, 0) }.unwrap();
    let ev = batch_get_status(id, 1, 2, None).unwrap();
    assert_eq!((ev[0].cookie, ev[0].ret), (0xC0FFEE, 8192));
    assert_eq!(mem, data);
    batch_cancel(id).unwrap();
    batch_destroy(id).unwrap();
    assert_eq!(batch_destroy(id).unwrap_err().op(), OpError::InvalidValue);
    // SAFETY: refused before any I/O.
    assert_eq!(
        // SAFETY: refused before any I/O.
        unsafe { batch_submit(id, &ops, 0) }.unwrap_err().op(),
        OpError::InvalidValue
    );
}

// ---------------------------------------------------------------- async

/// Holds `stream` until the returned sender is used (or dropped).
fn block_stream(stream: usize) -> std::sync::mpsc::Sender<()> {
    let (tx, rx) = channel::<()>();
    // SAFETY: tests pass streams of TestStream (live) or 0.
    unsafe {
        hipfs::gpu::runtime().launch_host_func(
            StreamId(stream),
            Box::new(move || {
                let _ = rx.recv();
            }),
        )
    }
    .unwrap();
    tx
}

fn sync(stream: usize) {
    // SAFETY: as in block_stream.
    unsafe { hipfs::gpu::runtime().stream_synchronize(StreamId(stream)) }.unwrap();
}

#[test]
fn a_write_then_a_read_on_one_stream_sees_the_write() {
    let _serial = setup();
    let stream_s = TestStream::new(0xA5_0001);
    let stream = stream_s.0;
    stream_register(stream, 0).unwrap();
    let (_d, path) = file_with("async-order", &vec![0u8; 64 * 1024]);
    let fh = open(&path, libc::O_RDWR);
    let h = fh.handle().unwrap();
    let src = pattern(7, 64 * 1024);
    let mut dst = vec![0u8; 64 * 1024];
    let gate = block_stream(stream);
    let (size, foff, boff) = (40_000usize, 5_000i64, 1_000i64);
    let (mut wrote, mut read) = (-777isize, -777isize);
    // SAFETY: every pointer outlives the stream's work: synchronized below.
    unsafe {
        write_async(
            h,
            src.as_ptr() as usize,
            &size,
            &foff,
            &boff,
            &mut wrote,
            stream,
        )
        .unwrap();
        read_async(
            h,
            dst.as_mut_ptr() as usize,
            &size,
            &foff,
            &boff,
            &mut read,
            stream,
        )
        .unwrap();
    }
    // Nothing ran while the stream was held.
    assert_eq!(std::fs::read(&path).unwrap(), vec![0u8; 64 * 1024]);
    drop(gate);
    sync(stream);
    // SAFETY: the stream has finished writing these.
    let (wrote, read) = unsafe {
        (
            std::ptr::read_volatile(&wrote),
            std::ptr::read_volatile(&read),
        )
    };
    assert_eq!((wrote, read), (40_000, 40_000));
    assert_eq!(&dst[1_000..41_000], &src[1_000..41_000]);
    assert_eq!(
        &std::fs::read(&path).unwrap()[5_000..45_000],
        &src[1_000..41_000]
    );
    stream_deregister(stream).unwrap();
}

#[test]
fn size_and_offsets_are_read_when_the_stream_reaches_the_operation() {
    let _serial = setup();
    let stream_s = TestStream::new(0xA5_0002);
    let stream = stream_s.0;
    stream_register(stream, 0).unwrap();
    let data = pattern(8, 64 * 1024);
    let (_d, path) = file_with("async-late", &data);
    let fh = open(&path, libc::O_RDONLY);
    let mut dst = vec![0xEEu8; 16 * 1024];
    let size = Box::new(4096usize);
    let foff = Box::new(0i64);
    let boff = Box::new(0i64);
    let mut got = Box::new(-777isize);
    let gate = block_stream(stream);
    let (sp, fp, bp, gp) = (
        &*size as *const usize,
        &*foff as *const i64,
        &*boff as *const i64,
        &mut *got as *mut isize,
    );
    // SAFETY: the boxes and dst outlive the stream's work (synchronized below);
    // they are changed only through these pointers while the stream is held.
    unsafe {
        read_async(
            fh.handle().unwrap(),
            dst.as_mut_ptr() as usize,
            sp,
            fp,
            bp,
            gp,
            stream,
        )
        .unwrap();
        *(sp as *mut usize) = 100;
        *(fp as *mut i64) = 30_000;
        *(bp as *mut i64) = 8_000;
        assert_eq!(std::ptr::read_volatile(gp), -777, "not run yet");
    }
    drop(gate);
    sync(stream);
    // SAFETY: the stream is done with the pointer.
    assert_eq!(unsafe { std::ptr::read_volatile(gp) }, 100);
    assert_eq!(&dst[8_000..8_100], &data[30_000..30_100]);
    assert!(dst[..8_000].iter().chain(&dst[8_100..]).all(|x| *x == 0xEE));
    stream_deregister(stream).unwrap();
}

#[test]
fn fixed_flags_capture_their_values_at_enqueue_time() {
    let _serial = setup();
    let data = pattern(9, 64 * 1024);
    let (_d, path) = file_with("async-fixed", &data);
    let fh = open(&path, libc::O_RDONLY);
    let mut buf_mem = vec![0u8; 16 * 1024];
    let buf = Buffer::from_slice(&mut buf_mem, 0);
    // All three fixed: later changes are ignored.
    let all_s = TestStream::new(0xA5_0003);
    let all = all_s.0;
    stream_register(
        all,
        STREAM_FIXED_FILE_SIZE | STREAM_FIXED_FILE_OFFSET | STREAM_FIXED_BUF_OFFSET,
    )
    .unwrap();
    let args = AsyncArgs::new(2048, 1024, 512);
    let gate = block_stream(all);
    // SAFETY: buf's memory outlives the stream's work: synchronized below.
    unsafe { fh.read_async(&buf, &args, all) }.unwrap();
    args.set_size(10);
    args.set_file_offset(50_000);
    args.set_buffer_offset(9_000);
    assert_eq!(args.result(), None);
    drop(gate);
    sync(all);
    assert_eq!(args.result(), Some(2048));
    // SAFETY: the stream is done; buf covers these bytes.
    let mem = unsafe { std::slice::from_raw_parts(buf.ptr(), buf.len()) };
    assert_eq!(&mem[512..2560], &data[1024..3072]);
    assert!(mem[9_000..9_010].iter().all(|x| *x == 0));
    // Only the size fixed: the file offset is still read late.
    let size_only_s = TestStream::new(0xA5_0004);
    let size_only = size_only_s.0;
    stream_register(size_only, STREAM_FIXED_FILE_SIZE).unwrap();
    let args = AsyncArgs::new(300, 0, 12_000);
    let gate = block_stream(size_only);
    // SAFETY: as above.
    unsafe { fh.read_async(&buf, &args, size_only) }.unwrap();
    args.set_size(5);
    args.set_file_offset(40_000);
    drop(gate);
    sync(size_only);
    assert_eq!(args.result(), Some(300));
    // SAFETY: as above.
    let mem = unsafe { std::slice::from_raw_parts(buf.ptr(), buf.len()) };
    assert_eq!(&mem[12_000..12_300], &data[40_000..40_300]);
    // A fixed negative offset is refused at enqueue time.
    let bad = AsyncArgs::new(1, -1, 0);
    // SAFETY: refused before anything is enqueued.
    let err = unsafe { fh.read_async(&buf, &bad, all) }.unwrap_err();
    assert_eq!(err.op(), OpError::InvalidValue);
    stream_deregister(all).unwrap();
    stream_deregister(size_only).unwrap();
}

#[test]
fn unregistered_streams_act_as_flags_0_and_registration_is_once_with_valid_flags() {
    let _serial = setup();
    let (_d, path) = file_with("async-reg", &pattern(10, 4096));
    let fh = open(&path, libc::O_RDONLY);
    let mut mem = vec![0u8; 4096];
    let buf = Buffer::from_slice(&mut mem, 0);
    let args = AsyncArgs::new(4096, 0, 0);
    let stream_s = TestStream::new(0xA5_0005);
    let stream = stream_s.0;
    // Never registered: accepted with flags 0 (hipFile 0.5 and cuFile).
    // SAFETY: mem outlives the stream's work: synchronized below.
    unsafe { fh.read_async(&buf, &args, stream) }.unwrap();
    sync(stream);
    assert_eq!(args.result(), Some(4096));
    assert_eq!(hipfs::stream::stream_flags(stream), None);
    for flags in [0x10, 0x1f, u32::MAX] {
        assert_eq!(
            stream_register(stream, flags).unwrap_err().op(),
            OpError::InvalidValue
        );
    }
    assert_eq!(
        stream_deregister(stream).unwrap_err().op(),
        OpError::InvalidValue
    );
    stream_register(stream, 0xf).unwrap();
    assert_eq!(
        stream_register(stream, 0).unwrap_err().op(),
        OpError::InvalidValue,
        "a registered stream cannot be registered again"
    );
    assert_eq!(hipfs::stream::stream_flags(stream), Some(0xf));
    let (size, off) = (4096usize, 0i64);
    let mut out = 0isize;
    let h = fh.handle().unwrap();
    let p = mem_ptr(&buf);
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            read_async(h, p, std::ptr::null(), &off, &off, &mut out, stream)
                .unwrap_err()
                .op(),
            OpError::InvalidValue
        );
        assert_eq!(
            read_async(h, p, &size, &off, &off, std::ptr::null_mut(), stream)
                .unwrap_err()
                .op(),
            OpError::InvalidValue
        );
        assert_eq!(
            read_async(h, 0, &size, &off, &off, &mut out, stream)
                .unwrap_err()
                .op(),
            OpError::InvalidValue
        );
        assert_eq!(
            read_async(u64::MAX, p, &size, &off, &off, &mut out, stream)
                .unwrap_err()
                .op(),
            OpError::HandleNotRegistered
        );
    }
    stream_deregister(stream).unwrap();
    let args = AsyncArgs::new(100, 0, 0);
    // SAFETY: as above.
    unsafe { fh.read_async(&buf, &args, stream) }.unwrap();
    sync(stream);
    assert_eq!(args.result(), Some(100), "deregistered: flags 0 again");
}

fn mem_ptr(buf: &Buffer<'_>) -> usize {
    buf.ptr() as usize
}

#[test]
fn async_failures_land_in_the_result_as_negative_errors() {
    let _serial = setup();
    let stream_s = TestStream::new(0xA5_0006);
    let stream = stream_s.0;
    stream_register(stream, 0).unwrap();
    let (_d, path) = file_with("async-fail", &pattern(11, 8192));
    let wo = open(&path, libc::O_WRONLY);
    let ro = open(&path, libc::O_RDONLY);
    let mut mem = vec![0u8; 4096];
    let buf = Buffer::from_slice(&mut mem, 0);
    let on_wo = AsyncArgs::new(4096, 0, 0);
    let too_big = AsyncArgs::new(4097, 0, 0);
    let late_negative = AsyncArgs::new(16, 0, 0);
    let gate = block_stream(stream);
    // SAFETY: mem outlives the stream's work: synchronized below.
    unsafe {
        fh_read(&wo, &buf, &on_wo, stream);
        fh_read(&ro, &buf, &too_big, stream);
        fh_read(&ro, &buf, &late_negative, stream);
    }
    // Not fixed, so a bad offset set now is only seen when the read runs.
    late_negative.set_file_offset(-5);
    drop(gate);
    sync(stream);
    assert_eq!(on_wo.result(), Some(-(libc::EBADF as isize)));
    let invalid = -(OpError::InvalidValue.code() as isize);
    assert_eq!(too_big.result(), Some(invalid), "past the buffer's end");
    assert_eq!(late_negative.result(), Some(invalid));
    stream_deregister(stream).unwrap();
}

/// # Safety
/// As [`FileHandle::read_async`].
unsafe fn fh_read(fh: &FileHandle, buf: &Buffer<'_>, args: &Arc<AsyncArgs>, stream: usize) {
    // SAFETY: forwarded.
    unsafe { fh.read_async(buf, args, stream) }.unwrap();
}

#[test]
fn many_async_operations_on_one_stream_run_in_order() {
    let _serial = setup();
    let stream_s = TestStream::new(0xA5_0007);
    let stream = stream_s.0;
    stream_register(stream, 0).unwrap();
    let (_d, path) = file_with("async-many", &vec![0u8; 4096]);
    let fh = open(&path, libc::O_RDWR);
    // 100 writes of the same 4 KiB block, each with a different byte: the
    // last one enqueued must win, and a read after each sees that write.
    let mut srcs: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; 4096]).collect();
    let mut dsts: Vec<Vec<u8>> = vec![vec![0xFF; 4096]; 100];
    let mut args = Vec::new();
    for i in 0..100 {
        let w = AsyncArgs::new(4096, 0, 0);
        let r = AsyncArgs::new(4096, 0, 0);
        let src = Buffer::from_slice(&mut srcs[i], 0);
        let dst = Buffer::from_slice(&mut dsts[i], 0);
        // SAFETY: srcs/dsts outlive the stream's work: synchronized below.
        unsafe {
            fh.write_async(&src, &w, stream).unwrap();
            fh.read_async(&dst, &r, stream).unwrap();
        }
        args.push((w, r));
    }
    sync(stream);
    for (i, (w, r)) in args.iter().enumerate() {
        assert_eq!((w.result(), r.result()), (Some(4096), Some(4096)));
        assert!(
            dsts[i].iter().all(|x| *x == i as u8),
            "read {i} saw write {i}"
        );
    }
    assert!(std::fs::read(&path).unwrap().iter().all(|x| *x == 99));
    stream_deregister(stream).unwrap();
}

// ---------------------------------------------------------------- device memory

/// Device memory on GPU 0, freed on drop; `None` on the host runtime.
struct DeviceMem {
    ptr: usize,
    len: usize,
}

impl DeviceMem {
    fn new(len: usize, poison: u8) -> DeviceMem {
        let rt = hipfs::gpu::runtime();
        // The callers are ignored where the build found no GPU.
        assert!(
            rt.device_count() > 0,
            "no GPU; these tests need HIPFS_REQUIRE_GPU=1 builds on a GPU machine"
        );
        let ptr = rt.device_alloc(0, len).unwrap().addr();
        // SAFETY: the allocation just made, `len` bytes.
        unsafe { rt.device_memset(hipfs::gpu::DevicePtr::from_addr(ptr), poison, len) }.unwrap();
        DeviceMem { ptr, len }
    }
    fn to_host(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        // SAFETY: `len` bytes of the live allocation.
        unsafe {
            hipfs::gpu::runtime()
                .copy_from_device(&mut v, hipfs::gpu::DevicePtr::from_addr(self.ptr))
        }
        .unwrap();
        v
    }
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        // SAFETY: allocated in new(), freed only here.
        unsafe { hipfs::gpu::runtime().device_free(hipfs::gpu::DevicePtr::from_addr(self.ptr)) };
    }
}

#[test]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn batch_reads_into_and_writes_from_registered_device_memory() {
    let _serial = setup();
    let dev = DeviceMem::new(4 << 20, 0xEE);
    // SAFETY: dev outlives buf (declared before it, dropped after).
    let buf = unsafe { Buffer::new(dev.ptr as *mut u8, dev.len, 0) };
    buf.register().unwrap();
    let data = pattern(21, 4 << 20);
    let (_d, path) = file_with("dev-batch", &data);
    let (_d2, out_path) = file_with("dev-batch-out", &vec![0u8; 4 << 20]);
    let fh = open(&path, libc::O_RDONLY);
    let out = open(&out_path, libc::O_RDWR);
    let batch = BatchIo::setup(64).unwrap();
    // 48 reads of odd sizes from odd file offsets to odd buffer offsets, disjoint.
    let reads: Vec<IoParams> = (0..48)
        .map(|i| IoParams {
            handle: fh.handle().unwrap(),
            opcode: Opcode::Read,
            buf_base: dev.ptr,
            buf_offset: i * 87_381 + 3,
            file_offset: (47 - i) * 87_000 + 11,
            size: 50_000 + i as usize * 613,
            cookie: i as usize,
        })
        .collect();
    // SAFETY: dev outlives the I/O: all events are collected below.
    unsafe { batch.submit(&reads, 0) }.unwrap();
    let ev = batch
        .get_status(48, 64, Some(Duration::from_secs(60)))
        .unwrap();
    assert_eq!(ev.len(), 48);
    let mem = dev.to_host();
    let mut covered = vec![false; dev.len];
    for e in &ev {
        let p = reads[e.cookie];
        assert_eq!(
            (e.status, e.ret),
            (Status::Complete, p.size as isize),
            "{e:?}"
        );
        let (b, f) = (p.buf_offset as usize, p.file_offset as usize);
        assert_eq!(
            &mem[b..b + p.size],
            &data[f..f + p.size],
            "read {}",
            e.cookie
        );
        covered[b..b + p.size].iter_mut().for_each(|c| *c = true);
    }
    assert!(
        mem.iter().zip(&covered).all(|(x, c)| *c || *x == 0xEE),
        "bytes outside the reads stay poisoned"
    );
    // Write the same ranges back to a second file, at the offsets they came from.
    let writes: Vec<IoParams> = reads
        .iter()
        .map(|p| IoParams {
            handle: out.handle().unwrap(),
            opcode: Opcode::Write,
            ..*p
        })
        .collect();
    // SAFETY: as above.
    unsafe { batch.submit(&writes, 0) }.unwrap();
    let ev = batch
        .get_status(48, 64, Some(Duration::from_secs(60)))
        .unwrap();
    assert!(ev.iter().all(|e| e.status == Status::Complete), "{ev:?}");
    let on_disk = std::fs::read(&out_path).unwrap();
    for p in &writes {
        let f = p.file_offset as usize;
        assert_eq!(&on_disk[f..f + p.size], &data[f..f + p.size]);
    }
    drop(batch);
    buf.deregister().unwrap();
}

#[test]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn async_reads_and_writes_move_unregistered_device_memory_in_stream_order() {
    let _serial = setup();
    let dev = DeviceMem::new(8 << 20, 0xEE);
    let s = TestStream::new(0xA5_0008);
    stream_register(s.0, 0).unwrap();
    let data = pattern(22, 8 << 20);
    let (_d, path) = file_with("dev-async", &data);
    let (_d2, out_path) = file_with("dev-async-out", &vec![0u8; 8 << 20]);
    let fh = open(&path, libc::O_RDONLY);
    let out = open(&out_path, libc::O_RDWR);
    let (size, foff, boff) = ((6 << 20) + 12_345usize, 999i64, 4_097i64);
    let (mut read, mut wrote) = (-777isize, -777isize);
    // SAFETY: the locals and dev outlive the stream's work: synchronized below.
    unsafe {
        read_async(
            fh.handle().unwrap(),
            dev.ptr,
            &size,
            &foff,
            &boff,
            &mut read,
            s.0,
        )
        .unwrap();
        write_async(
            out.handle().unwrap(),
            dev.ptr,
            &size,
            &foff,
            &boff,
            &mut wrote,
            s.0,
        )
        .unwrap();
    }
    sync(s.0);
    // SAFETY: the stream is done with them.
    let (read, wrote) = unsafe {
        (
            std::ptr::read_volatile(&read),
            std::ptr::read_volatile(&wrote),
        )
    };
    assert_eq!((read, wrote), (size as isize, size as isize));
    let mem = dev.to_host();
    let (b, f) = (boff as usize, foff as usize);
    assert_eq!(&mem[b..b + size], &data[f..f + size]);
    assert!(mem[..b].iter().chain(&mem[b + size..]).all(|x| *x == 0xEE));
    assert_eq!(
        &std::fs::read(&out_path).unwrap()[f..f + size],
        &data[f..f + size]
    );
    stream_deregister(s.0).unwrap();
}

/// Stream-ordered reads into device memory pending while another thread
/// allocates and frees device memory. `cuMemFree` waits for the whole
/// device, so the stream's pending reads must finish without any GPU call
/// from the threads doing their I/O (they hung on the H200 when the worker
/// made its own copies: see src/stream.rs). A watchdog turns a hang into an
/// abort after 60 s.
#[test]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn async_reads_complete_while_another_thread_frees_device_memory() {
    let _serial = setup();
    let dev = DeviceMem::new(32 << 20, 0xEE);
    let rt = hipfs::gpu::runtime();
    let data = pattern(23, 32 << 20);
    let (_d, path) = file_with("dev-async-free", &data);
    let fh = open(&path, libc::O_RDONLY);
    let s = TestStream::new(0xA5_0009);
    stream_register(s.0, 0).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let p = hipfs::gpu::runtime().device_alloc(0, 1 << 20).unwrap();
                // SAFETY: allocated just above, used by nothing.
                unsafe { hipfs::gpu::runtime().device_free(p) };
                n += 1;
            }
            n
        })
    };
    let piece = 4usize << 20;
    let sizes: Vec<usize> = vec![piece; 8];
    let offs: Vec<i64> = (0..8).map(|i| (i * piece) as i64).collect();
    let mut results = [-777isize; 8];
    let (fh_handle, dev_ptr, stream) = (fh.handle().unwrap(), dev.ptr, s.0);
    for round in 0..6 {
        // SAFETY: the argument slots and dev outlive the stream's work
        // (the stream is synchronised before they are touched again).
        unsafe {
            for i in 0..8 {
                read_async(
                    fh_handle,
                    dev_ptr,
                    &sizes[i],
                    &offs[i],
                    &offs[i],
                    &mut results[i],
                    stream,
                )
                .unwrap();
            }
        }
        // A hang cannot be unwound from: the watchdog ends the process.
        let (done_tx, done_rx) = channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if done_rx.recv_timeout(Duration::from_secs(60)).is_err() {
                eprintln!("round {round}: the stream did not finish within 60 s (hang)");
                std::process::abort();
            }
        });
        // SAFETY: the test's live stream.
        unsafe { rt.stream_synchronize(StreamId(stream)) }.unwrap();
        let _ = done_tx.send(());
        watchdog.join().unwrap();
        // SAFETY: the stream is done with the result slots.
        let got: Vec<isize> = results
            .iter()
            .map(|r| unsafe { std::ptr::read_volatile(r) })
            .collect();
        assert!(
            got.iter().all(|&r| r == piece as isize),
            "round {round}: {got:?}"
        );
    }
    // Writes from device memory, still under the churn, in odd pieces.
    let (_d2, out_path) = file_with("dev-async-free-out", &vec![0u8; 32 << 20]);
    let out = open(&out_path, libc::O_RDWR);
    let wsizes: Vec<usize> = (0..8).map(|i| piece - 1_001 * (i + 1)).collect();
    let woffs: Vec<i64> = (0..8).map(|i| (i * piece + 333) as i64).collect();
    let mut wrote = [-777isize; 8];
    // SAFETY: as above; synchronised before the slots are read.
    unsafe {
        for i in 0..8 {
            write_async(
                out.handle().unwrap(),
                dev_ptr,
                &wsizes[i],
                &woffs[i],
                &woffs[i],
                &mut wrote[i],
                stream,
            )
            .unwrap();
        }
    }
    let (done_tx, done_rx) = channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(Duration::from_secs(60)).is_err() {
            eprintln!("writes: the stream did not finish within 60 s (hang)");
            std::process::abort();
        }
    });
    // SAFETY: the test's live stream.
    unsafe { rt.stream_synchronize(StreamId(stream)) }.unwrap();
    let _ = done_tx.send(());
    watchdog.join().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let churned = churn.join().unwrap();
    assert!(churned > 0, "the other thread never freed memory");
    assert!(dev.to_host() == data, "device bytes equal the file");
    // SAFETY: the stream is done with them.
    let wrote: Vec<isize> = wrote
        .iter()
        .map(|r| unsafe { std::ptr::read_volatile(r) })
        .collect();
    assert_eq!(
        wrote,
        wsizes.iter().map(|&n| n as isize).collect::<Vec<_>>()
    );
    let on_disk = std::fs::read(&out_path).unwrap();
    for i in 0..8 {
        let f = woffs[i] as usize;
        assert_eq!(
            &on_disk[f..f + wsizes[i]],
            &data[f..f + wsizes[i]],
            "write {i}"
        );
    }
    stream_deregister(s.0).unwrap();
}

/// A device range past the allocation fails the operation with
/// `-InvalidValue` when the stream runs it (the raw API knows no buffer
/// length; the allocation holding the pointer bounds it), and the stream
/// goes on.
#[test]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn async_device_reads_past_the_allocation_fail_and_the_stream_goes_on() {
    let _serial = setup();
    let dev = DeviceMem::new(1 << 20, 0xEE);
    let data = pattern(24, 4 << 20);
    let (_d, path) = file_with("dev-async-past", &data);
    let fh = open(&path, libc::O_RDONLY);
    let s = TestStream::new(0xA5_000A);
    stream_register(s.0, 0).unwrap();
    let (big, fits, zero, boff) = ((1usize << 20) + 1, 70_000usize, 0i64, 100i64);
    let (mut r1, mut r2) = (-777isize, -777isize);
    // SAFETY: locals and dev outlive the stream's work (synchronised below).
    unsafe {
        read_async(
            fh.handle().unwrap(),
            dev.ptr,
            &big,
            &zero,
            &zero,
            &mut r1,
            s.0,
        )
        .unwrap();
        read_async(
            fh.handle().unwrap(),
            dev.ptr,
            &fits,
            &zero,
            &boff,
            &mut r2,
            s.0,
        )
        .unwrap();
    }
    sync(s.0);
    // SAFETY: the stream is done with them.
    let (r1, r2) = unsafe { (std::ptr::read_volatile(&r1), std::ptr::read_volatile(&r2)) };
    assert_eq!(r1, -(OpError::InvalidValue.code() as isize));
    assert_eq!(r2, fits as isize);
    let mem = dev.to_host();
    assert_eq!(&mem[100..100 + fits], &data[..fits]);
    assert!(mem[..100]
        .iter()
        .chain(&mem[100 + fits..])
        .all(|x| *x == 0xEE));
    stream_deregister(s.0).unwrap();
}
