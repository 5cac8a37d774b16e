"""hipfile.torch.load_file / safe_open against safetensors.torch, on the CPU
and, where torch sees a GPU, on CUDA. Skipped where torch is not installed
(CI has no torch; the GPU machine runs scripts/gpu/loader_bench.py too)."""

import json
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import safetensors.torch  # noqa: E402

import hipfile.torch as ht  # noqa: E402
from hipfile.torch import SafetensorError  # noqa: E402

CODES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "I16": "int16",
    "U16": "uint16",
    "F16": "float16",
    "BF16": "bfloat16",
    "I32": "int32",
    "U32": "uint32",
    "F32": "float32",
    "F64": "float64",
    "I64": "int64",
    "U64": "uint64",
    "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}
DTYPES = {k: getattr(torch, v) for k, v in CODES.items() if hasattr(torch, v)}
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def random_tensor(rng, dtype, shape):
    n = int(np.prod(shape, dtype=np.int64))
    size = torch.empty((), dtype=dtype).element_size()
    if dtype is torch.bool:
        return torch.from_numpy(rng.integers(0, 2, n).astype(np.bool_)).reshape(shape)
    raw = torch.frombuffer(bytearray(rng.bytes(n * size)) or bytearray(1), dtype=torch.uint8)[: n * size]
    return raw.view(dtype).reshape(shape).clone()


def as_bytes(t):
    # Bitwise comparison: NaNs compare equal, and torch.equal need not
    # support every dtype on every device.
    dense = torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t.detach())  # standard strides
    return dense.reshape(-1).view(torch.uint8).cpu()


def assert_same(got, ref, device):
    assert sorted(got) == sorted(ref)
    for k in ref:
        assert got[k].dtype == ref[k].dtype, k
        assert got[k].shape == ref[k].shape, k
        assert got[k].device.type == torch.device(device).type, k
        assert torch.equal(as_bytes(got[k]), as_bytes(ref[k])), k


def random_shape(rng):
    ndim = int(rng.integers(0, 5))
    shape = tuple(int(d) for d in rng.integers(0, 7, ndim))
    if ndim and rng.random() < 0.15:
        shape = shape[:-1] + (0,)
    return shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(6))
def test_random_checkpoints_match_safetensors_torch(tmp_path, device, seed):
    rng = np.random.default_rng(seed)
    codes = list(DTYPES)
    tensors = {f"m.{i}": random_tensor(rng, DTYPES[codes[int(rng.integers(0, len(codes)))]], random_shape(rng)) for i in range(40)}
    for code, dt in DTYPES.items():  # every dtype at least once, a scalar too
        tensors[f"all.{code}"] = random_tensor(rng, dt, (3, 5))
        tensors[f"scalar.{code}"] = random_tensor(rng, dt, ())
    path = tmp_path / "m.safetensors"
    safetensors.torch.save_file(tensors, path, metadata={"seed": str(seed)})
    got = ht.load_file(path, device=device)
    assert_same(got, safetensors.torch.load_file(path, device=device), device)
    assert_same(got, tensors, device)
    # All views of one allocation (the reference writer aligns every tensor).
    ptrs = {t.untyped_storage().data_ptr() for t in got.values() if t.numel()}
    assert len(ptrs) == 1
    with ht.safe_open(path, framework="pt", device=device) as f:
        assert sorted(f.keys()) == sorted(tensors)
        assert f.metadata() == {"seed": str(seed)}
        for k in ["all.BF16", "scalar.F32", "m.3"]:
            t = f.get_tensor(k)
            assert t.dtype == tensors[k].dtype and t.shape == tensors[k].shape
            assert torch.equal(as_bytes(t), as_bytes(tensors[k]))


@pytest.mark.parametrize("device", DEVICES)
def test_misaligned_offsets_give_aligned_copies(tmp_path, device):
    rng = np.random.default_rng(2)
    items = [("a", "U8", (3,)), ("b", "BF16", (4, 5)), ("c", "I8", (1,)), ("d", "F32", (7,)), ("e", "I64", (2, 3)),
             ("f", "F16", ()), ("g", "F64", (0, 4)), ("h", "C64", (2,))]
    header, data, at = {}, bytearray(), 0
    for name, code, shape in items:
        raw = as_bytes(random_tensor(rng, DTYPES[code], shape)).numpy().tobytes()
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [at, at + len(raw)]}
        data += raw
        at += len(raw)
    h = json.dumps(header).encode()
    path = tmp_path / "packed.safetensors"
    path.write_bytes(struct.pack("<Q", len(h)) + h + bytes(data))
    got = ht.load_file(path, device=device)
    assert_same(got, safetensors.torch.load_file(path, device=device), device)
    for name, code, shape in items:
        t = got[name]
        assert t.data_ptr() % t.element_size() == 0, name


def test_a_bare_index_means_a_cuda_device_and_bad_frameworks_are_refused(tmp_path):
    path = tmp_path / "x.safetensors"
    safetensors.torch.save_file({"x": torch.arange(10, dtype=torch.float32)}, path)
    with pytest.raises(ValueError, match="framework"):
        ht.safe_open(path, framework="tf")
    with ht.safe_open(path, framework="np") as f:
        assert f.get_tensor("x").tolist() == list(range(10))
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for device=0")
    assert ht.load_file(path, device=0)["x"].device == torch.device("cuda", 0)


@pytest.mark.parametrize("device", DEVICES)
def test_malformed_files_raise_safetensor_error(tmp_path, device):
    good = {"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}
    cases = [
        (b"\1\2", "too short"),
        (struct.pack("<Q", 99) + b"{}", "passes the end"),
        (struct.pack("<Q", 8) + b'{"a": 1}', "expected an object"),
    ]
    h = json.dumps(good).encode()
    cases.append((struct.pack("<Q", len(h)) + h + b"\0" * 3, "truncated"))
    h2 = json.dumps({**good, "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}}).encode()
    cases.append((struct.pack("<Q", len(h2)) + h2 + b"\0" * 6, "overlaps"))
    h3 = json.dumps({"a": {"dtype": "Q8", "shape": [2], "data_offsets": [0, 2]}}).encode()
    cases.append((struct.pack("<Q", len(h3)) + h3 + b"\0" * 2, "unknown dtype"))
    path = tmp_path / "bad.safetensors"
    for content, pattern in cases:
        path.write_bytes(content)
        with pytest.raises(SafetensorError, match=pattern):
            ht.load_file(path, device=device)
        with pytest.raises(Exception):
            safetensors.torch.load_file(path, device=device)


def test_a_dtype_this_loader_cannot_view_is_a_type_error(tmp_path):
    h = json.dumps({"q": {"dtype": "F4", "shape": [4], "data_offsets": [0, 2]}}).encode()
    path = tmp_path / "f4.safetensors"
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"\0\0")
    with pytest.raises(TypeError, match="F4"):
        ht.load_file(path)


@pytest.mark.parametrize("device", DEVICES)
def test_get_slice_matches_safetensors(tmp_path, device):
    import safetensors as st

    rng = np.random.default_rng(5)
    tensors = {"w": random_tensor(rng, torch.bfloat16, (6, 4, 8)), "s": random_tensor(rng, torch.float32, ())}
    path = tmp_path / "s.safetensors"
    safetensors.torch.save_file(tensors, path)
    with ht.safe_open(path, framework="pt", device=device) as f, st.safe_open(path, framework="pt", device=device) as ref:
        s, r = f.get_slice("w"), ref.get_slice("w")
        assert s.get_shape() == r.get_shape() and s.get_dtype() == r.get_dtype() == "BF16"
        for idx in [(slice(1, 3),), 2, (slice(None), 1), (Ellipsis, 2), (slice(0, 6, 2),), (-1,), (slice(1, 4), slice(0, 2), 3)]:
            got, want = s[idx], r[idx]
            assert got.dtype == want.dtype and got.shape == want.shape, idx
            assert got.is_contiguous() and got.device.type == torch.device(device).type
            assert torch.equal(as_bytes(got), as_bytes(want)), idx
        assert torch.equal(as_bytes(f.get_slice("s")[()]), as_bytes(tensors["s"]))
