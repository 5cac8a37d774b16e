"""safetensors checkpoints straight into PyTorch tensors, read with hipfile.

``hipfile.torch.load_file(path, device="cuda")`` is a drop-in for
``safetensors.torch.load_file``: the header is parsed and checked, the
whole data region is read by hipfile into one allocation on ``device``
(GPU memory directly, no host copy of the file in Python), and the
returned tensors are views of that allocation with the file's dtypes and
shapes. A tensor whose offset is not a multiple of its element size gets
its own copy. ``safe_open`` reads one tensor at a time.

Because the tensors share one allocation, it is freed only when all of
them are gone, and ``tensor.untyped_storage()`` is the whole checkpoint;
``.clone()`` a tensor that must own its memory.
"""

from typing import Any, Dict, Optional, Union

import torch

from ._safetensors import Framework, PathType, SafeOpen, SafetensorError, TensorInfo
from ._safetensors import load_file as _load_file

__all__ = ["load_file", "safe_open", "SafetensorError"]

# The dtypes safetensors.torch maps; the float8 and unsigned types exist
# only in newer torch releases.
_NAMES = {
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
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "F8_E8M0": "float8_e8m0fnu",
}
_DTYPES = {k: getattr(torch, v) for k, v in _NAMES.items() if isinstance(getattr(torch, v, None), torch.dtype)}

DeviceType = Union[str, int, "torch.device"]


def _device(device: DeviceType) -> "torch.device":
    # safetensors takes a bare integer as a CUDA device index.
    if isinstance(device, int) and not isinstance(device, bool):
        return torch.device("cuda", device)
    return torch.device(device)


class _Torch(Framework):
    name = "torch"

    def dtype(self, info: TensorInfo, path: str) -> Any:
        try:
            return _DTYPES[info.dtype]
        except KeyError:
            raise TypeError(
                f"{path}: tensor {info.name!r} has dtype {info.dtype}, which torch {torch.__version__} has no type for"
            ) from None

    def empty_bytes(self, nbytes: int, device: Any) -> Any:
        return torch.empty(nbytes, dtype=torch.uint8, device=device)

    def io_target(self, buf: Any) -> Any:
        # A CPU tensor is reached through numpy's buffer (shared memory);
        # a GPU tensor through __cuda_array_interface__.
        return buf.numpy() if buf.device.type == "cpu" else buf

    def is_device(self, buf: Any) -> bool:
        return bool(buf.device.type != "cpu")

    def address(self, buf: Any) -> int:
        return int(buf.data_ptr())

    def typed_view(self, raw: Any, dtype: Any, info: TensorInfo) -> Any:
        return raw.view(dtype).reshape(info.shape)

    def copy_bytes(self, raw: Any) -> Any:
        return raw.clone()

    def contiguous(self, x: Any) -> Any:
        return x.contiguous()


_TORCH = _Torch()


def load_file(
    filename: PathType, device: DeviceType = "cpu", *, register: Optional[bool] = None
) -> Dict[str, "torch.Tensor"]:
    """Load every tensor of the safetensors file ``filename`` onto ``device``.

    ``device`` is what ``safetensors.torch.load_file`` takes (``"cpu"``,
    ``"cuda"``, ``"cuda:1"``, an index, a ``torch.device``). ``register``
    registers the allocation with hipfile for the read (default: for GPU
    memory, not for host memory). Raises ``SafetensorError`` (a
    ``ValueError``) for a malformed file, ``TypeError`` for a dtype this
    torch has no type for, ``OSError`` / ``HipFileException`` when the
    read fails.
    """
    return _load_file(_TORCH, filename, _device(device), register)


def safe_open(filename: PathType, framework: str = "pt", device: DeviceType = "cpu") -> SafeOpen:
    """Lazy access, as ``safetensors.safe_open``: ``keys()``, ``metadata()``
    and ``get_tensor(name)``, which reads only that tensor (into its own
    allocation on ``device``). ``framework`` is ``"pt"``, or ``"np"`` for
    numpy arrays. Use as a context manager."""
    if framework in ("np", "numpy"):
        from . import numpy as _np

        return _np.safe_open(filename, "np", device)
    if framework not in ("pt", "torch"):
        raise ValueError(f"framework {framework!r}: hipfile.torch.safe_open gives 'pt' tensors or 'np' arrays")
    return SafeOpen(_TORCH, filename, _device(device))
