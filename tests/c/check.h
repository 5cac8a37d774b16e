/* Helpers of the hipFile C ABI tests: error checks that name the code's
 * string, scratch files, handle registration (the rest: harness.h). */
#ifndef HIPFILE_TEST_CHECK_H
#define HIPFILE_TEST_CHECK_H

#include "harness.h"
#include <hipfile.h>

#define CHECK_ERR(call, code)                                                       \
    do {                                                                            \
        hipFileError_t e_ = (call);                                                 \
        if ((int)e_.err != (int)(code))                                             \
            FAIL("%s gave %d (%s), expected %d (%s)", #call, (int)e_.err,           \
                 hipFileGetOpErrorString(e_.err), (int)(code),                      \
                 hipFileGetOpErrorString((hipFileOpError_t)(code)));                \
    } while (0)

#define CHECK_OK(call) CHECK_ERR(call, hipFileSuccess)

/* Creates `dir/name` holding `size` pattern bytes; returns the path (static). */
static inline const char *make_file(const char *dir, const char *name, size_t size, unsigned seed) {
    static char path[4096];
    close(create_pattern_file(dir, name, size, seed, O_WRONLY, path, sizeof path));
    return path;
}

static inline hipFileError_t register_fd(hipFileHandle_t *fh, int fd) {
    hipFileDescr_t d;
    memset(&d, 0, sizeof d);
    d.type = hipFileHandleTypeOpaqueFD;
    d.handle.fd = fd;
    return hipFileHandleRegister(fh, &d);
}

#endif
