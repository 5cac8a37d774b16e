"""FileHandleType.USERSPACE_FS on a real hipfs mount: a `hipfs serve` and a
FUSE `hipfs mount` as child processes; reads and writes go from the library
to the server directly, checked against the exported file.

Skipped when no `hipfs` binary is found (set HIPFS_BIN, or build it with
`cargo build --release --bin hipfs`) or FUSE is unavailable.
"""

import os
import pathlib
import shutil
import socket
import subprocess
import time

import numpy as np
import pytest

from hipfile import Buffer, Driver, FileHandle, FileHandleType

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


def test_userspace_fs_reads_of_a_hipfs_file_match_the_export(hipfs_mount):
    export, mnt = hipfs_mount
    data = np.random.default_rng(5).integers(0, 256, (9 << 20) + 12345, dtype=np.uint8)
    data.tofile(export / "data.bin")
    out = np.zeros(data.size + 64, dtype=np.uint8)
    with Driver(), FileHandle(mnt / "data.bin", os.O_RDONLY, handle_type=FileHandleType.USERSPACE_FS) as fh:
        assert fh.handle_type is FileHandleType.USERSPACE_FS
        for foff, boff, n in [(0, 0, 4096), (1, 3, 70001), (4097, 64, 5 << 20), (0, 0, data.size)]:
            out[:] = 0
            assert fh.read(out, n, foff, boff) == n
            assert np.array_equal(out[boff : boff + n], data[foff : foff + n]), (foff, boff, n)
        with Buffer(out) as buf:
            assert fh.read(buf, data.size, 0, 0) == data.size
        assert np.array_equal(out[: data.size], data)
        # Short at end of file, zero past it.
        assert fh.read(out, 1000, data.size - 10, 0) == 10
        assert fh.read(out, 1000, data.size + 10, 0) == 0


def test_userspace_fs_writes_reach_the_exported_file(hipfs_mount):
    export, mnt = hipfs_mount
    (export / "w.bin").write_bytes(b"\0" * 100000)
    src = np.arange(50000, dtype=np.uint16)
    with FileHandle(mnt / "w.bin", os.O_RDWR, handle_type=FileHandleType.USERSPACE_FS) as fh:
        assert fh.write(src, 30001, 777, 5) == 30001
    raw = (export / "w.bin").read_bytes()
    assert raw[777 : 777 + 30001] == src.tobytes()[5 : 5 + 30001]
    assert raw[:777] == b"\0" * 777


def test_userspace_fs_and_opaque_fd_read_the_same_bytes_from_a_mount(hipfs_mount):
    export, mnt = hipfs_mount
    payload = os.urandom(300000)
    (export / "same.bin").write_bytes(payload)
    a = bytearray(len(payload))
    b = bytearray(len(payload))
    with FileHandle(mnt / "same.bin", os.O_RDONLY, handle_type=FileHandleType.USERSPACE_FS) as fh:
        fh.read(a, len(a), 0, 0)
    with FileHandle(mnt / "same.bin", os.O_RDONLY) as fh:
        fh.read(b, len(b), 0, 0)
    assert bytes(a) == bytes(b) == payload
