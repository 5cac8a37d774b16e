/* Helpers of the cuFile C ABI tests (against include/cufile.h and hipfs'
 * libcufile.so.0): error checks that name the code's string, scratch
 * files, handle registration (the rest: ../harness.h). */
#ifndef CUFILE_TEST_CHECK_H
#define CUFILE_TEST_CHECK_H

#include "../harness.h"
#include <cufile.h>

#define CHECK_ERR(call, code)                                                       \
    do {                                                                            \
        CUfileError_t e_ = (call);                                                  \
        if ((int)e_.err != (int)(code))                                             \
            FAIL("%s gave %d (%s), expected %d (%s)", #call, (int)e_.err,           \
                 cufileop_status_error(e_.err), (int)(code),                        \
                 cufileop_status_error((CUfileOpError)(code)));                     \
        if ((int)(code) != CU_FILE_CUDA_DRIVER_ERROR && e_.cu_err != CUDA_SUCCESS)  \
            FAIL("%s set cu_err %d without a CUDA driver error", #call, (int)e_.cu_err); \
    } while (0)

#define CHECK_OK(call) CHECK_ERR(call, CU_FILE_SUCCESS)

/* Creates `dir/name` holding `size` pattern bytes; returns an O_RDWR fd. */
static inline int make_file(const char *dir, const char *name, size_t size, unsigned seed) {
    char path[4096];
    return create_pattern_file(dir, name, size, seed, O_RDWR, path, sizeof path);
}

/* Opens the existing `dir/name` with `flags`. */
static inline int open_mode(const char *dir, const char *name, int flags) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, flags);
    if (fd < 0) FAIL("open %s: %s", path, strerror(errno));
    return fd;
}

static inline CUfileError_t register_fd(CUfileHandle_t *fh, int fd) {
    CUfileDescr_t d;
    memset(&d, 0, sizeof d);
    d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    d.handle.fd = fd;
    return cuFileHandleRegister(fh, &d);
}

#endif
