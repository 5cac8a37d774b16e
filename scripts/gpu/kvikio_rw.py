# Peer measurement beside hipfs: RAPIDS KvikIO reading FILE into CuPy device
# memory (threads x task size, as ../shared/tools/gpu-baseline/kvikio_bench.py
# does) and writing it back out to FILE.kvout. Median of REPEATS runs each.
# Usage: python3 kvikio_rw.py FILE [read|write|both] [REPEATS]
import os, statistics, sys, time
import cupy, kvikio, kvikio.defaults

path = sys.argv[1]
what = sys.argv[2] if len(sys.argv) > 2 else "both"
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
size = os.path.getsize(path)
buf = cupy.empty(size, dtype=cupy.uint8)
buf[:] = 0
cupy.cuda.runtime.deviceSynchronize()
print(f"kvikio {kvikio.__version__} compat_mode={kvikio.defaults.get('compat_mode')}", flush=True)


def timed(op):
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        n = op()
        ts.append(time.perf_counter() - t0)
        assert n == size, (n, size)
    return size / statistics.median(ts) / 2**30


if what in ("read", "both"):
    for nthreads in [8, 16, 32]:
        for task_mb in [4, 16]:
            kvikio.defaults.set({"num_threads": nthreads, "task_size": task_mb << 20})
            with kvikio.CuFile(path, "r") as f:
                g = timed(lambda: f.pread(buf).get())
            print(f"kvikio read  threads={nthreads:2d} task={task_mb:2d}MiB GiB/s={g:.2f}", flush=True)
if what in ("write", "both"):
    out = path + ".kvout"
    with kvikio.CuFile(path, "r") as f:
        f.pread(buf[: os.path.getsize(path)]).get()
    for nthreads in [16]:
        for task_mb in [16]:
            kvikio.defaults.set({"num_threads": nthreads, "task_size": task_mb << 20})

            def w():
                with kvikio.CuFile(out, "w") as f:
                    n = f.pwrite(buf).get()
                fd = os.open(out, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
                return n

            g = timed(w)
            print(f"kvikio write threads={nthreads:2d} task={task_mb:2d}MiB (+fsync) GiB/s={g:.2f}", flush=True)
    os.unlink(out)
