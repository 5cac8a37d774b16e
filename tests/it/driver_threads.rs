//! Reference counting and thread safety: many threads opening and closing
//! the driver, registering handles and buffers, and reading concurrently.

use crate::common::{pattern, scratch_dir, write_file};
use hipfs::{Buffer, Driver, FileHandle, FileHandleType};
use std::sync::Arc;

#[test]
fn many_threads_open_register_read_and_close_with_a_balanced_count() {
    // It counts opens: no other test may open or close meanwhile.
    let _g = crate::common::driver_exclusive();
    let base = Driver::open().unwrap();
    let start = hipfs::use_count();
    let dir = scratch_dir("thr");
    let data = Arc::new(pattern(17, 4 << 20));
    let path = write_file(dir.path(), "f", &data);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let path = path.clone();
            let data = Arc::clone(&data);
            std::thread::spawn(move || {
                for i in 0..20 {
                    let drv = Driver::open().unwrap();
                    let mut fh =
                        FileHandle::new(&path, libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
                    fh.open().unwrap();
                    let mut mem = vec![0u8; 300_000];
                    let mut buf = Buffer::from_slice(&mut mem, 0);
                    buf.register().unwrap();
                    let off = (t * 7919 + i * 104_729) % (4 << 20);
                    let n = fh.read(&mut buf, 300_000, off as i64, 0).unwrap();
                    buf.deregister().unwrap();
                    drop(buf);
                    let expect = (data.len() - off).min(300_000);
                    assert_eq!(n, expect);
                    assert_eq!(&mem[..n], &data[off..off + n]);
                    fh.close();
                    drv.close().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(
        hipfs::use_count(),
        start,
        "every open was balanced by a close"
    );
    base.close().unwrap();
}

#[test]
fn one_handle_serves_concurrent_readers_and_writers_on_disjoint_ranges() {
    // Its driver must stay open: no test may close the driver to zero meanwhile.
    let _g = crate::common::driver_shared();
    let _drv = Driver::open().unwrap();
    let dir = scratch_dir("shared");
    let data = pattern(23, 8 << 20);
    let path = write_file(dir.path(), "f", &data);
    let mut fh = FileHandle::new(&path, libc::O_RDWR, 0, FileHandleType::OpaqueFd);
    fh.open().unwrap();
    let fh = Arc::new(fh);
    let threads: Vec<_> = (0..8usize)
        .map(|t| {
            let fh = Arc::clone(&fh);
            std::thread::spawn(move || {
                let off = t << 20;
                let mut src = pattern(100 + t as u64, 1 << 20);
                let buf = Buffer::from_slice(&mut src, 0);
                assert_eq!(fh.write(&buf, 1 << 20, off as i64, 0).unwrap(), 1 << 20);
                drop(buf);
                let mut back = vec![0u8; 1 << 20];
                let mut rb = Buffer::from_slice(&mut back, 0);
                assert_eq!(fh.read(&mut rb, 1 << 20, off as i64, 0).unwrap(), 1 << 20);
                drop(rb);
                assert!(back == src, "thread {t} reads back what it wrote");
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let on_disk = std::fs::read(&path).unwrap();
    for t in 0..8usize {
        assert!(on_disk[t << 20..(t + 1) << 20] == pattern(100 + t as u64, 1 << 20)[..]);
    }
}
