"""OpError, FileHandleType and HipFileException, as the reference states them."""

import pickle
from enum import IntEnum

import pytest

import hipfile
from hipfile import FileHandleType, HipFileException, OpError

# The C ABI's numbers and strings (hipfile-c-abi.md), checked against what
# the package exposes (whose values come from the Rust core).
C_CODES = {
    "SUCCESS": 0,
    "DRIVER_NOT_INITIALIZED": 5001,
    "DRIVER_INVALID_PROPS": 5002,
    "DRIVER_UNSUPPORTED_LIMIT": 5003,
    "DRIVER_VERSION_MISMATCH": 5004,
    "DRIVER_VERSION_READ_ERROR": 5005,
    "DRIVER_CLOSING": 5006,
    "PLATFORM_NOT_SUPPORTED": 5007,
    "IO_NOT_SUPPORTED": 5008,
    "DEVICE_NOT_SUPPORTED": 5009,
    "DRIVER_ERROR": 5010,
    "HIP_DRIVER_ERROR": 5011,
    "HIP_POINTER_INVALID": 5012,
    "HIP_MEMORY_TYPE_INVALID": 5013,
    "HIP_POINTER_RANGE_ERROR": 5014,
    "HIP_CONTEXT_MISMATCH": 5015,
    "INVALID_MAPPING_SIZE": 5016,
    "INVALID_MAPPING_RANGE": 5017,
    "INVALID_FILE_TYPE": 5018,
    "INVALID_FILE_OPEN_FLAG": 5019,
    "DIO_NOT_SET": 5020,
    "INVALID_VALUE": 5022,
    "MEMORY_ALREADY_REGISTERED": 5023,
    "MEMORY_NOT_REGISTERED": 5024,
    "PERMISSION_DENIED": 5025,
    "DRIVER_ALREADY_OPEN": 5026,
    "HANDLE_NOT_REGISTERED": 5027,
    "HANDLE_ALREADY_REGISTERED": 5028,
    "DEVICE_NOT_FOUND": 5029,
    "INTERNAL_ERROR": 5030,
    "GET_NEW_FD_FAILED": 5031,
    "DRIVER_SETUP_ERROR": 5033,
    "IO_DISABLED": 5034,
    "BATCH_SUBMIT_FAILED": 5035,
    "GPU_MEMORY_PINNING_FAILED": 5036,
    "BATCH_FULL": 5037,
    "ASYNC_NOT_SUPPORTED": 5038,
    "IO_MAX_ERROR": 5039,
}


def test_op_error_is_an_int_enum_with_every_reference_member_and_its_c_value():
    assert issubclass(OpError, IntEnum)
    assert {m.name: m.value for m in OpError} == C_CODES


def test_file_handle_type_is_an_int_enum_with_the_c_values():
    assert issubclass(FileHandleType, IntEnum)
    assert {m.name: m.value for m in FileHandleType} == {
        "OPAQUE_FD": 1,
        "OPAQUE_WIN32": 2,
        "USERSPACE_FS": 3,
    }


def test_op_error_description_is_the_c_error_string():
    assert OpError.HANDLE_NOT_REGISTERED.description == "File handle for GPU IO is not registered"
    assert OpError.SUCCESS.description == "hipFile success"


def test_exception_exposes_both_codes_as_given():
    e = HipFileException(OpError.MEMORY_NOT_REGISTERED, 0)
    assert e.hipfile_err == 5024
    assert e.hipfile_err is OpError.MEMORY_NOT_REGISTERED
    assert e.hip_err == 0
    assert isinstance(e, Exception)


def test_exception_accepts_plain_ints_and_maps_known_codes_to_members():
    e = HipFileException(5027, 3)
    assert e.hipfile_err is OpError.HANDLE_NOT_REGISTERED
    assert e.hip_err == 3


def test_str_includes_the_op_error_string_but_not_a_hip_code_for_ordinary_errors():
    s = str(HipFileException(OpError.INVALID_VALUE, 0))
    assert "One or more arguments have an invalid value" in s
    assert "5022" in s
    assert "HIP error" not in s


def test_str_appends_the_hip_code_for_hip_driver_errors():
    s = str(HipFileException(OpError.HIP_DRIVER_ERROR, 700))
    assert "GPU driver error: Inspect hip_drv_err for additional information" in s
    assert "HIP error 700" in s


def test_str_of_an_unknown_code_says_so_instead_of_failing():
    e = HipFileException(5032, 0)
    assert e.hipfile_err == 5032
    assert "Unknown hipFile error" in str(e)


def test_exception_survives_pickling_with_its_codes_and_detail():
    e = HipFileException(OpError.HIP_DRIVER_ERROR, 98, "copying to the device")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is HipFileException
    assert (back.hipfile_err, back.hip_err, back.detail) == (OpError.HIP_DRIVER_ERROR, 98, "copying to the device")
    assert str(back) == str(e)


def test_the_package_exports_the_reference_names():
    for name in (
        "Buffer",
        "Driver",
        "FileHandle",
        "FileHandleType",
        "HipFileException",
        "OpError",
        "driver_get_properties",
        "get_version",
    ):
        assert hasattr(hipfile, name), name
        assert name in hipfile.__all__


def test_exceptions_raised_by_the_core_are_hip_file_exceptions_with_detail():
    with pytest.raises(HipFileException) as info:
        hipfile.Driver().close()  # the driver is closed: nothing to close
    assert info.value.hipfile_err is OpError.DRIVER_NOT_INITIALIZED
    assert info.value.detail
