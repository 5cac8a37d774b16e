//! Device memory through the OpaqueFd path, checked against the file: runs
//! where a GPU runtime finds a device (the device machine, through
//! scripts/gpu/on-device.sh) and says why it skips elsewhere. The one test
//! that needs no GPU checks that the runtime selection explains itself.

use crate::common::{pattern, scratch_dir, write_file};
use crate::gpu_common::{gpu, Dev};
use hipfs::gpu::{self, GpuRuntime, MemoryKind};
use hipfs::{Buffer, Driver, FileHandle, FileHandleType, OpError};
use std::os::unix::fs::FileExt;
use std::path::Path;

const FILE_LEN: usize = 48 << 20;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
    /// Mostly unaligned values, sometimes 4 KiB multiples.
    fn pick(&mut self, max: usize) -> usize {
        let v = self.below(max);
        if self.below(3) == 0 {
            v / 4096 * 4096
        } else {
            v
        }
    }
}

fn round_trips(
    rt: &'static dyn GpuRuntime,
    path: &Path,
    data: &[u8],
    register: bool,
    seed: u64,
    cases: usize,
) {
    let dev = Dev::new(rt, 16 << 20);
    let mut buf = dev.buffer();
    if register {
        buf.register().unwrap();
    }
    let mut fh = FileHandle::new(path, libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
    fh.open().unwrap();
    let mut rng = Rng(seed);
    for case in 0..cases {
        let boff = rng.pick(1 << 20);
        let size = 1 + rng.pick(dev.len - boff - 1);
        let off = rng.pick(FILE_LEN - 1);
        // SAFETY: the test's own live device allocation, in range.
        unsafe { rt.device_memset(hipfs::gpu::DevicePtr::from_addr(dev.ptr), 0xA5, dev.len) }
            .unwrap();
        let got = fh.read(&mut buf, size, off as i64, boff as i64).unwrap();
        let want = size.min(FILE_LEN - off);
        assert_eq!(
            got, want,
            "case {case}: {size} bytes at file {off}, buffer {boff}"
        );
        let back = dev.fetch();
        assert!(
            back[boff..boff + want] == data[off..off + want],
            "case {case}: wrong bytes for {size} at file {off}, buffer {boff}"
        );
        assert!(
            back[..boff].iter().all(|&b| b == 0xA5),
            "case {case}: wrote before the range"
        );
        assert!(
            back[boff + want..].iter().all(|&b| b == 0xA5),
            "case {case}: wrote past the range"
        );
    }
    fh.close();
}

#[test]
fn runtime_selection_names_the_runtime_and_why() {
    let msg = gpu::selection_message();
    assert!(msg.starts_with("GPU runtime: "), "{msg}");
    let rt = gpu::runtime();
    if rt.device_count() == 0 {
        assert_eq!(rt.name(), "host");
        assert!(msg.contains("host memory only"), "{msg}");
    } else {
        assert!(msg.contains(rt.name()), "{msg}");
    }
}

#[test]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn registered_device_buffers_receive_exactly_the_requested_bytes() {
    let rt = gpu();
    let _d = Driver::open().unwrap();
    let dir = scratch_dir("gpu-reg");
    let data = pattern(11, FILE_LEN);
    let path = write_file(dir.path(), "f", &data);
    round_trips(rt, &path, &data, true, 0x1234_5678, 60);
}

#[test]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn unregistered_device_buffers_are_staged_and_equally_exact() {
    let rt = gpu();
    let _d = Driver::open().unwrap();
    let dir = scratch_dir("gpu-unreg");
    let data = pattern(12, FILE_LEN);
    let path = write_file(dir.path(), "f", &data);
    round_trips(rt, &path, &data, false, 0x8765_4321, 60);
}

#[test]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn many_threads_read_into_one_device_buffer_without_mixing_bytes() {
    let rt = gpu();
    let _d = Driver::open().unwrap();
    let dir = scratch_dir("gpu-mt");
    let data = pattern(13, FILE_LEN);
    let path = write_file(dir.path(), "f", &data);
    let dev = Dev::new(rt, FILE_LEN);
    // SAFETY: the test's own live device allocation, in range.
    unsafe { rt.device_memset(hipfs::gpu::DevicePtr::from_addr(dev.ptr), 0xA5, dev.len) }.unwrap();
    let mut buf = dev.buffer();
    buf.register().unwrap();
    let mut fh = FileHandle::new(&path, libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
    fh.open().unwrap();
    let parts = 12;
    let per = FILE_LEN / parts + 4097; // unaligned slices
    std::thread::scope(|s| {
        // One disjoint view per thread; the last covers the rest.
        for (p, mut view) in buf.chunks_mut(per).unwrap().into_iter().enumerate() {
            let fh = &fh;
            s.spawn(move || {
                let off = p * per;
                let n = view.len();
                // Several calls per thread, so requests interleave.
                let mut done = 0;
                while done < n {
                    let k = (n - done).min(1 << 20 | 333);
                    let at = (off + done) as i64;
                    assert_eq!(fh.read(&mut view, k, at, done as i64).unwrap(), k);
                    done += k;
                }
            });
        }
    });
    assert!(dev.fetch() == data, "threads' reads mixed or missed bytes");
}

#[test]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn device_writes_at_random_offsets_land_in_the_file() {
    let rt = gpu();
    let _d = Driver::open().unwrap();
    let dir = scratch_dir("gpu-write");
    let mut expect = pattern(14, FILE_LEN);
    let path = write_file(dir.path(), "f", &expect);
    let src = pattern(15, 16 << 20);
    let dev = Dev::new(rt, src.len());
    // SAFETY: the test's own live device allocation, in range.
    unsafe { rt.copy_to_device(hipfs::gpu::DevicePtr::from_addr(dev.ptr), &src) }.unwrap();
    let buf = dev.buffer();
    buf.register().unwrap();
    let mut fh = FileHandle::new(&path, libc::O_RDWR, 0, FileHandleType::OpaqueFd);
    fh.open().unwrap();
    let mut rng = Rng(0xDEAD_BEEF);
    for case in 0..40 {
        let boff = rng.pick(1 << 20);
        let size = 1 + rng.pick((src.len() - boff - 1).min(FILE_LEN / 2));
        let off = rng.pick(FILE_LEN - size);
        assert_eq!(
            fh.write(&buf, size, off as i64, boff as i64).unwrap(),
            size,
            "case {case}"
        );
        expect[off..off + size].copy_from_slice(&src[boff..boff + size]);
    }
    fh.close();
    let mut got = vec![0u8; FILE_LEN];
    std::fs::File::open(&path)
        .unwrap()
        .read_exact_at(&mut got, 0)
        .unwrap();
    assert!(
        got == expect,
        "file differs from the device data written into it"
    );
}

#[test]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn reads_past_the_end_of_file_stop_short_into_device_memory() {
    let rt = gpu();
    let _d = Driver::open().unwrap();
    let dir = scratch_dir("gpu-eof");
    let data = pattern(16, 5 << 20 | 123);
    let path = write_file(dir.path(), "f", &data);
    let dev = Dev::new(rt, 8 << 20);
    // SAFETY: the test's own live device allocation, in range.
    unsafe { rt.device_memset(hipfs::gpu::DevicePtr::from_addr(dev.ptr), 0xA5, dev.len) }.unwrap();
    let mut buf = dev.buffer();
    let mut fh = FileHandle::new(&path, libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
    fh.open().unwrap();
    let got = fh.read(&mut buf, 8 << 20, 0, 0).unwrap();
    assert_eq!(got, data.len());
    let back = dev.fetch();
    assert!(back[..data.len()] == data[..]);
    assert!(back[data.len()..].iter().all(|&b| b == 0xA5));
}

#[test]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn device_pointers_are_classified_and_ranges_checked_against_the_allocation() {
    let rt = gpu();
    let _d = Driver::open().unwrap();
    let dev = Dev::new(rt, 4 << 20);
    let info = gpu::classify(dev.ptr + 4096);
    assert_eq!(info.kind, MemoryKind::Device);
    assert_eq!(info.base, dev.ptr);
    assert!(info.size >= dev.len);
    // A range running past the allocation's end.
    // SAFETY: the Buffer is only registered (which must refuse), never used.
    let past = unsafe { Buffer::new((dev.ptr + 4096) as *mut u8, info.size, 0) };
    assert_eq!(
        past.register().unwrap_err().op(),
        OpError::HipPointerRangeError
    );
    let whole = dev.buffer();
    whole.register().unwrap();
    whole.deregister().unwrap();
    // Pinned host memory is host memory the GPU can reach.
    let pinned = rt.alloc_pinned(1 << 20).unwrap();
    assert_eq!(gpu::classify(pinned).kind, MemoryKind::PinnedHost);
    // SAFETY: allocated by this test, freed once, no longer used.
    unsafe { rt.free_pinned(pinned) };
    // Plain heap memory is unknown to the runtime.
    let heap = vec![0u8; 4096];
    assert_eq!(gpu::classify(heap.as_ptr() as usize).kind, MemoryKind::Host);
}

#[test]
#[cfg_attr(
    not(hipfs_gpu),
    ignore = "needs a GPU (scripts/gpu/; HIPFS_REQUIRE_GPU=1 makes a missing one a failure)"
)]
fn host_functions_run_in_stream_order() {
    let rt = gpu();
    let _g = rt.bind(0).unwrap();
    let stream = gpu::Stream::new(rt, 0).unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    for i in 0..20 {
        let s = std::sync::Arc::clone(&seen);
        // SAFETY: the stream is live while `stream` is.
        unsafe { rt.launch_host_func(stream.id(), Box::new(move || s.lock().unwrap().push(i))) }
            .unwrap();
    }
    stream.synchronize().unwrap();
    assert_eq!(*seen.lock().unwrap(), (0..20).collect::<Vec<_>>());
}
