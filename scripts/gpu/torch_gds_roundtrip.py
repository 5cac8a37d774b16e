# PyTorch GPU-direct storage through whatever libcufile.so.0 the process
# loaded (cufile-clients.sh preloads hipfs'): torch.cuda.gds.GdsFile save/load
# round trips of device tensors, with and without gds_register_buffer, at
# several sizes and offsets; then a timed load of SIZE_MIB beside torch.load
# of the same bytes. Prints "torch-gds: PASS ..." or "torch-gds: FAIL ...".
# Usage: python3 torch_gds_roundtrip.py DIR [SIZE_MIB]
import os, sys, time
import torch

d = sys.argv[1]
size_mib = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
path = os.path.join(d, "torch-gds.bin")
fails = []


def check(what, ok):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        fails.append(what)


maps = open("/proc/self/maps").read()
cufile_maps = sorted({l.split()[-1] for l in maps.splitlines() if "libcufile" in l})
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}; libcufile mapped: {cufile_maps}", flush=True)
gds = torch.cuda.gds
flags = os.O_CREAT | os.O_RDWR | os.O_DIRECT
f = gds.GdsFile(path, flags)
try:
    for n, off in [(4096, 0), (1 << 20, 4096), (3 * (1 << 20) + 4096, 1 << 22), (256, 1 << 23)]:
        for registered in (False, True):
            src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
            dst = torch.zeros(n, dtype=torch.uint8, device="cuda")
            if registered:
                gds.gds_register_buffer(src.untyped_storage())
                gds.gds_register_buffer(dst.untyped_storage())
            f.save_storage(src.untyped_storage(), offset=off)
            f.load_storage(dst.untyped_storage(), offset=off)
            torch.cuda.synchronize()
            check(f"{n} B at offset {off}, registered={registered}", torch.equal(src, dst))
            if registered:
                gds.gds_deregister_buffer(src.untyped_storage())
                gds.gds_deregister_buffer(dst.untyped_storage())
    # The bytes on disk are the tensor's (read back without cuFile).
    src = torch.arange(0, 1 << 16, dtype=torch.int32, device="cuda")
    f.save_storage(src.untyped_storage(), offset=0)
    torch.cuda.synchronize()
    with open(path, "rb") as h:
        on_disk = h.read(src.numel() * 4)
    check("save_storage wrote the tensor's bytes", on_disk == src.cpu().numpy().tobytes())
finally:
    f.deregister_handle()

# Timed: GdsFile.load_storage of SIZE_MIB beside torch.load of the same tensor.
n = size_mib << 20
big = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
# GdsFile.save_storage does not wait for the kernels that fill the tensor
# (cuFile reads device memory as it is; NVIDIA's DMA does the same): the
# caller synchronizes, as PyTorch's own GDS test does.
torch.cuda.synchronize()
f = gds.GdsFile(path, flags)
f.save_storage(big.untyped_storage(), offset=0)
pt = os.path.join(d, "torch-load.pt")
torch.save(big.cpu(), pt)
dst = torch.empty(n, dtype=torch.uint8, device="cuda")
gds.gds_register_buffer(dst.untyped_storage())
ts = []
for _ in range(3):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    f.load_storage(dst.untyped_storage(), offset=0)
    torch.cuda.synchronize()
    ts.append(time.perf_counter() - t0)
check("timed load matches", torch.equal(dst, big))
gds.gds_deregister_buffer(dst.untyped_storage())
f.deregister_handle()
tl = []
for _ in range(3):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    x = torch.load(pt, map_location="cuda")
    torch.cuda.synchronize()
    tl.append(time.perf_counter() - t0)
    del x
g_gds = n / sorted(ts)[1] / 2**30
g_load = n / sorted(tl)[1] / 2**30
print(f"torch-gds bench: GdsFile.load_storage {g_gds:.2f} GiB/s, torch.load(map_location=cuda) {g_load:.2f} GiB/s,"
      f" ratio {g_gds / g_load:.2f} ({size_mib} MiB, O_DIRECT file, median of 3)", flush=True)
os.unlink(pt)
os.unlink(path)
print(f"torch-gds: {'PASS' if not fails else 'FAIL'} ({len(fails)} failed: {fails})", flush=True)
sys.exit(1 if fails else 0)
