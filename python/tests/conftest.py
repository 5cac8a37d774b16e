"""Shared fixtures: real files in a temporary directory, and a check that
every test leaves the driver's reference count where it found it."""

import os

import pytest

import hipfile


def open_fds() -> set:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture(autouse=True)
def driver_count_restored():
    """Each test starts with the driver closed and must not leak references
    it opened explicitly; registration's implicit open (count 1, the C
    semantics) is closed here so the next test starts clean."""
    while hipfile.Driver.use_count() > 0:
        hipfile.Driver().close()
    yield
    while hipfile.Driver.use_count() > 0:
        hipfile.Driver().close()


@pytest.fixture
def payload() -> bytes:
    # Deterministic, position-dependent bytes: a misplaced byte changes the content.
    return bytes((i * 7 + (i >> 8) * 13 + (i >> 16)) & 0xFF for i in range(3 * 1024 * 1024 + 321))


@pytest.fixture
def data_file(tmp_path, payload):
    path = tmp_path / "data.bin"
    path.write_bytes(payload)
    return path
