"""hipfile.numpy.load_file / safe_open against the `safetensors` package on
real files: random checkpoints over every dtype numpy has, files written
here with misaligned offsets, malformed files (each must raise a clear
SafetensorError, and the reference must reject it too), and a checkpoint
on a real hipfs mount. hipfile.torch is tested the same way where torch is
installed (test_safetensors_torch.py)."""

import json
import os
import struct

import numpy as np
import pytest
import safetensors
import safetensors.numpy

import hipfile
import hipfile.numpy as hnp
from hipfile.numpy import SafetensorError

from conftest import open_fds

# safetensors dtype -> numpy dtype, every one safetensors.numpy maps.
NUMPY_DTYPES = {
    "BOOL": np.bool_,
    "U8": np.uint8,
    "I8": np.int8,
    "U16": np.uint16,
    "I16": np.int16,
    "F16": np.float16,
    "U32": np.uint32,
    "I32": np.int32,
    "F32": np.float32,
    "U64": np.uint64,
    "I64": np.int64,
    "F64": np.float64,
    "C64": np.complex64,
}


def random_array(rng, dtype, shape):
    """Random bit patterns (NaNs and all) of `dtype`; 0/1 for bool."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dt == np.bool_:
        return rng.integers(0, 2, n).astype(np.bool_).reshape(shape)
    return np.frombuffer(rng.bytes(n * dt.itemsize), dtype=dt).reshape(shape).copy()


def random_shape(rng):
    ndim = int(rng.integers(0, 5))
    shape = tuple(int(d) for d in rng.integers(0, 8, ndim))
    if rng.random() < 0.15 and ndim:  # an empty tensor
        shape = shape[:-1] + (0,)
    return shape


def write_raw(path, header, data=b"", pad_to=None):
    """A safetensors file exactly as given: `header` (dict, or raw bytes), then `data`."""
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    if pad_to:
        h += b" " * (-(8 + len(h)) % pad_to)
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)
    return path


def write_packed(path, tensors, metadata=None, header_pad=None):
    """Tensors one after another in the given order, no alignment padding:
    offsets land where they fall (the reference writer aligns; this one
    need not)."""
    header, data, at = {}, bytearray(), 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + len(raw)]}
        data += raw
        at += len(raw)
    return write_raw(path, header, bytes(data), header_pad)


def assert_same(got, ref):
    assert list(sorted(got)) == list(sorted(ref))
    for k in ref:
        assert got[k].dtype == ref[k].dtype, k
        assert got[k].shape == ref[k].shape, k
        assert got[k].tobytes() == ref[k].tobytes(), k


def base_of(a):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


@pytest.mark.parametrize("seed", range(12))
def test_random_checkpoints_load_bit_for_bit_as_safetensors_numpy_does(tmp_path, seed):
    rng = np.random.default_rng(seed)
    tensors = {}
    for i in range(int(rng.integers(1, 40))):
        dtype = list(NUMPY_DTYPES.values())[int(rng.integers(0, len(NUMPY_DTYPES)))]
        tensors[f"layer.{i}.w"] = random_array(rng, dtype, random_shape(rng))
    meta = {"format": "np", "seed": str(seed)} if seed % 2 else None
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file(tensors, path, metadata=meta)
    got = hnp.load_file(path)
    ref = safetensors.numpy.load_file(path)
    assert_same(got, ref)
    assert_same(got, tensors)
    # Every tensor is a view of one allocation (the reference writer aligns them all).
    bases = {id(base_of(a)) for a in got.values() if a.size}
    assert len(bases) <= 1
    with hnp.safe_open(path) as f:
        assert sorted(f.keys()) == sorted(tensors)
        assert f.metadata() == meta
        for name in rng.permutation(sorted(tensors))[:5]:
            t = f.get_tensor(name)
            assert t.dtype == tensors[name].dtype and t.shape == tensors[name].shape
            assert t.tobytes() == tensors[name].tobytes()


def test_every_numpy_dtype_scalars_and_empty_tensors_match(tmp_path):
    rng = np.random.default_rng(99)
    tensors = {}
    for code, dt in NUMPY_DTYPES.items():
        for shape in [(), (1,), (0,), (3, 0, 2), (5, 3), (2, 3, 4, 5)]:
            tensors[f"{code}{shape}"] = random_array(rng, dt, shape)
    path = tmp_path / "all.safetensors"
    safetensors.numpy.save_file(tensors, path)
    assert_same(hnp.load_file(path), safetensors.numpy.load_file(path))
    assert_same(hnp.load_file(path, register=True), tensors)
    hdr = json.loads(path.read_bytes()[8 : 8 + struct.unpack("<Q", path.read_bytes()[:8])[0]])
    assert {v["dtype"] for k, v in hdr.items() if k != "__metadata__"} == set(NUMPY_DTYPES)


def test_misaligned_tensors_get_aligned_copies_and_the_rest_stay_views(tmp_path):
    rng = np.random.default_rng(3)
    items = []
    for i, (code, shape) in enumerate([("U8", (3,)), ("F32", (4, 5)), ("I8", (1,)), ("F64", (7,)), ("I16", (2, 3)),
                                       ("U8", (5,)), ("C64", (3,)), ("F32", ()), ("I64", (0, 2)), ("U64", (9,))]):
        a = random_array(rng, NUMPY_DTYPES[code], shape)
        items.append((f"t{i}", code, shape, a.tobytes()))
    # A header whose length is odd too: the data region itself starts unaligned.
    path = write_packed(tmp_path / "packed.safetensors", items, metadata={"k": "v" * 3})
    got = hnp.load_file(path)
    ref = safetensors.numpy.load_file(path)
    assert_same(got, ref)
    starts = {}
    at = 0
    for name, code, shape, raw in items:
        starts[name] = at
        at += len(raw)
    whole = base_of(got["t0"])
    assert whole.size == at  # one allocation of the whole data region
    for name, code, shape, raw in items:
        a = got[name]
        assert a.flags.aligned, name
        if starts[name] % np.dtype(NUMPY_DTYPES[code]).itemsize == 0:
            assert base_of(a) is whole, f"{name} should be a view"
        elif a.size:
            assert base_of(a) is not whole, f"{name} should be a copy"


def test_a_checkpoint_of_40_mib_across_the_cores_chunking_matches(tmp_path):
    rng = np.random.default_rng(11)
    tensors = {
        "emb": random_array(rng, np.float16, (5000, 1024)),  # ~10 MiB
        "w1": random_array(rng, np.float32, (1024, 4096)),  # 16 MiB
        "w2": random_array(rng, np.int64, (1000, 1500)),  # ~11.4 MiB
        "b": random_array(rng, np.float32, (4097,)),
        "odd": random_array(rng, np.uint8, (1234567,)),
    }
    path = tmp_path / "big.safetensors"
    safetensors.numpy.save_file(tensors, path)
    before = open_fds()
    assert_same(hnp.load_file(path), safetensors.numpy.load_file(path))
    assert open_fds() == before


def test_the_lazy_accessor_reads_tensors_by_name_and_closes(tmp_path):
    rng = np.random.default_rng(4)
    tensors = {f"t{i}": random_array(rng, np.float32, (100 + i, 3)) for i in range(6)}
    path = tmp_path / "lazy.safetensors"
    safetensors.numpy.save_file(tensors, path, metadata={"a": "b"})
    before = open_fds()
    with hnp.safe_open(path, framework="np") as f:
        with safetensors.safe_open(path, framework="np") as ref:
            assert sorted(f.keys()) == sorted(ref.keys())
            assert f.metadata() == ref.metadata() == {"a": "b"}
            for k in ref.keys():
                assert f.get_tensor(k).tobytes() == ref.get_tensor(k).tobytes()
        with pytest.raises(KeyError, match="nope"):
            f.get_tensor("nope")
        assert hipfile.Driver.use_count() >= 1
    assert open_fds() == before
    with pytest.raises(RuntimeError, match="closed"):
        f.get_tensor("t0")
    with pytest.raises(ValueError, match="framework"):
        hnp.safe_open(path, framework="pt")
    with pytest.raises(ValueError, match="cpu"):
        hnp.safe_open(path, device="cuda")
    assert open_fds() == before


def test_an_empty_checkpoint_and_a_metadata_only_one_load(tmp_path):
    p = tmp_path / "empty.safetensors"
    safetensors.numpy.save_file({}, p)
    assert hnp.load_file(p) == {} == safetensors.numpy.load_file(p)
    p = write_raw(tmp_path / "meta.safetensors", {"__metadata__": {"x": "y"}})
    assert hnp.load_file(p) == {}
    with hnp.safe_open(p) as f:
        assert f.keys() == [] and f.metadata() == {"x": "y"}


def test_a_dtype_numpy_lacks_is_a_type_error_naming_it(tmp_path):
    p = write_packed(tmp_path / "bf16.safetensors", [("ok", "F32", (2,), b"\0" * 8), ("w", "BF16", (3,), b"\1" * 6)])
    with pytest.raises(TypeError, match=r"'w' has dtype BF16"):
        hnp.load_file(p)
    with pytest.raises(TypeError):
        safetensors.numpy.load_file(p)
    with hnp.safe_open(p) as f:
        assert f.get_tensor("ok").tobytes() == b"\0" * 8
        with pytest.raises(TypeError, match="BF16"):
            f.get_tensor("w")


F32x2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}

MALFORMED = [
    # (name, file bytes or (header, data), message pattern)
    ("empty file", b"", "too short"),
    ("three bytes", b"\x05\0\0", "too short"),
    ("header length past the end", struct.pack("<Q", 1000) + b"{}", "passes the end"),
    ("huge header length", struct.pack("<Q", 1 << 63) + b"{}", "exceeds the limit"),
    ("header length over 100 MB", struct.pack("<Q", 100_000_001) + b"{}", "exceeds the limit"),
    ("data truncated", ({"a": F32x2}, b"\0" * 5), "truncated"),
    ("no data at all", ({"a": F32x2}, b""), "truncated"),
    ("bytes after the last tensor", ({"a": F32x2}, b"\0" * 12), "after the last tensor"),
    (
        "overlapping offsets",
        ({"a": F32x2, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12),
        "overlaps tensor 'a'",
    ),
    (
        "identical offsets",
        ({"a": F32x2, "b": F32x2}, b"\0" * 8),
        "overlaps tensor",
    ),
    ("a gap before the first tensor", ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12), "belong to no tensor"),
    (
        "a gap between tensors",
        ({"a": F32x2, "b": {"dtype": "U8", "shape": [1], "data_offsets": [9, 10]}}, b"\0" * 10),
        r"\[8, 9\) belong to no tensor",
    ),
    ("offsets larger than shape", ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 12]}}, b"\0" * 12), "needs 8"),
    ("offsets smaller than shape", ({"a": {"dtype": "F64", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8), "needs 16"),
    ("end before start", ({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}}, b"\0" * 8), "end before"),
    ("unknown dtype", ({"a": {"dtype": "F128", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8), "unknown dtype 'F128'"),
    ("lower-case dtype", ({"a": {"dtype": "f32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8), "unknown dtype"),
    ("dtype not a string", ({"a": {"dtype": 7, "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8), "unknown dtype"),
    ("negative dimension", ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8), "shape"),
    ("float dimension", ({"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}, b"\0" * 8), "shape"),
    ("boolean dimension", ({"a": {"dtype": "F32", "shape": [True, 2], "data_offsets": [0, 8]}}, b"\0" * 8), "shape"),
    ("shape not a list", ({"a": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}}, b"\0" * 8), "shape"),
    ("three offsets", ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 8]}}, b"\0" * 8), "data_offsets"),
    ("negative offset", ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}}, b"\0" * 8), "data_offsets"),
    ("no shape", ({"a": {"dtype": "F32", "data_offsets": [0, 8]}}, b"\0" * 8), "no 'shape'"),
    ("tensor not an object", ({"a": [1, 2]}, b""), "expected an object"),
    ("metadata not strings", ({"__metadata__": {"a": 1}, "a": F32x2}, b"\0" * 8), "__metadata__"),
    ("offset overflow", ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 1 << 70]}}, b"\0" * 8), "needs 8"),
    ("shape overflow", ({"a": {"dtype": "F32", "shape": [1 << 40, 1 << 40], "data_offsets": [0, 8]}}, b"\0" * 8), "needs"),
    ("sub-byte dtype, odd count", ({"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, b"\0" * 2), "whole number of bytes"),
    ("bad JSON", (b'{"a": {"dtype": "F32", ', b""), "not valid JSON"),
    ("trailing NUL after the JSON", (b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}\0', b"\0" * 8), "not valid JSON"),
    ("NaN in the header", (b'{"__metadata__": {"a": NaN}}', b""), "NaN"),
    ("header not UTF-8", (b'{"\xff\xfe": 1}', b""), "UTF-8"),
    ("header a JSON array", (b"[]", b""), "not an object"),
    ("header a JSON string", (b'"x"', b""), "not an object"),
]


def materialize(tmp_path, case):
    name, content, _ = case
    path = tmp_path / "bad.safetensors"
    if isinstance(content, bytes):
        path.write_bytes(content)
        return path
    header, data = content
    return write_raw(path, header, data)


@pytest.mark.parametrize("case", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_files_raise_a_clear_safetensor_error(tmp_path, case):
    path = materialize(tmp_path, case)
    before = open_fds()
    count = hipfile.Driver.use_count()
    with pytest.raises(SafetensorError, match=case[2]) as info:
        hnp.load_file(path)
    assert isinstance(info.value, ValueError)
    assert str(path) in str(info.value)
    with pytest.raises(SafetensorError, match=case[2]):
        hnp.safe_open(path)
    # The reference rejects the file too: these are not hipfile's quirks.
    with pytest.raises(Exception):
        safetensors.numpy.load_file(path)
    assert open_fds() == before
    assert hipfile.Driver.use_count() == count


def test_a_duplicate_tensor_name_is_refused(tmp_path):
    # The reference keeps the last entry silently; a loader that is strict
    # about offsets refuses a header that names a tensor twice.
    path = tmp_path / "dup.safetensors"
    write_raw(path, b'{"a": ' + json.dumps(F32x2).encode() + b', "a": ' + json.dumps(F32x2).encode() + b"}", b"\0" * 8)
    with pytest.raises(SafetensorError, match="names 'a' twice"):
        hnp.load_file(path)


def test_every_truncation_of_a_valid_file_is_an_error_never_a_crash(tmp_path):
    rng = np.random.default_rng(8)
    tensors = {f"t{i}": random_array(rng, np.float32, (i + 1, 3)) for i in range(4)}
    good = tmp_path / "good.safetensors"
    safetensors.numpy.save_file(tensors, good)
    raw = good.read_bytes()
    cut = tmp_path / "cut.safetensors"
    for n in sorted(set(range(0, 40)) | set(range(40, len(raw), 7))):
        cut.write_bytes(raw[:n])
        with pytest.raises(SafetensorError):
            hnp.load_file(cut)


def test_corrupted_headers_fail_or_load_exactly_as_the_reference_does(tmp_path):
    """Random byte flips in the header: hipfile and safetensors agree on
    every file (both refuse it, or both load the same arrays), and hipfile
    fails only with SafetensorError / TypeError."""
    rng = np.random.default_rng(21)
    tensors = {"a": random_array(rng, np.float32, (3, 4)), "b": random_array(rng, np.int16, (5,)), "c": random_array(rng, np.uint8, (7,))}
    good = tmp_path / "good.safetensors"
    safetensors.numpy.save_file(tensors, good)
    raw = bytearray(good.read_bytes())
    n = struct.unpack("<Q", raw[:8])[0]
    bad = tmp_path / "bad.safetensors"
    agreed_errors = 0
    for _ in range(300):
        b = bytearray(raw)
        for _ in range(int(rng.integers(1, 3))):
            b[int(rng.integers(8, 8 + n))] = int(rng.integers(0, 256))
        bad.write_bytes(bytes(b))
        try:
            ref = safetensors.numpy.load_file(bad)
        except Exception:
            ref = None
        try:
            got = hnp.load_file(bad)
        except (SafetensorError, TypeError) as e:
            assert ref is None or "twice" in str(e), f"hipfile refused what safetensors loads: {e}"
            agreed_errors += ref is None
            continue
        assert ref is not None, f"hipfile loaded what safetensors refuses: {bytes(b[8:8 + n])!r}"
        assert_same(got, ref)
    assert agreed_errors > 50


def test_a_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        hnp.load_file(tmp_path / "nope.safetensors")


def test_the_package_exposes_the_loaders_lazily():
    assert hipfile.numpy.load_file is hnp.load_file


def test_a_checkpoint_on_a_hipfs_mount_loads_as_the_export_does(hipfs_mount, tmp_path):
    export, mnt = hipfs_mount
    rng = np.random.default_rng(17)
    tensors = {f"blk.{i}": random_array(rng, list(NUMPY_DTYPES.values())[i % 13], random_shape(rng)) for i in range(30)}
    tensors["big"] = random_array(rng, np.float32, (3 << 20,))  # 12 MiB: many remote chunks
    safetensors.numpy.save_file(tensors, export / "m.safetensors", metadata={"on": "mount"})
    ref = safetensors.numpy.load_file(export / "m.safetensors")
    assert_same(hnp.load_file(mnt / "m.safetensors"), ref)
    with hnp.safe_open(mnt / "m.safetensors") as f:
        assert f.metadata() == {"on": "mount"}
        assert f.get_tensor("big").tobytes() == ref["big"].tobytes()
    # A malformed file is as clear through the mount.
    (export / "short.safetensors").write_bytes((export / "m.safetensors").read_bytes()[:-1])
    with pytest.raises(SafetensorError, match="truncated"):
        hnp.load_file(mnt / "short.safetensors")


def bytes_read_by_this_process():
    # rchar sums every thread's read syscalls, the core's workers included.
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def test_get_tensor_reads_only_that_tensors_bytes(tmp_path):
    rng = np.random.default_rng(6)
    tensors = {"big": random_array(rng, np.uint8, (48 << 20,)), "small": random_array(rng, np.float32, (1000,))}
    path = tmp_path / "two.safetensors"
    safetensors.numpy.save_file(tensors, path)
    with hnp.safe_open(path) as f:
        before = bytes_read_by_this_process()
        assert f.get_tensor("small").tobytes() == tensors["small"].tobytes()
        small = bytes_read_by_this_process() - before
        before = bytes_read_by_this_process()
        assert f.get_tensor("big").tobytes() == tensors["big"].tobytes()
        big = bytes_read_by_this_process() - before
    assert small < 1 << 20, f"reading a 4000-byte tensor read {small} bytes"
    assert big >= 48 << 20


def test_concurrent_loads_of_one_file_from_threads_all_match(tmp_path):
    import threading

    rng = np.random.default_rng(12)
    tensors = {f"t{i}": random_array(rng, np.float32, (256, 1024)) for i in range(8)}
    path = tmp_path / "shared.safetensors"
    safetensors.numpy.save_file(tensors, path)
    results, errors = [None] * 6, []

    def load(i):
        try:
            results[i] = hnp.load_file(path)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=load, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for r in results:
        assert_same(r, tensors)


SLICES = [
    (slice(1, 3),),
    2,
    (slice(None), 1),
    (Ellipsis, 2),
    (slice(0, 5, 2),),
    (-1,),
    (slice(1, 4), slice(0, 2), 3),
    (3, 2, 1),
    slice(None),
]


def test_get_slice_matches_the_reference_and_reads_only_the_rows_it_needs(tmp_path):
    rng = np.random.default_rng(9)
    tensors = {"w": random_array(rng, np.float32, (5, 3, 4)), "big": random_array(rng, np.int16, (1024, 8192))}
    path = tmp_path / "s.safetensors"
    safetensors.numpy.save_file(tensors, path)
    with hnp.safe_open(path) as f, safetensors.safe_open(path, framework="np") as ref:
        s, r = f.get_slice("w"), ref.get_slice("w")
        assert s.get_shape() == r.get_shape() == [5, 3, 4]
        assert s.get_dtype() == r.get_dtype() == "F32"
        for idx in SLICES:
            got, want = s[idx], r[idx]
            assert got.dtype == want.dtype and got.shape == want.shape, idx
            assert got.tobytes() == want.tobytes(), idx
            assert got.flags.c_contiguous
        # Beyond what the reference takes: negative starts, empty ranges, negative steps.
        w = tensors["w"]
        for idx in [(slice(-2, None),), (slice(3, 1),), (slice(None, None, -1), 0), (slice(4, 0, -2),)]:
            assert np.array_equal(s[idx], w[idx]), idx
        with pytest.raises(IndexError, match="out of range"):
            s[5]
        before = bytes_read_by_this_process()
        rows = f.get_slice("big")[100:102, 8:16]
        assert bytes_read_by_this_process() - before < 1 << 20  # two 16 KiB rows, not 16 MiB
        assert np.array_equal(rows, tensors["big"][100:102, 8:16])
    p = tmp_path / "scalar.safetensors"
    safetensors.numpy.save_file({"s": np.array(2.5, dtype=np.float64), "e": np.zeros((0, 3), np.int8)}, p)
    with hnp.safe_open(p) as f:
        assert f.get_tensor("s").shape == () and f.get_tensor("s") == 2.5
        assert f.get_slice("s")[()] == 2.5
        assert f.get_slice("e")[0:0].shape == (0, 3)
        assert f.get_tensor("e").shape == (0, 3)
