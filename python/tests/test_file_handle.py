"""FileHandle: construction, properties, open/close and every error the
reference names, on real files."""

import errno
import os
import pathlib

import numpy as np
import pytest

from conftest import open_fds
from hipfile import Driver, FileHandle, FileHandleType, HipFileException, OpError


def test_constructor_does_not_open_or_create_the_file(tmp_path):
    path = tmp_path / "new.bin"
    fh = FileHandle(str(path), os.O_CREAT | os.O_RDWR)
    assert not path.exists()
    assert fh.handle is None
    assert Driver.use_count() == 0


def test_open_creates_with_the_given_mode(tmp_path):
    path = tmp_path / "new.bin"
    old = os.umask(0)
    try:
        with FileHandle(path, os.O_CREAT | os.O_RDWR, 0o600):
            pass
    finally:
        os.umask(old)
    assert (path.stat().st_mode & 0o777) == 0o600


def test_path_accepts_str_and_path_like(data_file):
    class Custom:
        def __fspath__(self):
            return str(data_file)

    for p in (str(data_file), data_file, Custom()):
        fh = FileHandle(p, os.O_RDONLY)
        assert fh.path == str(data_file)
        with fh:
            assert fh.handle is not None


def test_properties_reflect_the_constructor_and_defaults(data_file):
    fh = FileHandle(data_file, os.O_RDONLY)
    assert fh.flags == os.O_RDONLY
    assert fh.mode == 0o644
    assert fh.handle_type is FileHandleType.OPAQUE_FD
    fh2 = FileHandle(data_file, os.O_RDWR, 0o600, FileHandleType.USERSPACE_FS)
    assert (fh2.flags, fh2.mode, fh2.handle_type) == (os.O_RDWR, 0o600, FileHandleType.USERSPACE_FS)


@pytest.mark.parametrize("name", ["path", "flags", "mode", "handle"])
def test_read_only_properties_cannot_be_set(data_file, name):
    fh = FileHandle(data_file, os.O_RDONLY)
    with pytest.raises(AttributeError):
        setattr(fh, name, 1)


def test_handle_is_an_int_while_open_and_none_after_close(data_file):
    fh = FileHandle(data_file, os.O_RDONLY)
    fh.open()
    assert isinstance(fh.handle, int)
    fh.close()
    assert fh.handle is None


def test_handle_type_can_be_set_while_closed(data_file):
    fh = FileHandle(data_file, os.O_RDONLY)
    fh.handle_type = FileHandleType.USERSPACE_FS
    assert fh.handle_type is FileHandleType.USERSPACE_FS
    fh.handle_type = FileHandleType.OPAQUE_FD
    assert fh.handle_type is FileHandleType.OPAQUE_FD


def test_setting_handle_type_while_open_raises_runtime_error(data_file):
    with FileHandle(data_file, os.O_RDONLY) as fh:
        with pytest.raises(RuntimeError):
            fh.handle_type = FileHandleType.USERSPACE_FS
        assert fh.handle_type is FileHandleType.OPAQUE_FD


@pytest.mark.parametrize("bad", [1, 3, 7, "OPAQUE_FD", None, 1.0])
def test_setting_handle_type_to_a_non_member_raises_value_error(data_file, bad):
    fh = FileHandle(data_file, os.O_RDONLY)
    with pytest.raises(ValueError):
        fh.handle_type = bad
    assert fh.handle_type is FileHandleType.OPAQUE_FD
    with pytest.raises(ValueError):
        FileHandle(data_file, os.O_RDONLY, 0o644, bad)


def test_opaque_win32_raises_not_implemented_error_in_setter_and_constructor(data_file):
    fh = FileHandle(data_file, os.O_RDONLY)
    with pytest.raises(NotImplementedError):
        fh.handle_type = FileHandleType.OPAQUE_WIN32
    assert fh.handle_type is FileHandleType.OPAQUE_FD
    with pytest.raises(NotImplementedError):
        FileHandle(data_file, os.O_RDONLY, handle_type=FileHandleType.OPAQUE_WIN32)


def test_opening_twice_raises_runtime_error_and_keeps_the_first_handle(data_file):
    with FileHandle(data_file, os.O_RDONLY) as fh:
        first = fh.handle
        before = open_fds()
        with pytest.raises(RuntimeError):
            fh.open()
        assert fh.handle == first
        assert open_fds() == before


def test_opening_a_missing_file_raises_os_error_with_errno(tmp_path):
    fh = FileHandle(tmp_path / "missing", os.O_RDONLY)
    with pytest.raises(OSError) as info:
        fh.open()
    assert info.value.errno == errno.ENOENT
    assert fh.handle is None


def test_failed_registration_raises_and_closes_the_descriptor_again(tmp_path):
    # A directory opens fine but is not a file hipFile can register.
    before = open_fds()
    fh = FileHandle(tmp_path, os.O_RDONLY)
    with pytest.raises(HipFileException) as info:
        fh.open()
    assert info.value.hipfile_err == OpError.INVALID_FILE_TYPE
    assert open_fds() == before
    assert fh.handle is None


def test_append_mode_is_refused_with_invalid_file_open_flag(data_file):
    before = open_fds()
    with pytest.raises(HipFileException) as info:
        FileHandle(data_file, os.O_WRONLY | os.O_APPEND).open()
    assert info.value.hipfile_err == OpError.INVALID_FILE_OPEN_FLAG
    assert open_fds() == before


def test_userspace_fs_on_a_local_file_is_io_not_supported_and_leaks_nothing(data_file):
    before = open_fds()
    fh = FileHandle(data_file, os.O_RDONLY, handle_type=FileHandleType.USERSPACE_FS)
    with pytest.raises(HipFileException) as info:
        fh.open()
    assert info.value.hipfile_err == OpError.IO_NOT_SUPPORTED
    assert open_fds() == before


def test_close_is_idempotent_and_closes_the_descriptor(data_file):
    before = open_fds()
    fh = FileHandle(data_file, os.O_RDONLY)
    fh.open()
    fd = fh.fd
    assert str(fd) in open_fds()
    fh.close()
    fh.close()
    assert open_fds() == before
    FileHandle(data_file, os.O_RDONLY).close()  # never opened: also a no-op


def test_a_closed_handle_can_be_opened_again(data_file, payload):
    fh = FileHandle(data_file, os.O_RDONLY)
    buf = bytearray(100)
    for _ in range(2):
        with fh:
            assert fh.read(buf, 100, 5, 0) == 100
        assert bytes(buf) == payload[5:105]


def test_context_manager_opens_and_closes_even_when_the_body_raises(data_file):
    before = open_fds()
    fh = FileHandle(data_file, os.O_RDONLY)
    with pytest.raises(ZeroDivisionError):
        with fh as entered:
            assert entered is fh
            assert fh.handle is not None
            raise ZeroDivisionError
    assert fh.handle is None
    assert open_fds() == before


def test_registration_opens_the_driver_implicitly(data_file):
    assert Driver.use_count() == 0
    with FileHandle(data_file, os.O_RDONLY):
        assert Driver.use_count() == 1


def test_handles_inside_a_driver_context_keep_the_count_balanced(data_file):
    with Driver():
        for _ in range(3):
            with FileHandle(data_file, os.O_RDONLY):
                assert Driver.use_count() == 1
    assert Driver.use_count() == 0


def test_the_same_file_can_be_registered_by_two_handles(data_file, payload):
    with FileHandle(data_file, os.O_RDONLY) as a, FileHandle(data_file, os.O_RDONLY) as b:
        assert a.handle != b.handle
        x, y = bytearray(10), bytearray(10)
        a.read(x, 10, 0, 0)
        b.read(y, 10, 10, 0)
        assert bytes(x + y) == payload[:20]


@pytest.mark.parametrize("op", ["read", "write"])
def test_io_before_open_and_after_close_raises_runtime_error(data_file, op):
    fh = FileHandle(data_file, os.O_RDWR)
    buf = bytearray(16)
    with pytest.raises(RuntimeError):
        getattr(fh, op)(buf, 16, 0, 0)
    fh.open()
    fh.close()
    with pytest.raises(RuntimeError):
        getattr(fh, op)(buf, 16, 0, 0)


def test_writing_through_a_read_only_descriptor_raises_os_error_ebadf(data_file, payload):
    with FileHandle(data_file, os.O_RDONLY) as fh:
        with pytest.raises(OSError) as info:
            fh.write(b"x" * 4096, 4096, 0, 0)
    assert info.value.errno == errno.EBADF
    assert not isinstance(info.value, HipFileException)
    assert data_file.read_bytes() == payload


def test_reading_through_a_write_only_descriptor_raises_os_error_ebadf(data_file):
    with FileHandle(data_file, os.O_WRONLY) as fh:
        with pytest.raises(OSError) as info:
            fh.read(bytearray(4096), 4096, 0, 0)
    assert info.value.errno == errno.EBADF


def test_a_negative_file_offset_raises_invalid_value(data_file):
    with FileHandle(data_file, os.O_RDONLY) as fh:
        with pytest.raises(HipFileException) as info:
            fh.read(bytearray(8), 8, -1, 0)
    assert info.value.hipfile_err == OpError.INVALID_VALUE


def test_a_transfer_past_the_end_of_the_buffer_raises_invalid_value(data_file):
    buf = np.zeros(100, dtype=np.uint8)
    with FileHandle(data_file, os.O_RDONLY) as fh:
        with pytest.raises(HipFileException) as info:
            fh.read(buf, 101, 0, 0)
        assert info.value.hipfile_err == OpError.INVALID_VALUE
        with pytest.raises(HipFileException):
            fh.read(buf, 50, 0, 51)
        assert fh.read(buf, 50, 0, 50) == 50  # exactly to the end is fine


def test_a_negative_size_raises_value_error(data_file):
    with FileHandle(data_file, os.O_RDONLY) as fh:
        with pytest.raises(ValueError):
            fh.read(bytearray(8), -1, 0, 0)


def test_reading_into_read_only_memory_raises_type_error(data_file):
    with FileHandle(data_file, os.O_RDONLY) as fh:
        with pytest.raises(TypeError):
            fh.read(b"\0" * 64, 64, 0, 0)
        ro = np.zeros(64, dtype=np.uint8)
        ro.flags.writeable = False
        with pytest.raises(TypeError):
            fh.read(ro, 64, 0, 0)


def test_objects_without_memory_raise_type_error(data_file):
    with FileHandle(data_file, os.O_RDONLY) as fh:
        with pytest.raises(TypeError):
            fh.read(object(), 8, 0, 0)
        with pytest.raises(TypeError):
            fh.read([0] * 8, 8, 0, 0)


def test_io_after_the_driver_was_closed_to_zero_raises_hip_file_exception(data_file):
    fh = FileHandle(data_file, os.O_RDONLY)
    fh.open()
    assert Driver.use_count() == 1
    Driver().close()  # closing to zero deregisters every handle
    with pytest.raises(HipFileException) as info:
        fh.read(bytearray(8), 8, 0, 0)
    assert info.value.hipfile_err in (OpError.DRIVER_NOT_INITIALIZED, OpError.HANDLE_NOT_REGISTERED)
    before = open_fds()
    fh.close()  # still releases the descriptor
    assert len(open_fds()) == len(before) - 1


def test_dropping_an_open_handle_closes_its_descriptor(data_file):
    import gc

    before = open_fds()
    fh = FileHandle(data_file, os.O_RDONLY)
    fh.open()
    del fh
    gc.collect()
    assert open_fds() == before


def test_repr_names_the_path_and_state(data_file):
    fh = FileHandle(pathlib.Path(data_file), os.O_RDONLY)
    assert "closed" in repr(fh) and str(data_file) in repr(fh)
    with fh:
        assert f"handle={fh.handle}" in repr(fh)
