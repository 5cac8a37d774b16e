/* Shared helpers for the cuFile C ABI tests (against include/cufile.h and
 * hipfs' libcufile.so.0): checks that name the failing line and the code's
 * string, and scratch files with known contents. */
#ifndef CUFILE_TEST_CHECK_H
#define CUFILE_TEST_CHECK_H

#define _GNU_SOURCE
#include <cufile.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAIL(...)                                                   \
    do {                                                            \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);             \
        fprintf(stderr, __VA_ARGS__);                               \
        fprintf(stderr, "\n");                                      \
        exit(1);                                                    \
    } while (0)

#define CHECK(cond)                                                 \
    do {                                                            \
        if (!(cond)) FAIL("CHECK failed: %s", #cond);               \
    } while (0)

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

#define CHECK_SSIZE(call, want)                                                     \
    do {                                                                            \
        ssize_t r_ = (call);                                                        \
        if (r_ != (ssize_t)(want))                                                  \
            FAIL("%s returned %zd (errno %d), expected %zd", #call, r_, errno,      \
                 (ssize_t)(want));                                                  \
    } while (0)

#define CHECK_ERRNO(call, e)                                                        \
    do {                                                                            \
        errno = 0;                                                                  \
        ssize_t r_ = (call);                                                        \
        if (r_ != -1 || errno != (e))                                               \
            FAIL("%s returned %zd errno %d, expected -1 errno %d", #call, r_, errno, \
                 (e));                                                              \
    } while (0)

static inline unsigned char pattern_byte(size_t pos, unsigned seed) {
    size_t x = pos * 2654435761u + seed * 40503u;
    return (unsigned char)(x ^ (x >> 13) ^ (x >> 7));
}

static inline void fill_pattern(unsigned char *p, size_t n, size_t start, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = pattern_byte(start + i, seed);
}

static inline int matches_pattern(const unsigned char *p, size_t n, size_t start, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != pattern_byte(start + i, seed)) return 0;
    return 1;
}

/* Creates `dir/name` holding `size` pattern bytes; returns an O_RDWR fd. */
static inline int make_file(const char *dir, const char *name, size_t size, unsigned seed) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd < 0) FAIL("create %s: %s", path, strerror(errno));
    unsigned char *buf = malloc(size ? size : 1);
    CHECK(buf != NULL);
    fill_pattern(buf, size, 0, seed);
    size_t done = 0;
    while (done < size) {
        ssize_t n = pwrite(fd, buf + done, size - done, (off_t)done);
        if (n <= 0) FAIL("write %s: %s", path, strerror(errno));
        done += (size_t)n;
    }
    free(buf);
    return fd;
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

static inline const char *test_dir(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        exit(2);
    }
    return argv[1];
}

#endif
