/* The same round trip through dlopen/dlsym, as Python's ctypes does: no
 * link-time dependency on the library, every symbol looked up by name. */
#include "check.h"
#include <dlfcn.h>

static const char *NAMES[] = {
    "hipFileBatchIOCancel", "hipFileBatchIODestroy", "hipFileBatchIOGetStatus", "hipFileBatchIOSetUp",
    "hipFileBatchIOSubmit", "hipFileBufDeregister", "hipFileBufRegister", "hipFileDriverClose",
    "hipFileDriverGetProperties", "hipFileDriverOpen", "hipFileDriverSetMaxCacheSize",
    "hipFileDriverSetMaxDirectIOSize", "hipFileDriverSetMaxPinnedMemSize", "hipFileDriverSetPollMode",
    "hipFileGetOpErrorString", "hipFileGetParameterBool", "hipFileGetParameterSizeT",
    "hipFileGetParameterString", "hipFileGetVersion", "hipFileHandleDeregister", "hipFileHandleRegister",
    "hipFileRead", "hipFileReadAsync", "hipFileSetParameterBool", "hipFileSetParameterSizeT",
    "hipFileSetParameterString", "hipFileStreamDeregister", "hipFileStreamRegister", "hipFileUseCount",
    "hipFileWrite", "hipFileWriteAsync",
};

/* Names a Rust library would export if its symbol table were not trimmed. */
static const char *HIDDEN[] = {"rust_eh_personality", "__rust_alloc", "__rust_dealloc", "rust_begin_unwind",
                               "hipfs_capi", "main"};

#define SYM(lib, T, name) ((T)sym(lib, name))

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) FAIL("dlsym(%s): %s", name, dlerror());
    return p;
}

int main(int argc, char **argv) {
    const char *dir = test_dir(argc, argv);
    if (argc < 3) FAIL("usage: dlopen DIR LIBRARY");
    void *lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!lib) FAIL("dlopen(%s): %s", argv[2], dlerror());
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) (void)sym(lib, NAMES[i]);
    for (size_t i = 0; i < sizeof HIDDEN / sizeof HIDDEN[0]; i++)
        if (dlsym(lib, HIDDEN[i]) != NULL) FAIL("%s is exported", HIDDEN[i]);

    hipFileError_t (*drv_open)(void) = SYM(lib, hipFileError_t(*)(void), "hipFileDriverOpen");
    hipFileError_t (*drv_close)(void) = SYM(lib, hipFileError_t(*)(void), "hipFileDriverClose");
    int64_t (*use_count)(void) = SYM(lib, int64_t(*)(void), "hipFileUseCount");
    hipFileError_t (*reg)(hipFileHandle_t *, hipFileDescr_t *) =
        SYM(lib, hipFileError_t(*)(hipFileHandle_t *, hipFileDescr_t *), "hipFileHandleRegister");
    void (*dereg)(hipFileHandle_t) = SYM(lib, void (*)(hipFileHandle_t), "hipFileHandleDeregister");
    hipFileError_t (*buf_reg)(const void *, size_t, int) =
        SYM(lib, hipFileError_t(*)(const void *, size_t, int), "hipFileBufRegister");
    hipFileError_t (*buf_dereg)(const void *) = SYM(lib, hipFileError_t(*)(const void *), "hipFileBufDeregister");
    ssize_t (*rd)(hipFileHandle_t, void *, size_t, hoff_t, hoff_t) =
        SYM(lib, ssize_t(*)(hipFileHandle_t, void *, size_t, hoff_t, hoff_t), "hipFileRead");
    ssize_t (*wr)(hipFileHandle_t, const void *, size_t, hoff_t, hoff_t) =
        SYM(lib, ssize_t(*)(hipFileHandle_t, const void *, size_t, hoff_t, hoff_t), "hipFileWrite");
    const char *(*errstr)(hipFileOpError_t) = SYM(lib, const char *(*)(hipFileOpError_t), "hipFileGetOpErrorString");
    hipFileError_t (*version)(unsigned *, unsigned *, unsigned *) =
        SYM(lib, hipFileError_t(*)(unsigned *, unsigned *, unsigned *), "hipFileGetVersion");

    unsigned ma = 9, mi = 9, pa = 9;
    CHECK(version(&ma, &mi, &pa).err == hipFileSuccess && ma == 0 && mi == 5);
    CHECK(strcmp(errstr(hipFileBatchFull), "Batch operation queue is full") == 0);
    CHECK(use_count() == 0);
    CHECK(drv_open().err == hipFileSuccess);
    CHECK(use_count() == 1);

    const char *path = make_file(dir, "dlopen.dat", 100000, 51);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    hipFileDescr_t d;
    memset(&d, 0, sizeof d);
    d.type = hipFileHandleTypeOpaqueFD;
    d.handle.fd = fd;
    hipFileHandle_t fh = NULL;
    CHECK(reg(&fh, &d).err == hipFileSuccess);
    CHECK(reg(&fh, &d).err == hipFileHandleAlreadyRegistered);

    unsigned char *src = malloc(70000), *dst = malloc(70000 + 3);
    CHECK(src && dst);
    fill_pattern(src, 70000, 0, 52);
    CHECK(buf_reg(dst, 70003, 0).err == hipFileSuccess);
    CHECK(wr(fh, src, 70000, 12345, 0) == 70000);
    CHECK(rd(fh, dst, 70000, 12345, 3) == 70000);
    CHECK(memcmp(dst + 3, src, 70000) == 0);
    unsigned char check[70000];
    CHECK(pread(fd, check, sizeof check, 12345) == (ssize_t)sizeof check);
    CHECK(memcmp(check, src, sizeof check) == 0);
    CHECK(rd(fh, dst, 10, 200000, 0) == 0);
    CHECK(buf_dereg(dst).err == hipFileSuccess);
    dereg(fh);
    CHECK(rd(fh, dst, 10, 0, 0) == -hipFileHandleNotRegistered);
    CHECK(drv_close().err == hipFileSuccess);
    errno = 0;
    CHECK(rd(fh, dst, 10, 0, 0) == -1 && errno == EINVAL);
    free(src);
    free(dst);
    close(fd);
    /* Like ctypes, the library stays loaded until exit. */
    puts("dlopen: ok");
    return 0;
}
