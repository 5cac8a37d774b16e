"""The driver lifecycle and the module-level queries."""

from types import TracebackType
from typing import Dict, Optional, Tuple, Type

from . import _hipfile

__all__ = ["Driver", "get_version", "driver_get_properties"]


def get_version() -> Tuple[int, int, int]:
    """Return the hipFile library version as ``(major, minor, patch)``."""
    return tuple(_hipfile.get_version())  # type: ignore[return-value]


def driver_get_properties() -> Dict[str, int]:
    """Return the driver properties as ``{name: value}`` (sizes in KiB).

    The names flatten ``hipFileDriverProps_t``: the ``nvfs`` sub-struct's
    fields get an ``nvfs_`` prefix (``nvfs_major_version``, ...,
    ``nvfs_driver_control_flags``), the rest keep their C names
    (``feature_flags``, ..., ``max_batch_io_timeout_msecs``).
    """
    return dict(_hipfile.driver_get_properties())


class Driver:
    """The hipFile driver's lifecycle.

    The driver is reference-counted across the process: every :meth:`open`
    adds one reference, every :meth:`close` drops one, and the driver shuts
    down (deregistering every handle and buffer) when the count reaches zero.
    As a context manager it opens on entry and closes on exit::

        with Driver():
            ...  # driver open
    """

    def open(self) -> None:
        """Open the driver (one more reference). Raises ``HipFileException`` on failure."""
        _hipfile.driver_open()

    def close(self) -> None:
        """Close the driver once.

        Raises ``HipFileException`` (``DRIVER_NOT_INITIALIZED``) when the
        driver is not open.
        """
        _hipfile.driver_close()

    @staticmethod
    def use_count() -> int:
        """Return the driver's current reference count."""
        return int(_hipfile.use_count())

    def __enter__(self) -> "Driver":
        self.open()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()
