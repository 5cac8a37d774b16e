"""Round trips through real files at awkward offsets and sizes, into and out
of every kind of memory the package accepts, checked byte for byte."""

import ctypes
import os
import threading
import time

import numpy as np
import pytest

from hipfile import Buffer, Driver, FileHandle

O_DIRECT = getattr(os, "O_DIRECT", 0)

# (file_offset, buffer_offset, size): unaligned starts, sizes that are not
# page multiples, ranges that straddle the core's 16 MiB chunking, and EOF.
AWKWARD = [
    (0, 0, 1),
    (1, 3, 4095),
    (4095, 1, 4097),
    (12345, 777, 65537),
    (4096, 0, 1 << 20),
    (3, 5, 3 * 1024 * 1024 + 321 - 3),  # to the last byte of the file
]


def pread_all(path, size, offset):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


@pytest.mark.parametrize("flags", [os.O_RDONLY, os.O_RDONLY | O_DIRECT], ids=["buffered", "o_direct"])
@pytest.mark.parametrize("registered", [False, True], ids=["unregistered", "registered"])
@pytest.mark.parametrize("foff,boff,size", AWKWARD)
def test_read_into_numpy_at_awkward_offsets(data_file, payload, flags, registered, foff, boff, size):
    arr = np.full(boff + size + 16, 0xAB, dtype=np.uint8)
    with Driver(), FileHandle(data_file, flags) as fh:
        if registered:
            with Buffer(arr) as buf:
                n = fh.read(buf, size, foff, boff)
        else:
            n = fh.read(arr, size, foff, boff)
    assert n == size
    assert arr[boff : boff + size].tobytes() == payload[foff : foff + size]
    # Nothing outside the target range was touched.
    assert (arr[:boff] == 0xAB).all() and (arr[boff + size :] == 0xAB).all()


def test_a_read_past_end_of_file_is_short(data_file, payload):
    arr = np.zeros(10000, dtype=np.uint8)
    with FileHandle(data_file, os.O_RDONLY) as fh:
        n = fh.read(arr, 9000, len(payload) - 100, 7)
        assert n == 100
        assert arr[7:107].tobytes() == payload[-100:]
        assert fh.read(arr, 9000, len(payload) + 5, 0) == 0


def test_zero_byte_transfers_return_zero(data_file):
    with FileHandle(data_file, os.O_RDWR) as fh:
        assert fh.read(bytearray(4), 0, 0, 0) == 0
        assert fh.write(b"abcd", 0, 0, 0) == 0


@pytest.mark.parametrize("flags", [os.O_RDWR, os.O_RDWR | O_DIRECT], ids=["buffered", "o_direct"])
@pytest.mark.parametrize("foff,boff,size", AWKWARD[:5])
def test_write_from_numpy_at_awkward_offsets_then_read_back(data_file, payload, flags, foff, boff, size):
    rng = np.random.default_rng(foff + size)
    src = rng.integers(0, 256, boff + size, dtype=np.uint8)
    with FileHandle(data_file, flags) as fh:
        assert fh.write(src, size, foff, boff) == size
        back = np.zeros(size, dtype=np.uint8)
        assert fh.read(back, size, foff, 0) == size
    expected = bytearray(payload)
    expected[foff : foff + size] = src[boff : boff + size].tobytes()
    assert (back == src[boff:]).all()
    assert data_file.read_bytes() == bytes(expected)


def test_write_extends_a_new_file_at_an_offset(tmp_path):
    path = tmp_path / "new.bin"
    src = np.arange(100000, dtype=np.uint32)
    with FileHandle(path, os.O_CREAT | os.O_RDWR, 0o644) as fh:
        assert fh.write(src, src.nbytes, 5000, 0) == src.nbytes
    raw = path.read_bytes()
    assert raw[:5000] == b"\0" * 5000
    assert np.frombuffer(raw[5000:], dtype=np.uint32).tolist() == src.tolist()


def test_a_multi_dimensional_float_array_round_trips_by_value(tmp_path):
    arr = np.linspace(-1.0, 1.0, 123 * 457, dtype=np.float32).reshape(123, 457)
    path = tmp_path / "f.bin"
    with FileHandle(path, os.O_CREAT | os.O_RDWR) as fh:
        fh.write(arr, arr.nbytes, 31, 0)
        out = np.empty_like(arr)
        assert fh.read(out, out.nbytes, 31, 0) == arr.nbytes
    np.testing.assert_array_equal(out, arr)


def test_large_reads_cross_chunk_boundaries_with_the_right_bytes(tmp_path):
    size = 40 * 1024 * 1024 + 4097  # several worker chunks, unaligned tail
    data = np.random.default_rng(7).integers(0, 256, size, dtype=np.uint8)
    path = tmp_path / "big.bin"
    data.tofile(path)
    out = np.zeros(size + 11, dtype=np.uint8)
    with Driver(), FileHandle(path, os.O_RDONLY | O_DIRECT) as fh:
        with Buffer(out) as buf:
            assert fh.read(buf, size - 513, 513, 11) == size - 513
    assert np.array_equal(out[11:], np.concatenate([data[513:], np.zeros(513, np.uint8)]))


def test_ctypes_string_buffer_round_trip(data_file, payload):
    mem = ctypes.create_string_buffer(9000)
    with FileHandle(data_file, os.O_RDWR) as fh:
        assert fh.read(mem, 8999, 1001, 1) == 8999
        assert mem.raw[1:9000] == payload[1001:10000]
        mem.raw = b"Q" * 9000
        assert fh.write(mem, 333, 70000, 17) == 333
    assert pread_all(data_file, 335, 69999) == payload[69999:70000] + b"Q" * 333 + payload[70333:70334]


def test_ctypes_void_p_buffer_round_trip(data_file, payload):
    mem = (ctypes.c_uint8 * 65536)()
    p = ctypes.c_void_p(ctypes.addressof(mem))
    with Driver(), FileHandle(data_file, os.O_RDONLY | O_DIRECT) as fh:
        with Buffer.from_ctypes_void_p(p, 65536, 0) as buf:
            assert fh.read(buf, 60000, 4099, 123) == 60000
        assert fh.read(p, 100, 0, 0) == 100  # a bare c_void_p works too
    assert bytes(mem[123:60123]) == payload[4099:64099]
    assert bytes(mem[:100]) == payload[:100]


def test_int_address_round_trip(data_file, payload):
    arr = np.zeros(5000, dtype=np.uint8)
    with FileHandle(data_file, os.O_RDONLY) as fh:
        assert fh.read(arr.ctypes.data, 4000, 17, 3) == 4000
    assert arr[3:4003].tobytes() == payload[17:4017]


def test_bytearray_memoryview_and_bytes_round_trip(data_file, payload):
    ba = bytearray(5000)
    with FileHandle(data_file, os.O_RDWR) as fh:
        assert fh.read(ba, 5000, 99, 0) == 5000
        assert bytes(ba) == payload[99:5099]
        mv = memoryview(ba)[100:]
        assert fh.read(mv, 10, 0, 0) == 10
        assert bytes(ba[100:110]) == payload[:10]
        assert fh.write(b"hello world", 5, 1, 6) == 5
    assert pread_all(data_file, 7, 0) == payload[:1] + b"world" + payload[6:7]


class DlpackOnly:
    """Exposes memory only through DLPack (as a CPU torch tensor does)."""

    def __init__(self, arr):
        self._arr = arr

    def __dlpack__(self, stream=None):
        return self._arr.__dlpack__()

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


def test_dlpack_objects_round_trip(data_file, payload):
    arr = np.zeros((100, 50), dtype=np.int16)  # 10000 bytes
    with FileHandle(data_file, os.O_RDONLY) as fh:
        assert fh.read(DlpackOnly(arr), 10000, 12345, 0) == 10000
        with Buffer(DlpackOnly(arr)) as buf:
            assert buf.length == 10000
            assert fh.read(buf, 200, 0, 9800) == 200
    raw = arr.tobytes()
    assert raw[:9800] == payload[12345 : 12345 + 9800]
    assert raw[9800:] == payload[:200]


def test_a_dlpack_view_with_an_offset_reads_at_the_view(data_file, payload):
    base = np.zeros(1000, dtype=np.uint8)
    with FileHandle(data_file, os.O_RDONLY) as fh:
        assert fh.read(DlpackOnly(base[100:]), 50, 0, 0) == 50
    assert base[100:150].tobytes() == payload[:50]
    assert not base[:100].any()


def test_a_non_contiguous_dlpack_tensor_is_refused(data_file):
    arr = np.zeros((10, 10), dtype=np.uint8).T
    with FileHandle(data_file, os.O_RDONLY) as fh:
        with pytest.raises(BufferError):
            fh.read(DlpackOnly(arr), 10, 0, 0)


class CudaArrayInterface:
    """``__cuda_array_interface__`` describing host memory: the parsing path
    CuPy arrays and CUDA tensors take (the core accepts host memory)."""

    def __init__(self, arr, strides=None, stream=None):
        self._arr = arr
        self.__cuda_array_interface__ = {
            "shape": arr.shape,
            "typestr": arr.dtype.str,
            "data": (arr.ctypes.data, False),
            "strides": strides,
            "stream": stream,
            "version": 3,
        }


def test_cuda_array_interface_objects_round_trip(data_file, payload):
    arr = np.zeros((64, 64), dtype=np.float64)
    with FileHandle(data_file, os.O_RDONLY) as fh:
        with Buffer(CudaArrayInterface(arr)) as buf:
            assert buf.length == arr.nbytes
            assert fh.read(buf, arr.nbytes, 999, 0) == arr.nbytes
    assert arr.tobytes() == payload[999 : 999 + arr.nbytes]


def test_cuda_array_interface_with_a_stream_round_trips(data_file, payload):
    # The stream is synchronized before each transfer (a no-op without a GPU
    # runtime); the transfer itself must be unaffected.
    arr = np.zeros(4096, dtype=np.uint8)
    with FileHandle(data_file, os.O_RDWR) as fh:
        assert fh.read(CudaArrayInterface(arr, stream=1), 4096, 10, 0) == 4096
        with Buffer(CudaArrayInterface(arr, stream=2)) as buf:
            assert fh.write(buf, 100, 0, 0) == 100
    assert arr.tobytes() == payload[10:4106]
    assert data_file.read_bytes()[:100] == payload[10:110]


def test_the_producers_stream_is_synchronized_before_every_transfer(data_file, monkeypatch):
    # CUDA array interface v3 names the stream the producer queued work on;
    # the transfer must wait for it (with and without a Buffer).
    import hipfile._memory as memory

    seen = []
    monkeypatch.setattr(memory._hipfile, "stream_synchronize", seen.append)
    arr = np.zeros(4096, dtype=np.uint8)
    with FileHandle(data_file, os.O_RDWR) as fh:
        fh.read(CudaArrayInterface(arr, stream=7), 16, 0, 0)
        assert seen == [7]
        with Buffer(CudaArrayInterface(arr, stream=9)) as buf:
            fh.write(buf, 16, 0, 0)
            fh.read(buf, 16, 0, 0)
        assert seen == [7, 9, 9]
        fh.read(CudaArrayInterface(arr), 16, 0, 0)  # no stream: nothing to wait for
        assert seen == [7, 9, 9]


def test_a_strided_cuda_array_interface_is_refused():
    arr = np.zeros((8, 8), dtype=np.float32)
    with pytest.raises(BufferError):
        Buffer(CudaArrayInterface(arr, strides=(4, 32)))


def test_reads_release_the_gil(tmp_path):
    # While a long read runs in another thread, this thread must keep
    # running Python. A read that held the GIL would freeze it completely,
    # so no iteration could land in the middle of the read.
    size = 192 * 1024 * 1024
    path = tmp_path / "gil.bin"
    np.ones(size, dtype=np.uint8).tofile(path)
    out = np.zeros(size, dtype=np.uint8)
    span = {}

    with FileHandle(path, os.O_RDONLY) as fh:
        fh.read(out, size, 0, 0)  # warm the page cache

        def reader():
            span["t0"] = time.perf_counter()
            span["n"] = fh.read(out, size, 0, 0)
            span["t1"] = time.perf_counter()

        ticks = []
        t = threading.Thread(target=reader)
        t.start()
        while t.is_alive():
            ticks.append(time.perf_counter())
        t.join()
    assert span["n"] == size
    t0, t1 = span["t0"], span["t1"]
    margin = (t1 - t0) * 0.2
    during = [x for x in ticks if t0 + margin < x < t1 - margin]
    assert during, f"no Python ran during a {1000 * (t1 - t0):.1f} ms read"
