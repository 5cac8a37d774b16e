//! cuFile clients only register OPAQUE_FD handles. For both C libraries
//! (`hipfs_cabi` with `Flavor::CuFile`, the rules `libcufile.so.0` runs,
//! and `Flavor::HipFile`) the core binds such a handle on a hipfs mount to
//! the remote client's direct path, counted by the mount as an OPAQUE_FD
//! handle with no byte read through FUSE; a file elsewhere stays an fd.

use std::ffi::c_void;
use std::fs;
use std::os::fd::AsRawFd;

use crate::common::pattern;
use crate::remote_common::{mount_stats, stat_after, stat_before, Fixture};
use hipfs::{Driver, FileHandleType};
use hipfs_cabi::types::{Descr, DescrHandle, HANDLE_TYPE_OPAQUE_FD};
use hipfs_cabi::{io, Flavor};

fn register(fd: i32, flavor: Flavor) -> *mut c_void {
    let d = Descr {
        type_: HANDLE_TYPE_OPAQUE_FD,
        handle: DescrHandle { fd },
        fs_ops: std::ptr::null(),
    };
    let mut fh = std::ptr::null_mut();
    // SAFETY: both pointers are to live locals.
    unsafe { io::handle_register(&mut fh, &d, flavor) }.unwrap();
    fh
}

fn kind_of(fh: *mut c_void) -> FileHandleType {
    hipfs::handle::lookup(io::handle_id(fh)).unwrap().kind
}

fn read_all(fh: *mut c_void, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` has `len` writable bytes for the call.
    let n = unsafe { io::read(fh, buf.as_mut_ptr().cast(), len, 0, 0) }.unwrap();
    assert_eq!(n, len);
    buf
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn cufile_opaque_fd_handles_on_a_hipfs_mount_take_the_direct_remote_path() {
    require_fuse!();
    let _d = Driver::open().unwrap();
    let fx = Fixture::new();
    let data = pattern(17, (3 << 20) + 777);
    fs::write(fx.e("f"), &data).unwrap();
    let on_mount = fs::File::open(fx.m("f")).unwrap();

    for flavor in [Flavor::CuFile, Flavor::HipFile] {
        let before = mount_stats(fx.mnt.path());
        let fh = register(on_mount.as_raw_fd(), flavor);
        assert_eq!(kind_of(fh), FileHandleType::OpaqueFd, "{flavor:?}");
        assert!(read_all(fh, data.len()) == data, "{flavor:?} direct read");
        io::handle_deregister(fh);
        let after = mount_stats(fx.mnt.path());
        assert_eq!(
            stat_before(&after, "opaque_fd handles"),
            stat_before(&before, "opaque_fd handles") + 1,
            "{flavor:?}: {after}"
        );
        assert_eq!(
            stat_after(&after, "read through the mount:"),
            stat_after(&before, "read through the mount:"),
            "{flavor:?}: bytes went through FUSE: {after}"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("local"), &data).unwrap();
    let local = fs::File::open(dir.path().join("local")).unwrap();
    let fh = register(local.as_raw_fd(), Flavor::CuFile);
    assert_eq!(kind_of(fh), FileHandleType::OpaqueFd);
    assert!(
        read_all(fh, data.len()) == data,
        "cuFile read of a local file"
    );
    io::handle_deregister(fh);
}
