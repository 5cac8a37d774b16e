"""The safetensors format: header parsing, validation and the read plan that
``hipfile.torch`` and ``hipfile.numpy`` share.

A safetensors file is an 8-byte little-endian header length ``n``, ``n``
bytes of UTF-8 JSON, then the data region. The header maps each tensor
name to ``{"dtype", "shape", "data_offsets": [start, end]}`` (offsets
relative to the data region) plus an optional ``"__metadata__"`` map of
strings. The checks are those of the reference implementation (the
tensors tile the data region exactly, in offset order, each exactly
``prod(shape) * dtype size`` bytes, and the region ends at the end of the
file), with duplicate names and non-standard JSON refused as well: every
failure raises :class:`SafetensorError` naming the problem.

The loaders read the whole data region with hipfile into one allocation
and hand out views of it; :class:`SafeOpen` reads one tensor at a time.
"""

import json
import math
import os
import struct
from types import TracebackType
from typing import Any, Dict, Iterator, List, Optional, Tuple, Type, Union

from ._driver import Driver
from ._file import FileHandle
from ._memory import Buffer

__all__ = ["SafetensorError", "TensorInfo", "Header", "DTYPE_BITS", "parse_header", "read_header", "SafeOpen", "TensorSlice"]

PathType = Union[str, "os.PathLike[str]"]

#: The reference implementation's ceiling on the header length.
MAX_HEADER_SIZE = 100_000_000

#: Every dtype the format defines, with its element size in bits.
DTYPE_BITS: Dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}


class SafetensorError(ValueError):
    """The file is not a valid safetensors file; the message says why."""


class TensorInfo:
    """One tensor of the header: ``start``/``end`` are data-region offsets."""

    __slots__ = ("name", "dtype", "shape", "start", "end")

    def __init__(self, name: str, dtype: str, shape: Tuple[int, ...], start: int, end: int) -> None:
        self.name = name
        self.dtype = dtype
        self.shape = shape
        self.start = start
        self.end = end

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    def __repr__(self) -> str:
        return f"TensorInfo({self.name!r}, {self.dtype}, {list(self.shape)}, [{self.start}, {self.end}])"


class Header:
    """A validated header: the tensors in offset order, the metadata, and
    where the data region lies in the file."""

    __slots__ = ("tensors", "metadata", "data_offset", "data_size", "_by_name")

    def __init__(self, tensors: List[TensorInfo], metadata: Optional[Dict[str, str]], data_offset: int) -> None:
        self.tensors = tensors
        self.metadata = metadata
        self.data_offset = data_offset
        self.data_size = tensors[-1].end if tensors else 0
        self._by_name = {t.name: t for t in tensors}

    def __getitem__(self, name: str) -> TensorInfo:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def keys(self) -> List[str]:
        return [t.name for t in self.tensors]


def _no_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise SafetensorError(f"header names {k!r} twice")
        out[k] = v
    return out


def _reject_constant(name: str) -> Any:
    raise SafetensorError(f"header is not valid JSON: {name} is not a JSON value")


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _tensor(name: str, entry: Any) -> TensorInfo:
    where = f"tensor {name!r}"
    if not isinstance(entry, dict):
        raise SafetensorError(f"{where}: expected an object with dtype, shape and data_offsets, got {entry!r:.80}")
    for field in ("dtype", "shape", "data_offsets"):
        if field not in entry:
            raise SafetensorError(f"{where}: no {field!r}")
    dtype = entry["dtype"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise SafetensorError(f"{where}: unknown dtype {dtype!r} (known: {', '.join(DTYPE_BITS)})")
    shape = entry["shape"]
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise SafetensorError(f"{where}: shape {shape!r:.80} is not a list of non-negative integers")
    offsets = entry["data_offsets"]
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets):
        raise SafetensorError(f"{where}: data_offsets {offsets!r:.80} is not [start, end] in non-negative integers")
    start, end = offsets
    if end < start:
        raise SafetensorError(f"{where}: data_offsets [{start}, {end}] end before they start")
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits % 8:
        raise SafetensorError(f"{where}: {dtype} {shape} is {bits} bits, not a whole number of bytes")
    if end - start != bits // 8:
        raise SafetensorError(
            f"{where}: data_offsets [{start}, {end}] hold {end - start} bytes, "
            f"but {dtype} of shape {shape} needs {bits // 8}"
        )
    return TensorInfo(name, dtype, tuple(shape), start, end)


def parse_header(header: bytes, file_size: int) -> Header:
    """Validate the JSON ``header`` (the ``n`` bytes after the length) of a
    file of ``file_size`` bytes; raises :class:`SafetensorError`."""
    try:
        text = header.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SafetensorError(f"header is not valid UTF-8 ({e.reason} at byte {8 + e.start})") from None
    try:
        root = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise SafetensorError(f"header is not valid JSON: {e}") from None
    except RecursionError:
        raise SafetensorError("header is not valid JSON: nested too deeply") from None
    if not isinstance(root, dict):
        raise SafetensorError(f"header is a JSON {type(root).__name__}, not an object")
    metadata = root.pop("__metadata__", None)
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise SafetensorError("__metadata__ is not an object of strings")
    tensors = sorted((_tensor(name, entry) for name, entry in root.items()), key=lambda t: (t.start, t.end))
    data_offset = 8 + len(header)
    data_size = file_size - data_offset
    at, prev = 0, None
    for t in tensors:
        if t.start != at:
            if t.start < at:
                raise SafetensorError(
                    f"tensor {t.name!r} at [{t.start}, {t.end}] overlaps tensor {prev.name!r} at [{prev.start}, {prev.end}]"  # type: ignore[union-attr]
                )
            raise SafetensorError(f"tensor {t.name!r} starts at {t.start}: data bytes [{at}, {t.start}) belong to no tensor")
        at, prev = t.end, t
    if at > data_size:
        raise SafetensorError(
            f"file is truncated: its tensors need {at} data bytes after the {data_offset}-byte header, "
            f"the file has {data_size} (file size {file_size})"
        )
    if at < data_size:
        raise SafetensorError(f"file has {data_size - at} bytes after the last tensor's data (ends at data offset {at})")
    return Header(tensors, metadata, data_offset)


def _pread_exact(fd: int, n: int, offset: int) -> bytes:
    parts = []
    while n > 0:
        b = os.pread(fd, n, offset)
        if not b:
            break
        parts.append(b)
        n -= len(b)
        offset += len(b)
    return b"".join(parts)


def read_header(fd: int) -> Header:
    """Read and validate the header of the open file ``fd``."""
    file_size = os.fstat(fd).st_size
    if file_size < 8:
        raise SafetensorError(f"file is {file_size} bytes, too short for the 8-byte header length")
    prefix = _pread_exact(fd, 8, 0)
    if len(prefix) < 8:
        raise SafetensorError("file ended inside the 8-byte header length")
    (n,) = struct.unpack("<Q", prefix)
    if n > MAX_HEADER_SIZE:
        raise SafetensorError(f"header length {n} exceeds the limit of {MAX_HEADER_SIZE} bytes")
    if 8 + n > file_size:
        raise SafetensorError(f"header length {n} passes the end of the {file_size}-byte file (truncated?)")
    header = _pread_exact(fd, n, 8)
    if len(header) < n:
        raise SafetensorError(f"file ended inside the {n}-byte header")
    return parse_header(header, file_size)


def read_exact(fh: FileHandle, memory: Any, size: int, file_offset: int, buffer_offset: int = 0) -> None:
    """Read exactly ``size`` bytes with hipfile, looping over short reads."""
    done = 0
    while done < size:
        n = fh.read(memory, size - done, file_offset + done, buffer_offset + done)
        if n <= 0:
            raise SafetensorError(
                f"file ended at byte {file_offset + done} while reading tensor data (did it shrink after the header was read?)"
            )
        done += n


class Framework:
    """What a loader needs from an array library: a byte allocation on a
    device, how hipfile reaches it, and typed views of it."""

    #: Name in error messages ("numpy", "torch").
    name = ""

    def dtype(self, info: TensorInfo, path: str) -> Any:
        """The library's dtype for the tensor; TypeError when it has none."""
        raise NotImplementedError

    def empty_bytes(self, nbytes: int, device: Any) -> Any:
        """A new 1-D uint8 allocation of ``nbytes`` on ``device``."""
        raise NotImplementedError

    def io_target(self, buf: Any) -> Any:
        """The object hipfile reads into for the allocation ``buf``."""
        return buf

    def is_device(self, buf: Any) -> bool:
        return False

    def address(self, buf: Any) -> int:
        raise NotImplementedError

    def typed_view(self, raw: Any, dtype: Any, info: TensorInfo) -> Any:
        """``raw`` (a uint8 slice, suitably aligned) as ``dtype`` and the tensor's shape."""
        raise NotImplementedError

    def copy_bytes(self, raw: Any) -> Any:
        """A new, aligned allocation holding the bytes of ``raw``."""
        raise NotImplementedError

    def contiguous(self, x: Any) -> Any:
        """``x`` (an indexing result) as a C-contiguous array or tensor."""
        raise NotImplementedError


def _itemsize(info: TensorInfo) -> int:
    return max(1, DTYPE_BITS[info.dtype] // 8)


def _views(fw: Framework, buf: Any, header: Header, dtypes: Dict[str, Any]) -> Dict[str, Any]:
    base = fw.address(buf) if header.data_size else 0
    out = {}
    for t in header.tensors:
        raw = buf[t.start : t.end]
        if (base + t.start) % _itemsize(t):
            # A typed view must start on an element boundary: such a
            # tensor gets its own (aligned) copy.
            raw = fw.copy_bytes(raw)
        out[t.name] = fw.typed_view(raw, dtypes[t.name], t)
    return out


def _read_data(fw: Framework, fh: FileHandle, header: Header, device: Any, register: Optional[bool]) -> Any:
    """The whole data region read with hipfile into one new allocation."""
    buf = fw.empty_bytes(header.data_size, device)
    if header.data_size == 0:
        return buf
    target = fw.io_target(buf)
    if register is None:
        register = fw.is_device(buf)
    if register:
        with Buffer(target) as reg:
            read_exact(fh, reg, header.data_size, header.data_offset)
    else:
        read_exact(fh, target, header.data_size, header.data_offset)
    return buf


def load_file(fw: Framework, filename: PathType, device: Any, register: Optional[bool] = None) -> Dict[str, Any]:
    """Every tensor of the file, as views of one allocation on ``device``."""
    path = os.fspath(filename)
    with Driver(), FileHandle(filename, os.O_RDONLY) as fh:
        fd = fh.fd
        assert fd is not None
        try:
            header = read_header(fd)
            # Unsupported dtypes fail before the big read, not after it.
            dtypes = {t.name: fw.dtype(t, path) for t in header.tensors}
            buf = _read_data(fw, fh, header, device, register)
        except SafetensorError as e:
            raise SafetensorError(f"{path}: {e}") from None
    return _views(fw, buf, header, dtypes)


class SafeOpen:
    """Lazy access to one file: the header is read on entry, each
    :meth:`get_tensor` reads only that tensor's bytes into its own
    allocation. Use as a context manager (or call :meth:`close`)."""

    def __init__(self, fw: Framework, filename: PathType, device: Any) -> None:
        self._fw = fw
        self._device = device
        self._path = os.fspath(filename)
        self._driver: Optional[Driver] = Driver()
        self._driver.open()
        self._fh: Optional[FileHandle] = None
        try:
            fh = FileHandle(filename, os.O_RDONLY)
            fh.open()
            self._fh = fh
            assert fh.fd is not None
            try:
                self._header = read_header(fh.fd)
            except SafetensorError as e:
                raise SafetensorError(f"{self._path}: {e}") from None
        except BaseException:
            self.close()
            raise

    def _open(self) -> FileHandle:
        if self._fh is None:
            raise RuntimeError(f"{self._path!r} is closed")
        return self._fh

    def keys(self) -> List[str]:
        """The tensor names, in file order."""
        self._open()
        return self._header.keys()

    def offset_keys(self) -> List[str]:
        """The tensor names, in file order (as ``safetensors`` names it)."""
        return self.keys()

    def metadata(self) -> Optional[Dict[str, str]]:
        """The header's ``__metadata__``, or ``None``."""
        self._open()
        return None if self._header.metadata is None else dict(self._header.metadata)

    def _info(self, name: str) -> TensorInfo:
        self._open()
        if name not in self._header:
            raise KeyError(f"{self._path}: no tensor named {name!r}")
        return self._header[name]

    def _read_rows(self, t: TensorInfo, lo: int, hi: int) -> Any:
        """Rows ``[lo, hi)`` of the first dimension (the whole of a scalar)."""
        fh = self._open()
        dtype = self._fw.dtype(t, self._path)
        rows = (hi - lo,) + t.shape[1:] if t.shape else ()
        row_bytes = t.nbytes // t.shape[0] if t.shape and t.shape[0] else 0
        start = t.start + lo * row_bytes if t.shape else t.start
        nbytes = (hi - lo) * row_bytes if t.shape else t.nbytes
        buf = self._fw.empty_bytes(nbytes, self._device)
        if nbytes:
            try:
                read_exact(fh, self._fw.io_target(buf), nbytes, self._header.data_offset + start)
            except SafetensorError as e:
                raise SafetensorError(f"{self._path}: {e}") from None
        return self._fw.typed_view(buf, dtype, TensorInfo(t.name, t.dtype, rows, start, start + nbytes))

    def get_tensor(self, name: str) -> Any:
        """Read tensor ``name``; ``KeyError`` if the file has none of that name."""
        t = self._info(name)
        return self._read_rows(t, 0, t.shape[0] if t.shape else 0)

    def get_slice(self, name: str) -> "TensorSlice":
        """A lazy slice of tensor ``name``: ``get_shape()``, ``get_dtype()``,
        and indexing (``f.get_slice("w")[:, 128:256]``), which reads only
        the rows the first index selects."""
        return TensorSlice(self, self._info(name))

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def close(self) -> None:
        fh, self._fh = self._fh, None
        driver, self._driver = self._driver, None
        try:
            if fh is not None:
                fh.close()
        finally:
            if driver is not None:
                driver.close()

    def __enter__(self) -> "SafeOpen":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if getattr(self, "_fh", None) is not None or getattr(self, "_driver", None) is not None:
                self.close()
        except Exception:
            pass


class TensorSlice:
    """What :meth:`SafeOpen.get_slice` returns."""

    def __init__(self, owner: SafeOpen, info: TensorInfo) -> None:
        self._owner = owner
        self._info = info

    def get_shape(self) -> List[int]:
        return list(self._info.shape)

    def get_dtype(self) -> str:
        """The safetensors dtype name (``"BF16"``, ``"F32"``, ...)."""
        return self._info.dtype

    def __getitem__(self, index: Any) -> Any:
        t, owner = self._info, self._owner
        idx = index if isinstance(index, tuple) else (index,)
        first = idx[0] if idx else Ellipsis
        n0 = t.shape[0] if t.shape else 0
        local: Any
        if t.shape and isinstance(first, slice) and (first.step is None or first.step > 0):
            start, stop, step = first.indices(n0)
            lo, hi = start, max(start, stop)
            local = slice(0, hi - lo, step)
        elif t.shape and isinstance(first, int) and not isinstance(first, bool):
            i = first + n0 if first < 0 else first
            if not 0 <= i < n0:
                raise IndexError(f"index {first} is out of range for dimension 0 of {t.name!r} (size {n0})")
            lo, hi, local = i, i + 1, 0
        else:
            # Anything else (Ellipsis first, arrays, negative steps, a
            # scalar tensor): read it all and let the library index.
            return owner._fw.contiguous(owner.get_tensor(t.name)[index])
        rows = owner._read_rows(t, lo, hi)
        return owner._fw.contiguous(rows[(local,) + idx[1:]])
