"""The hipFile enumerations, with their values taken from the native core.

The member names are the reference's; the numbers come from the Rust core
(``_hipfile.OP_ERRORS`` / ``_hipfile.HANDLE_TYPES``) rather than being typed
in again here, so the Python enum cannot drift from the C ABI. A name missing
from the core fails at import time.
"""

from enum import IntEnum

from . import _hipfile

_OP = _hipfile.OP_ERRORS
_HT = _hipfile.HANDLE_TYPES

__all__ = ["OpError", "FileHandleType"]


class OpError(IntEnum):
    """``hipFileOpError_t``: every hipFile result code, with the C values."""

    #: ``hipFileSuccess``: hipFile success.
    SUCCESS = _OP["SUCCESS"]
    #: ``hipFileDriverNotInitialized``: GPU IO driver is not loaded.
    DRIVER_NOT_INITIALIZED = _OP["DRIVER_NOT_INITIALIZED"]
    #: ``hipFileDriverInvalidProps``: Invalid GPU IO driver property provided.
    DRIVER_INVALID_PROPS = _OP["DRIVER_INVALID_PROPS"]
    #: ``hipFileDriverUnsupportedLimit``: GPU IO Driver property value is unsupported.
    DRIVER_UNSUPPORTED_LIMIT = _OP["DRIVER_UNSUPPORTED_LIMIT"]
    #: ``hipFileDriverVersionMismatch``: hipFile version does not match GPU IO driver version.
    DRIVER_VERSION_MISMATCH = _OP["DRIVER_VERSION_MISMATCH"]
    #: ``hipFileDriverVersionReadError``: Unable to read the GPU IO driver version.
    DRIVER_VERSION_READ_ERROR = _OP["DRIVER_VERSION_READ_ERROR"]
    #: ``hipFileDriverClosing``: GPU IO driver is closing and not accepting new requests.
    DRIVER_CLOSING = _OP["DRIVER_CLOSING"]
    #: ``hipFilePlatformNotSupported``: hipFile is not supported on the current platform.
    PLATFORM_NOT_SUPPORTED = _OP["PLATFORM_NOT_SUPPORTED"]
    #: ``hipFileIONotSupported``: hipFile is not supported on the selected file.
    IO_NOT_SUPPORTED = _OP["IO_NOT_SUPPORTED"]
    #: ``hipFileDeviceNotSupported``: The selected GPU does not support hipFile.
    DEVICE_NOT_SUPPORTED = _OP["DEVICE_NOT_SUPPORTED"]
    #: ``hipFileDriverError``: GPU IO driver error.
    DRIVER_ERROR = _OP["DRIVER_ERROR"]
    #: ``hipFileHipDriverError``: GPU driver error: Inspect hip_drv_err for additional information.
    HIP_DRIVER_ERROR = _OP["HIP_DRIVER_ERROR"]
    #: ``hipFileHipPointerInvalid``: Invalid GPU pointer.
    HIP_POINTER_INVALID = _OP["HIP_POINTER_INVALID"]
    #: ``hipFileHipMemoryTypeInvalid``: Memory type backing pointer is incompatible with hipFile.
    HIP_MEMORY_TYPE_INVALID = _OP["HIP_MEMORY_TYPE_INVALID"]
    #: ``hipFileHipPointerRangeError``: Pointer range exceeds allocated memory region.
    HIP_POINTER_RANGE_ERROR = _OP["HIP_POINTER_RANGE_ERROR"]
    #: ``hipFileHipContextMismatch``: GPU driver context mismatch.
    HIP_CONTEXT_MISMATCH = _OP["HIP_CONTEXT_MISMATCH"]
    #: ``hipFileInvalidMappingSize``: Accessing memory beyond pinned memory buffer.
    INVALID_MAPPING_SIZE = _OP["INVALID_MAPPING_SIZE"]
    #: ``hipFileInvalidMappingRange``: Accessing memory beyond mapped memory region.
    INVALID_MAPPING_RANGE = _OP["INVALID_MAPPING_RANGE"]
    #: ``hipFileInvalidFileType``: Unsupported file type.
    INVALID_FILE_TYPE = _OP["INVALID_FILE_TYPE"]
    #: ``hipFileInvalidFileOpenFlag``: Unsupported file open flags.
    INVALID_FILE_OPEN_FLAG = _OP["INVALID_FILE_OPEN_FLAG"]
    #: ``hipFileDIONotSet``: O_DIRECT flag not set.
    DIO_NOT_SET = _OP["DIO_NOT_SET"]
    #: ``hipFileInvalidValue``: One or more arguments have an invalid value.
    INVALID_VALUE = _OP["INVALID_VALUE"]
    #: ``hipFileMemoryAlreadyRegistered``: Device pointer is already registered.
    MEMORY_ALREADY_REGISTERED = _OP["MEMORY_ALREADY_REGISTERED"]
    #: ``hipFileMemoryNotRegistered``: Device pointer is not registered.
    MEMORY_NOT_REGISTERED = _OP["MEMORY_NOT_REGISTERED"]
    #: ``hipFilePermissionDenied``: Permission error on device or file access.
    PERMISSION_DENIED = _OP["PERMISSION_DENIED"]
    #: ``hipFileDriverAlreadyOpen``: GPU IO driver is already open.
    DRIVER_ALREADY_OPEN = _OP["DRIVER_ALREADY_OPEN"]
    #: ``hipFileHandleNotRegistered``: File handle for GPU IO is not registered.
    HANDLE_NOT_REGISTERED = _OP["HANDLE_NOT_REGISTERED"]
    #: ``hipFileHandleAlreadyRegistered``: File handle for GPU IO is already registered.
    HANDLE_ALREADY_REGISTERED = _OP["HANDLE_ALREADY_REGISTERED"]
    #: ``hipFileDeviceNotFound``: Selected device not found.
    DEVICE_NOT_FOUND = _OP["DEVICE_NOT_FOUND"]
    #: ``hipFileInternalError``: Internal GPU IO library error.
    INTERNAL_ERROR = _OP["INTERNAL_ERROR"]
    #: ``hipFileGetNewFDFailed``: Unable to obtain a new file descriptor.
    GET_NEW_FD_FAILED = _OP["GET_NEW_FD_FAILED"]
    #: ``hipFileDriverSetupError``: GPU IO Driver initialization error.
    DRIVER_SETUP_ERROR = _OP["DRIVER_SETUP_ERROR"]
    #: ``hipFileIODisabled``: GPU IO config file prohibits GPU IO on specified file.
    IO_DISABLED = _OP["IO_DISABLED"]
    #: ``hipFileBatchSubmitFailed``: Failed to submit request for batch operation.
    BATCH_SUBMIT_FAILED = _OP["BATCH_SUBMIT_FAILED"]
    #: ``hipFileGPUMemoryPinningFailed``: Failed to allocated pinned device memory.
    GPU_MEMORY_PINNING_FAILED = _OP["GPU_MEMORY_PINNING_FAILED"]
    #: ``hipFileBatchFull``: Batch operation queue is full.
    BATCH_FULL = _OP["BATCH_FULL"]
    #: ``hipFileAsyncNotSupported``: hipFile async IO is not supported.
    ASYNC_NOT_SUPPORTED = _OP["ASYNC_NOT_SUPPORTED"]
    #: ``hipFileIOMaxError``: Internal flag to mark largest hipFile error code.
    IO_MAX_ERROR = _OP["IO_MAX_ERROR"]

    @property
    def description(self) -> str:
        """The code's string, as ``hipFileGetOpErrorString`` gives it."""
        return _hipfile.op_error_string(int(self))


class FileHandleType(IntEnum):
    """``hipFileFileHandleType_t``: how a file is registered."""

    #: ``hipFileHandleTypeOpaqueFD``: a POSIX file descriptor.
    OPAQUE_FD = _HT["OPAQUE_FD"]
    #: ``hipFileHandleTypeOpaqueWin32``: a Windows handle (not implemented).
    OPAQUE_WIN32 = _HT["OPAQUE_WIN32"]
    #: ``hipFileHandleTypeUserspaceFS``: a file on a userspace (RDMA)
    #: filesystem, such as a hipfs mount.
    USERSPACE_FS = _HT["USERSPACE_FS"]
