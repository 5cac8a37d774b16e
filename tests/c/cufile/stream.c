/* Stream-ordered I/O with cuFile's rules: an unregistered stream (NULL, the
 * legacy default stream, included) works as if registered with flags 0;
 * registering twice or deregistering an unknown stream is
 * CU_FILE_INVALID_VALUE. Without a GPU any pointer value is a stream (the
 * host runtime emulates streams). */
#include "check.h"
#include <stdint.h>
#include <time.h>

#define SENTINEL ((ssize_t)-424242)

static ssize_t wait_result(ssize_t *p) {
    for (int i = 0; i < 20000; i++) {
        ssize_t v = __atomic_load_n(p, __ATOMIC_ACQUIRE);
        if (v != SENTINEL) return v;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    FAIL("async operation never completed");
}

static unsigned char buf[65536];

int main(int argc, char **argv) {
    const char *dir = test_dir(argc, argv);
    int fd = make_file(dir, "stream.bin", 65536, 31);
    CUfileHandle_t fh;
    CHECK_OK(register_fd(&fh, fd));
    CUstream s1 = (CUstream)(uintptr_t)0x5100, s2 = (CUstream)(uintptr_t)0x5200;
    size_t size = 4096;
    off_t foff = 100, boff = 8;
    ssize_t res = SENTINEL;

    /* Unregistered stream: accepted, flags 0. */
    memset(buf, 0, sizeof buf);
    CHECK_OK(cuFileReadAsync(fh, buf, &size, &foff, &boff, &res, s1));
    CHECK(wait_result(&res) == 4096);
    CHECK(matches_pattern(buf + 8, 4096, 100, 31));
    /* The legacy default stream (NULL). */
    res = SENTINEL;
    foff = 5000;
    CHECK_OK(cuFileReadAsync(fh, buf, &size, &foff, &boff, &res, NULL));
    CHECK(wait_result(&res) == 4096);
    CHECK(matches_pattern(buf + 8, 4096, 5000, 31));
    /* A write on an unregistered stream, read back with pread. */
    fill_pattern(buf, 2048, 0, 32);
    size = 2048;
    foff = 30000;
    boff = 0;
    res = SENTINEL;
    CHECK_OK(cuFileWriteAsync(fh, buf, &size, &foff, &boff, &res, s2));
    CHECK(wait_result(&res) == 2048);
    static unsigned char back[2048];
    CHECK(pread(fd, back, sizeof back, 30000) == (ssize_t)sizeof back);
    CHECK(matches_pattern(back, sizeof back, 0, 32));

    /* Registration rules. */
    CHECK_ERR(cuFileStreamDeregister(s1), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileStreamRegister(s1, 0x10), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileStreamRegister(s1, CU_FILE_STREAM_FIXED_FILE_SIZE | CU_FILE_STREAM_FIXED_FILE_OFFSET |
                                          CU_FILE_STREAM_FIXED_BUF_OFFSET | CU_FILE_STREAM_PAGE_ALIGNED_INPUTS));
    CHECK_ERR(cuFileStreamRegister(s1, 0), CU_FILE_INVALID_VALUE);
    /* Fixed offsets are checked at enqueue time. */
    foff = -1;
    CHECK_ERR(cuFileReadAsync(fh, buf, &size, &foff, &boff, &res, s1), CU_FILE_INVALID_VALUE);
    foff = 0;
    size = 4096;
    res = SENTINEL;
    CHECK_OK(cuFileReadAsync(fh, buf, &size, &foff, &boff, &res, s1));
    CHECK(wait_result(&res) == 4096);
    CHECK_OK(cuFileStreamDeregister(s1));
    CHECK_ERR(cuFileStreamDeregister(s1), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileStreamRegister(s1, 0)); /* registrable again once deregistered */
    CHECK_OK(cuFileStreamDeregister(s1));

    /* Bad input. */
    CHECK_ERR(cuFileReadAsync(fh, buf, NULL, &foff, &boff, &res, s1), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileReadAsync(fh, buf, &size, NULL, &boff, &res, s1), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileReadAsync(fh, buf, &size, &foff, NULL, &res, s1), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileWriteAsync(fh, buf, &size, &foff, &boff, NULL, s1), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileReadAsync(fh, NULL, &size, &foff, &boff, &res, s1), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileReadAsync((CUfileHandle_t)(uintptr_t)999, buf, &size, &foff, &boff, &res, s1),
              CU_FILE_HANDLE_NOT_REGISTERED);
    /* A negative offset read when the stream runs the operation is its result. */
    foff = -4096;
    res = SENTINEL;
    CHECK_OK(cuFileReadAsync(fh, buf, &size, &foff, &boff, &res, s2));
    CHECK(wait_result(&res) < 0);

    cuFileHandleDeregister(fh);
    CHECK_OK(cuFileDriverClose());
    close(fd);
    printf("stream-ordered reads and writes, registration rules checked\n");
    return 0;
}
