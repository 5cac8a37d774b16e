"""``FileHandle``: a file opened by path and registered with the driver."""

import operator
import os
from types import TracebackType
from typing import Any, Optional, Type, Union

from . import _hipfile
from ._enums import FileHandleType
from ._memory import _io_memory

__all__ = ["FileHandle"]

PathType = Union[str, "os.PathLike[str]"]


class FileHandle:
    """A file descriptor registered with the hipFile driver.

    Wraps ``os.open``/``os.close`` together with handle registration. The
    file is not opened until :meth:`open` is called or the context manager
    is entered::

        with FileHandle(path, os.O_RDONLY | os.O_DIRECT) as fh:
            fh.read(buf, size, 0, 0)
    """

    def __init__(
        self,
        path: PathType,
        flags: int,
        mode: int = 0o644,
        handle_type: FileHandleType = FileHandleType.OPAQUE_FD,
    ) -> None:
        self._path = os.fspath(path)
        self._flags = operator.index(flags)
        self._mode = operator.index(mode)
        self._fd: Optional[int] = None
        self._handle: Optional[int] = None
        self._handle_type = FileHandleType.OPAQUE_FD
        self.handle_type = handle_type

    @property
    def path(self) -> Any:
        """Filesystem path, as ``os.fspath`` gave it (read-only)."""
        return self._path

    @property
    def flags(self) -> int:
        """Flags passed to ``os.open`` (read-only)."""
        return self._flags

    @property
    def mode(self) -> int:
        """File creation permission bits (read-only); defaults to ``0o644``."""
        return self._mode

    @property
    def handle_type(self) -> FileHandleType:
        """``FileHandleType`` used for registration; settable while closed.

        Setting raises ``RuntimeError`` if the file is open, ``ValueError`` if
        the value is not a ``FileHandleType`` member and
        ``NotImplementedError`` for ``OPAQUE_WIN32``.
        """
        return self._handle_type

    @handle_type.setter
    def handle_type(self, value: FileHandleType) -> None:
        if self._handle is not None:
            raise RuntimeError("handle_type cannot change while the file is open")
        if not isinstance(value, FileHandleType):
            raise ValueError(f"{value!r} is not a FileHandleType member")
        if value is FileHandleType.OPAQUE_WIN32:
            raise NotImplementedError("FileHandleType.OPAQUE_WIN32 is not supported on this platform")
        self._handle_type = value

    @property
    def handle(self) -> Optional[int]:
        """Opaque hipFile handle, or ``None`` when the file is not open (read-only)."""
        return self._handle

    @property
    def fd(self) -> Optional[int]:
        """The file descriptor, or ``None`` when the file is not open."""
        return self._fd

    @property
    def closed(self) -> bool:
        """Whether the file is not open."""
        return self._handle is None

    def open(self) -> None:
        """Open the file and register it with the driver.

        Raises ``RuntimeError`` if already open, ``OSError`` if ``os.open``
        fails and ``HipFileException`` if registration fails (the file
        descriptor is closed again then). Registration opens the driver
        implicitly if it is closed.
        """
        if self._handle is not None:
            raise RuntimeError(f"{self._path!r} is already open")
        fd = os.open(self._path, self._flags, self._mode)
        try:
            handle = _hipfile.handle_register(fd, int(self._handle_type))
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._handle = handle

    def close(self) -> None:
        """Deregister the handle and close the descriptor; later calls do nothing."""
        handle, fd = self._handle, self._fd
        self._handle = None
        self._fd = None
        try:
            if handle is not None:
                _hipfile.handle_deregister(handle)
        finally:
            if fd is not None:
                os.close(fd)

    def _open_handle(self) -> int:
        if self._handle is None:
            raise RuntimeError(f"{self._path!r} is not open")
        return self._handle

    def read(self, buffer: Any, size: int, file_offset: int = 0, buffer_offset: int = 0) -> int:
        """Read ``size`` bytes at ``file_offset`` into ``buffer`` at ``buffer_offset``.

        ``buffer`` is a :class:`Buffer`, an integer address, a ctypes
        pointer, or any object with the buffer protocol,
        ``__cuda_array_interface__`` or ``__dlpack__``. Returns the number of
        bytes read (short only at end of file). The GIL is released while
        the bytes move.

        Raises ``RuntimeError`` if the handle is not open, ``OSError`` on a
        system error and ``HipFileException`` on a hipFile or HIP error.
        """
        return self._transfer(_hipfile.read, True, buffer, size, file_offset, buffer_offset)

    def write(self, buffer: Any, size: int, file_offset: int = 0, buffer_offset: int = 0) -> int:
        """Write ``size`` bytes from ``buffer`` at ``buffer_offset`` to ``file_offset``.

        Accepts the same ``buffer`` kinds as :meth:`read`; returns the number
        of bytes written. Raises as :meth:`read` does.
        """
        return self._transfer(_hipfile.write, False, buffer, size, file_offset, buffer_offset)

    def _transfer(self, call: Any, into: bool, buffer: Any, size: int, file_offset: int, buffer_offset: int) -> int:
        handle = self._open_handle()
        size = operator.index(size)
        file_offset = operator.index(file_offset)
        buffer_offset = operator.index(buffer_offset)
        if size < 0:
            raise ValueError(f"size {size} is negative")
        mem = _io_memory(buffer, size, buffer_offset, writable=into)
        try:
            # Work the producer queued on this memory (a copy into it that
            # returned before its DMA landed) must finish first.
            mem.synchronize()
            return int(call(handle, mem.ptr, size, file_offset, buffer_offset))
        finally:
            mem.release()

    def __enter__(self) -> "FileHandle":
        self.open()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # Do not leak the descriptor or the registration of a dropped handle.
        try:
            if getattr(self, "_handle", None) is not None or getattr(self, "_fd", None) is not None:
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = f"handle={self._handle}" if self._handle is not None else "closed"
        return (
            f"<hipfile.FileHandle path={self._path!r} flags={self._flags:#o} "
            f"mode={self._mode:#o} {self._handle_type.name} {state}>"
        )
