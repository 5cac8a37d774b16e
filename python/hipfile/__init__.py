"""hipfile: GPU-direct storage (the hipFile API) for Python.

The API is the one AMD's ``hipfile`` bindings document (``Driver``,
``FileHandle``, ``Buffer``, ``HipFileException``, ``OpError``,
``FileHandleType``, ``get_version``, ``driver_get_properties``), backed by
the hipfs Rust core. Beyond the reference, memory arguments accept numpy,
CuPy and PyTorch arrays (buffer protocol, ``__cuda_array_interface__``,
DLPack) directly.

Example::

    import os, numpy as np, hipfile
    data = np.empty(1 << 20, dtype=np.uint8)
    with hipfile.Driver(), hipfile.FileHandle("/data/x", os.O_RDONLY) as fh:
        n = fh.read(data, data.nbytes, 0, 0)
"""

try:
    from . import _hipfile
except ImportError as e:  # pragma: no cover - depends on how it was installed
    raise ImportError(
        "hipfile's native extension (hipfile._hipfile) is missing: this is the source "
        "tree, not an installed package. Install with `pip install ./python` and run "
        "from outside python/ (or build in place with `maturin develop`)."
    ) from e
from ._driver import Driver, driver_get_properties, get_version
from ._enums import FileHandleType, OpError
from ._errors import HipFileException
from ._file import FileHandle
from ._memory import Buffer

#: ``HIPFILE_RDMA_REGISTER``: also register a buffer with the RDMA transport.
RDMA_REGISTER: int = _hipfile.RDMA_REGISTER
#: ``HIPFILE_RDMA_RELAXED_ORDERING``.
RDMA_RELAXED_ORDERING: int = _hipfile.RDMA_RELAXED_ORDERING

__version__: str = _hipfile.__version__

# Show (and pickle) the public classes under the package name users import.
for _cls in (Buffer, Driver, FileHandle, FileHandleType, HipFileException, OpError):
    _cls.__module__ = __name__
del _cls


def __getattr__(name: str) -> object:
    # ``hipfile.torch`` / ``hipfile.numpy`` (the safetensors loaders) import
    # their array library, so they load on first use, not with the package.
    if name in ("torch", "numpy"):
        import importlib

        try:
            return importlib.import_module(f".{name}", __name__)
        except ImportError as e:
            # getattr(hipfile, "torch", None) and hasattr() expect AttributeError.
            raise AttributeError(f"hipfile.{name} is unavailable: {e}") from e
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Buffer",
    "Driver",
    "FileHandle",
    "FileHandleType",
    "HipFileException",
    "OpError",
    "RDMA_REGISTER",
    "RDMA_RELAXED_ORDERING",
    "driver_get_properties",
    "get_version",
]
