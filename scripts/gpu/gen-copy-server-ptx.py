#!/usr/bin/env python3
"""Compiles src/gpu/kernels/copy_server.cu to PTX with NVRTC (no GPU needed).

    python3 -m pip install --target /tmp/nvrtc "nvidia-cuda-nvrtc-cu12==12.0.*"
    NVRTC_LIB=/tmp/nvrtc/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 \
        python3 scripts/gpu/gen-copy-server-ptx.py

NVRTC 12.0 writes PTX ISA 8.0, which every driver from CUDA 12.0 (R525) on
loads; a newer NVRTC raises the ISA version and so the driver needed. The
PTX targets compute_70 (the oldest GPU with system-scope acquire and
release), which the driver JIT-compiles for any newer GPU. Where the module
does not load, async I/O logs it once and falls back (src/stream.rs).
"""
import ctypes
import os
import sys

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
src_path = os.path.join(root, "src/gpu/kernels/copy_server.cu")
out_path = os.path.join(root, "src/gpu/kernels/copy_server.ptx")
lib = ctypes.CDLL(os.environ.get("NVRTC_LIB", "libnvrtc.so.12"))


def check(r, what):
    if r != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        sys.exit(f"{what}: {lib.nvrtcGetErrorString(r).decode()}")


src = open(src_path, "rb").read()
prog = ctypes.c_void_p()
check(lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"copy_server.cu", 0, None, None), "create")
opts = [b"--gpu-architecture=compute_70", b"-default-device", b"--std=c++14"]
arr = (ctypes.c_char_p * len(opts))(*opts)
r = lib.nvrtcCompileProgram(prog, len(opts), arr)
size = ctypes.c_size_t()
lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
log = ctypes.create_string_buffer(size.value)
lib.nvrtcGetProgramLog(prog, log)
if log.value.strip():
    print(log.value.decode(), file=sys.stderr)
check(r, "compile")
lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
ptx = ctypes.create_string_buffer(size.value)
check(lib.nvrtcGetPTX(prog, ptx), "ptx")
with open(out_path, "w") as f:
    f.write(ptx.value.decode())
print(f"wrote {out_path}")
