"""The write/read round trip through Python's ctypes, as a ctypes user (or
the AMD bindings' loader) would load libhipfile.so: by path, no headers.

usage: python3 ctypes_roundtrip.py SCRATCH_DIR LIBRARY
"""
import ctypes
import os
import sys


class HipFileError(ctypes.Structure):
    _fields_ = [("err", ctypes.c_int), ("hip_drv_err", ctypes.c_int)]


class Handle(ctypes.Union):
    _fields_ = [("fd", ctypes.c_int), ("hFile", ctypes.c_void_p)]


class Descr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("handle", Handle), ("fs_ops", ctypes.c_void_p)]


def main():
    scratch, libpath = sys.argv[1], sys.argv[2]
    lib = ctypes.CDLL(libpath)
    for name in ("hipFileDriverOpen", "hipFileDriverClose", "hipFileHandleRegister",
                 "hipFileBufRegister", "hipFileBufDeregister"):
        getattr(lib, name).restype = HipFileError
    lib.hipFileUseCount.restype = ctypes.c_int64
    lib.hipFileGetOpErrorString.restype = ctypes.c_char_p
    lib.hipFileGetOpErrorString.argtypes = [ctypes.c_int]
    rw_args = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64, ctypes.c_int64]
    for name in ("hipFileRead", "hipFileWrite"):
        getattr(lib, name).restype = ctypes.c_ssize_t
        getattr(lib, name).argtypes = rw_args
    lib.hipFileHandleDeregister.argtypes = [ctypes.c_void_p]
    lib.hipFileBufRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    lib.hipFileBufDeregister.argtypes = [ctypes.c_void_p]

    assert lib.hipFileGetOpErrorString(5027) == b"File handle for GPU IO is not registered"
    assert lib.hipFileDriverOpen().err == 0
    assert lib.hipFileUseCount() == 1

    path = os.path.join(scratch, "ctypes.dat")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    d = Descr(type=1)
    d.handle.fd = fd
    fh = ctypes.c_void_p()
    e = lib.hipFileHandleRegister(ctypes.byref(fh), ctypes.byref(d))
    assert e.err == 0, e.err

    payload = bytes((i * 7 + 3) % 251 for i in range(100003))
    src = ctypes.create_string_buffer(payload, len(payload))
    dst = ctypes.create_string_buffer(len(payload) + 5)
    assert lib.hipFileBufRegister(dst, len(dst), 0).err == 0
    assert lib.hipFileWrite(fh, src, len(payload), 4095, 0) == len(payload)
    assert lib.hipFileRead(fh, dst, len(payload), 4095, 5) == len(payload)
    assert dst.raw[5:5 + len(payload)] == payload
    assert os.pread(fd, len(payload), 4095) == payload
    assert lib.hipFileBufDeregister(dst).err == 0
    lib.hipFileHandleDeregister(fh)
    assert lib.hipFileRead(fh, dst, 10, 0, 0) == -5027
    assert lib.hipFileDriverClose().err == 0
    os.close(fd)
    print("ctypes: ok")


if __name__ == "__main__":
    main()
