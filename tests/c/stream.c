/* Stream-ordered async I/O: registration flags, argument errors, ordering
 * on one stream, and when the size/offsets are read: when the stream
 * reaches the operation, or at enqueue time with the FIXED flags. The stream
 * is held back by a first operation on a userspace-FS file whose read
 * callback waits on a gate. Without a GPU, any pointer value is a stream
 * (the host runtime emulates streams). */
#include "check.h"
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#define SENTINEL ((ssize_t)-424242)

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open = 1;
static int gate_entered = 0;

static ssize_t gated_read(void *h, char *buf, size_t n, hoff_t off, hipFileRDMAInfo_t *info) {
    (void)h;
    (void)off;
    (void)info;
    pthread_mutex_lock(&gate_mu);
    gate_entered++;
    pthread_cond_broadcast(&gate_cv);
    while (!gate_open) pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    memset(buf, 'g', n);
    return (ssize_t)n;
}

static ssize_t no_write(void *h, const char *buf, size_t n, hoff_t off, hipFileRDMAInfo_t *info) {
    (void)h, (void)buf, (void)n, (void)off, (void)info;
    return -EROFS;
}

static void set_gate(int open) {
    pthread_mutex_lock(&gate_mu);
    gate_open = open;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

static void wait_gate_entered(int n) {
    pthread_mutex_lock(&gate_mu);
    while (gate_entered < n) pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
}

/* Waits (up to 20 s) until the stream wrote a result. */
static ssize_t wait_result(ssize_t *p) {
    for (int i = 0; i < 20000; i++) {
        ssize_t v = __atomic_load_n(p, __ATOMIC_ACQUIRE);
        if (v != SENTINEL) return v;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    FAIL("async operation never completed");
}

/* Enqueues a gated read on `s`, then a read of the regular file whose
 * arguments are changed after enqueue; returns the second result. */
static ssize_t deferred_case(hipFileHandle_t gfh, hipFileHandle_t fh, hipStream_t s, unsigned char *buf,
                             int *entered) {
    static char gbuf[64];
    size_t gsize = 64;
    hoff_t gfoff = 0, gboff = 0;
    ssize_t gres = SENTINEL;
    set_gate(0);
    CHECK_OK(hipFileReadAsync(gfh, gbuf, &gsize, &gfoff, &gboff, &gres, s));
    wait_gate_entered(++*entered);
    size_t size = 100;
    hoff_t foff = 0, boff = 0;
    ssize_t res = SENTINEL;
    memset(buf, 0, 8192);
    CHECK_OK(hipFileReadAsync(fh, buf, &size, &foff, &boff, &res, s));
    /* The stream has not reached the read yet. */
    CHECK(__atomic_load_n(&res, __ATOMIC_ACQUIRE) == SENTINEL);
    size = 200;
    foff = 4096;
    boff = 10;
    set_gate(1);
    CHECK(wait_result(&gres) == 64);
    return wait_result(&res);
}

int main(int argc, char **argv) {
    const char *dir = test_dir(argc, argv);
    const char *path = make_file(dir, "stream.dat", 65536, 41);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    int p[2];
    CHECK(pipe(p) == 0);
    hipFileHandle_t fh = NULL, gfh = NULL;
    CHECK_OK(register_fd(&fh, fd));
    hipFileFSOps_t ops = {NULL, NULL, NULL, gated_read, no_write};
    hipFileDescr_t d;
    memset(&d, 0, sizeof d);
    d.type = hipFileHandleTypeUserspaceFS;
    d.handle.fd = p[0];
    d.fs_ops = &ops;
    CHECK_OK(hipFileHandleRegister(&gfh, &d));
    unsigned char *buf = calloc(1, 65536);
    unsigned char want[65536];
    CHECK(buf != NULL);
    CHECK(pread(fd, want, sizeof want, 0) == (ssize_t)sizeof want);

    hipStream_t s1 = (hipStream_t)(uintptr_t)0x1001;
    hipStream_t s2 = (hipStream_t)(uintptr_t)0x2002;
    size_t size = 100;
    hoff_t foff = 0, boff = 0;
    ssize_t res = SENTINEL;

    /* Registration flags. */
    CHECK_ERR(hipFileStreamRegister(s1, 0x10), hipFileInvalidValue);
    CHECK_ERR(hipFileStreamRegister(s1, HIPFILE_STREAM_FLAGS_MASK + 1), hipFileInvalidValue);
    CHECK_ERR(hipFileStreamDeregister(s1), hipFileInvalidValue);
    /* I/O on an unregistered stream acts as on one registered with flags 0
     * (hipFile 0.5, as cuFile). */
    CHECK_OK(hipFileReadAsync(fh, buf, &size, &foff, &boff, &res, s1));
    CHECK(wait_result(&res) == 100);
    res = SENTINEL;
    CHECK_OK(hipFileStreamRegister(s1, HIPFILE_STREAM_FLAGS_MASK));
    /* Registering a registered stream is refused; deregistered, it may be again. */
    CHECK_ERR(hipFileStreamRegister(s1, 0), hipFileInvalidValue);
    CHECK_OK(hipFileStreamDeregister(s1));
    CHECK_OK(hipFileStreamRegister(s1, HIPFILE_STREAM_PAGE_ALIGNED_INPUTS));
    CHECK_OK(hipFileStreamDeregister(s1));
    CHECK_OK(hipFileStreamRegister(s1, 0));

    /* Argument errors at enqueue time. */
    CHECK_ERR(hipFileReadAsync(fh, buf, NULL, &foff, &boff, &res, s1), hipFileInvalidValue);
    CHECK_ERR(hipFileReadAsync(fh, buf, &size, NULL, &boff, &res, s1), hipFileInvalidValue);
    CHECK_ERR(hipFileReadAsync(fh, buf, &size, &foff, NULL, &res, s1), hipFileInvalidValue);
    CHECK_ERR(hipFileWriteAsync(fh, buf, &size, &foff, &boff, NULL, s1), hipFileInvalidValue);
    CHECK_ERR(hipFileReadAsync(fh, NULL, &size, &foff, &boff, &res, s1), hipFileInvalidValue);
    CHECK_ERR(hipFileReadAsync((hipFileHandle_t)(uintptr_t)0x999, buf, &size, &foff, &boff, &res, s1),
              hipFileHandleNotRegistered);

    /* A plain read. */
    size = 5000;
    foff = 333;
    boff = 7;
    res = SENTINEL;
    CHECK_OK(hipFileReadAsync(fh, buf, &size, &foff, &boff, &res, s1));
    CHECK(wait_result(&res) == 5000);
    CHECK(memcmp(buf + 7, want + 333, 5000) == 0);

    /* Ordering: a write then a read of the same range on one stream. */
    unsigned char *src = malloc(8192);
    CHECK(src != NULL);
    fill_pattern(src, 8192, 0, 42);
    size_t wsize = 8192, rsize = 8192;
    hoff_t wfoff = 20000, wboff = 0, rfoff = 20000, rboff = 1;
    ssize_t wres = SENTINEL, rres = SENTINEL;
    memset(buf, 0, 65536);
    CHECK_OK(hipFileWriteAsync(fh, src, &wsize, &wfoff, &wboff, &wres, s1));
    CHECK_OK(hipFileReadAsync(fh, buf, &rsize, &rfoff, &rboff, &rres, s1));
    CHECK(wait_result(&rres) == 8192);
    CHECK(wait_result(&wres) == 8192);
    CHECK(memcmp(buf + 1, src, 8192) == 0);
    CHECK(pread(fd, want, sizeof want, 0) == (ssize_t)sizeof want);

    /* An error found when the stream runs the operation lands in the result. */
    size = 10;
    foff = -4;
    boff = 0;
    res = SENTINEL;
    CHECK_OK(hipFileReadAsync(fh, buf, &size, &foff, &boff, &res, s1));
    CHECK(wait_result(&res) == -hipFileInvalidValue);
    size = 10;
    foff = 0;
    res = SENTINEL;
    CHECK_OK(hipFileWriteAsync(gfh, buf, &size, &foff, &boff, &res, s1));
    CHECK(wait_result(&res) == -EROFS);

    /* Not FIXED: size and offsets are read when the stream gets there. */
    int entered = 0;
    ssize_t r = deferred_case(gfh, fh, s1, buf, &entered);
    CHECK(r == 200);
    CHECK(memcmp(buf + 10, want + 4096, 200) == 0);

    /* FIXED: they are read at enqueue time. */
    CHECK_OK(hipFileStreamRegister(s2, HIPFILE_STREAM_FIXED_FILE_SIZE | HIPFILE_STREAM_FIXED_FILE_OFFSET |
                                           HIPFILE_STREAM_FIXED_BUF_OFFSET));
    r = deferred_case(gfh, fh, s2, buf, &entered);
    CHECK(r == 100);
    CHECK(memcmp(buf, want, 100) == 0);
    /* Only the size fixed: offsets still deferred. */
    CHECK_OK(hipFileStreamDeregister(s2));
    CHECK_OK(hipFileStreamRegister(s2, HIPFILE_STREAM_FIXED_FILE_SIZE));
    r = deferred_case(gfh, fh, s2, buf, &entered);
    CHECK(r == 100);
    CHECK(memcmp(buf + 10, want + 4096, 100) == 0);
    /* A negative fixed offset is refused at enqueue. */
    CHECK_OK(hipFileStreamDeregister(s2));
    CHECK_OK(hipFileStreamRegister(s2, HIPFILE_STREAM_FIXED_FILE_OFFSET));
    foff = -1;
    CHECK_ERR(hipFileReadAsync(fh, buf, &size, &foff, &boff, &res, s2), hipFileInvalidValue);

    CHECK_OK(hipFileStreamDeregister(s1));
    CHECK_OK(hipFileStreamDeregister(s2));
    CHECK_ERR(hipFileStreamDeregister(s2), hipFileInvalidValue);
    /* Deregistered: flags 0 again, so the size is read when the stream runs. */
    foff = 0;
    size = 10;
    res = SENTINEL;
    CHECK_OK(hipFileReadAsync(fh, buf, &size, &foff, &boff, &res, s1));
    CHECK(wait_result(&res) == 10);

    hipFileHandleDeregister(fh);
    hipFileHandleDeregister(gfh);
    CHECK_OK(hipFileDriverClose());
    free(src);
    free(buf);
    puts("stream: ok");
    return 0;
}
