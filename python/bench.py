#!/usr/bin/env python3
"""Reading one large file into memory: hipfile beside the usual ways.

    python python/bench.py [--size-mib 1024] [--repeat 3] [--dir /tmp] [--cold]

Host rows read the file into a numpy array: ``numpy.fromfile``,
``open(..., buffering=0).readinto`` (looped: one call stops at 2 GiB) into a
preallocated array, and hipfile
(unregistered through the page cache; registered with O_DIRECT). GPU rows
(when PyTorch with a GPU is installed) read into a ``uint8`` CUDA tensor:
hipfile with a registered buffer, beside torch loading the same bytes
(``torch.from_file`` + ``.to("cuda")``, and ``readinto`` a pinned tensor +
copy). Every method's result is checked against the file's bytes.

``--cold`` drops the page cache before every run (needs root); otherwise
the file is read once first and all runs are from the page cache. Prints a
Markdown table; times are the median of ``--repeat`` runs.
"""

import argparse
import hashlib
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

# Use the installed package, not the source tree next to this script (which
# has no compiled extension).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import hipfile  # noqa: E402
from hipfile import Buffer, Driver, FileHandle  # noqa: E402

O_DIRECT = getattr(os, "O_DIRECT", 0)


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{platform.node()}: {cpu}, {os.cpu_count()} CPUs, {mem:.0f} GiB RAM, Linux {platform.release()}"


def readinto_all(path, arr) -> int:
    """``readinto`` until full: one read(2) stops at 2 GiB - 4 KiB."""
    view = memoryview(arr).cast("B")
    done = 0
    with open(path, "rb", buffering=0) as f:
        while done < len(view):
            n = f.readinto(view[done:])
            if not n:
                break
            done += n
    return done


def timed(fn, repeat, cold, prepare=None):
    times, out = [], None
    for _ in range(repeat):
        if prepare:
            prepare()
        if cold:
            drop_caches()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--cold", action="store_true", help="drop the page cache before each run (root)")
    ap.add_argument("--no-gpu", action="store_true")
    args = ap.parse_args()

    size = args.size_mib * 1024 * 1024
    path = os.path.join(args.dir, "hipfile-bench.bin")
    rng = np.random.default_rng(0)
    with open(path, "wb") as f:
        for _ in range(0, size, 64 << 20):
            f.write(rng.integers(0, 256, min(64 << 20, size - f.tell()), dtype=np.uint8).tobytes())
    want = hashlib.sha256(open(path, "rb").read()).hexdigest()
    if args.cold and not drop_caches():
        print("--cold needs write access to /proc/sys/vm/drop_caches", file=sys.stderr)
        return 2
    rows = []

    def row(name, seconds, ok):
        rows.append((name, seconds, size / seconds / 2**30, ok))
        print(f"  {name}: {seconds * 1000:.0f} ms {'ok' if ok else 'WRONG BYTES'}", file=sys.stderr, flush=True)

    def digest(a) -> bool:
        return hashlib.sha256(memoryview(a)).hexdigest() == want

    try:
        np.fromfile(path, dtype=np.uint8)  # warm the cache (and the allocator)
        t, a = timed(lambda: np.fromfile(path, dtype=np.uint8), args.repeat, args.cold)
        row("numpy.fromfile (new array)", t, digest(a))

        host = np.empty(size, dtype=np.uint8)
        host.fill(0)  # fault the pages in once, as a reused buffer would be

        def readinto():
            return readinto_all(path, host)

        t, _ = timed(readinto, args.repeat, args.cold, prepare=lambda: host.fill(0))
        row("open().readinto (preallocated)", t, digest(host))

        with Driver():

            def hip_read(flags, target):
                def go():
                    with FileHandle(path, flags) as fh:
                        return fh.read(target, size, 0, 0)

                return go

            t, _ = timed(hip_read(os.O_RDONLY, host), args.repeat, args.cold, prepare=lambda: host.fill(0))
            row("hipfile read, unregistered (preallocated)", t, digest(host))
            with Buffer(host) as buf:
                direct = hip_read(os.O_RDONLY | O_DIRECT, buf)
                t, _ = timed(direct, args.repeat, args.cold, prepare=lambda: host.fill(0))
                row("hipfile read, registered, O_DIRECT", t, digest(host))

            if not args.no_gpu:
                gpu_rows(path, size, args, row, digest, hip_read)
    finally:
        os.unlink(path)

    print(f"\nMachine: {machine()}")
    cache = "cold (page cache dropped before each run)" if args.cold else "warm (page cache)"
    print(f"hipfile {hipfile.__version__}; file: {args.size_mib} MiB in {args.dir}, {cache}, median of {args.repeat}\n")
    print("| method | time (ms) | GiB/s | bytes checked |")
    print("|---|---:|---:|---|")
    for name, t, gibs, ok in rows:
        print(f"| {name} | {t * 1000:.0f} | {gibs:.2f} | {'yes' if ok else 'MISMATCH'} |")
    return 0 if all(ok for *_, ok in rows) else 1


def gpu_rows(path, size, args, row, digest, hip_read):
    try:
        import torch
    except ImportError:
        print("(no torch: GPU rows skipped)", file=sys.stderr)
        return
    if not torch.cuda.is_available():
        print("(torch has no GPU: GPU rows skipped)", file=sys.stderr)
        return
    print(f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}", file=sys.stderr)

    def check(dev) -> bool:
        torch.cuda.synchronize()
        return digest(dev.cpu().numpy())

    def sync_after(fn):
        def go():
            r = fn()
            torch.cuda.synchronize()
            return r

        return go

    dev = torch.empty(size, dtype=torch.uint8, device="cuda")
    with Buffer(dev) as buf:
        direct = sync_after(hip_read(os.O_RDONLY | O_DIRECT, buf))
        t, _ = timed(direct, args.repeat, args.cold, prepare=lambda: dev.zero_())
        row("GPU: hipfile read into CUDA tensor, registered, O_DIRECT", t, check(dev))
    t, _ = timed(sync_after(hip_read(os.O_RDONLY, dev)), args.repeat, args.cold, prepare=lambda: dev.zero_())
    row("GPU: hipfile read into CUDA tensor, unregistered", t, check(dev))

    t, out = timed(
        sync_after(lambda: torch.from_file(path, shared=False, size=size, dtype=torch.uint8).to("cuda")),
        args.repeat,
        args.cold,
    )
    row('GPU: torch.from_file + .to("cuda")', t, check(out))
    del out

    pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True)

    def pinned_copy():
        readinto_all(path, pinned.numpy())
        dev.copy_(pinned, non_blocking=True)

    t, _ = timed(sync_after(pinned_copy), args.repeat, args.cold, prepare=lambda: dev.zero_())
    row("GPU: readinto pinned tensor + copy_", t, check(dev))


if __name__ == "__main__":
    sys.exit(main())
