//! Every error the API returns for bad input, reached from bad input.

use crate::common::{pattern, scratch_dir, write_file};
use hipfs::{Buffer, Driver, FileHandle, FileHandleType, OpError};
use std::os::fd::AsRawFd;

/// These tests close the driver to zero: nothing else may use it meanwhile.
fn guard() -> std::sync::RwLockWriteGuard<'static, ()> {
    crate::common::driver_exclusive()
}

fn close_all() {
    while hipfs::use_count() > 0 {
        hipfs::driver_close().unwrap();
    }
}

#[test]
fn closing_a_closed_driver_is_driver_not_initialized() {
    let _g = guard();
    close_all();
    assert_eq!(
        hipfs::driver_close().unwrap_err().op(),
        OpError::DriverNotInitialized
    );
}

#[test]
fn null_zero_length_and_bad_flag_buffers_are_invalid_values() {
    let _g = guard();
    let _d = Driver::open().unwrap();
    assert_eq!(
        hipfs::buffer::buf_register(0, 4096, 0).unwrap_err().op(),
        OpError::InvalidValue
    );
    let mut mem = vec![0u8; 4096];
    let p = mem.as_mut_ptr() as usize;
    assert_eq!(
        hipfs::buffer::buf_register(p, 0, 0).unwrap_err().op(),
        OpError::InvalidValue
    );
    assert_eq!(
        hipfs::buffer::buf_register(p, 4096, 0x40).unwrap_err().op(),
        OpError::InvalidValue
    );
}

#[test]
fn registering_a_buffer_twice_or_overlapping_is_already_registered() {
    let _g = guard();
    let _d = Driver::open().unwrap();
    let mut mem = vec![0u8; 64 << 10];
    let p = mem.as_mut_ptr() as usize;
    hipfs::buffer::buf_register(p, 32 << 10, 0).unwrap();
    assert_eq!(
        hipfs::buffer::buf_register(p, 32 << 10, 0)
            .unwrap_err()
            .op(),
        OpError::MemoryAlreadyRegistered
    );
    assert_eq!(
        hipfs::buffer::buf_register(p + 4096, 4096, 0)
            .unwrap_err()
            .op(),
        OpError::MemoryAlreadyRegistered
    );
    assert_eq!(
        hipfs::buffer::buf_register(p - 4096, 8192, 0)
            .unwrap_err()
            .op(),
        OpError::MemoryAlreadyRegistered
    );
    // Adjacent, not overlapping: fine.
    hipfs::buffer::buf_register(p + (32 << 10), 4096, 0).unwrap();
    hipfs::buffer::buf_deregister(p).unwrap();
    hipfs::buffer::buf_deregister(p + (32 << 10)).unwrap();
    assert_eq!(
        hipfs::buffer::buf_deregister(p).unwrap_err().op(),
        OpError::MemoryNotRegistered
    );
}

#[test]
fn a_range_past_mapped_memory_or_overflowing_is_a_pointer_range_error() {
    let _g = guard();
    let _d = Driver::open().unwrap();
    // A mapping followed by a hole.
    // SAFETY: plain anonymous mappings, unmapped at the end of the test.
    let (a, hole) = unsafe {
        let a = libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(a, libc::MAP_FAILED);
        libc::munmap((a as usize + 4096) as *mut _, 4096);
        (a as usize, a as usize + 4096)
    };
    assert_eq!(
        hipfs::buffer::buf_register(a, 8192, 0).unwrap_err().op(),
        OpError::HipPointerRangeError
    );
    assert_eq!(
        hipfs::buffer::buf_register(hole, 10, 0).unwrap_err().op(),
        OpError::HipPointerInvalid
    );
    assert_eq!(
        hipfs::buffer::buf_register(usize::MAX - 10, 100, 0)
            .unwrap_err()
            .op(),
        OpError::HipPointerRangeError
    );
    hipfs::buffer::buf_register(a, 4096, 0).unwrap();
    hipfs::buffer::buf_deregister(a).unwrap();
    // SAFETY: unmapping what we mapped.
    unsafe { libc::munmap(a as *mut _, 4096) };
}

#[test]
fn deregister_with_the_driver_closed_is_driver_closing() {
    let _g = guard();
    close_all();
    let x = 5u8;
    assert_eq!(
        hipfs::buffer::buf_deregister(&x as *const u8 as usize)
            .unwrap_err()
            .op(),
        OpError::DriverClosing
    );
}

#[test]
fn buffer_offsets_out_of_range_are_invalid_values() {
    let _g = guard();
    let _d = Driver::open().unwrap();
    let dir = scratch_dir("err");
    let path = write_file(dir.path(), "f", &pattern(1, 10_000));
    let mut fh = FileHandle::new(&path, libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
    fh.open().unwrap();
    let mut mem = vec![0u8; 4096];
    let mut buf = Buffer::from_slice(&mut mem, 0);
    assert_eq!(
        fh.read(&mut buf, 4097, 0, 0).unwrap_err().op(),
        OpError::InvalidValue
    );
    assert_eq!(
        fh.read(&mut buf, 10, 0, 4090).unwrap_err().op(),
        OpError::InvalidValue
    );
    assert_eq!(
        fh.read(&mut buf, 10, 0, -1).unwrap_err().op(),
        OpError::InvalidValue
    );
    assert_eq!(
        fh.read(&mut buf, 10, -5, 0).unwrap_err().op(),
        OpError::InvalidValue
    );
    // Registered buffers are checked in the core too (the C path has no Buffer length).
    buf.register().unwrap();
    let file = hipfs::handle::lookup(fh.handle().unwrap()).unwrap();
    assert_eq!(
        // SAFETY: refused before any memory is touched (the range passes
        // the registration's end).
        unsafe { hipfs::handle::read(&file, buf.ptr() as usize, 100, 0, 4000) }
            .unwrap_err()
            .op(),
        OpError::InvalidValue
    );
    assert_eq!(
        // SAFETY: a null base is refused before any memory is touched.
        unsafe { hipfs::handle::read(&file, 0, 100, 0, 0) }
            .unwrap_err()
            .op(),
        OpError::InvalidValue
    );
}

#[test]
fn reads_past_the_end_of_file_return_zero_and_straddling_reads_are_short() {
    let _g = guard();
    let _d = Driver::open().unwrap();
    let dir = scratch_dir("eof");
    let data = pattern(2, 10_000);
    let path = write_file(dir.path(), "f", &data);
    let mut fh = FileHandle::new(&path, libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
    fh.open().unwrap();
    let mut mem = vec![0u8; 8192];
    let mut buf = Buffer::from_slice(&mut mem, 0);
    assert_eq!(fh.read(&mut buf, 4096, 10_000, 0).unwrap(), 0);
    assert_eq!(fh.read(&mut buf, 4096, 1 << 30, 0).unwrap(), 0);
    assert_eq!(fh.read(&mut buf, 8192, 8192, 0).unwrap(), 10_000 - 8192);
}

#[test]
fn io_on_a_closed_handle_is_handle_not_registered_and_close_is_idempotent() {
    let _g = guard();
    let _d = Driver::open().unwrap();
    let dir = scratch_dir("closed");
    let path = write_file(dir.path(), "f", &pattern(3, 4096));
    let mut fh = FileHandle::new(&path, libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
    let mut mem = vec![0u8; 4096];
    let mut buf = Buffer::from_slice(&mut mem, 0);
    assert_eq!(
        fh.read(&mut buf, 10, 0, 0).unwrap_err().op(),
        OpError::HandleNotRegistered
    );
    fh.open().unwrap();
    assert!(fh.handle().is_some());
    assert_eq!(
        fh.open().unwrap_err().op(),
        OpError::HandleAlreadyRegistered
    );
    fh.close();
    fh.close();
    assert!(fh.handle().is_none());
    assert_eq!(
        fh.read(&mut buf, 10, 0, 0).unwrap_err().op(),
        OpError::HandleNotRegistered
    );
    assert_eq!(
        hipfs::handle::lookup(987_654).unwrap_err().op(),
        OpError::HandleNotRegistered
    );
}

#[test]
fn directories_sockets_and_pipes_are_invalid_file_types() {
    let _g = guard();
    let _d = Driver::open().unwrap();
    let dir = scratch_dir("types");
    let d = std::fs::File::open(dir.path()).unwrap();
    let e =
        hipfs::handle::handle_register(d.as_raw_fd(), FileHandleType::OpaqueFd, None).unwrap_err();
    assert_eq!(e.op(), OpError::InvalidFileType, "{e}");
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    assert_eq!(
        hipfs::handle::handle_register(a.as_raw_fd(), FileHandleType::OpaqueFd, None)
            .unwrap_err()
            .op(),
        OpError::InvalidFileType
    );
    let mut fds = [0; 2];
    // SAFETY: pipe writes two fds into the array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    assert_eq!(
        hipfs::handle::handle_register(fds[0], FileHandleType::OpaqueFd, None)
            .unwrap_err()
            .op(),
        OpError::InvalidFileType
    );
    // SAFETY: closing our pipe fds.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    let mut fh = FileHandle::new(dir.path(), libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
    assert_eq!(fh.open().unwrap_err().op(), OpError::InvalidFileType);
    assert!(
        fh.handle().is_none(),
        "a failed open leaves the handle closed"
    );
}

#[test]
fn wrong_open_flags_and_bad_fds_are_refused_with_the_right_code() {
    let _g = guard();
    let _d = Driver::open().unwrap();
    let dir = scratch_dir("flags");
    let path = write_file(dir.path(), "f", &pattern(3, 4096));
    let mut fh = FileHandle::new(
        &path,
        libc::O_WRONLY | libc::O_APPEND,
        0,
        FileHandleType::OpaqueFd,
    );
    assert_eq!(fh.open().unwrap_err().op(), OpError::InvalidFileOpenFlag);
    let mut fh = FileHandle::new(&path, libc::O_PATH, 0, FileHandleType::OpaqueFd);
    assert_eq!(fh.open().unwrap_err().op(), OpError::InvalidFileOpenFlag);
    assert_eq!(
        hipfs::handle::handle_register(-1, FileHandleType::OpaqueFd, None)
            .unwrap_err()
            .op(),
        OpError::InvalidValue
    );
    assert_eq!(
        hipfs::handle::handle_register(9999, FileHandleType::OpaqueFd, None)
            .unwrap_err()
            .op(),
        OpError::InvalidValue
    );
    let f = std::fs::File::open(&path).unwrap();
    assert_eq!(
        hipfs::handle::handle_register(f.as_raw_fd(), FileHandleType::OpaqueWin32, None)
            .unwrap_err()
            .op(),
        OpError::IoNotSupported
    );
    let id = hipfs::handle::handle_register(f.as_raw_fd(), FileHandleType::OpaqueFd, None).unwrap();
    assert_eq!(
        hipfs::handle::handle_register(f.as_raw_fd(), FileHandleType::OpaqueFd, None)
            .unwrap_err()
            .op(),
        OpError::HandleAlreadyRegistered
    );
    // Writing through a read-only fd is a system error with EBADF.
    let file = hipfs::handle::lookup(id).unwrap();
    let src = vec![1u8; 4096];
    // SAFETY: `src` is 4096 readable bytes that live across the call.
    let e = unsafe { hipfs::handle::write(&file, src.as_ptr() as usize, 4096, 0, 0) }.unwrap_err();
    assert_eq!(e.errno(), Some(libc::EBADF), "{e}");
    assert!(hipfs::handle::handle_deregister(id));
}

#[test]
fn userspace_fs_on_a_plain_file_is_io_not_supported_with_a_reason() {
    let _g = guard();
    let _d = Driver::open().unwrap();
    let dir = scratch_dir("ufs");
    let path = write_file(dir.path(), "f", &pattern(3, 4096));
    let mut fh = FileHandle::new(&path, libc::O_RDONLY, 0, FileHandleType::UserspaceFs);
    let e = fh.open().unwrap_err();
    assert_eq!(e.op(), OpError::IoNotSupported);
    assert!(e.to_string().contains("hipfs mount"), "{e}");
}

#[test]
fn handle_type_changes_only_while_closed_and_win32_is_not_implemented() {
    let _g = guard();
    let _d = Driver::open().unwrap();
    let dir = scratch_dir("ht");
    let path = write_file(dir.path(), "f", &pattern(3, 4096));
    let mut fh = FileHandle::new(&path, libc::O_RDONLY, 0o600, FileHandleType::OpaqueFd);
    assert_eq!(fh.mode(), 0o600);
    assert_eq!(fh.flags(), libc::O_RDONLY);
    assert_eq!(
        fh.set_handle_type(FileHandleType::OpaqueWin32)
            .unwrap_err()
            .op(),
        OpError::IoNotSupported
    );
    fh.set_handle_type(FileHandleType::UserspaceFs).unwrap();
    fh.set_handle_type(FileHandleType::OpaqueFd).unwrap();
    fh.open().unwrap();
    assert!(fh.set_handle_type(FileHandleType::UserspaceFs).is_err());
    assert_eq!(fh.handle_type(), FileHandleType::OpaqueFd);
}

#[test]
fn io_after_the_driver_closed_to_zero_fails_cleanly() {
    let _g = guard();
    close_all();
    let dir = scratch_dir("zero");
    let path = write_file(dir.path(), "f", &pattern(3, 4096));
    let mut fh = FileHandle::new(&path, libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
    fh.open().unwrap();
    assert_eq!(
        hipfs::use_count(),
        1,
        "registration opens the driver implicitly"
    );
    let mut mem = vec![0u8; 4096];
    let mut buf = Buffer::from_slice(&mut mem, 0);
    buf.register().unwrap();
    hipfs::driver_close().unwrap();
    assert_eq!(
        fh.read(&mut buf, 10, 0, 0).unwrap_err().op(),
        OpError::DriverNotInitialized
    );
    // The buffer registration went with the driver: deregister is a no-op.
    buf.deregister().unwrap();
    let _d = Driver::open().unwrap();
    assert_eq!(
        fh.read(&mut buf, 10, 0, 0).unwrap_err().op(),
        OpError::HandleNotRegistered
    );
}

#[test]
fn parameters_are_set_only_while_the_driver_is_closed_and_apply_at_open() {
    let _g = guard();
    close_all();
    hipfs::set_parameter_size(hipfs::SizeTParam::PropertiesMaxDirectIOSizeKB, 2048).unwrap();
    hipfs::set_parameter_string(hipfs::StringParam::LogDir, "/tmp/x").unwrap();
    assert_eq!(
        hipfs::get_parameter_string(hipfs::StringParam::LogDir),
        "/tmp/x"
    );
    let d = Driver::open().unwrap();
    assert_eq!(
        hipfs::driver_get_properties().unwrap().max_direct_io_size,
        2048
    );
    assert_eq!(
        hipfs::set_parameter_size(hipfs::SizeTParam::PropertiesMaxDirectIOSizeKB, 1)
            .unwrap_err()
            .op(),
        OpError::DriverAlreadyOpen
    );
    assert_eq!(
        hipfs::set_parameter_bool(hipfs::BoolParam::ForceCompatMode, true)
            .unwrap_err()
            .op(),
        OpError::DriverAlreadyOpen
    );
    assert_eq!(
        hipfs::driver_set_max_direct_io_size(0).unwrap_err().op(),
        OpError::DriverUnsupportedLimit
    );
    hipfs::driver_set_poll_mode(true, 64).unwrap();
    let p = hipfs::driver_get_properties().unwrap();
    assert_eq!(p.poll_thresh_size, 64);
    assert_eq!(p.driver_control_flags & 1, 1);
    d.close().unwrap();
    hipfs::set_parameter_size(hipfs::SizeTParam::PropertiesMaxDirectIOSizeKB, 16384).unwrap();
    hipfs::set_parameter_string(hipfs::StringParam::LogDir, "").unwrap();
    assert_eq!(
        hipfs::set_parameter_string(hipfs::StringParam::LogDir, "a\0b")
            .unwrap_err()
            .op(),
        OpError::InvalidValue
    );
}
