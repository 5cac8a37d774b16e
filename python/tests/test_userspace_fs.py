"""FileHandleType.USERSPACE_FS on a real hipfs mount: a `hipfs serve` and a
FUSE `hipfs mount` as child processes; reads and writes go from the library
to the server directly, checked against the exported file.

The `hipfs_mount` fixture is in conftest.py; these tests are skipped when
no `hipfs` binary is found (set HIPFS_BIN, or build it with
`cargo build --release --bin hipfs`) or FUSE is unavailable.
"""

import os

import numpy as np

from hipfile import Buffer, Driver, FileHandle, FileHandleType


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
