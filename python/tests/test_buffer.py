"""Buffer: construction, registration, idempotent deregistration, context
management and keeping the memory's owner alive."""

import ctypes
import gc
import mmap
import weakref

import numpy as np
import pytest

import hipfile
from hipfile import Buffer, Driver, HipFileException, OpError


def test_buffer_from_an_int_pointer_keeps_ptr_length_and_flags():
    mem = ctypes.create_string_buffer(4096)
    addr = ctypes.addressof(mem)
    buf = Buffer(addr, 4096, 0)
    assert buf.ptr == addr
    assert buf.length == 4096
    assert buf.flags == 0
    assert not buf.registered


def test_ptr_is_read_only():
    mem = ctypes.create_string_buffer(64)
    buf = Buffer(ctypes.addressof(mem), 64, 0)
    with pytest.raises(AttributeError):
        buf.ptr = 0


def test_from_ctypes_void_p_takes_the_pointer_value():
    mem = ctypes.create_string_buffer(4096)
    p = ctypes.c_void_p(ctypes.addressof(mem))
    buf = Buffer.from_ctypes_void_p(p, 4096, 0)
    assert buf.ptr == ctypes.addressof(mem)
    assert buf.length == 4096


def test_from_ctypes_void_p_raises_value_error_for_null():
    with pytest.raises(ValueError):
        Buffer.from_ctypes_void_p(ctypes.c_void_p(None), 4096, 0)
    with pytest.raises(ValueError):
        Buffer.from_ctypes_void_p(ctypes.c_void_p(0), 4096, 0)


def test_from_ctypes_void_p_rejects_other_types():
    with pytest.raises(TypeError):
        Buffer.from_ctypes_void_p(1234, 4096, 0)


def test_an_int_pointer_without_a_length_is_a_type_error():
    with pytest.raises(TypeError):
        Buffer(1234)


def test_negative_pointer_or_length_is_a_value_error():
    with pytest.raises(ValueError):
        Buffer(-1, 10, 0)
    mem = ctypes.create_string_buffer(64)
    with pytest.raises(ValueError):
        Buffer(ctypes.addressof(mem), -1, 0)


def test_register_and_deregister_change_the_driver_state():
    mem = ctypes.create_string_buffer(8192)
    buf = Buffer(ctypes.addressof(mem), 8192, 0)
    buf.register()
    assert buf.registered
    # A second Buffer over the same memory is refused while the first holds it.
    with pytest.raises(HipFileException) as info:
        Buffer(ctypes.addressof(mem), 8192, 0).register()
    assert info.value.hipfile_err == OpError.MEMORY_ALREADY_REGISTERED
    buf.deregister()
    assert not buf.registered
    Buffer(ctypes.addressof(mem), 8192, 0).register()  # free again


def test_registering_twice_raises_memory_already_registered():
    mem = ctypes.create_string_buffer(4096)
    buf = Buffer(ctypes.addressof(mem), 4096, 0)
    buf.register()
    with pytest.raises(HipFileException) as info:
        buf.register()
    assert info.value.hipfile_err == OpError.MEMORY_ALREADY_REGISTERED
    buf.deregister()


def test_deregister_is_a_no_op_when_not_registered():
    mem = ctypes.create_string_buffer(4096)
    buf = Buffer(ctypes.addressof(mem), 4096, 0)
    buf.deregister()  # never registered
    buf.register()
    buf.deregister()
    buf.deregister()  # already deregistered
    assert Driver.use_count() == 1  # registration's implicit open stays


def test_registration_opens_the_driver_implicitly():
    mem = ctypes.create_string_buffer(4096)
    assert Driver.use_count() == 0
    with Buffer(ctypes.addressof(mem), 4096, 0):
        assert Driver.use_count() == 1


def test_deregister_after_the_driver_closed_to_zero_succeeds_quietly():
    mem = ctypes.create_string_buffer(4096)
    buf = Buffer(ctypes.addressof(mem), 4096, 0)
    with Driver():
        buf.register()
    # The driver dropped every registration when it closed.
    buf.deregister()
    assert not buf.registered


def test_context_manager_registers_on_entry_and_deregisters_on_exit():
    mem = ctypes.create_string_buffer(4096)
    with Driver():
        with Buffer(ctypes.addressof(mem), 4096, 0) as buf:
            assert isinstance(buf, Buffer)
            assert buf.registered
        assert not buf.registered
        # Deregistered for real: the same memory registers again.
        with Buffer(ctypes.addressof(mem), 4096, 0):
            pass


def test_context_manager_deregisters_when_the_body_raises():
    mem = ctypes.create_string_buffer(4096)
    buf = Buffer(ctypes.addressof(mem), 4096, 0)
    with pytest.raises(RuntimeError):
        with buf:
            raise RuntimeError("boom")
    assert not buf.registered


def test_null_pointer_registration_raises_invalid_value():
    with pytest.raises(HipFileException) as info:
        Buffer(0, 4096, 0).register()
    assert info.value.hipfile_err == OpError.INVALID_VALUE


def test_zero_length_registration_raises_invalid_value():
    mem = ctypes.create_string_buffer(16)
    with pytest.raises(HipFileException) as info:
        Buffer(ctypes.addressof(mem), 0, 0).register()
    assert info.value.hipfile_err == OpError.INVALID_VALUE


def test_unknown_flags_raise_invalid_value():
    mem = ctypes.create_string_buffer(4096)
    with pytest.raises(HipFileException) as info:
        Buffer(ctypes.addressof(mem), 4096, 0x100).register()
    assert info.value.hipfile_err == OpError.INVALID_VALUE


def _two_pages_with_the_second_unmapped():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    page = mmap.PAGESIZE
    addr = libc.mmap(None, 2 * page, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert addr not in (None, ctypes.c_void_p(-1).value)
    assert libc.munmap(addr + page, page) == 0
    return libc, addr, page


def test_a_range_running_into_unmapped_memory_raises_pointer_range_error():
    libc, addr, page = _two_pages_with_the_second_unmapped()
    try:
        with pytest.raises(HipFileException) as info:
            Buffer(addr, 2 * page, 0).register()
        assert info.value.hipfile_err == OpError.HIP_POINTER_RANGE_ERROR
        with pytest.raises(HipFileException) as info:
            Buffer(addr + page, 64, 0).register()
        assert info.value.hipfile_err == OpError.HIP_POINTER_INVALID
        with Buffer(addr, page, 0):  # the mapped page alone is fine
            pass
    finally:
        libc.munmap(addr, page)


def test_buffer_over_an_object_takes_its_address_and_size():
    arr = np.zeros((16, 32), dtype=np.float32)
    buf = Buffer(arr)
    assert buf.ptr == arr.ctypes.data
    assert buf.length == arr.nbytes
    assert buf.obj is arr
    assert Buffer(arr, 100).length == 100


def test_buffer_over_an_object_rejects_a_length_larger_than_the_object():
    with pytest.raises(ValueError):
        Buffer(bytearray(10), 11)


def test_buffer_keeps_its_object_alive_while_it_exists():
    arr = np.zeros(4096, dtype=np.uint8)
    ref = weakref.ref(arr)
    buf = Buffer(arr)
    buf.register()
    del arr
    gc.collect()
    assert ref() is not None
    del buf
    gc.collect()
    assert ref() is None


def test_a_dropped_registered_buffer_deregisters_itself():
    mem = ctypes.create_string_buffer(4096)
    buf = Buffer(ctypes.addressof(mem), 4096, 0)
    buf.register()
    del buf
    gc.collect()
    with Buffer(ctypes.addressof(mem), 4096, 0):  # would be MEMORY_ALREADY_REGISTERED
        pass


def test_buffer_pins_a_bytearray_so_it_cannot_move():
    data = bytearray(4096)
    buf = Buffer(data)
    with pytest.raises(BufferError):
        data.extend(b"x" * 100000)
    del buf
    gc.collect()
    data.extend(b"x")  # released with the Buffer
    assert len(data) == 4097


def test_a_non_contiguous_array_is_refused():
    arr = np.zeros((64, 64), dtype=np.uint8)[:, ::2]
    with pytest.raises(BufferError):
        Buffer(arr)


def test_rdma_flag_constants_have_the_c_values():
    assert hipfile.RDMA_REGISTER == 1
    assert hipfile.RDMA_RELAXED_ORDERING == 2
