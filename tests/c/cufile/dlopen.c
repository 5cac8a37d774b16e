/* Loads libcufile.so.0 by SONAME as KvikIO and cuda-python do (no link-time
 * dependency), resolves every function clients look up (both DriverClose
 * names), and moves bytes through it. */
#define _GNU_SOURCE
#include <cufile.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(c)                                                        \
    do {                                                                \
        if (!(c)) {                                                     \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); \
            exit(1);                                                    \
        }                                                               \
    } while (0)

static const char *kvikio_and_cuda_python[] = {
    "cuFileHandleRegister", "cuFileHandleDeregister", "cuFileBufRegister", "cuFileBufDeregister",
    "cuFileRead", "cuFileWrite", "cuFileReadAsync", "cuFileWriteAsync", "cuFileStreamRegister",
    "cuFileStreamDeregister", "cuFileDriverOpen", "cuFileDriverClose", "cuFileDriverClose_v2",
    "cuFileUseCount", "cuFileDriverGetProperties", "cuFileDriverSetPollMode",
    "cuFileDriverSetMaxDirectIOSize", "cuFileDriverSetMaxCacheSize", "cuFileDriverSetMaxPinnedMemSize",
    "cuFileBatchIOSetUp", "cuFileBatchIOSubmit", "cuFileBatchIOGetStatus", "cuFileBatchIOCancel",
    "cuFileBatchIODestroy", "cuFileGetVersion", "cuFileGetParameterSizeT", "cuFileSetParameterSizeT",
    "cuFileGetParameterBool", "cuFileSetParameterBool", "cuFileGetParameterString",
    "cuFileSetParameterString", "cuFileGetParameterMinMaxValue", "cuFileSetStatsLevel",
    "cuFileGetStatsLevel", "cuFileStatsStart", "cuFileStatsStop", "cuFileStatsReset",
    "cuFileGetStatsL1", "cuFileGetStatsL2", "cuFileGetStatsL3", "cuFileGetBARSizeInKB",
    "cuFileSetParameterPosixPoolSlabArray", "cuFileGetParameterPosixPoolSlabArray", "cuFileReadv",
    "cuFileWritev", NULL};

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    void *lib = dlopen("libcufile.so.0", RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    for (const char **n = kvikio_and_cuda_python; *n; n++) {
        if (!dlsym(lib, *n)) {
            fprintf(stderr, "missing %s\n", *n);
            return 1;
        }
    }
    /* Internal symbols stay hidden. */
    CHECK(dlsym(lib, "rust_eh_personality") == NULL);
    CHECK(dlsym(lib, "hipFileDriverOpen") == NULL);

    CUfileError_t (*open_)(void) = (CUfileError_t(*)(void))dlsym(lib, "cuFileDriverOpen");
    CUfileError_t (*close_plain)(void) = (CUfileError_t(*)(void))dlsym(lib, "cuFileDriverClose");
    CUfileError_t (*close_v2)(void) = (CUfileError_t(*)(void))dlsym(lib, "cuFileDriverClose_v2");
    long (*use_count)(void) = (long (*)(void))dlsym(lib, "cuFileUseCount");
    CUfileError_t (*get_version)(int *) = (CUfileError_t(*)(int *))dlsym(lib, "cuFileGetVersion");
    CUfileError_t (*reg)(CUfileHandle_t *, CUfileDescr_t *) =
        (CUfileError_t(*)(CUfileHandle_t *, CUfileDescr_t *))dlsym(lib, "cuFileHandleRegister");
    void (*dereg)(CUfileHandle_t) = (void (*)(CUfileHandle_t))dlsym(lib, "cuFileHandleDeregister");
    ssize_t (*rd)(CUfileHandle_t, void *, size_t, off_t, off_t) =
        (ssize_t(*)(CUfileHandle_t, void *, size_t, off_t, off_t))dlsym(lib, "cuFileRead");

    int v = 0;
    CHECK(get_version(&v).err == CU_FILE_SUCCESS && v == 1150);
    CHECK(open_().err == CU_FILE_SUCCESS && open_().err == CU_FILE_SUCCESS);
    CHECK(use_count() == 2);
    CHECK(close_plain().err == CU_FILE_SUCCESS && use_count() == 1);
    CHECK(close_v2().err == CU_FILE_SUCCESS && use_count() == 0);

    char path[4096];
    snprintf(path, sizeof path, "%s/dl.bin", argv[1]);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    CHECK(fd >= 0);
    char data[1000];
    for (int i = 0; i < 1000; i++) data[i] = (char)(i * 7);
    CHECK(pwrite(fd, data, sizeof data, 0) == (ssize_t)sizeof data);
    CUfileDescr_t d;
    memset(&d, 0, sizeof d);
    d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    d.handle.fd = fd;
    CUfileHandle_t fh;
    CHECK(reg(&fh, &d).err == CU_FILE_SUCCESS); /* opens the driver implicitly */
    char got[1000];
    CHECK(rd(fh, got, sizeof got, 0, 0) == (ssize_t)sizeof got);
    CHECK(memcmp(got, data, sizeof got) == 0);
    dereg(fh);
    CHECK(close_v2().err == CU_FILE_SUCCESS && use_count() == 0);
    errno = 0;
    CHECK(rd(fh, got, 10, 0, 0) == -1 && errno == EINVAL);
    close(fd);
    printf("dlopen(\"libcufile.so.0\") resolved %zu functions\n",
           sizeof kvikio_and_cuda_python / sizeof *kvikio_and_cuda_python - 1);
    return 0;
}
