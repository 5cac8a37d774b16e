//! Errors: one [`Error`] type for the whole crate, each mapping to exactly one [`OpError`].

use std::fmt;

/// Base of the hipFile error codes (`HIPFILE_BASE_ERR`).
pub const HIPFILE_BASE_ERR: i32 = 5000;

macro_rules! op_errors {
    ($( $name:ident = $num:expr, $cname:literal, $py:literal, $text:literal; )*) => {
        /// Every `hipFileOpError_t` code, with the C numbering.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum OpError {
            $( #[doc = $text] $name = $num, )*
        }

        impl OpError {
            /// Every code, in numeric order.
            pub const ALL: &'static [OpError] = &[$(OpError::$name,)*];

            /// The code's string, exactly as `hipFileGetOpErrorString` returns it.
            pub fn as_str(self) -> &'static str {
                match self { $(OpError::$name => $text,)* }
            }

            /// The C enumerator name (`hipFileSuccess`, ...).
            pub fn c_name(self) -> &'static str {
                match self { $(OpError::$name => $cname,)* }
            }

            /// The Python `OpError` member name (`SUCCESS`, ...).
            pub fn python_name(self) -> &'static str {
                match self { $(OpError::$name => $py,)* }
            }

            /// The code for a number, if it is one.
            pub fn from_code(code: i32) -> Option<OpError> {
                match code { $($num => Some(OpError::$name),)* _ => None }
            }
        }
    };
}

op_errors! {
    Success = 0, "hipFileSuccess", "SUCCESS", "hipFile success";
    DriverNotInitialized = 5001, "hipFileDriverNotInitialized", "DRIVER_NOT_INITIALIZED", "GPU IO driver is not loaded";
    DriverInvalidProps = 5002, "hipFileDriverInvalidProps", "DRIVER_INVALID_PROPS", "Invalid GPU IO driver property provided";
    DriverUnsupportedLimit = 5003, "hipFileDriverUnsupportedLimit", "DRIVER_UNSUPPORTED_LIMIT", "GPU IO Driver property value is unsupported";
    DriverVersionMismatch = 5004, "hipFileDriverVersionMismatch", "DRIVER_VERSION_MISMATCH", "hipFile version does not match GPU IO driver version";
    DriverVersionReadError = 5005, "hipFileDriverVersionReadError", "DRIVER_VERSION_READ_ERROR", "Unable to read the GPU IO driver version";
    DriverClosing = 5006, "hipFileDriverClosing", "DRIVER_CLOSING", "GPU IO driver is closing and not accepting new requests";
    PlatformNotSupported = 5007, "hipFilePlatformNotSupported", "PLATFORM_NOT_SUPPORTED", "hipFile is not supported on the current platform";
    IoNotSupported = 5008, "hipFileIONotSupported", "IO_NOT_SUPPORTED", "hipFile is not supported on the selected file";
    DeviceNotSupported = 5009, "hipFileDeviceNotSupported", "DEVICE_NOT_SUPPORTED", "The selected GPU does not support hipFile";
    DriverError = 5010, "hipFileDriverError", "DRIVER_ERROR", "GPU IO driver error";
    HipDriverError = 5011, "hipFileHipDriverError", "HIP_DRIVER_ERROR", "GPU driver error: Inspect hip_drv_err for additional information";
    HipPointerInvalid = 5012, "hipFileHipPointerInvalid", "HIP_POINTER_INVALID", "Invalid GPU pointer";
    HipMemoryTypeInvalid = 5013, "hipFileHipMemoryTypeInvalid", "HIP_MEMORY_TYPE_INVALID", "Memory type backing pointer is incompatible with hipFile";
    HipPointerRangeError = 5014, "hipFileHipPointerRangeError", "HIP_POINTER_RANGE_ERROR", "Pointer range exceeds allocated memory region";
    HipContextMismatch = 5015, "hipFileHipContextMismatch", "HIP_CONTEXT_MISMATCH", "GPU driver context mismatch";
    InvalidMappingSize = 5016, "hipFileInvalidMappingSize", "INVALID_MAPPING_SIZE", "Accessing memory beyond pinned memory buffer";
    InvalidMappingRange = 5017, "hipFileInvalidMappingRange", "INVALID_MAPPING_RANGE", "Accessing memory beyond mapped memory region";
    InvalidFileType = 5018, "hipFileInvalidFileType", "INVALID_FILE_TYPE", "Unsupported file type";
    InvalidFileOpenFlag = 5019, "hipFileInvalidFileOpenFlag", "INVALID_FILE_OPEN_FLAG", "Unsupported file open flags";
    DioNotSet = 5020, "hipFileDIONotSet", "DIO_NOT_SET", "O_DIRECT flag not set";
    InvalidValue = 5022, "hipFileInvalidValue", "INVALID_VALUE", "One or more arguments have an invalid value";
    MemoryAlreadyRegistered = 5023, "hipFileMemoryAlreadyRegistered", "MEMORY_ALREADY_REGISTERED", "Device pointer is already registered";
    MemoryNotRegistered = 5024, "hipFileMemoryNotRegistered", "MEMORY_NOT_REGISTERED", "Device pointer is not registered";
    PermissionDenied = 5025, "hipFilePermissionDenied", "PERMISSION_DENIED", "Permission error on device or file access";
    DriverAlreadyOpen = 5026, "hipFileDriverAlreadyOpen", "DRIVER_ALREADY_OPEN", "GPU IO driver is already open";
    HandleNotRegistered = 5027, "hipFileHandleNotRegistered", "HANDLE_NOT_REGISTERED", "File handle for GPU IO is not registered";
    HandleAlreadyRegistered = 5028, "hipFileHandleAlreadyRegistered", "HANDLE_ALREADY_REGISTERED", "File handle for GPU IO is already registered";
    DeviceNotFound = 5029, "hipFileDeviceNotFound", "DEVICE_NOT_FOUND", "Selected device not found";
    InternalError = 5030, "hipFileInternalError", "INTERNAL_ERROR", "Internal GPU IO library error";
    GetNewFdFailed = 5031, "hipFileGetNewFDFailed", "GET_NEW_FD_FAILED", "Unable to obtain a new file descriptor";
    DriverSetupError = 5033, "hipFileDriverSetupError", "DRIVER_SETUP_ERROR", "GPU IO Driver initialization error";
    IoDisabled = 5034, "hipFileIODisabled", "IO_DISABLED", "GPU IO config file prohibits GPU IO on specified file";
    BatchSubmitFailed = 5035, "hipFileBatchSubmitFailed", "BATCH_SUBMIT_FAILED", "Failed to submit request for batch operation";
    GpuMemoryPinningFailed = 5036, "hipFileGPUMemoryPinningFailed", "GPU_MEMORY_PINNING_FAILED", "Failed to allocated pinned device memory";
    BatchFull = 5037, "hipFileBatchFull", "BATCH_FULL", "Batch operation queue is full";
    AsyncNotSupported = 5038, "hipFileAsyncNotSupported", "ASYNC_NOT_SUPPORTED", "hipFile async IO is not supported";
    IoMaxError = 5039, "hipFileIOMaxError", "IO_MAX_ERROR", "Internal flag to mark largest hipFile error code";
}

/// The string for any code number; unknown numbers give "Unknown hipFile error".
pub fn op_error_string(code: i32) -> &'static str {
    OpError::from_code(code).map_or("Unknown hipFile error", OpError::as_str)
}

impl OpError {
    /// The numeric code.
    pub fn code(self) -> i32 {
        self as i32
    }
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.as_str(), self.code())
    }
}

/// The error every hipfs API returns.
///
/// It always carries one [`OpError`]; system errors carry the errno
/// (`OpError::Success` as the code is never used for an error, so a system
/// error is reported with the errno and `op == OpError::InternalError` only if
/// nothing better fits: see [`Error::system`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Error {
    op: OpError,
    gpu_code: i32,
    errno: Option<i32>,
    context: String,
}

impl Error {
    /// A hipFile error with a message saying what happened.
    pub fn new(op: OpError, context: impl Into<String>) -> Error {
        Error {
            op,
            gpu_code: 0,
            errno: None,
            context: context.into(),
        }
    }

    /// A system-call failure: the C API returns `-1` with this errno.
    pub fn system(errno: i32, context: impl Into<String>) -> Error {
        let op = match errno {
            libc::EACCES | libc::EPERM => OpError::PermissionDenied,
            libc::EBADF => OpError::InvalidFileOpenFlag,
            libc::EMFILE | libc::ENFILE => OpError::GetNewFdFailed,
            _ => OpError::InternalError,
        };
        Error {
            op,
            gpu_code: 0,
            errno: Some(errno),
            context: context.into(),
        }
    }

    /// A failure from the GPU runtime (`hipFileHipDriverError` + the runtime's code).
    pub fn gpu(code: i32, context: impl Into<String>) -> Error {
        Error {
            op: OpError::HipDriverError,
            gpu_code: code,
            errno: None,
            context: context.into(),
        }
    }

    /// The last OS error as a system error.
    pub fn last_os(context: impl Into<String>) -> Error {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        Error::system(errno, context)
    }

    /// The hipFile code.
    pub fn op(&self) -> OpError {
        self.op
    }

    /// The GPU runtime's error code (`hip_drv_err`), 0 when none.
    pub fn gpu_code(&self) -> i32 {
        self.gpu_code
    }

    /// The errno of a failed system call, if this is one.
    pub fn errno(&self) -> Option<i32> {
        self.errno
    }

    /// What happened, in words.
    pub fn context(&self) -> &str {
        &self.context
    }

    /// Adds context in front of the message.
    pub fn with_context(mut self, what: impl fmt::Display) -> Error {
        self.context = if self.context.is_empty() {
            what.to_string()
        } else {
            format!("{what}: {}", self.context)
        };
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.errno {
            Some(errno) => write!(
                f,
                "{}: {}",
                self.context,
                std::io::Error::from_raw_os_error(errno)
            ),
            None => {
                write!(f, "{} ({})", self.op.as_str(), self.op.code())?;
                if self.op == OpError::HipDriverError {
                    write!(f, " [GPU runtime error {}]", self.gpu_code)?;
                }
                if !self.context.is_empty() {
                    write!(f, ": {}", self.context)?;
                }
                Ok(())
            }
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::system(e.raw_os_error().unwrap_or(libc::EIO), e.to_string())
    }
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_the_c_numbers_and_strings() {
        assert_eq!(OpError::ALL.len(), 38);
        assert_eq!(OpError::HandleNotRegistered.code(), 5027);
        assert_eq!(OpError::DriverSetupError.code(), 5033);
        assert_eq!(OpError::from_code(5021), None);
        assert_eq!(OpError::from_code(5032), None);
        assert_eq!(op_error_string(5032), "Unknown hipFile error");
        assert_eq!(op_error_string(0), "hipFile success");
        assert_eq!(OpError::BatchFull.as_str(), "Batch operation queue is full");
        for op in OpError::ALL {
            assert_eq!(OpError::from_code(op.code()), Some(*op));
        }
    }

    #[test]
    fn display_includes_the_code_string() {
        let e = Error::new(OpError::InvalidValue, "buffer is null");
        let s = e.to_string();
        assert!(
            s.contains("One or more arguments have an invalid value"),
            "{s}"
        );
        assert!(s.contains("buffer is null"));
        let g = Error::gpu(700, "copy");
        assert!(g.to_string().contains("700"));
    }
}
