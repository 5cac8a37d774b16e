/* hipFile 0.5 statistics: hipFileGetStatsL1/L2/L3 count what passed
 * through this library at the level HIPFILE_STATS_LEVEL gives (set here
 * before the first call, as a profiler's launcher would; driver.c checks
 * that level 0, the default, refuses every query). */
#include "check.h"
#include <stdint.h>

static unsigned char buf[65536];

int main(int argc, char **argv) {
    const char *dir = test_dir(argc, argv);
    hipFileStatsLevel1_t l1;
    hipFileStatsLevel2_t l2;
    hipFileStatsLevel3_t l3;
    setenv("HIPFILE_STATS_LEVEL", "2", 1);
    CHECK_ERR(hipFileGetStatsL1(NULL), hipFileInvalidValue);
    CHECK_OK(hipFileGetStatsL1(&l1));
    CHECK(l1.read_ops.ok == 0 && l1.read_bytes == 0);
    CHECK_ERR(hipFileGetStatsL3(&l3), hipFileInvalidValue); /* level 2 < 3 */

    const char *path = make_file(dir, "stats.bin", sizeof buf, 5);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    hipFileHandle_t fh;
    CHECK_OK(register_fd(&fh, fd));
    CHECK_OK(hipFileBufRegister(buf, sizeof buf, 0));
    CHECK_SSIZE(hipFileRead(fh, buf, 4096, 0, 0), 4096);
    CHECK_SSIZE(hipFileRead(fh, buf, 100, 50, 0), 100);
    CHECK_SSIZE(hipFileWrite(fh, buf, 16384, 0, 0), 16384);
    CHECK_SSIZE(hipFileRead((hipFileHandle_t)(uintptr_t)999, buf, 10, 0, 0), -hipFileHandleNotRegistered);
    CHECK_OK(hipFileGetStatsL1(&l1));
    CHECK(l1.read_ops.ok == 2 && l1.read_ops.err == 1 && l1.read_bytes == 4196);
    CHECK(l1.write_ops.ok == 1 && l1.write_bytes == 16384);
    CHECK(l1.hdl_register_ops.ok == 1 && l1.buf_register_ops.ok == 1);
    CHECK_OK(hipFileGetStatsL2(&l2));
    CHECK(l2.basic.read_bytes == 4196);
    CHECK(l2.read_size_kb_hist[3] == 1 && l2.read_size_kb_hist[0] == 1);
    CHECK(l2.write_size_kb_hist[5] == 1);

    /* A batch: its setup, submit and completion are counted. */
    hipFileBatchHandle_t b;
    CHECK_OK(hipFileBatchIOSetUp(&b, 2));
    hipFileIOParams_t op;
    memset(&op, 0, sizeof op);
    op.mode = hipFileBatch;
    op.fh = fh;
    op.opcode = hipFileBatchRead;
    op.u.batch.devPtr_base = buf;
    op.u.batch.size = 2048;
    CHECK_OK(hipFileBatchIOSubmit(b, 1, &op, 0));
    hipFileIOEvents_t ev;
    unsigned nr = 1;
    CHECK_OK(hipFileBatchIOGetStatus(b, 1, &nr, &ev, NULL));
    CHECK(nr == 1 && ev.status == hipFileComplete);
    hipFileBatchIODestroy(b);
    CHECK_OK(hipFileGetStatsL1(&l1));
    CHECK(l1.batch_setup_ops.ok == 1 && l1.batch_submit_ops.ok == 1 && l1.batch_complete_ops.ok == 1);
    CHECK(l1.batch_destroy_ops.ok == 1 && l1.batch_read_bytes == 2048 && l1.last_batch_read_bytes == 2048);

    CHECK_OK(hipFileBufDeregister(buf));
    hipFileHandleDeregister(fh);
    CHECK_OK(hipFileDriverClose());
    close(fd);
    printf("L1/L2 counters and histograms checked; L3 refused at level 2\n");
    return 0;
}
