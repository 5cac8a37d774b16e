#!/usr/bin/env python3
"""GPU round trips through hipfile, checked by checksum.

Run on a machine with a GPU and CuPy or PyTorch (CUDA or ROCm builds)::

    python python/tests/gpu_check.py [--size-mib 96] [--dir /some/fs]
                                     [--hipfs-file /mnt/hipfs/some/file]

For each available library it writes a file of random bytes, reads it into
device memory (registered and unregistered, at unaligned file and buffer
offsets, buffered and O_DIRECT), copies the device bytes back and compares
SHA-256 digests with the file's; then writes device memory to a file and
compares again. ``--hipfs-file`` also reads a file of a hipfs mount with
``FileHandleType.USERSPACE_FS`` (the direct remote path) into device memory
and checks it against an ordinary read of the same file.

Exits 0 with a "SKIP" line when neither CuPy nor a GPU-enabled PyTorch is
installed, 1 when any check fails.
"""

import argparse
import hashlib
import os
import sys
import tempfile
import time

import numpy as np

import hipfile
from hipfile import Buffer, Driver, FileHandle, FileHandleType

O_DIRECT = getattr(os, "O_DIRECT", 0)


def sha(b) -> str:
    return hashlib.sha256(memoryview(b)).hexdigest()


class Torch:
    name = "torch"

    def __init__(self):
        import torch

        if not torch.cuda.is_available():
            raise ImportError("torch has no GPU")
        self.torch = torch
        self.device = f"{torch.cuda.get_device_name(0)} (torch {torch.__version__})"

    def empty(self, n):
        return self.torch.empty(n, dtype=self.torch.uint8, device="cuda")

    def from_host(self, host: np.ndarray):
        return self.torch.from_numpy(host).to("cuda")

    def to_host(self, dev) -> np.ndarray:
        self.torch.cuda.synchronize()
        return dev.cpu().numpy()

    def fill(self, dev, value):
        dev.fill_(value)


class Cupy:
    name = "cupy"

    def __init__(self):
        import cupy

        cupy.cuda.runtime.getDeviceCount()
        self.cp = cupy
        props = cupy.cuda.runtime.getDeviceProperties(0)
        self.device = f"{props['name'].decode()} (cupy {cupy.__version__})"

    def empty(self, n):
        return self.cp.empty(n, dtype=self.cp.uint8)

    def from_host(self, host: np.ndarray):
        return self.cp.asarray(host)

    def to_host(self, dev) -> np.ndarray:
        self.cp.cuda.runtime.deviceSynchronize()
        return self.cp.asnumpy(dev)

    def fill(self, dev, value):
        dev.fill(value)


def libraries():
    found, why = [], []
    for cls in (Cupy, Torch):
        try:
            found.append(cls())
        except Exception as e:  # ImportError, or a runtime without a device
            why.append(f"{cls.name}: {e}")
    return found, why


def check(results, what, ok, detail=""):
    results.append((what, ok))
    print(f"{'PASS' if ok else 'FAIL'}  {what}{'  ' + detail if detail else ''}", flush=True)


def round_trips(lib, directory, size, results):
    rng = np.random.default_rng(1234)
    data = rng.integers(0, 256, size, dtype=np.uint8)
    path = os.path.join(directory, f"hipfile-gpu-{lib.name}.bin")
    data.tofile(path)
    try:
        cases = [
            (0, 0, size),  # aligned, whole file
            (4096, 0, size - 4096),
            (4097, 513, size - 8192),  # unaligned file and device offsets
            (12345, 1, 1 << 20),
        ]
        with Driver():
            for flags, fname in ((os.O_RDONLY, "buffered"), (os.O_RDONLY | O_DIRECT, "O_DIRECT")):
                for registered in (False, True):
                    for foff, boff, n in cases:
                        dev = lib.empty(size)
                        lib.fill(dev, 0)
                        t0 = time.perf_counter()
                        with FileHandle(path, flags) as fh:
                            if registered:
                                with Buffer(dev) as buf:
                                    got = fh.read(buf, n, foff, boff)
                            else:
                                got = fh.read(dev, n, foff, boff)
                        dt = time.perf_counter() - t0
                        host = lib.to_host(dev)
                        ok = got == n and sha(host[boff : boff + n]) == sha(data[foff : foff + n])
                        ok = ok and not host[:boff].any()
                        reg = "registered" if registered else "unregistered"
                        check(
                            results,
                            f"{lib.name} read {fname} {reg} foff={foff} boff={boff} n={n}",
                            ok,
                            f"{n / dt / 1e9:.2f} GB/s",
                        )
            # Device -> file, then compare the file's digest.
            src = lib.from_host(data)
            out = os.path.join(directory, f"hipfile-gpu-{lib.name}-out.bin")
            for flags, fname in ((os.O_RDWR, "buffered"), (os.O_RDWR | O_DIRECT, "O_DIRECT")):
                with FileHandle(out, os.O_CREAT | os.O_TRUNC | flags, 0o644) as fh:
                    with Buffer(src) as buf:
                        w1 = fh.write(buf, size - 777, 0, 777)
                    w2 = fh.write(src, 777, size - 777, 0)  # unregistered, unaligned tail
                with open(out, "rb") as f:
                    written = f.read()
                expect = np.concatenate([data[777:], data[:777]])
                ok = (w1, w2) == (size - 777, 777) and sha(written) == sha(expect)
                detail = ""
                if not ok:
                    got = np.frombuffer(written, dtype=np.uint8)
                    n = min(len(got), len(expect))
                    bad = np.flatnonzero(got[:n] != expect[:n])
                    first = int(bad[0]) if len(bad) else None
                    detail = f"wrote {w1}+{w2}, file {len(got)} bytes, first differing byte {first}, {len(bad)} differ"
                check(results, f"{lib.name} write {fname} device->file (registered + unregistered)", ok, detail)
            os.unlink(out)
    finally:
        os.unlink(path)


def userspace_read(lib, path, results):
    want = open(path, "rb").read()
    n = len(want)
    dev = lib.empty(max(n, 1))
    with Driver():
        with FileHandle(path, os.O_RDONLY, handle_type=FileHandleType.USERSPACE_FS) as fh:
            with Buffer(dev) as buf:
                t0 = time.perf_counter()
                got = fh.read(buf, n, 0, 0)
                dt = time.perf_counter() - t0
    host = lib.to_host(dev)[:n]
    check(
        results,
        f"{lib.name} USERSPACE_FS read of {path} ({n} bytes)",
        got == n and sha(host) == sha(want),
        f"{n / max(dt, 1e-9) / 1e9:.2f} GB/s",
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=96)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="directory for the test files")
    ap.add_argument("--hipfs-file", help="a file inside a hipfs mount, for the USERSPACE_FS check")
    args = ap.parse_args()

    libs, why = libraries()
    if not libs:
        print("SKIP: no GPU array library: " + "; ".join(why))
        return 0
    print(f"hipfile {hipfile.__version__}, core {'.'.join(map(str, hipfile.get_version()))}")
    results = []
    for lib in libs:
        print(f"== {lib.name}: {lib.device}")
        round_trips(lib, args.dir, args.size_mib * 1024 * 1024 + 12345, results)
        if args.hipfs_file:
            userspace_read(lib, args.hipfs_file, results)
    failed = [w for w, ok in results if not ok]
    print(f"{len(results) - len(failed)}/{len(results)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
