//! Device memory and a real NIC: the registration chain of issue 16 run for
//! real in the soft-RoCE VM. The "device memory" is the `dmabuf-test`
//! runtime's (vgem dumb buffers mapped into the process: a real dmabuf
//! exporter, and a driver mapping as a GPU BAR is), so against rxe0:
//! 1. the dmabuf is offered (`ibv_reg_dmabuf_mr`) and rxe refuses it (it
//!    implements no dmabuf registration);
//! 2. the device address is offered (`ibv_reg_mr`, the peer-memory way)
//!    and refused: vgem maps its pages `VM_PFNMAP`, which
//!    `pin_user_pages` will not pin (EFAULT), as a GPU BAR without
//!    nvidia-peermem;
//! 3. the read is staged: the server RDMA-WRITEs into a pinned host slab,
//!    which is copied into the dumb buffer. The link remembers the refusal,
//!    so later reads into the buffer do not ask the NIC again.
//!
//! The `pinnable_` tests run the other way to its end: with the
//! `pinnable-test` runtime (anonymous shared pages: no dmabuf exporter, and
//! pinnable, as GPU memory is with a peer-memory client) the address is
//! registered and the server RDMA-WRITEs reads straight into device memory,
//! nothing staged.
//!
//! Run by mount-scripts/rdma-vm/ci-remote-verbs.sh, each group in a VM of
//! its own with `HIPFS_GPU_RUNTIME=dmabuf-test` (`vgem_` tests) or
//! `pinnable-test` (`pinnable_` tests): the runtime is chosen once per process.

use std::fs;
use std::sync::{Mutex, OnceLock};

use hipfs::gpu::{self, DeviceAllocation, GpuRuntime};
use hipfs::stats::{device_registrations, DeviceRegistrations};
use hipfs::{Buffer, Driver, FileHandle, RDMA_REGISTER};

use crate::remote_common::{lcg, open_us, pattern};
use crate::remote_verbs_vm::{not_in_vm, rxe_sent_pkts, VerbsFixture};

/// The log lines about device memory, kept (and echoed to stderr, so the
/// VM run shows them) by a logger installed before the driver opens.
struct DeviceLog(Mutex<Vec<String>>);

impl log::Log for DeviceLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Debug && m.target().starts_with("hipfs")
    }
    fn log(&self, r: &log::Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let line = format!("{} {}: {}", r.level(), r.target(), r.args());
        if ["device memory", "dmabuf", "GPU runtime", "cannot register"]
            .iter()
            .any(|k| line.contains(k))
        {
            eprintln!("log: {line}");
            self.0.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }
    }
    fn flush(&self) {}
}

static LOG: DeviceLog = DeviceLog(Mutex::new(Vec::new()));

/// The captured lines so far; panics when another logger got in first.
fn device_log() -> Vec<String> {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    let ours = *INSTALLED.get_or_init(|| {
        let ok = log::set_logger(&LOG).is_ok();
        if ok {
            log::set_max_level(log::LevelFilter::Debug);
        }
        ok
    });
    assert!(
        ours,
        "another logger was installed first: run this module's tests alone"
    );
    LOG.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Panics unless in the VM with the GPU runtime `name`.
fn require_device_vm(name: &str) {
    if let Some(why) = not_in_vm() {
        panic!("{why}; these tests are ignored outside the VM unless HIPFS_REQUIRE_VERBS=1");
    }
    // Before anything selects the runtime (and logs its choice).
    device_log();
    let rt = gpu::runtime();
    assert_eq!(
        rt.name(),
        name,
        "needs HIPFS_GPU_RUNTIME={name} ({})",
        gpu::selection_message()
    );
}

/// What each test starts from: in the VM with the GPU runtime it needs,
/// the driver open, and a verbs mount of a fresh export.
struct DeviceVm {
    rt: &'static dyn GpuRuntime,
    /// Before the driver: fields drop in order, so the mount goes first.
    fx: VerbsFixture,
    _driver: Driver,
}

impl DeviceVm {
    /// Panics unless in the VM with the GPU runtime `runtime`.
    fn new(runtime: &str) -> DeviceVm {
        require_device_vm(runtime);
        let rt = gpu::runtime();
        let driver = Driver::open().unwrap();
        DeviceVm {
            rt,
            fx: VerbsFixture::new(),
            _driver: driver,
        }
    }

    /// Writes `contents` to `name` in the export and opens it through the
    /// mount with `flags`.
    fn file(&self, name: &str, contents: &[u8], flags: i32) -> FileHandle {
        fs::write(self.fx.e(name), contents).unwrap();
        open_us(&self.fx.m(name), flags)
    }
}

fn delta(a: &DeviceRegistrations, b: &DeviceRegistrations) -> DeviceRegistrations {
    DeviceRegistrations {
        dmabuf: b.dmabuf - a.dmabuf,
        dmabuf_refused: b.dmabuf_refused - a.dmabuf_refused,
        peer_memory: b.peer_memory - a.peer_memory,
        peer_memory_refused: b.peer_memory_refused - a.peer_memory_refused,
        staged: b.staged - a.staged,
    }
}

/// Every registration attempt in `d` went the whole way: dmabuf refused,
/// peer memory refused, staged; nothing registered.
fn assert_refused_twice_then_staged(d: &DeviceRegistrations, what: &str) {
    assert!(d.dmabuf_refused >= 1, "{what}: no dmabuf attempt: {d:?}");
    assert_eq!(
        (d.dmabuf, d.peer_memory),
        (0, 0),
        "{what}: rxe0 registered device memory: {d:?}"
    );
    assert_eq!(
        (d.peer_memory_refused, d.staged),
        (d.dmabuf_refused, d.dmabuf_refused),
        "{what}: each attempt tries peer memory after the dmabuf, then stages: {d:?}"
    );
}

#[test]
#[cfg_attr(
    not(hipfs_verbs),
    ignore = "needs an RDMA device: run in the soft-RoCE VM (mount-scripts/rdma-vm/; HIPFS_REQUIRE_VERBS=1)"
)]
fn vgem_device_memory_is_offered_to_rxe_as_dmabuf_then_peer_memory_both_refused_and_reads_stage_into_it(
) {
    let vm = DeviceVm::new("dmabuf-test");
    let rt = vm.rt;
    let size = (3 << 20) + 4321;
    let data = pattern(61, size);
    let fh = vm.file("data", &data, libc::O_RDONLY);

    let len = 4 << 20;
    let mut dev = DeviceAllocation::new(rt, 0, len).unwrap();
    dev.fill(0xee).unwrap();
    // The export is a real dmabuf (only dmabuf fds have an exporter name).
    let export = rt.export_dmabuf(dev.device_ptr(), len).unwrap();
    let info = {
        use std::os::fd::AsRawFd;
        fs::read_to_string(format!("/proc/self/fdinfo/{}", export.fd.as_raw_fd())).unwrap()
    };
    let exporter = info.lines().find_map(|l| l.strip_prefix("exp_name:"));
    assert!(exporter.is_some(), "not a dmabuf: {info}");
    eprintln!(
        "device memory: {len} bytes at {:#x}, exported as a dmabuf of {} bytes (exporter {})",
        dev.ptr(),
        export.len,
        exporter.unwrap_or("").trim()
    );
    drop(export);

    // RDMA_REGISTER: registered with the live verbs link(s) at once.
    let before = device_registrations();
    let buf = Buffer::from_device(&dev, RDMA_REGISTER);
    buf.register().unwrap();
    let at_register = device_registrations();
    let d = delta(&before, &at_register);
    eprintln!("registration: {d:?}");
    assert_refused_twice_then_staged(&d, "Buffer::register");

    // Reads at random offsets and sizes land in the device memory.
    let mut buf = buf;
    let remote = hipfs::stats::snapshot().remote;
    hipfs::io::bounce_pool::take_profile();
    let pkts = rxe_sent_pkts();
    let moved = random_reads_into_device(&fh, &mut buf, &dev, &data, 9, 8, true);
    let staged = hipfs::io::bounce_pool::take_profile();
    let after = device_registrations();
    let d = delta(&at_register, &after);
    eprintln!(
        "8 reads: {} chunks through the pinned bounce lanes; registrations {d:?}",
        staged.chunks
    );
    // The link remembers the refusal: reads ask the NIC nothing more, and
    // every one of them goes through the staged pipeline.
    assert_eq!(d, DeviceRegistrations::default(), "reads registered again");
    assert!(
        staged.chunks >= 8,
        "only {} staged chunks for 8 reads",
        staged.chunks
    );
    assert_eq!(
        hipfs::stats::snapshot().remote.read_bytes - remote.read_bytes,
        moved as u64,
        "every byte counted on the remote path"
    );
    let sent = rxe_sent_pkts() - pkts;
    assert!(
        sent >= (moved / 4096) as u64,
        "rxe0 sent only {sent} packets for {moved} bytes"
    );
    eprintln!("verbs: {moved} bytes staged into device memory in 8 reads, {sent} rxe packets");

    // Each step logged with its reason.
    let lines = device_log();
    let has = |k: &str| lines.iter().any(|l| l.contains(k));
    assert!(has("GPU runtime: dmabuf-test"), "{lines:#?}");
    assert!(
        has("device memory registration: the NIC refused the dmabuf"),
        "{lines:#?}"
    );
    assert!(
        has("(peer memory) failed") && has("staging through pinned host memory"),
        "{lines:#?}"
    );
    eprintln!("{}", hipfs::stats::snapshot());
    drop(buf);
}

#[test]
#[cfg_attr(
    not(hipfs_verbs),
    ignore = "needs an RDMA device: run in the soft-RoCE VM (mount-scripts/rdma-vm/; HIPFS_REQUIRE_VERBS=1)"
)]
fn vgem_device_memory_writes_over_rxe_stage_through_host_memory_and_land_in_the_file() {
    let vm = DeviceVm::new("dmabuf-test");
    let size = 2 << 20;
    let fh = vm.file("w", &vec![0u8; size], libc::O_RDWR);
    let len = 1 << 20;
    let mut dev = DeviceAllocation::new(vm.rt, 0, len).unwrap();
    let src = pattern(62, len);
    dev.write(0, &src).unwrap();
    let buf = Buffer::from_device(&dev, 0);
    let mut expect = vec![0u8; size];
    let mut x = 3u64;
    let remote = hipfs::stats::snapshot().remote;
    let mut moved = 0u64;
    hipfs::io::bounce_pool::take_profile();
    for _ in 0..6 {
        let n = (lcg(&mut x) % (len as u64 / 2)) as usize + 1;
        let boff = (lcg(&mut x) % (len - n) as u64) as usize;
        let off = (lcg(&mut x) % (size - n) as u64) as usize;
        assert_eq!(
            fh.write(&buf, n, off as i64, boff as i64).unwrap(),
            n,
            "{n} bytes from device offset {boff} to {off}"
        );
        expect[off..off + n].copy_from_slice(&src[boff..boff + n]);
        moved += n as u64;
    }
    assert_eq!(
        hipfs::stats::snapshot().remote.write_bytes - remote.write_bytes,
        moved
    );
    let staged = hipfs::io::bounce_pool::take_profile().chunks;
    assert!(staged >= 6, "only {staged} staged chunks for 6 writes");
    assert!(
        fs::read(vm.fx.e("w")).unwrap() == expect,
        "the server's file holds every write from device memory"
    );
    eprintln!(
        "verbs: {moved} bytes written from device memory in 6 writes, {staged} staged chunks"
    );
}

/// Reads of `data` (the file behind `fh`) at random offsets and sizes into
/// `dev` through `buf`, each checked against the file; the bytes moved.
/// With `whole_file_first`, the first read is the whole file, to the start
/// of `dev`.
fn random_reads_into_device(
    fh: &FileHandle,
    buf: &mut Buffer,
    dev: &DeviceAllocation,
    data: &[u8],
    seed: u64,
    rounds: usize,
    whole_file_first: bool,
) -> usize {
    let size = data.len();
    let mut host = vec![0u8; dev.len()];
    let mut x = seed;
    let mut moved = 0;
    for i in 0..rounds {
        let (n_want, off, boff) = if i == 0 && whole_file_first {
            (size, 0, 0)
        } else {
            (
                (lcg(&mut x) % (1 << 20)) as usize + 1,
                lcg(&mut x) % (size - 1) as u64,
                (lcg(&mut x) % 65536) as usize,
            )
        };
        let n = fh.read(buf, n_want, off as i64, boff as i64).unwrap();
        let expect = &data[off as usize..(off as usize + n_want).min(size)];
        assert_eq!(n, expect.len(), "read {i}: {n_want} bytes at {off}");
        dev.read(boff, &mut host[..n]).unwrap();
        assert!(
            host[..n] == *expect,
            "read {i}: {n} bytes at {off} into device offset {boff} differ from the file"
        );
        moved += n;
    }
    moved
}

#[test]
#[cfg_attr(
    not(hipfs_verbs),
    ignore = "needs an RDMA device: run in the soft-RoCE VM (mount-scripts/rdma-vm/; HIPFS_REQUIRE_VERBS=1)"
)]
fn pinnable_device_memory_is_registered_by_address_and_the_server_rdma_writes_reads_straight_into_it(
) {
    let vm = DeviceVm::new("pinnable-test");
    let rt = vm.rt;
    let size = (3 << 20) + 999;
    let data = pattern(63, size);
    let fh = vm.file("data", &data, libc::O_RDONLY);

    // A registered buffer (RDMA_REGISTER): the runtime has no dmabuf to
    // offer, so the address is registered (peer memory) at once.
    let mut dev = DeviceAllocation::new(rt, 0, 4 << 20).unwrap();
    dev.fill(0xee).unwrap();
    let before = device_registrations();
    let buf = Buffer::from_device(&dev, RDMA_REGISTER);
    buf.register().unwrap();
    let at_register = device_registrations();
    let d = delta(&before, &at_register);
    eprintln!("registration: {d:?}");
    assert!(
        d.dmabuf_refused >= 1 && d.peer_memory == d.dmabuf_refused,
        "{d:?}"
    );
    assert_eq!(
        (d.dmabuf, d.peer_memory_refused, d.staged),
        (0, 0, 0),
        "{d:?}"
    );

    let mut buf = buf;
    let remote = hipfs::stats::snapshot().remote;
    hipfs::io::bounce_pool::take_profile();
    let pkts = rxe_sent_pkts();
    let moved = random_reads_into_device(&fh, &mut buf, &dev, &data, 17, 8, false);
    let staged = hipfs::io::bounce_pool::take_profile().chunks;
    let d = delta(&at_register, &device_registrations());
    eprintln!("8 reads into the registered buffer: {moved} bytes, {staged} staged chunks, registrations {d:?}");
    assert_eq!(staged, 0, "reads into registered device memory were staged");
    assert_eq!(
        d,
        DeviceRegistrations::default(),
        "the registration is reused"
    );
    assert_eq!(
        hipfs::stats::snapshot().remote.read_bytes - remote.read_bytes,
        moved as u64
    );
    let sent = rxe_sent_pkts() - pkts;
    assert!(
        sent >= (moved / 4096) as u64,
        "rxe0 sent only {sent} packets for {moved} bytes"
    );
    drop(buf);

    // An allocation nobody registered: the client registers it on first
    // use (the allocation cache) and reuses that registration.
    let other = DeviceAllocation::new(rt, 0, 2 << 20).unwrap();
    let mut plain = Buffer::from_device(&other, 0);
    let before = device_registrations();
    hipfs::io::bounce_pool::take_profile();
    let moved = random_reads_into_device(&fh, &mut plain, &other, &data, 18, 6, false);
    let staged = hipfs::io::bounce_pool::take_profile().chunks;
    let d = delta(&before, &device_registrations());
    eprintln!("6 reads into an unregistered allocation: {moved} bytes, {staged} staged chunks, registrations {d:?}");
    assert_eq!(
        staged, 0,
        "reads into registrable device memory were staged"
    );
    assert_eq!(
        (
            d.dmabuf_refused,
            d.peer_memory,
            d.dmabuf,
            d.peer_memory_refused,
            d.staged
        ),
        (1, 1, 0, 0, 0),
        "registered once, on the first read"
    );

    let lines = device_log();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("did not export") && l.contains("as a dmabuf")),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("(peer memory) failed")),
        "{lines:#?}"
    );
    eprintln!("{}", hipfs::stats::snapshot());
}
