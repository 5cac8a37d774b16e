"""get_version, driver_get_properties and Driver's reference counting."""

import pytest

import hipfile
from hipfile import Driver, HipFileException, OpError

PROPERTY_NAMES = {
    "nvfs_major_version",
    "nvfs_minor_version",
    "nvfs_poll_thresh_size",
    "nvfs_max_direct_io_size",
    "nvfs_driver_status_flags",
    "nvfs_driver_control_flags",
    "feature_flags",
    "max_device_cache_size",
    "per_buffer_cache_size",
    "max_device_pinned_mem_size",
    "max_batch_io_count",
    "max_batch_io_timeout_msecs",
}


def test_get_version_is_a_three_int_tuple_matching_the_package_version():
    v = hipfile.get_version()
    assert isinstance(v, tuple) and len(v) == 3
    assert all(isinstance(x, int) for x in v)
    assert ".".join(map(str, v)) == hipfile.__version__
    assert v[:2] == (0, 5)


def test_driver_properties_have_every_flattened_name_as_ints():
    props = hipfile.driver_get_properties()
    assert isinstance(props, dict)
    assert set(props) == PROPERTY_NAMES
    assert all(isinstance(v, int) for v in props.values())


def test_driver_properties_report_the_library_version_and_limits():
    props = hipfile.driver_get_properties()
    major, minor, _ = hipfile.get_version()
    assert (props["nvfs_major_version"], props["nvfs_minor_version"]) == (major, minor)
    assert props["max_batch_io_count"] == 128
    assert props["nvfs_max_direct_io_size"] > 0
    # Batch I/O is a supported feature (hipFileBatchIOSupported, bit 1).
    assert props["feature_flags"] & (1 << 1)


def test_driver_properties_work_with_the_driver_open_too():
    with Driver():
        assert set(hipfile.driver_get_properties()) == PROPERTY_NAMES


def test_open_and_close_move_the_use_count_by_one():
    d = Driver()
    assert Driver.use_count() == 0
    d.open()
    assert Driver.use_count() == 1
    d.open()
    assert Driver.use_count() == 2
    d.close()
    assert Driver.use_count() == 1
    d.close()
    assert Driver.use_count() == 0


def test_constructing_a_driver_does_not_open_it():
    Driver()
    assert Driver.use_count() == 0


def test_use_count_is_static():
    assert Driver.use_count() == Driver().use_count() == 0


def test_context_manager_opens_on_entry_and_closes_on_exit():
    with Driver() as d:
        assert isinstance(d, Driver)
        assert Driver.use_count() == 1
        with Driver():
            assert Driver.use_count() == 2
        assert Driver.use_count() == 1
    assert Driver.use_count() == 0


def test_context_manager_closes_when_the_body_raises():
    with pytest.raises(KeyError):
        with Driver():
            raise KeyError("boom")
    assert Driver.use_count() == 0


def test_closing_a_closed_driver_raises_driver_not_initialized():
    with pytest.raises(HipFileException) as info:
        Driver().close()
    assert info.value.hipfile_err == OpError.DRIVER_NOT_INITIALIZED
    assert Driver.use_count() == 0


def test_unbalanced_close_after_context_exit_raises():
    d = Driver()
    with d:
        pass
    with pytest.raises(HipFileException):
        d.close()
