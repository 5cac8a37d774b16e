"""Shared fixtures: real files in a temporary directory, a real hipfs
mount (`hipfs serve` + FUSE `hipfs mount` as child processes), and a check
that every test leaves the driver's reference count where it found it."""

import os
import pathlib
import shutil
import socket
import subprocess
import time

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


REPO = pathlib.Path(__file__).resolve().parents[2]


def hipfs_bin():
    candidates = [os.environ.get("HIPFS_BIN")]
    candidates += [str(REPO / "target" / p / "hipfs") for p in ("release", "debug")]
    candidates.append(shutil.which("hipfs"))
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


def wait_for(cond, what, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


@pytest.fixture
def hipfs_mount(tmp_path):
    exe = hipfs_bin()
    if exe is None:
        pytest.skip("no hipfs binary (set HIPFS_BIN or cargo build --release --bin hipfs)")
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")
    export, mnt = tmp_path / "export", tmp_path / "mnt"
    export.mkdir()
    mnt.mkdir()
    port = free_port()
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = subprocess.Popen([exe, "serve", str(export), "--listen", f"127.0.0.1:{port}"], **quiet)
    client = None
    try:

        def accepting():
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return True
            except OSError:
                return False

        wait_for(accepting, "hipfs serve did not start")
        client = subprocess.Popen([exe, "mount", "-f", f"127.0.0.1:{port}", str(mnt)], **quiet)
        try:
            wait_for(lambda: mounted(mnt), "hipfs mount did not appear")
        except TimeoutError:
            pytest.skip("hipfs mount did not come up (FUSE not usable here?)")
        yield export, mnt
    finally:
        if client is not None:
            subprocess.run([exe, "umount", str(mnt)], **quiet, timeout=30)
            try:
                client.wait(timeout=10)
            except subprocess.TimeoutExpired:
                client.kill()
                client.wait()
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
