//! OpaqueFd reads and writes into host memory, checked against `std::fs`
//! as the oracle, through the O_DIRECT path and the buffered fallback.

use crate::common::{pattern, scratch_dir, write_file, TestMem};
use hipfs::{Buffer, Driver, FileHandle, FileHandleType};
use proptest::prelude::*;
use std::os::unix::fs::FileExt;
// The driver is process-wide; these tests change parameters or close it
// to zero, so each takes `common::driver_exclusive`.

const FILE_LEN: usize = 3 << 20;

fn read_case(
    path: &std::path::Path,
    data: &[u8],
    off: usize,
    size: usize,
    boff: usize,
    misalign: usize,
) {
    let mut fh = FileHandle::new(path, libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
    fh.open().unwrap();
    let mut mem = TestMem::new(boff + size, misalign);
    mem.as_mut_slice().fill(0xEE);
    let mut buf = Buffer::from_slice(mem.as_mut_slice(), 0);
    let got = fh.read(&mut buf, size, off as i64, boff as i64).unwrap();
    drop(buf);
    let expect = data.len().saturating_sub(off).min(size);
    assert_eq!(got, expect, "short only at end of file");
    let s = mem.as_mut_slice();
    // (A read that starts past the end moves nothing: there is nothing to slice.)
    let want: &[u8] = data.get(off..off + got).unwrap_or(&[]);
    assert_eq!(&s[boff..boff + got], want);
    assert!(
        s[..boff].iter().all(|b| *b == 0xEE),
        "bytes before buffer_offset untouched"
    );
    assert!(
        s[boff + got..].iter().all(|b| *b == 0xEE),
        "bytes after the read untouched"
    );
}

fn write_case(
    path: &std::path::Path,
    oracle: &mut Vec<u8>,
    off: usize,
    size: usize,
    boff: usize,
    misalign: usize,
    seed: u64,
) {
    let mut fh = FileHandle::new(path, libc::O_RDWR, 0, FileHandleType::OpaqueFd);
    fh.open().unwrap();
    let src = pattern(seed, boff + size);
    let mut mem = TestMem::new(boff + size, misalign);
    mem.as_mut_slice().copy_from_slice(&src);
    let buf = Buffer::from_slice(mem.as_mut_slice(), 0);
    let put = fh.write(&buf, size, off as i64, boff as i64).unwrap();
    assert_eq!(put, size);
    if oracle.len() < off + size {
        oracle.resize(off + size, 0);
    }
    oracle[off..off + size].copy_from_slice(&src[boff..boff + size]);
    fh.close();
    let on_disk = std::fs::read(path).unwrap();
    assert_eq!(on_disk.len(), oracle.len(), "file length");
    assert!(
        on_disk == *oracle,
        "file content after write at {off}+{size}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    #[test]
    fn reads_at_any_offset_size_and_alignment_match_the_file(
        off in 0usize..FILE_LEN + 8192,
        size in 1usize..(1 << 20) + 9000,
        boff in 0usize..5000,
        misalign in 0usize..600,
    ) {
        let _g = crate::common::driver_exclusive();
        let _drv = Driver::open().unwrap();
        let dir = scratch_dir("rd");
        let data = pattern(7, FILE_LEN);
        let path = write_file(dir.path(), "f", &data);
        read_case(&path, &data, off, size, boff, misalign);
    }

    #[test]
    fn writes_at_any_offset_size_and_alignment_land_exactly(
        ops in proptest::collection::vec((0usize..(2 << 20), 1usize..(600 << 10), 0usize..5000, 0usize..600), 1..5),
    ) {
        let _g = crate::common::driver_exclusive();
        let _drv = Driver::open().unwrap();
        let dir = scratch_dir("wr");
        let mut oracle = pattern(3, 1 << 20);
        let path = write_file(dir.path(), "f", &oracle);
        for (i, (off, size, boff, mis)) in ops.into_iter().enumerate() {
            write_case(&path, &mut oracle, off, size, boff, mis, i as u64 + 11);
        }
    }
}

#[test]
fn large_aligned_reads_take_the_direct_path_when_the_page_cache_is_cold() {
    let _g = crate::common::driver_exclusive();
    let _drv = Driver::open().unwrap();
    let dir = scratch_dir("direct");
    let data = pattern(5, 8 << 20);
    let path = write_file(dir.path(), "f", &data);
    // Evict the file's pages so the page-cache probe misses.
    let f = std::fs::File::open(&path).unwrap();
    // SAFETY: fadvise on a valid fd.
    unsafe {
        libc::posix_fadvise(
            std::os::fd::AsRawFd::as_raw_fd(&f),
            0,
            0,
            libc::POSIX_FADV_DONTNEED,
        )
    };
    let before = hipfs::stats::snapshot();
    read_case(&path, &data, 0, 8 << 20, 0, 0);
    let after = hipfs::stats::snapshot();
    let direct = after.direct.read_bytes - before.direct.read_bytes;
    let buffered = after.buffered.read_bytes - before.buffered.read_bytes;
    assert_eq!(
        direct + buffered,
        (8 << 20) as u64,
        "every byte counted once"
    );
    assert_eq!(
        direct,
        (8 << 20) as u64,
        "a cold aligned read is all O_DIRECT (buffered {buffered})"
    );
    // And it did not drag the file into the page cache on the way (a
    // RWF_NOWAIT probe of cold pages would start readahead of them).
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    if let Some(cached) = hipfs::io::posix::cached_pages(fd, 0, 8 << 20) {
        assert!(
            cached < 256,
            "{cached} of 2048 pages were pulled into the page cache"
        );
    }
}

#[test]
fn a_partial_block_write_keeps_the_rest_of_the_block() {
    let _g = crate::common::driver_exclusive();
    let _drv = Driver::open().unwrap();
    let dir = scratch_dir("partial");
    let mut oracle = pattern(9, 64 << 10);
    let path = write_file(dir.path(), "f", &oracle);
    // 100 bytes in the middle of block 2, then a write spanning blocks 3..6 unaligned.
    write_case(&path, &mut oracle, 8192 + 1000, 100, 0, 0, 21);
    write_case(&path, &mut oracle, 12288 + 17, 3 * 4096 + 50, 3, 1, 22);
}

#[test]
fn writes_past_the_end_extend_the_file() {
    let _g = crate::common::driver_exclusive();
    let _drv = Driver::open().unwrap();
    let dir = scratch_dir("extend");
    let mut oracle = pattern(1, 5000);
    let path = write_file(dir.path(), "f", &oracle);
    write_case(&path, &mut oracle, 20_000, 70_000, 0, 0, 2);
    write_case(&path, &mut oracle, 200_001, 1, 0, 0, 3);
}

#[test]
fn forced_compat_mode_serves_everything_buffered() {
    let _g = crate::common::driver_exclusive();
    // Parameters change only while the driver is closed.
    while hipfs::use_count() > 0 {
        hipfs::driver_close().unwrap();
    }
    hipfs::set_parameter_bool(hipfs::BoolParam::ForceCompatMode, true).unwrap();
    let drv = Driver::open().unwrap();
    let dir = scratch_dir("compat");
    let data = pattern(4, 2 << 20);
    let path = write_file(dir.path(), "f", &data);
    let before = hipfs::stats::snapshot();
    read_case(&path, &data, 4096, 1 << 20, 0, 0);
    let mut oracle = data.clone();
    write_case(&path, &mut oracle, 8192, 1 << 20, 0, 0, 8);
    let after = hipfs::stats::snapshot();
    assert_eq!(
        after.direct.read_bytes, before.direct.read_bytes,
        "no direct reads"
    );
    assert_eq!(
        after.direct.write_bytes, before.direct.write_bytes,
        "no direct writes"
    );
    assert!(after.buffered.read_bytes - before.buffered.read_bytes >= 1 << 20);
    drv.close().unwrap();
    hipfs::set_parameter_bool(hipfs::BoolParam::ForceCompatMode, false).unwrap();
}

/// ramfs has no O_DIRECT at all: the open is refused and the handle must fall
/// back (or be refused when compat mode is not allowed).
#[test]
#[cfg_attr(not(hipfs_root), ignore = "needs root (mounts a ramfs)")]
fn a_filesystem_that_refuses_o_direct_falls_back_or_is_refused_without_compat() {
    let _g = crate::common::driver_exclusive();
    let dir = scratch_dir("ramfs");
    let mnt = dir.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "ramfs", "ramfs"])
        .arg(&mnt)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "mount -t ramfs failed");
    struct Umount(std::path::PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Umount(mnt.clone());
    let data = pattern(12, 300_000);
    let path = write_file(&mnt, "f", &data);
    let probe = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags_direct()
        .open(&path);
    assert!(
        probe.is_err(),
        "this kernel's ramfs accepts O_DIRECT, so the fallback cannot be tested on it"
    );
    {
        let _drv = Driver::open().unwrap();
        let before = hipfs::stats::snapshot();
        read_case(&path, &data, 4096, 200_000, 3, 1);
        let after = hipfs::stats::snapshot();
        assert_eq!(after.direct.read_bytes, before.direct.read_bytes);
        assert!(
            after.fallbacks > before.fallbacks,
            "the fallback is counted"
        );
    }
    while hipfs::use_count() > 0 {
        hipfs::driver_close().unwrap();
    }
    hipfs::set_parameter_bool(hipfs::BoolParam::PropertiesAllowCompatMode, false).unwrap();
    let mut fh = FileHandle::new(&path, libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
    let err = fh.open().unwrap_err();
    hipfs::set_parameter_bool(hipfs::BoolParam::PropertiesAllowCompatMode, true).unwrap();
    assert_eq!(err.op(), hipfs::OpError::IoNotSupported, "{err}");
    assert!(fh.handle().is_none());
}

trait DirectFlag {
    fn custom_flags_direct(&mut self) -> &mut Self;
}
impl DirectFlag for std::fs::OpenOptions {
    fn custom_flags_direct(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_DIRECT)
    }
}

#[test]
fn requests_split_across_workers_return_the_same_bytes_as_one_thread() {
    let _g = crate::common::driver_exclusive();
    let _drv = Driver::open().unwrap();
    let dir = scratch_dir("par");
    // Not a multiple of the chunk or the block size.
    let data = pattern(6, (40 << 20) + 12_345);
    let path = write_file(dir.path(), "f", &data);
    read_case(&path, &data, 777, (40 << 20) + 20_000, 5, 3);
    let f = std::fs::File::open(&path).unwrap();
    let mut one = vec![0u8; 100];
    f.read_exact_at(&mut one, 40 << 20).unwrap();
    assert_eq!(&one[..], &data[40 << 20..(40 << 20) + 100]);
}
