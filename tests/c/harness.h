/* What the hipFile and the cuFile C ABI tests share: checks that name the
 * failing line, deterministic pattern bytes, scratch files holding them.
 * Each suite's check.h adds its API's error checks and handle helpers. */
#ifndef HIPFS_TEST_HARNESS_H
#define HIPFS_TEST_HARNESS_H

#define _GNU_SOURCE
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

/* ssize_t result: expected exactly `want`. */
#define CHECK_SSIZE(call, want)                                                     \
    do {                                                                            \
        ssize_t r_ = (call);                                                        \
        if (r_ != (ssize_t)(want))                                                  \
            FAIL("%s returned %zd (errno %d), expected %zd", #call, r_, errno,      \
                 (ssize_t)(want));                                                  \
    } while (0)

/* -1 with errno == e. */
#define CHECK_ERRNO(call, e)                                                        \
    do {                                                                            \
        errno = 0;                                                                  \
        ssize_t r_ = (call);                                                        \
        if (r_ != -1 || errno != (e))                                               \
            FAIL("%s returned %zd errno %d, expected -1 errno %d", #call, r_, errno, \
                 (e));                                                              \
    } while (0)

/* Deterministic, position-dependent bytes (so misplaced data is caught). */
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

/* Creates (or truncates) `dir/name` holding `size` pattern bytes, opened
 * with `mode` (O_WRONLY or O_RDWR); `path` receives its name. */
static inline int create_pattern_file(const char *dir, const char *name, size_t size,
                                      unsigned seed, int mode, char *path, size_t path_len) {
    snprintf(path, path_len, "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_TRUNC | mode, 0644);
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

static inline const char *test_dir(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        exit(2);
    }
    return argv[1];
}

#endif
