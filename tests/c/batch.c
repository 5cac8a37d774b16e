/* Batch I/O: set-up limits, read and write round trips with cookies and
 * events, capacity (BatchFull), all-or-nothing submit, failed events,
 * GetStatus waiting rules, cancel and destroy. */
#include "check.h"
#include <time.h>

#define FSIZE (2 * 1024 * 1024)

static void set_read(hipFileIOParams_t *p, hipFileHandle_t fh, void *base, int64_t boff, int64_t foff,
                     size_t size, int opcode, uintptr_t cookie) {
    memset(p, 0, sizeof *p);
    p->mode = hipFileBatch;
    p->u.batch.devPtr_base = base;
    p->u.batch.devPtr_offset = boff;
    p->u.batch.file_offset = foff;
    p->u.batch.size = size;
    p->fh = fh;
    p->opcode = (hipFileOpcode_t)opcode;
    p->cookie = (void *)cookie;
}

/* Collects exactly `want` events (waiting as needed). */
static void collect(hipFileBatchHandle_t b, hipFileIOEvents_t *ev, unsigned want) {
    unsigned got = 0;
    while (got < want) {
        unsigned nr = want - got;
        CHECK_OK(hipFileBatchIOGetStatus(b, nr, &nr, ev + got, NULL));
        CHECK(nr > 0);
        got += nr;
    }
}

static unsigned poll_now(hipFileBatchHandle_t b, hipFileIOEvents_t *ev, unsigned max) {
    struct timespec zero = {0, 0};
    unsigned nr = max;
    CHECK_OK(hipFileBatchIOGetStatus(b, 0, &nr, ev, &zero));
    return nr;
}

int main(int argc, char **argv) {
    const char *dir = test_dir(argc, argv);
    const char *path = make_file(dir, "batch.dat", FSIZE, 31);
    int fd = open(path, O_RDWR);
    int rofd = open(path, O_RDONLY);
    CHECK(fd >= 0 && rofd >= 0);
    hipFileBatchHandle_t b = NULL, b2 = NULL;
    hipFileIOParams_t ops[130];
    hipFileIOEvents_t ev[130];
    unsigned char *buf = malloc(FSIZE);
    unsigned char *want = malloc(FSIZE);
    CHECK(buf && want);

    /* Set-up needs an open driver and 1..128 entries. */
    CHECK_ERR(hipFileBatchIOSetUp(&b, 4), hipFileDriverNotInitialized);
    hipFileHandle_t fh = NULL, rofh = NULL;
    CHECK_OK(register_fd(&fh, fd));
    CHECK_OK(register_fd(&rofh, rofd));
    CHECK_ERR(hipFileBatchIOSetUp(NULL, 4), hipFileInvalidValue);
    CHECK_ERR(hipFileBatchIOSetUp(&b, 0), hipFileInvalidValue);
    CHECK_ERR(hipFileBatchIOSetUp(&b, 129), hipFileInvalidValue);
    CHECK_OK(hipFileBatchIOSetUp(&b, 128));
    CHECK(b != NULL);
    CHECK_ERR(hipFileBatchIOSubmit(b, 129, ops, 0), hipFileBatchFull);
    hipFileBatchIODestroy(b);
    /* A destroyed batch is unknown. */
    CHECK_ERR(hipFileBatchIOSubmit(b, 0, ops, 0), hipFileInvalidValue);
    CHECK_ERR(hipFileBatchIOCancel(b), hipFileInvalidValue);
    hipFileBatchIODestroy(b);
    hipFileBatchIODestroy(NULL);

    /* Reads: 16 operations at awkward offsets, each checked against pread. */
    CHECK_OK(hipFileBatchIOSetUp(&b, 16));
    for (unsigned i = 0; i < 16; i++)
        set_read(&ops[i], fh, buf, i * 5000 + 1, i * 60000 + 7, 4099, hipFileBatchRead, 100 + i);
    memset(buf, 0, FSIZE);
    CHECK_OK(hipFileBatchIOSubmit(b, 16, ops, 0));
    collect(b, ev, 16);
    unsigned seen = 0;
    for (unsigned i = 0; i < 16; i++) {
        uintptr_t k = (uintptr_t)ev[i].cookie - 100;
        CHECK(k < 16 && !(seen & (1u << k)));
        seen |= 1u << k;
        CHECK(ev[i].status == hipFileComplete);
        CHECK(ev[i].ret == 4099);
        CHECK(pread(fd, want, 4099, (off_t)(k * 60000 + 7)) == 4099);
        CHECK(memcmp(buf + k * 5000 + 1, want, 4099) == 0);
    }
    /* Every event is returned once: nothing is left. */
    CHECK(poll_now(b, ev, 16) == 0);
    /* Nothing outstanding: a GetStatus asking for more never waits. */
    unsigned nr = 4;
    CHECK_OK(hipFileBatchIOGetStatus(b, 4, &nr, ev, NULL));
    CHECK(nr == 0);

    /* Bad arguments. */
    nr = 4;
    CHECK_ERR(hipFileBatchIOGetStatus(b, 0, NULL, ev, NULL), hipFileInvalidValue);
    CHECK_ERR(hipFileBatchIOGetStatus(b, 0, &nr, NULL, NULL), hipFileInvalidValue);
    CHECK_ERR(hipFileBatchIOGetStatus(b, 5, &nr, ev, NULL), hipFileInvalidValue);
    nr = 0; /* no room for an event (hipFile 0.5) */
    CHECK_ERR(hipFileBatchIOGetStatus(b, 0, &nr, ev, NULL), hipFileInvalidValue);
    nr = 4;
    struct timespec badts = {0, 2000000000L};
    CHECK_ERR(hipFileBatchIOGetStatus(b, 0, &nr, ev, &badts), hipFileInvalidValue);
    CHECK_ERR(hipFileBatchIOSubmit(b, 1, NULL, 0), hipFileInvalidValue);
    CHECK_ERR(hipFileBatchIOSubmit(b, 0, ops, 0), hipFileInvalidValue); /* nr == 0 (hipFile 0.5) */
    CHECK_ERR(hipFileBatchIOSubmit(b, 1, ops, 1), hipFileInvalidValue);
    set_read(&ops[0], fh, buf, 0, 0, 10, hipFileBatchRead, 1);
    ops[0].mode = (hipFileBatchMode_t)2;
    CHECK_ERR(hipFileBatchIOSubmit(b, 1, ops, 0), hipFileInvalidValue);
    set_read(&ops[0], fh, buf, 0, 0, 10, 7, 1);
    CHECK_ERR(hipFileBatchIOSubmit(b, 1, ops, 0), hipFileInvalidValue);
    set_read(&ops[0], fh, NULL, 0, 0, 10, hipFileBatchRead, 1);
    CHECK_ERR(hipFileBatchIOSubmit(b, 1, ops, 0), hipFileInvalidValue);
    set_read(&ops[0], fh, buf, 0, -1, 10, hipFileBatchRead, 1);
    CHECK_ERR(hipFileBatchIOSubmit(b, 1, ops, 0), hipFileInvalidValue);

    /* All or nothing: one unregistered handle fails the whole submit. */
    for (unsigned i = 0; i < 3; i++) set_read(&ops[i], fh, buf, i * 10, i * 10, 10, hipFileBatchRead, i);
    ops[1].fh = (hipFileHandle_t)(uintptr_t)0x7777;
    CHECK_ERR(hipFileBatchIOSubmit(b, 3, ops, 0), hipFileHandleNotRegistered);
    struct timespec short_wait = {0, 50 * 1000 * 1000};
    nr = 16;
    CHECK_OK(hipFileBatchIOGetStatus(b, 1, &nr, ev, &short_wait));
    CHECK(nr == 0);
    hipFileBatchIODestroy(b);

    /* Capacity: operations hold their slot until their event is collected. */
    CHECK_OK(hipFileBatchIOSetUp(&b, 4));
    for (unsigned i = 0; i < 5; i++) set_read(&ops[i], fh, buf, i * 4096, i * 4096, 4096, hipFileBatchRead, i);
    CHECK_ERR(hipFileBatchIOSubmit(b, 5, ops, 0), hipFileBatchFull);
    CHECK_OK(hipFileBatchIOSubmit(b, 4, ops, 0));
    CHECK_ERR(hipFileBatchIOSubmit(b, 1, ops + 4, 0), hipFileBatchFull);
    collect(b, ev, 2);
    CHECK_OK(hipFileBatchIOSubmit(b, 1, ops + 4, 0));
    CHECK_ERR(hipFileBatchIOSubmit(b, 2, ops, 0), hipFileBatchFull);
    collect(b, ev, 3);
    for (unsigned i = 0; i < 3; i++) CHECK(ev[i].status == hipFileComplete && ev[i].ret == 4096);

    /* A failed operation: a write through a read-only fd gives -EBADF. */
    set_read(&ops[0], rofh, buf, 0, 0, 100, hipFileBatchWrite, 55);
    set_read(&ops[1], rofh, buf, 0, 0, 100, hipFileBatchRead, 56);
    CHECK_OK(hipFileBatchIOSubmit(b, 2, ops, 0));
    collect(b, ev, 2);
    for (unsigned i = 0; i < 2; i++) {
        if ((uintptr_t)ev[i].cookie == 55) {
            CHECK(ev[i].status == hipFileFailed);
            CHECK((ssize_t)ev[i].ret == -EBADF);
        } else {
            CHECK((uintptr_t)ev[i].cookie == 56);
            CHECK(ev[i].status == hipFileComplete && ev[i].ret == 100);
        }
    }
    hipFileBatchIODestroy(b);

    /* Writes: 8 pieces, then the file is checked with pread. */
    CHECK_OK(hipFileBatchIOSetUp(&b2, 8));
    fill_pattern(buf, FSIZE, 0, 32);
    for (unsigned i = 0; i < 8; i++)
        set_read(&ops[i], fh, buf, i * 3001, 1000000 + i * 10007, 7001, hipFileBatchWrite, i);
    CHECK_OK(hipFileBatchIOSubmit(b2, 8, ops, 0));
    collect(b2, ev, 8);
    for (unsigned i = 0; i < 8; i++) CHECK(ev[i].status == hipFileComplete && ev[i].ret == 7001);
    /* The pieces' sources overlap in memory, their file ranges do not. */
    for (unsigned i = 0; i < 8; i++) {
        CHECK(pread(fd, want, 7001, 1000000 + i * 10007) == 7001);
        CHECK(memcmp(want, buf + i * 3001, 7001) == 0);
    }
    hipFileBatchIODestroy(b2);

    /* Cancel: every submitted operation still yields exactly one event,
     * Complete or Canceled. */
    CHECK_OK(hipFileBatchIOSetUp(&b, 128));
    for (unsigned i = 0; i < 128; i++)
        set_read(&ops[i], fh, buf, 0, (int64_t)i * 16384, 16384, hipFileBatchRead, 1000 + i);
    CHECK_OK(hipFileBatchIOSubmit(b, 128, ops, 0));
    CHECK_OK(hipFileBatchIOCancel(b));
    collect(b, ev, 128);
    unsigned canceled = 0, complete = 0;
    for (unsigned i = 0; i < 128; i++) {
        if (ev[i].status == hipFileCanceled) canceled++;
        else if (ev[i].status == hipFileComplete && ev[i].ret == 16384) complete++;
    }
    CHECK(canceled + complete == 128);
    printf("batch: cancel: %u canceled, %u completed\n", canceled, complete);
    CHECK(poll_now(b, ev, 128) == 0);
    hipFileBatchIODestroy(b);

    hipFileHandleDeregister(fh);
    hipFileHandleDeregister(rofh);
    CHECK_OK(hipFileDriverClose());
    free(buf);
    free(want);
    puts("batch: ok");
    return 0;
}
