/* Driver life cycle, version, properties, the parameter API (cuFile's
 * extras included), min/max, slab arrays, BAR size and statistics. */
#include "check.h"

static void version_and_use_count(void) {
    int v = 0;
    CHECK_OK(cuFileGetVersion(&v));
    CHECK(v == CUFILE_VERSION && v == 1150);
    CHECK_ERR(cuFileGetVersion(NULL), CU_FILE_INVALID_VALUE);
    CHECK(cuFileUseCount() == 0);
    CHECK_ERR(cuFileDriverClose(), CU_FILE_DRIVER_NOT_INITIALIZED);
    CHECK_OK(cuFileDriverOpen());
    CHECK_OK(cuFileDriverOpen());
    CHECK(cuFileUseCount() == 2);
    CHECK_OK(cuFileDriverClose());
    CHECK(cuFileUseCount() == 1);
    CHECK_OK(cuFileDriverClose_v2());
    CHECK(cuFileUseCount() == 0);
}

/* cuFile's rule: registering even a bad handle opens the driver. */
static void bad_registration_opens_the_driver(void) {
    CUfileHandle_t fh = NULL;
    CUfileDescr_t d;
    memset(&d, 0, sizeof d);
    CHECK(cuFileUseCount() == 0);
    CHECK_ERR(cuFileHandleRegister(NULL, NULL), CU_FILE_INVALID_VALUE);
    CHECK(cuFileUseCount() == 1);
    CHECK_OK(cuFileDriverClose());
    d.type = 77;
    CHECK_ERR(cuFileHandleRegister(&fh, &d), CU_FILE_INVALID_VALUE);
    CHECK(cuFileUseCount() == 1);
    CHECK_OK(cuFileDriverClose());
    CHECK(cuFileUseCount() == 0);
}

static void properties(void) {
    CUfileDrvProps_t p;
    CHECK_ERR(cuFileDriverGetProperties(NULL), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, 8192));
    CHECK_OK(cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_PER_BUFFER_CACHE_SIZE_KB, 512));
    /* 2^33 KiB does not fit the 32-bit field: it saturates. */
    CHECK_OK(cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB, (size_t)1 << 33));
    CHECK_OK(cuFileDriverOpen());
    memset(&p, 0xee, sizeof p);
    CHECK_OK(cuFileDriverGetProperties(&p));
    CHECK(p.nvfs.major_version != 0 || p.nvfs.minor_version != 0); /* KvikIO's "GDS available" test */
    CHECK(p.nvfs.max_direct_io_size == 8192);
    CHECK(p.per_buffer_cache_size == 512);
    CHECK(p.max_device_pinned_mem_size == 0xffffffffu);
    CHECK(p.max_batch_io_size == 128);
    CHECK(p.fflags & (1u << CU_FILE_BATCH_IO_SUPPORTED));
    CHECK(p.fflags & (1u << CU_FILE_STREAMS_SUPPORTED));
    CHECK(p.nvfs.dcontrolflags & (1u << CU_FILE_ALLOW_COMPAT_MODE));
    CHECK(!(p.nvfs.dcontrolflags & (1u << CU_FILE_USE_POLL_MODE)));
    CHECK_OK(cuFileDriverSetPollMode(true, 64));
    CHECK_OK(cuFileDriverSetMaxDirectIOSize(4096));
    CHECK_OK(cuFileDriverSetMaxCacheSize(1024));
    CHECK_OK(cuFileDriverSetMaxPinnedMemSize(2048));
    CHECK_ERR(cuFileDriverSetMaxCacheSize(0), CU_FILE_DRIVER_UNSUPPORTED_LIMIT);
    CHECK_ERR(cuFileDriverSetMaxPinnedMemSize(0), CU_FILE_DRIVER_UNSUPPORTED_LIMIT);
    CHECK_OK(cuFileDriverGetProperties(&p));
    CHECK(p.nvfs.dcontrolflags & (1u << CU_FILE_USE_POLL_MODE));
    CHECK(p.nvfs.poll_thresh_size == 64);
    CHECK(p.nvfs.max_direct_io_size == 4096);
    CHECK(p.max_device_cache_size == 1024);
    CHECK(p.max_device_pinned_mem_size == 2048);
    CHECK_OK(cuFileDriverClose());
    CHECK_OK(cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB, 33554432));
}

static void parameters(void) {
    for (int i = CUFILE_PARAM_PROFILE_STATS; i <= CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS; i++) {
        size_t orig = 0, v = 0, lo = 1, hi = 0;
        CHECK_OK(cuFileGetParameterSizeT((CUFileSizeTConfigParameter_t)i, &orig));
        CHECK_OK(cuFileGetParameterMinMaxValue((CUFileSizeTConfigParameter_t)i, &lo, &hi));
        CHECK(lo <= orig && orig <= hi && hi > 0);
        CHECK_OK(cuFileSetParameterSizeT((CUFileSizeTConfigParameter_t)i, hi));
        CHECK_OK(cuFileGetParameterSizeT((CUFileSizeTConfigParameter_t)i, &v));
        CHECK(v == hi);
        CHECK_OK(cuFileSetParameterSizeT((CUFileSizeTConfigParameter_t)i, orig));
    }
    size_t v, lo, hi;
    CHECK_ERR(cuFileGetParameterSizeT((CUFileSizeTConfigParameter_t)12, &v), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterSizeT((CUFileSizeTConfigParameter_t)-1, &v), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileSetParameterSizeT((CUFileSizeTConfigParameter_t)12, 1), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterSizeT(CUFILE_PARAM_PROFILE_STATS, NULL), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterMinMaxValue((CUFileSizeTConfigParameter_t)12, &lo, &hi), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterMinMaxValue(CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB, NULL, &hi), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterMinMaxValue(CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB, &lo, NULL), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileGetParameterMinMaxValue(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, &lo, &hi));
    CHECK(lo == 1 && hi == 128);

    /* Bools 0..13: the twelve hipFile shares and cuFile's two extras. */
    for (int i = CUFILE_PARAM_PROPERTIES_USE_POLL_MODE; i <= CUFILE_PARAM_GDS_FALLBACK_IO; i++) {
        bool orig, b;
        CHECK_OK(cuFileGetParameterBool((CUFileBoolConfigParameter_t)i, &orig));
        CHECK_OK(cuFileSetParameterBool((CUFileBoolConfigParameter_t)i, !orig));
        CHECK_OK(cuFileGetParameterBool((CUFileBoolConfigParameter_t)i, &b));
        CHECK(b == !orig);
        CHECK_OK(cuFileSetParameterBool((CUFileBoolConfigParameter_t)i, orig));
        CHECK_OK(cuFileGetParameterBool((CUFileBoolConfigParameter_t)i, &b));
        CHECK(b == orig);
    }
    bool b;
    CHECK_ERR(cuFileGetParameterBool((CUFileBoolConfigParameter_t)14, &b), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileSetParameterBool((CUFileBoolConfigParameter_t)14, true), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterBool(CUFILE_PARAM_GDS_FALLBACK_IO, NULL), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterBool(CUFILE_PARAM_PROFILE_NVTX, NULL), CU_FILE_INVALID_VALUE);

    /* Strings 0..3 (3 = cuFile's RDMA_TRANSPORT). */
    const char *vals[] = {"INFO", "/tmp/cufile-test.log", "/tmp/cufile-logs", "tcp"};
    for (int i = CUFILE_PARAM_LOGGING_LEVEL; i <= CUFILE_PARAM_RDMA_TRANSPORT; i++) {
        char orig[256], s[256];
        CHECK_OK(cuFileGetParameterString((CUFileStringConfigParameter_t)i, orig, sizeof orig));
        CHECK_OK(cuFileSetParameterString((CUFileStringConfigParameter_t)i, vals[i]));
        CHECK_OK(cuFileGetParameterString((CUFileStringConfigParameter_t)i, s, sizeof s));
        CHECK(strcmp(s, vals[i]) == 0);
        /* Truncated to len - 1 bytes and NUL-terminated. */
        CHECK_OK(cuFileGetParameterString((CUFileStringConfigParameter_t)i, s, 3));
        CHECK(strlen(s) == 2 && strncmp(s, vals[i], 2) == 0);
        CHECK_ERR(cuFileGetParameterString((CUFileStringConfigParameter_t)i, s, 0), CU_FILE_INVALID_VALUE);
        CHECK_ERR(cuFileGetParameterString((CUFileStringConfigParameter_t)i, NULL, 8), CU_FILE_INVALID_VALUE);
        CHECK_ERR(cuFileSetParameterString((CUFileStringConfigParameter_t)i, NULL), CU_FILE_INVALID_VALUE);
        CHECK_OK(cuFileSetParameterString((CUFileStringConfigParameter_t)i, orig));
    }
    char s[16];
    CHECK_ERR(cuFileGetParameterString((CUFileStringConfigParameter_t)4, s, sizeof s), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileSetParameterString((CUFileStringConfigParameter_t)4, "x"), CU_FILE_INVALID_VALUE);

    /* Every set is refused while the driver is open, extras included. */
    CHECK_OK(cuFileDriverOpen());
    CHECK_ERR(cuFileSetParameterSizeT(CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB, 8), CU_FILE_DRIVER_ALREADY_OPEN);
    CHECK_ERR(cuFileSetParameterBool(CUFILE_PARAM_PROFILE_NVTX, true), CU_FILE_DRIVER_ALREADY_OPEN);
    CHECK_ERR(cuFileSetParameterBool(CUFILE_PARAM_GDS_FALLBACK_IO, true), CU_FILE_DRIVER_ALREADY_OPEN);
    CHECK_ERR(cuFileSetParameterString(CUFILE_PARAM_LOG_DIR, "/tmp"), CU_FILE_DRIVER_ALREADY_OPEN);
    CHECK_ERR(cuFileSetParameterString(CUFILE_PARAM_RDMA_TRANSPORT, "x"), CU_FILE_DRIVER_ALREADY_OPEN);
    size_t sz[2] = {4, 8}, ct[2] = {1, 2};
    CHECK_ERR(cuFileSetParameterPosixPoolSlabArray(sz, ct, 2), CU_FILE_DRIVER_ALREADY_OPEN);
    CHECK_OK(cuFileDriverClose());
}

typedef CUfileError_t (*set_slabs_fn)(const size_t *, const size_t *, int);
typedef CUfileError_t (*get_slabs_fn)(size_t *, size_t *, int);

static void slab_arrays(set_slabs_fn set, get_slabs_fn get) {
    size_t sz[16], ct[16];
    /* Four defaults before any set. */
    CHECK_OK(get(sz, ct, 4));
    CHECK(sz[0] > 0 && ct[0] > 0);
    CHECK_ERR(get(sz, ct, 3), CU_FILE_INVALID_VALUE);
    CHECK_ERR(get(NULL, ct, 4), CU_FILE_INVALID_VALUE);
    CHECK_ERR(get(sz, NULL, 4), CU_FILE_INVALID_VALUE);
    size_t want_sz[3] = {4, 1024, 16384}, want_ct[3] = {10, 5, 2};
    CHECK_ERR(set(want_sz, want_ct, 0), CU_FILE_INVALID_VALUE);
    CHECK_ERR(set(want_sz, want_ct, 17), CU_FILE_INVALID_VALUE);
    CHECK_ERR(set(want_sz, want_ct, -1), CU_FILE_INVALID_VALUE);
    CHECK_ERR(set(NULL, want_ct, 3), CU_FILE_INVALID_VALUE);
    CHECK_ERR(set(want_sz, NULL, 3), CU_FILE_INVALID_VALUE);
    size_t zero_sz[1] = {0}, one_ct[1] = {1};
    CHECK_ERR(set(zero_sz, one_ct, 1), CU_FILE_INVALID_VALUE);
    CHECK_OK(set(want_sz, want_ct, 3));
    /* Still there after open (the driver takes the staged values). */
    CHECK_OK(cuFileDriverOpen());
    memset(sz, 0, sizeof sz);
    memset(ct, 0, sizeof ct);
    CHECK_OK(get(sz, ct, 3));
    for (int i = 0; i < 3; i++) CHECK(sz[i] == want_sz[i] && ct[i] == want_ct[i]);
    CHECK_ERR(get(sz, ct, 4), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileDriverClose());
}

static void bar_size(void) {
    size_t kb = 0;
    /* No GPU on the host runtime: every index is out of range. */
    CHECK_ERR(cuFileGetBARSizeInKB(0, &kb), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetBARSizeInKB(-1, &kb), CU_FILE_INVALID_VALUE);
}

static void statistics(const char *dir) {
    int level = -1;
    CHECK_OK(cuFileGetStatsLevel(&level));
    CHECK(level == 0);
    CHECK_ERR(cuFileGetStatsLevel(NULL), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileSetStatsLevel(-1), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileSetStatsLevel(4), CU_FILE_INVALID_VALUE);
    CUfileStatsLevel1_t l1;
    CUfileStatsLevel2_t l2;
    CUfileStatsLevel3_t l3;
    CHECK_ERR(cuFileGetStatsL1(&l1), CU_FILE_INVALID_VALUE); /* level 0 */
    CHECK_OK(cuFileSetStatsLevel(1));
    CHECK_OK(cuFileGetStatsLevel(&level));
    CHECK(level == 1);
    CHECK_ERR(cuFileGetStatsL1(NULL), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetStatsL2(&l2), CU_FILE_INVALID_VALUE); /* level 1 < 2 */
    CHECK_ERR(cuFileGetStatsL3(&l3), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileStatsReset());
    CHECK_OK(cuFileStatsStart());

    int fd = make_file(dir, "stats.bin", 65536, 7);
    CUfileHandle_t fh;
    CHECK_OK(register_fd(&fh, fd));
    static unsigned char buf[65536];
    CHECK_OK(cuFileBufRegister(buf, sizeof buf, 0));
    CHECK_ERR(cuFileBufRegister(buf, sizeof buf, 0), CU_FILE_MEMORY_ALREADY_REGISTERED);
    CHECK_SSIZE(cuFileRead(fh, buf, 4096, 0, 0), 4096);
    CHECK_SSIZE(cuFileRead(fh, buf, 512, 4096, 0), 512);
    CHECK_SSIZE(cuFileWrite(fh, buf, 8192, 0, 0), 8192);
    CHECK_SSIZE(cuFileRead((CUfileHandle_t)(uintptr_t)999, buf, 16, 0, 0), -CU_FILE_HANDLE_NOT_REGISTERED);
    memset(&l1, 0xee, sizeof l1);
    CHECK_OK(cuFileGetStatsL1(&l1));
    CHECK(l1.read_ops.ok == 2 && l1.read_ops.err == 1);
    CHECK(l1.write_ops.ok == 1 && l1.write_ops.err == 0);
    CHECK(l1.read_bytes == 4608 && l1.write_bytes == 8192);
    CHECK(l1.hdl_register_ops.ok == 1 && l1.hdl_register_ops.err == 0);
    CHECK(l1.buf_register_ops.ok == 1 && l1.buf_register_ops.err == 1);
    CHECK(l1.read_lat_avg_us * 2 <= l1.read_lat_sum_us + 2);
    CHECK(l1.batch_submit_ops.ok == 0 && l1.last_batch_read_bytes == 0);

    /* Stopped: nothing counts; started again: counting resumes. */
    CHECK_OK(cuFileStatsStop());
    CHECK_SSIZE(cuFileRead(fh, buf, 100, 0, 0), 100);
    CHECK_OK(cuFileGetStatsL1(&l1));
    CHECK(l1.read_ops.ok == 2);
    CHECK_OK(cuFileStatsStart());

    /* Level 2: the size histograms (4 KiB lands in bucket 3: [4, 8) KiB). */
    CHECK_OK(cuFileSetStatsLevel(2));
    CHECK_OK(cuFileStatsReset());
    CHECK_SSIZE(cuFileRead(fh, buf, 4096, 0, 0), 4096);
    CHECK_SSIZE(cuFileRead(fh, buf, 100, 0, 0), 100);
    CHECK_SSIZE(cuFileWrite(fh, buf, 65536, 0, 0), 65536);
    CHECK_OK(cuFileGetStatsL2(&l2));
    CHECK(l2.basic.read_ops.ok == 2 && l2.basic.write_bytes == 65536);
    CHECK(l2.read_size_kb_hist[3] == 1 && l2.read_size_kb_hist[0] == 1);
    CHECK(l2.write_size_kb_hist[7] == 1);
    uint64_t total = 0;
    for (int i = 0; i < 32; i++) total += l2.read_size_kb_hist[i] + l2.write_size_kb_hist[i];
    CHECK(total == 3);

    /* Level 3: no GPU on the host runtime, so no per-GPU entry. */
    CHECK_OK(cuFileSetStatsLevel(3));
    memset(&l3, 0xee, sizeof l3);
    CHECK_OK(cuFileGetStatsL3(&l3));
    CHECK(l3.num_gpus == 0);
    CHECK(l3.detailed.basic.read_ops.ok == 2 && l3.per_gpu_stats[0].n_total_reads == 0);

    CHECK_OK(cuFileStatsReset());
    CHECK_OK(cuFileGetStatsL1(&l1));
    CHECK(l1.read_ops.ok == 0 && l1.read_bytes == 0 && l1.buf_register_ops.err == 0);
    CHECK_OK(cuFileBufDeregister(buf));
    cuFileHandleDeregister(fh);
    CHECK_OK(cuFileSetStatsLevel(0));
    CHECK_OK(cuFileDriverClose());
    close(fd);
}

int main(int argc, char **argv) {
    const char *dir = test_dir(argc, argv);
    version_and_use_count();
    bad_registration_opens_the_driver();
    properties();
    parameters();
    slab_arrays(cuFileSetParameterPosixPoolSlabArray, cuFileGetParameterPosixPoolSlabArray);
    slab_arrays(cuFileSetParameterGpuBounceBufferSlabArray, cuFileGetParameterGpuBounceBufferSlabArray);
    bar_size();
    statistics(dir);
    CHECK(cuFileUseCount() == 0);
    printf("driver, version, properties, parameters, slabs, stats checked\n");
    return 0;
}
