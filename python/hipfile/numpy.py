"""safetensors checkpoints into numpy arrays, read with hipfile.

``hipfile.numpy.load_file(path)`` is a drop-in for
``safetensors.numpy.load_file``: same arrays (dtype, shape, bytes), read
with one hipfile read of the whole data region into one host allocation;
the arrays are views of it (a tensor whose offset is not a multiple of its
element size gets its own aligned copy). Bad files raise
:class:`hipfile.numpy.SafetensorError` (a ``ValueError``).
"""

from typing import Any, Dict, Optional

import numpy as np

from ._safetensors import Framework, PathType, SafeOpen, SafetensorError, TensorInfo
from ._safetensors import load_file as _load_file

__all__ = ["load_file", "safe_open", "SafetensorError"]

# The dtypes safetensors.numpy maps, little-endian as the format stores them.
_DTYPES = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "U16": np.dtype("<u2"),
    "I16": np.dtype("<i2"),
    "F16": np.dtype("<f2"),
    "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"),
    "F32": np.dtype("<f4"),
    "U64": np.dtype("<u8"),
    "I64": np.dtype("<i8"),
    "F64": np.dtype("<f8"),
    "C64": np.dtype("<c8"),
}


class _Numpy(Framework):
    name = "numpy"

    def dtype(self, info: TensorInfo, path: str) -> Any:
        try:
            return _DTYPES[info.dtype]
        except KeyError:
            raise TypeError(f"{path}: tensor {info.name!r} has dtype {info.dtype}, which numpy has no type for") from None

    def empty_bytes(self, nbytes: int, device: Any) -> Any:
        return np.empty(nbytes, dtype=np.uint8)

    def address(self, buf: Any) -> int:
        return int(buf.ctypes.data)

    def typed_view(self, raw: Any, dtype: Any, info: TensorInfo) -> Any:
        return raw.view(dtype).reshape(info.shape)

    def copy_bytes(self, raw: Any) -> Any:
        return raw.copy()

    def contiguous(self, x: Any) -> Any:
        # Also turns the numpy scalar that full integer indexing gives into a 0-d array.
        return x if isinstance(x, np.ndarray) and x.flags.c_contiguous else np.array(x, order="C")


_NUMPY = _Numpy()


def _check_device(device: Any) -> None:
    if device != "cpu":
        raise ValueError(f"hipfile.numpy loads into host memory; device {device!r} is not 'cpu'")


def load_file(filename: PathType, *, register: Optional[bool] = None) -> Dict[str, np.ndarray]:
    """Load every tensor of the safetensors file ``filename`` as numpy arrays.

    ``register`` registers the host allocation with hipfile for the read
    (default: no). Raises ``SafetensorError`` for a malformed file,
    ``TypeError`` for a dtype numpy has no type for (e.g. BF16),
    ``OSError`` when the file cannot be opened or read.
    """
    return _load_file(_NUMPY, filename, "cpu", register)


def safe_open(filename: PathType, framework: str = "np", device: Any = "cpu") -> SafeOpen:
    """Lazy access: ``keys()``, ``metadata()`` and ``get_tensor(name)``,
    which reads only that tensor. Use as a context manager."""
    if framework not in ("np", "numpy"):
        raise ValueError(f"hipfile.numpy.safe_open gives numpy arrays; framework {framework!r} is not 'np'")
    _check_device(device)
    return SafeOpen(_NUMPY, filename, "cpu")
