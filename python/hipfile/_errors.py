"""``HipFileException``: the exception every hipFile (non-OS) failure raises."""

from typing import Any, Optional, Tuple, Union

from . import _hipfile
from ._enums import OpError

__all__ = ["HipFileException"]


def _as_op_error(code: int) -> Union[OpError, int]:
    try:
        return OpError(code)
    except ValueError:
        # A code this version does not know stays a plain int.
        return code


class HipFileException(Exception):
    """A hipFile operation failed.

    ``hipfile_err`` is the ``hipFileOpError_t`` code (an :class:`OpError`
    member when it is one); ``hip_err`` is the GPU runtime's ``hipError_t``,
    meaningful only when ``hipfile_err`` is ``OpError.HIP_DRIVER_ERROR``.
    ``detail`` (an extension) says what the library was doing, when known.
    """

    def __init__(self, hipfile_err: int, hip_err: int = 0, detail: Optional[str] = None) -> None:
        super().__init__(int(hipfile_err), int(hip_err))
        self._hipfile_err = _as_op_error(int(hipfile_err))
        self._hip_err = int(hip_err)
        self._detail = detail or None

    @property
    def hipfile_err(self) -> Union[OpError, int]:
        """The ``hipFileOpError_t`` code."""
        return self._hipfile_err

    @property
    def hip_err(self) -> int:
        """The ``hipError_t`` code (only meaningful for ``HIP_DRIVER_ERROR``)."""
        return self._hip_err

    @property
    def detail(self) -> Optional[str]:
        """What the library was doing when it failed, if it said."""
        return self._detail

    def __str__(self) -> str:
        code = int(self._hipfile_err)
        name = self._hipfile_err.name if isinstance(self._hipfile_err, OpError) else "unknown"
        text = f"{_hipfile.op_error_string(code)} (hipFile error {code}, {name})"
        if code == OpError.HIP_DRIVER_ERROR:
            text += f" [HIP error {self._hip_err}]"
        if self._detail:
            text += f": {self._detail}"
        return text

    def __repr__(self) -> str:
        return f"HipFileException({int(self._hipfile_err)}, {self._hip_err}, {self._detail!r})"

    def __reduce__(self) -> Tuple[Any, ...]:
        # Keep the detail across pickling (multiprocessing workers raise these).
        return (type(self), (int(self._hipfile_err), self._hip_err, self._detail))
