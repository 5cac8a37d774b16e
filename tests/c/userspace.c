/* A userspace filesystem written in C: hipFileFSOps_t callbacks serving a
 * file from memory. Checks that the library hands the fd back as the
 * callbacks' handle and never does I/O on it, passes rdma_info == NULL with
 * host memory for unregistered/plain-registered buffers and a version-1
 * descriptor for buffers registered with HIPFILE_RDMA_REGISTER, and maps
 * negative callback returns to -1/errno. */
#include "check.h"
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>

#define CAP (1 << 20)

static struct {
    pthread_mutex_t mu;
    int fd;
    unsigned char data[CAP];
    size_t size;
    int calls;
    int bad_handle;
    int info_null;
    int info_version;
    int desc_len;
    char desc[256];
    const char *ptr;
    size_t len;
    int fail_errno;
    int overreport;
} MF = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void record(void *handle, const char *buf, size_t len, const hipFileRDMAInfo_t *info) {
    MF.calls++;
    if ((intptr_t)handle != MF.fd) MF.bad_handle = 1;
    MF.ptr = buf;
    MF.len = len;
    MF.info_null = info == NULL;
    MF.desc[0] = 0;
    MF.desc_len = -1;
    MF.info_version = -1;
    if (info) {
        MF.info_version = info->version;
        MF.desc_len = info->desc_len;
        snprintf(MF.desc, sizeof MF.desc, "%s", info->desc_str ? info->desc_str : "(null)");
    }
}

static const char *mf_type(void *handle) {
    (void)handle;
    return "c-memfs";
}

static ssize_t mf_read(void *handle, char *buf, size_t n, hoff_t off, hipFileRDMAInfo_t *info) {
    pthread_mutex_lock(&MF.mu);
    record(handle, buf, n, info);
    ssize_t ret;
    if (MF.fail_errno) {
        ret = -MF.fail_errno;
    } else if (MF.overreport) {
        ret = (ssize_t)n + 1;
    } else if (off < 0) {
        ret = -EINVAL;
    } else if ((size_t)off >= MF.size) {
        ret = 0;
    } else {
        size_t k = MF.size - (size_t)off < n ? MF.size - (size_t)off : n;
        memcpy(buf, MF.data + off, k);
        ret = (ssize_t)k;
    }
    pthread_mutex_unlock(&MF.mu);
    return ret;
}

static ssize_t mf_write(void *handle, const char *buf, size_t n, hoff_t off, hipFileRDMAInfo_t *info) {
    pthread_mutex_lock(&MF.mu);
    record(handle, buf, n, info);
    ssize_t ret;
    if (MF.fail_errno) {
        ret = -MF.fail_errno;
    } else if (off < 0 || (size_t)off + n > CAP) {
        ret = -ENOSPC;
    } else {
        memcpy(MF.data + off, buf, n);
        if ((size_t)off + n > MF.size) MF.size = (size_t)off + n;
        ret = (ssize_t)n;
    }
    pthread_mutex_unlock(&MF.mu);
    return ret;
}

static const hipFileFSOps_t OPS = {mf_type, NULL, NULL, mf_read, mf_write};

static hipFileError_t register_ufs(hipFileHandle_t *fh, int fd, const hipFileFSOps_t *ops) {
    hipFileDescr_t d;
    memset(&d, 0, sizeof d);
    d.type = hipFileHandleTypeUserspaceFS;
    d.handle.fd = fd;
    d.fs_ops = ops;
    return hipFileHandleRegister(fh, &d);
}

/* Parses a version-1 descriptor; returns 1 on success. */
static int parse_desc(const char *s, char *transport, uint64_t *addr, uint64_t *len, unsigned *rkey) {
    return sscanf(s, "hipfs-rdma:v1:%15[a-z]:addr=0x%" SCNx64 ",len=%" SCNu64 ",rkey=0x%x", transport,
                  addr, len, rkey) == 4;
}

int main(int argc, char **argv) {
    (void)test_dir(argc, argv);
    /* The fd is a pipe holding one byte: any read or fstat-based I/O on it
     * by the library would consume the byte or reject the fd. */
    int p[2];
    CHECK(pipe(p) == 0);
    CHECK(write(p[1], "Z", 1) == 1);
    MF.fd = p[0];
    fill_pattern(MF.data, 300000, 0, 21);
    MF.size = 300000;

    hipFileHandle_t fh = NULL, dup_fh = NULL;
    CHECK(hipFileUseCount() == 0);
    CHECK_OK(register_ufs(&fh, MF.fd, &OPS));
    CHECK(hipFileUseCount() == 1);
    CHECK_ERR(register_ufs(&dup_fh, MF.fd, &OPS), hipFileHandleAlreadyRegistered);
    CHECK_ERR(register_ufs(&dup_fh, -3, &OPS), hipFileInvalidValue);

    /* 1. Unregistered host buffer: rdma_info NULL, the pointer is ours. */
    unsigned char *buf = malloc(CAP);
    CHECK(buf != NULL);
    CHECK_SSIZE(hipFileRead(fh, buf, 1000, 10, 3), 1000);
    CHECK(MF.info_null && MF.ptr == (char *)buf + 3 && MF.len == 1000 && !MF.bad_handle);
    for (size_t i = 0; i < 1000; i++) CHECK(buf[3 + i] == pattern_byte(10 + i, 21));

    /* 2. Registered without the RDMA flag: still rdma_info NULL. */
    CHECK_OK(hipFileBufRegister(buf, CAP, 0));
    CHECK_SSIZE(hipFileRead(fh, buf, 4096, 4095, 1), 4096);
    CHECK(MF.info_null && MF.ptr == (char *)buf + 1);
    for (size_t i = 0; i < 4096; i++) CHECK(buf[1 + i] == pattern_byte(4095 + i, 21));
    CHECK_OK(hipFileBufDeregister(buf));

    /* 3. Registered with HIPFILE_RDMA_REGISTER: a descriptor of the whole
     * registration, and the pointer is the request's address inside it. */
    CHECK_OK(hipFileBufRegister(buf, CAP, HIPFILE_RDMA_REGISTER));
    memset(buf, 0, CAP);
    CHECK_SSIZE(hipFileRead(fh, buf, 70000, 123, 4097), 70000);
    CHECK(!MF.info_null);
    CHECK(MF.info_version == 1);
    CHECK(MF.desc_len == (int)strlen(MF.desc));
    char transport[16];
    uint64_t addr = 0, len = 0;
    unsigned rkey = 99;
    if (!parse_desc(MF.desc, transport, &addr, &len, &rkey)) FAIL("unparsable descriptor \"%s\"", MF.desc);
    CHECK(strcmp(transport, "host") == 0);
    CHECK(addr == (uint64_t)(uintptr_t)buf && len == CAP && rkey == 0);
    CHECK(MF.ptr == (char *)buf + 4097);
    for (size_t i = 0; i < 70000; i++) CHECK(buf[4097 + i] == pattern_byte(123 + i, 21));

    /* Writes get the descriptor too, and land in the file. */
    fill_pattern(buf + 5, 50000, 0, 22);
    CHECK_SSIZE(hipFileWrite(fh, buf, 50000, 290000, 5), 50000);
    CHECK(!MF.info_null && MF.info_version == 1 && MF.ptr == (char *)buf + 5);
    CHECK(MF.size == 340000);
    for (size_t i = 0; i < 50000; i++) CHECK(MF.data[290000 + i] == pattern_byte(i, 22));
    CHECK_OK(hipFileBufDeregister(buf));

    /* 4. Short read at end of file, zero past it. */
    CHECK_SSIZE(hipFileRead(fh, buf, 10000, 335000, 0), 5000);
    CHECK_SSIZE(hipFileRead(fh, buf, 10000, 340000, 0), 0);
    CHECK_SSIZE(hipFileRead(fh, buf, 10, 999999999, 0), 0);

    /* 5. Negative returns are -errno: -1 with errno set. */
    MF.fail_errno = EIO;
    CHECK_ERRNO(hipFileRead(fh, buf, 100, 0, 0), EIO);
    MF.fail_errno = EACCES;
    CHECK_ERRNO(hipFileWrite(fh, buf, 100, 0, 0), EACCES);
    MF.fail_errno = 0;
    CHECK_ERRNO(hipFileWrite(fh, buf, 100, CAP - 50, 0), ENOSPC);
    /* A callback claiming more than asked is an internal error, not trusted. */
    MF.overreport = 1;
    CHECK_SSIZE(hipFileRead(fh, buf, 100, 0, 0), -hipFileInternalError);
    MF.overreport = 0;

    /* 6. A table without a write callback: writes are not supported. */
    int q[2];
    CHECK(pipe(q) == 0);
    hipFileFSOps_t ro = {NULL, NULL, NULL, mf_read, NULL};
    hipFileHandle_t rfh = NULL;
    CHECK_OK(register_ufs(&rfh, q[0], &ro));
    CHECK_SSIZE(hipFileWrite(rfh, buf, 100, 0, 0), -hipFileIONotSupported);
    hipFileHandleDeregister(rfh);

    /* 7. After deregistration the callbacks are not called again. */
    int before = MF.calls;
    hipFileHandleDeregister(fh);
    CHECK_SSIZE(hipFileRead(fh, buf, 100, 0, 0), -hipFileHandleNotRegistered);
    CHECK(MF.calls == before);
    CHECK(!MF.bad_handle);

    /* The library never touched the fd: the byte is still in the pipe. */
    char c = 0;
    CHECK(read(p[0], &c, 1) == 1 && c == 'Z');
    CHECK_OK(hipFileDriverClose());
    free(buf);
    puts("userspace: ok");
    return 0;
}
