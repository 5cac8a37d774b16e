/* Batch I/O on host memory: argument checks (nr = 0, *nr = 0, capacity),
 * data and cookies, failures as events, cuFile's lenient timeouts,
 * cancel and destroy. */
#include "check.h"
#include <stdint.h>
#include <time.h>

#define FSIZE (1 << 20)
#define OPS 16

static void set_op(CUfileIOParams_t *p, CUfileHandle_t fh, void *buf, off_t boff, off_t foff, size_t n,
                   int opcode, uintptr_t cookie) {
    memset(p, 0, sizeof *p);
    p->mode = CUFILE_BATCH;
    p->fh = fh;
    p->opcode = (CUfileOpcode_t)opcode;
    p->u.batch.devPtr_base = buf;
    p->u.batch.devPtr_offset = boff;
    p->u.batch.file_offset = foff;
    p->u.batch.size = n;
    p->cookie = (void *)cookie;
}

/* Collects exactly `want` events, min_nr = nr as NIXL does (NULL timeout). */
static void collect(CUfileBatchHandle_t b, CUfileIOEvents_t *ev, unsigned want) {
    unsigned got = 0;
    while (got < want) {
        unsigned nr = want - got;
        CHECK_OK(cuFileBatchIOGetStatus(b, nr, &nr, ev + got, NULL));
        CHECK(nr > 0);
        got += nr;
    }
}

static unsigned char buf[FSIZE];

int main(int argc, char **argv) {
    const char *dir = test_dir(argc, argv);
    CUfileBatchHandle_t b = NULL;
    CHECK_ERR(cuFileBatchIOSetUp(&b, 4), CU_FILE_DRIVER_NOT_INITIALIZED);
    CHECK_OK(cuFileDriverOpen());
    CHECK_ERR(cuFileBatchIOSetUp(NULL, 4), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileBatchIOSetUp(&b, 0), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileBatchIOSetUp(&b, 129), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileBatchIOSetUp(&b, OPS));

    int fd = make_file(dir, "batch.bin", FSIZE, 21);
    CUfileHandle_t fh;
    CHECK_OK(register_fd(&fh, fd));
    CUfileIOParams_t ops[OPS + 1];
    CUfileIOEvents_t ev[OPS + 1];
    unsigned nr;

    /* Submit's checks. */
    set_op(&ops[0], fh, buf, 0, 0, 10, CUFILE_READ, 1);
    CHECK_ERR(cuFileBatchIOSubmit(b, 0, ops, 0), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileBatchIOSubmit(b, 1, NULL, 0), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileBatchIOSubmit(b, 129, ops, 0), CU_FILE_BATCH_FULL);
    ops[0].mode = (CUfileBatchMode_t)2;
    CHECK_ERR(cuFileBatchIOSubmit(b, 1, ops, 0), CU_FILE_INVALID_VALUE);
    set_op(&ops[0], fh, buf, 0, 0, 10, 7, 1);
    CHECK_ERR(cuFileBatchIOSubmit(b, 1, ops, 0), CU_FILE_INVALID_VALUE);
    /* All or nothing: one unregistered handle fails the whole submit. */
    set_op(&ops[0], fh, buf, 0, 0, 10, CUFILE_READ, 1);
    set_op(&ops[1], (CUfileHandle_t)(uintptr_t)999, buf, 0, 0, 10, CUFILE_READ, 2);
    CHECK_ERR(cuFileBatchIOSubmit(b, 2, ops, 0), CU_FILE_HANDLE_NOT_REGISTERED);
    CHECK_ERR(cuFileBatchIOSubmit((CUfileBatchHandle_t)(uintptr_t)12345, 1, ops, 0), CU_FILE_INVALID_VALUE);

    /* GetStatus's checks. */
    struct timespec zero = {0, 0};
    nr = 4;
    CHECK_ERR(cuFileBatchIOGetStatus(b, 0, NULL, ev, &zero), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileBatchIOGetStatus(b, 0, &nr, NULL, &zero), CU_FILE_INVALID_VALUE);
    nr = 0;
    CHECK_ERR(cuFileBatchIOGetStatus(b, 0, &nr, ev, &zero), CU_FILE_INVALID_VALUE);
    nr = 2;
    CHECK_ERR(cuFileBatchIOGetStatus(b, 3, &nr, ev, &zero), CU_FILE_INVALID_VALUE);
    nr = 4;
    CHECK_OK(cuFileBatchIOGetStatus(b, 0, &nr, ev, &zero));
    CHECK(nr == 0); /* nothing was queued */

    /* Sixteen reads at awkward offsets, checked against the pattern. */
    memset(buf, 0, sizeof buf);
    for (unsigned i = 0; i < OPS; i++)
        set_op(&ops[i], fh, buf, (off_t)i * 20000 + 3, (off_t)i * 17777 + 11, 9999, CUFILE_READ, 100 + i);
    CHECK_OK(cuFileBatchIOSubmit(b, OPS, ops, 0));
    collect(b, ev, OPS);
    unsigned seen = 0;
    for (unsigned i = 0; i < OPS; i++) {
        unsigned k = (unsigned)((uintptr_t)ev[i].cookie - 100);
        CHECK(k < OPS && !(seen & (1u << k)));
        seen |= 1u << k;
        CHECK(ev[i].status == CUFILE_COMPLETE && ev[i].ret == 9999);
        CHECK(matches_pattern(buf + k * 20000 + 3, 9999, (size_t)k * 17777 + 11, 21));
    }

    /* Writes, and a failure reported in its event (write to a read-only fd). */
    char path[4096];
    snprintf(path, sizeof path, "%s/batch.bin", dir);
    int rofd = open(path, O_RDONLY);
    CHECK(rofd >= 0);
    CUfileHandle_t rofh;
    CHECK_OK(register_fd(&rofh, rofd));
    fill_pattern(buf, 8192, 0, 77);
    set_op(&ops[0], fh, buf, 0, 500000, 8192, CUFILE_WRITE, 1);
    set_op(&ops[1], rofh, buf, 0, 0, 100, CUFILE_WRITE, 2);
    CHECK_OK(cuFileBatchIOSubmit(b, 2, ops, 0));
    collect(b, ev, 2);
    for (int i = 0; i < 2; i++) {
        if ((uintptr_t)ev[i].cookie == 1) {
            CHECK(ev[i].status == CUFILE_COMPLETE && ev[i].ret == 8192);
        } else {
            CHECK(ev[i].status == CUFILE_FAILED && (ssize_t)ev[i].ret == -CU_FILE_INVALID_FILE_OPEN_FLAG);
        }
    }
    static unsigned char back[8192];
    CHECK(pread(fd, back, sizeof back, 500000) == (ssize_t)sizeof back);
    CHECK(matches_pattern(back, sizeof back, 0, 77));

    /* cuFile's lenient timeouts: a malformed timespec (negative seconds,
     * nanoseconds past a second, or the 16 bytes behind a 4-byte int as
     * cuda-python passes) waits without limit for min_nr events, never for
     * more than the batch can produce (here: none are outstanding). */
    struct timespec neg = {-5, 0}, big_ns = {0, 5000000001L};
    nr = 4;
    CHECK_OK(cuFileBatchIOGetStatus(b, 4, &nr, ev, &neg));
    CHECK(nr == 0);
    nr = 4;
    CHECK_OK(cuFileBatchIOGetStatus(b, 4, &nr, ev, &big_ns));
    CHECK(nr == 0);
    struct {
        int value;
        unsigned int garbage;
        long more_garbage;
    } ctypes_int = {10000, 0xffffffffu, -77};
    for (unsigned i = 0; i < 4; i++) set_op(&ops[i], fh, buf, (off_t)i * 4096, 0, 4096, CUFILE_READ, 5 + i);
    CHECK_OK(cuFileBatchIOSubmit(b, 4, ops, 0));
    nr = 4;
    CHECK_OK(cuFileBatchIOGetStatus(b, 4, &nr, ev, (struct timespec *)(void *)&ctypes_int));
    CHECK(nr == 4);
    for (unsigned i = 0; i < 4; i++) CHECK(ev[i].status == CUFILE_COMPLETE && ev[i].ret == 4096);

    /* Over capacity across submits: 16 queued, a 17th is refused. */
    for (unsigned i = 0; i < OPS + 1; i++) set_op(&ops[i], fh, buf, 0, 0, 512, CUFILE_READ, i);
    CHECK_OK(cuFileBatchIOSubmit(b, OPS, ops, 0));
    CHECK_ERR(cuFileBatchIOSubmit(b, 1, ops + OPS, 0), CU_FILE_BATCH_FULL);
    collect(b, ev, OPS);

    /* Cancel, then destroy (twice: the second is ignored). */
    CHECK_OK(cuFileBatchIOCancel(b));
    CHECK_ERR(cuFileBatchIOCancel((CUfileBatchHandle_t)(uintptr_t)12345), CU_FILE_INVALID_VALUE);
    cuFileBatchIODestroy(b);
    cuFileBatchIODestroy(b);
    CHECK_ERR(cuFileBatchIOSubmit(b, 1, ops, 0), CU_FILE_INVALID_VALUE);
    nr = 1;
    CHECK_ERR(cuFileBatchIOGetStatus(b, 0, &nr, ev, &zero), CU_FILE_INVALID_VALUE);

    cuFileHandleDeregister(fh);
    cuFileHandleDeregister(rofh);
    CHECK_OK(cuFileDriverClose());
    close(fd);
    close(rofd);
    printf("batch set-up, submit, get-status, timeouts, cancel, destroy checked\n");
    return 0;
}
