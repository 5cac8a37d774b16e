/* Driver reference counting and implicit open, version, error strings,
 * properties and the parameter API's open/closed rules. */
#include "check.h"

static const struct {
    int code;
    const char *str;
} STRINGS[] = {
    {0, "hipFile success"},
    {5001, "GPU IO driver is not loaded"},
    {5002, "Invalid GPU IO driver property provided"},
    {5003, "GPU IO Driver property value is unsupported"},
    {5004, "hipFile version does not match GPU IO driver version"},
    {5005, "Unable to read the GPU IO driver version"},
    {5006, "GPU IO driver is closing and not accepting new requests"},
    {5007, "hipFile is not supported on the current platform"},
    {5008, "hipFile is not supported on the selected file"},
    {5009, "The selected GPU does not support hipFile"},
    {5010, "GPU IO driver error"},
    {5011, "GPU driver error: Inspect hip_drv_err for additional information"},
    {5012, "Invalid GPU pointer"},
    {5013, "Memory type backing pointer is incompatible with hipFile"},
    {5014, "Pointer range exceeds allocated memory region"},
    {5015, "GPU driver context mismatch"},
    {5016, "Accessing memory beyond pinned memory buffer"},
    {5017, "Accessing memory beyond mapped memory region"},
    {5018, "Unsupported file type"},
    {5019, "Unsupported file open flags"},
    {5020, "O_DIRECT flag not set"},
    {5022, "One or more arguments have an invalid value"},
    {5023, "Device pointer is already registered"},
    {5024, "Device pointer is not registered"},
    {5025, "Permission error on device or file access"},
    {5026, "GPU IO driver is already open"},
    {5027, "File handle for GPU IO is not registered"},
    {5028, "File handle for GPU IO is already registered"},
    {5029, "Selected device not found"},
    {5030, "Internal GPU IO library error"},
    {5031, "Unable to obtain a new file descriptor"},
    {5033, "GPU IO Driver initialization error"},
    {5034, "GPU IO config file prohibits GPU IO on specified file"},
    {5035, "Failed to submit request for batch operation"},
    {5036, "Failed to allocated pinned device memory"},
    {5037, "Batch operation queue is full"},
    {5038, "hipFile async IO is not supported"},
    {5039, "Internal flag to mark largest hipFile error code"},
};

static void version_and_strings(void) {
    unsigned ma = 99, mi = 99, pa = 99;
    CHECK_OK(hipFileGetVersion(&ma, &mi, &pa));
    CHECK(ma == HIPFILE_VERSION_MAJOR && mi == HIPFILE_VERSION_MINOR && pa == HIPFILE_VERSION_PATCH);
    CHECK_OK(hipFileGetVersion(NULL, NULL, NULL));
    CHECK_OK(hipFileGetVersion(NULL, &mi, NULL));
    for (size_t i = 0; i < sizeof STRINGS / sizeof STRINGS[0]; i++) {
        const char *s = hipFileGetOpErrorString((hipFileOpError_t)STRINGS[i].code);
        if (s == NULL || strcmp(s, STRINGS[i].str) != 0)
            FAIL("code %d: got \"%s\", want \"%s\"", STRINGS[i].code, s ? s : "(null)", STRINGS[i].str);
    }
    int unknown[] = {5021, 5032, 5000, 4999, 5040, -1, 1};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        CHECK(strcmp(hipFileGetOpErrorString((hipFileOpError_t)unknown[i]), "Unknown hipFile error") == 0);
    CHECK(strcmp(HIPFILE_ERRSTR(-5024), "Device pointer is not registered") == 0);
}

static void parameters_while_closed(void) {
    size_t v = 0;
    bool b = false;
    char s[64];
    CHECK(hipFileUseCount() == 0);
    CHECK_OK(hipFileGetParameterSizeT(hipFileParamPropertiesMaxDirectIOSizeKB, &v));
    CHECK(v > 0);
    CHECK_OK(hipFileSetParameterSizeT(hipFileParamPropertiesMaxDirectIOSizeKB, 2048));
    CHECK_OK(hipFileGetParameterSizeT(hipFileParamPropertiesMaxDirectIOSizeKB, &v));
    CHECK(v == 2048);
    CHECK_OK(hipFileSetParameterBool(hipFileParamPropertiesUsePollMode, true));
    CHECK_OK(hipFileGetParameterBool(hipFileParamPropertiesUsePollMode, &b));
    CHECK(b == true);
    CHECK_OK(hipFileSetParameterBool(hipFileParamForceCompatMode, false));
    CHECK_OK(hipFileGetParameterBool(hipFileParamForceCompatMode, &b));
    CHECK(b == false);
    CHECK_OK(hipFileSetParameterString(hipFileParamLoggingLevel, "DEBUG"));
    memset(s, 'x', sizeof s);
    CHECK_OK(hipFileGetParameterString(hipFileParamLoggingLevel, s, sizeof s));
    CHECK(strcmp(s, "DEBUG") == 0);
    /* Truncated to the buffer, always NUL-terminated. */
    memset(s, 'x', sizeof s);
    CHECK_OK(hipFileGetParameterString(hipFileParamLoggingLevel, s, 3));
    CHECK(strcmp(s, "DE") == 0);
    CHECK_OK(hipFileSetParameterString(hipFileParamLogDir, "/var/log/hipfile"));
    CHECK_OK(hipFileGetParameterString(hipFileParamLogDir, s, sizeof s));
    CHECK(strcmp(s, "/var/log/hipfile") == 0);

    /* Unknown ordinals and NULLs. */
    CHECK_ERR(hipFileSetParameterSizeT((hipFileSizeTConfigParameter_t)12, 1), hipFileInvalidValue);
    CHECK_ERR(hipFileGetParameterSizeT((hipFileSizeTConfigParameter_t)-1, &v), hipFileInvalidValue);
    CHECK_ERR(hipFileSetParameterBool((hipFileBoolConfigParameter_t)12, true), hipFileInvalidValue);
    CHECK_ERR(hipFileGetParameterBool((hipFileBoolConfigParameter_t)99, &b), hipFileInvalidValue);
    CHECK_ERR(hipFileSetParameterString((hipFileStringConfigParameter_t)3, "x"), hipFileInvalidValue);
    CHECK_ERR(hipFileGetParameterString((hipFileStringConfigParameter_t)3, s, 8), hipFileInvalidValue);
    CHECK_ERR(hipFileGetParameterSizeT(hipFileParamProfileStats, NULL), hipFileInvalidValue);
    CHECK_ERR(hipFileGetParameterBool(hipFileParamProfileNvtx, NULL), hipFileInvalidValue);
    CHECK_ERR(hipFileGetParameterString(hipFileParamLogDir, NULL, 8), hipFileInvalidValue);
    CHECK_ERR(hipFileGetParameterString(hipFileParamLogDir, s, 0), hipFileInvalidValue);
    CHECK_ERR(hipFileSetParameterString(hipFileParamLogDir, NULL), hipFileInvalidValue);
}

static void props_after_open(void) {
    hipFileDriverProps_t p;
    size_t v = 0;
    bool b = false;
    char s[16];
    CHECK_OK(hipFileDriverOpen());
    CHECK(hipFileUseCount() == 1);
    memset(&p, 0xff, sizeof p);
    CHECK_OK(hipFileDriverGetProperties(&p));
    CHECK(p.nvfs.major_version == 0 && p.nvfs.minor_version == 5);
    /* Parameters staged while closed took effect at open. */
    CHECK(p.nvfs.max_direct_io_size == 2048);
    CHECK(p.nvfs.driver_control_flags & (1u << hipFileUsePollMode));
    CHECK(p.feature_flags & (1u << hipFileBatchIOSupported));
    CHECK(p.feature_flags & (1u << hipFileStreamsSupported));
    CHECK(p.max_batch_io_count == 128);
    CHECK_ERR(hipFileDriverGetProperties(NULL), hipFileInvalidValue);

    /* Parameters cannot change while open, but can be read. */
    CHECK_ERR(hipFileSetParameterSizeT(hipFileParamPropertiesMaxDirectIOSizeKB, 64), hipFileDriverAlreadyOpen);
    CHECK_ERR(hipFileSetParameterBool(hipFileParamForceCompatMode, true), hipFileDriverAlreadyOpen);
    CHECK_ERR(hipFileSetParameterString(hipFileParamLoggingLevel, "INFO"), hipFileDriverAlreadyOpen);
    CHECK_OK(hipFileGetParameterSizeT(hipFileParamPropertiesMaxDirectIOSizeKB, &v));
    CHECK(v == 2048);
    CHECK_OK(hipFileGetParameterBool(hipFileParamForceCompatMode, &b));
    CHECK(!b);
    CHECK_OK(hipFileGetParameterString(hipFileParamLoggingLevel, s, sizeof s));
    CHECK(strcmp(s, "DEBUG") == 0);

    /* The driver setters work on the open driver. */
    CHECK_OK(hipFileDriverSetMaxDirectIOSize(4096));
    CHECK_OK(hipFileDriverSetMaxCacheSize(1024));
    CHECK_OK(hipFileDriverSetMaxPinnedMemSize(8192));
    CHECK_OK(hipFileDriverSetPollMode(false, 8));
    CHECK_OK(hipFileDriverGetProperties(&p));
    CHECK(p.nvfs.max_direct_io_size == 4096);
    CHECK(p.max_device_cache_size == 1024);
    CHECK(p.max_device_pinned_mem_size == 8192);
    CHECK(p.nvfs.poll_thresh_size == 8);
    CHECK(!(p.nvfs.driver_control_flags & (1u << hipFileUsePollMode)));
    CHECK_ERR(hipFileDriverSetMaxDirectIOSize(0), hipFileDriverUnsupportedLimit);
    CHECK_ERR(hipFileDriverSetMaxCacheSize(0), hipFileDriverUnsupportedLimit);
    CHECK_ERR(hipFileDriverSetMaxPinnedMemSize(0), hipFileDriverUnsupportedLimit);

    /* Reference counting. */
    CHECK_OK(hipFileDriverOpen());
    CHECK(hipFileUseCount() == 2);
    CHECK_OK(hipFileDriverClose());
    CHECK(hipFileUseCount() == 1);
    CHECK_OK(hipFileDriverClose());
    CHECK(hipFileUseCount() == 0);
    CHECK_ERR(hipFileDriverClose(), hipFileDriverNotInitialized);
    CHECK(hipFileUseCount() == 0);
    /* Closed again: parameters are settable once more. */
    CHECK_OK(hipFileSetParameterSizeT(hipFileParamPropertiesMaxDirectIOSizeKB, 1024));
}

static void implicit_open_and_close_to_zero(const char *dir) {
    static unsigned char mem[8192];
    const char *path = make_file(dir, "driver.dat", 8192, 1);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    hipFileHandle_t fh = NULL;

    CHECK(hipFileUseCount() == 0);
    CHECK_OK(register_fd(&fh, fd));
    CHECK(fh != NULL);
    CHECK(hipFileUseCount() == 1);
    CHECK_OK(hipFileBufRegister(mem, sizeof mem, 0));
    CHECK(hipFileUseCount() == 1);
    CHECK_SSIZE(hipFileRead(fh, mem, 100, 0, 0), 100);

    /* Close to zero deregisters every handle and buffer. */
    CHECK_OK(hipFileDriverClose());
    CHECK(hipFileUseCount() == 0);
    CHECK_ERRNO(hipFileRead(fh, mem, 100, 0, 0), EINVAL);
    CHECK_OK(hipFileDriverOpen());
    CHECK_SSIZE(hipFileRead(fh, mem, 100, 0, 0), -hipFileHandleNotRegistered);
    CHECK_ERR(hipFileBufDeregister(mem), hipFileMemoryNotRegistered);
    CHECK_OK(hipFileBufRegister(mem, sizeof mem, 0));
    hipFileHandle_t fh2 = NULL;
    CHECK_OK(register_fd(&fh2, fd));
    CHECK_SSIZE(hipFileRead(fh2, mem, 8192, 0, 0), 8192);
    for (size_t i = 0; i < 8192; i++) CHECK(mem[i] == pattern_byte(i, 1));
    CHECK_OK(hipFileDriverClose());

    /* BufRegister opens the driver too. */
    CHECK(hipFileUseCount() == 0);
    CHECK_ERR(hipFileBufDeregister(mem), hipFileDriverClosing);
    CHECK_OK(hipFileBufRegister(mem, sizeof mem, 0));
    CHECK(hipFileUseCount() == 1);
    CHECK_OK(hipFileBufDeregister(mem));
    CHECK_OK(hipFileDriverClose());
    close(fd);
}

int main(int argc, char **argv) {
    const char *dir = test_dir(argc, argv);
    version_and_strings();
    /* Statistics are off by default (HIPFILE_STATS_LEVEL unset): queries are refused. */
    hipFileStatsLevel1_t l1;
    hipFileStatsLevel2_t l2;
    hipFileStatsLevel3_t l3;
    CHECK_ERR(hipFileGetStatsL1(&l1), hipFileInvalidValue);
    CHECK_ERR(hipFileGetStatsL2(&l2), hipFileInvalidValue);
    CHECK_ERR(hipFileGetStatsL3(&l3), hipFileInvalidValue);
    CHECK_ERR(hipFileDriverClose(), hipFileDriverNotInitialized);
    parameters_while_closed();
    props_after_open();
    implicit_open_and_close_to_zero(dir);
    puts("driver: ok");
    return 0;
}
