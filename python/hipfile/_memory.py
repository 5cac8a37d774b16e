"""Memory: the reference's ``Buffer`` and how any Python object that holds
bytes (buffer protocol, ``__cuda_array_interface__``, DLPack, raw pointers)
becomes an address and a length."""

import ctypes
import math
import operator
from types import TracebackType
from typing import Any, Optional, Type

from . import _hipfile
from ._enums import OpError
from ._errors import HipFileException

__all__ = ["Buffer"]


class _Memory:
    """An address, its length when known, and what keeps it valid."""

    __slots__ = ("ptr", "nbytes", "readonly", "keep", "source", "stream", "_export")

    def __init__(
        self,
        ptr: int,
        nbytes: Optional[int],
        readonly: bool,
        keep: Any,
        source: str,
        export: Any = None,
        stream: Optional[int] = None,
    ) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self.readonly = readonly
        # The object (and DLPack capsule) whose lifetime guarantees the memory.
        self.keep = keep
        self.source = source
        # The GPU stream the producer orders its work on (CUDA array
        # interface v3 / DLPack); synchronized before every transfer.
        self.stream = stream
        # A held buffer-protocol export (pins a bytearray's storage, etc.).
        self._export = export

    def synchronize(self) -> None:
        """Wait for the producer's queued work on this memory (e.g. a copy
        into it that cudaMemcpy returned from before its DMA finished)."""
        if self.stream:
            _hipfile.stream_synchronize(self.stream)

    def release(self) -> None:
        if self._export is not None:
            self._export.release()
            self._export = None


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _itemsize(typestr: str) -> int:
    # Array-interface type strings: byte order, kind, size in bytes ("<f4").
    try:
        return int(typestr[2:])
    except (TypeError, ValueError):
        raise ValueError(f"unsupported array interface typestr {typestr!r}") from None


def _from_array_interface(obj: Any, iface: dict, source: str) -> _Memory:
    data = iface.get("data")
    if not isinstance(data, tuple) or len(data) != 2:
        raise ValueError(f"{source} of {type(obj).__name__} has no (pointer, read_only) data")
    ptr, readonly = data
    shape = tuple(iface.get("shape", ()))
    itemsize = _itemsize(iface.get("typestr", ""))
    strides = iface.get("strides")
    if strides is not None and math.prod(shape) > 0:
        expected = itemsize
        for dim, stride in reversed(list(zip(shape, strides))):
            if dim != 1 and stride != expected:
                raise BufferError(f"{type(obj).__name__} is not C-contiguous; hipfile moves one contiguous byte range")
            expected *= dim
    # CUDA array interface v3: "stream" names the stream to synchronize on
    # before use (1 legacy default, 2 per-thread default, None: no need).
    stream = iface.get("stream")
    stream = stream if _is_int(stream) and stream > 0 else None
    return _Memory(int(ptr or 0), math.prod(shape) * itemsize, bool(readonly), obj, source, stream=stream)


# DLPack device types whose producers order work on streams, and the stream
# value that asks them to make the memory ready for the default stream:
# kDLCUDA and kDLCUDAManaged (1: legacy default stream), kDLROCM (0: default).
_DLPACK_STREAM = {2: 1, 13: 1, 10: 0}


def _from_dlpack(obj: Any) -> _Memory:
    stream = None
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is not None:
        stream = _DLPACK_STREAM.get(int(dev()[0]))
    if stream is None:
        capsule = obj.__dlpack__()
    else:
        try:
            capsule = obj.__dlpack__(stream=stream)
        except TypeError:  # a producer from before the stream argument
            capsule = obj.__dlpack__()
    ptr, nbytes, _device_type, _device_id = _hipfile.dlpack_info(capsule)
    # The capsule owns a reference to the tensor until it is collected.
    return _Memory(ptr, nbytes, False, (obj, capsule), "DLPack", stream=stream)


def _resolve(obj: Any) -> _Memory:
    """Find the bytes behind ``obj``; raises TypeError when there are none."""
    if isinstance(obj, Buffer):
        return _Memory(obj.ptr, obj.length, obj._readonly, obj, "Buffer", stream=obj._memory.stream)
    if _is_int(obj):
        if obj < 0:
            raise ValueError(f"pointer {obj} is negative")
        return _Memory(obj, None, False, None, "pointer")
    if isinstance(obj, ctypes.c_void_p):
        return _Memory(obj.value or 0, None, False, obj, "ctypes.c_void_p")
    if isinstance(obj, ctypes._Pointer):  # type: ignore[attr-defined]
        return _Memory(ctypes.cast(obj, ctypes.c_void_p).value or 0, None, False, obj, "ctypes pointer")
    # Device memory first: CuPy arrays and CUDA tensors export this.
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_array_interface(obj, cai, "__cuda_array_interface__")
    try:
        export = _hipfile.export_buffer(obj)
    except TypeError:
        export = None
    if export is not None:
        return _Memory(export.ptr, export.nbytes, export.readonly, obj, "buffer protocol", export)
    ai = getattr(obj, "__array_interface__", None)
    if isinstance(ai, dict) and ai.get("data") is not None:
        return _from_array_interface(obj, ai, "__array_interface__")
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj)
    raise TypeError(
        f"{type(obj).__name__} is not memory hipfile can use: pass a Buffer, an integer "
        "address, a ctypes pointer, or an object with the buffer protocol, "
        "__cuda_array_interface__ or __dlpack__"
    )


def _io_memory(buffer: Any, size: int, buffer_offset: int, writable: bool) -> _Memory:
    """Resolve the memory of one read or write and check the range fits."""
    mem = _resolve(buffer)
    try:
        if writable and mem.readonly:
            raise TypeError(f"cannot read into read-only memory ({type(buffer).__name__})")
        if mem.nbytes is not None and buffer_offset >= 0 and buffer_offset + size > mem.nbytes:
            raise HipFileException(
                OpError.INVALID_VALUE,
                0,
                f"{size} bytes at buffer offset {buffer_offset} pass the end of the {mem.nbytes}-byte buffer",
            )
    except BaseException:
        mem.release()
        raise
    return mem


class Buffer:
    """Registration of memory with the hipFile driver.

    A ``Buffer`` never owns or frees the memory; it manages the registration
    and, when built from an object, keeps that object alive (and its buffer
    export held) for as long as the ``Buffer`` exists.

    ``Buffer(buffer_ptr, length, flags)`` takes an integer address as in the
    reference. As an extension ``buffer_ptr`` may also be any object holding
    bytes (numpy/CuPy arrays, PyTorch tensors, ``bytearray``, ctypes arrays,
    ``mmap``): then ``length`` defaults to the object's size in bytes.

    As a context manager it registers on entry and deregisters on exit.
    """

    def __init__(self, buffer_ptr: Any, length: Optional[int] = None, flags: int = 0) -> None:
        if _is_int(buffer_ptr):
            if length is None:
                raise TypeError("Buffer(buffer_ptr, length, flags): an integer pointer needs a length")
            mem = _resolve(buffer_ptr)
        else:
            mem = _resolve(buffer_ptr)
            if length is None:
                if mem.nbytes is None:
                    raise TypeError(f"the length of a {mem.source} is unknown; pass length")
                length = mem.nbytes
        length = operator.index(length)
        if length < 0:
            raise ValueError(f"length {length} is negative")
        if mem.nbytes is not None and length > mem.nbytes:
            mem.release()
            raise ValueError(f"length {length} exceeds the object's {mem.nbytes} bytes")
        self._ptr = mem.ptr
        self._length = length
        self._flags = operator.index(flags)
        self._readonly = mem.readonly
        self._memory = mem
        self._registered = False

    @classmethod
    def from_ctypes_void_p(cls, ctypes_void_p: ctypes.c_void_p, length: int, flags: int = 0) -> "Buffer":
        """Create a ``Buffer`` from a ``ctypes.c_void_p``; ``ValueError`` if it is null."""
        if not isinstance(ctypes_void_p, ctypes.c_void_p):
            raise TypeError(f"expected ctypes.c_void_p, got {type(ctypes_void_p).__name__}")
        if not ctypes_void_p.value:
            raise ValueError("ctypes_void_p is a null pointer")
        return cls(ctypes_void_p.value, length, flags)

    @property
    def ptr(self) -> int:
        """Integer address of the memory (read-only)."""
        return self._ptr

    @property
    def length(self) -> int:
        """Length in bytes (read-only)."""
        return self._length

    @property
    def flags(self) -> int:
        """Registration flags (read-only)."""
        return self._flags

    @property
    def registered(self) -> bool:
        """Whether this ``Buffer`` is registered with the driver."""
        return self._registered

    @property
    def obj(self) -> Any:
        """The object the memory belongs to, or ``None`` for a raw address."""
        keep = self._memory.keep
        return keep[0] if isinstance(keep, tuple) else keep

    def register(self) -> None:
        """Register the memory with the driver (opening it implicitly if closed).

        Raises ``HipFileException`` on failure (``MEMORY_ALREADY_REGISTERED``
        when it is registered already, ``INVALID_VALUE`` for a null pointer
        or zero length, ``HIP_POINTER_RANGE_ERROR`` for a range past its
        allocation).
        """
        _hipfile.buf_register(self._ptr, self._length, self._flags)
        self._registered = True

    def deregister(self) -> None:
        """Deregister the memory; a no-op when it is not registered.

        Raises ``HipFileException`` on failure. If the driver was closed to
        zero meanwhile, the registration is already gone and this succeeds.
        """
        if not self._registered:
            return
        try:
            _hipfile.buf_deregister(self._ptr)
        except HipFileException as e:
            if e.hipfile_err not in (OpError.DRIVER_CLOSING, OpError.MEMORY_NOT_REGISTERED):
                raise
        self._registered = False

    def __enter__(self) -> "Buffer":
        self.register()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.deregister()

    def __del__(self) -> None:
        # A collected Buffer must not leave the driver pointing at memory
        # whose owner it was keeping alive.
        try:
            if getattr(self, "_registered", False):
                self.deregister()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "registered" if self._registered else "unregistered"
        return f"<hipfile.Buffer ptr={self._ptr:#x} length={self._length} flags={self._flags} {state}>"
