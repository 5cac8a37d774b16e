/* Handles, buffers and synchronous I/O on host memory: the return
 * conventions, bad input for every function, vectored I/O and the
 * USERSPACE_FS callbacks. */
#include "check.h"
#include <stdint.h>

#define FSIZE (256 * 1024)

static unsigned char mem[FSIZE];

static void closed_driver(void) {
    CHECK(cuFileUseCount() == 0);
    CHECK_ERRNO(cuFileRead(NULL, mem, 10, 0, 0), EINVAL);
    CHECK_ERRNO(cuFileWrite((CUfileHandle_t)(uintptr_t)42, mem, 10, 0, 0), EINVAL);
    CUfileIOVec_t v = {mem, 10};
    CHECK_ERRNO(cuFileReadv(NULL, &v, 1, 0, 0), EINVAL);
}

static void handles_and_buffers(const char *dir) {
    int fd = make_file(dir, "io.bin", FSIZE, 3);
    CUfileHandle_t fh = NULL, fh2 = NULL;
    CUfileDescr_t d;
    memset(&d, 0, sizeof d);
    CHECK_ERR(cuFileHandleRegister(&fh, NULL), CU_FILE_INVALID_VALUE);
    d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    d.handle.fd = -1;
    CHECK_ERR(cuFileHandleRegister(&fh, &d), CU_FILE_INVALID_VALUE);
    d.type = CU_FILE_HANDLE_TYPE_OPAQUE_WIN32;
    d.handle.fd = fd;
    CHECK_ERR(cuFileHandleRegister(&fh, &d), CU_FILE_IO_NOT_SUPPORTED);
    /* USERSPACE_FS without fs_ops on a file of no hipfs mount. */
    d.type = CU_FILE_HANDLE_TYPE_USERSPACE_FS;
    CHECK_ERR(cuFileHandleRegister(&fh, &d), CU_FILE_INVALID_VALUE);
    CHECK_OK(register_fd(&fh, fd));
    CHECK(fh != NULL);
    CHECK_ERR(register_fd(&fh2, fd), CU_FILE_HANDLE_ALREADY_REGISTERED);
    int closed_fd = dup(fd);
    close(closed_fd);
    CHECK(register_fd(&fh2, closed_fd).err != CU_FILE_SUCCESS);

    /* Buffers: host memory, registered or not. */
    CHECK_ERR(cuFileBufRegister(NULL, 4096, 0), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileBufRegister(mem, 0, 0), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileBufRegister(mem, 65536, 0));
    CHECK_ERR(cuFileBufRegister(mem, 65536, 0), CU_FILE_MEMORY_ALREADY_REGISTERED);
    CHECK_ERR(cuFileBufDeregister(mem + 1), CU_FILE_MEMORY_NOT_REGISTERED);
    CHECK_ERR(cuFileBufDeregister(NULL), CU_FILE_INVALID_VALUE);

    /* Reads at awkward offsets, into registered and unregistered memory. */
    memset(mem, 0, sizeof mem);
    CHECK_SSIZE(cuFileRead(fh, mem, 4096, 0, 0), 4096);
    CHECK(matches_pattern(mem, 4096, 0, 3));
    CHECK_SSIZE(cuFileRead(fh, mem, 1000, 12345, 777), 1000);
    CHECK(matches_pattern(mem + 777, 1000, 12345, 3));
    CHECK_SSIZE(cuFileRead(fh, mem + 70000, 5000, 100, 3), 5000);
    CHECK(matches_pattern(mem + 70003, 5000, 100, 3));
    /* Short at end of file, 0 past it. */
    CHECK_SSIZE(cuFileRead(fh, mem, 4096, FSIZE - 100, 0), 100);
    CHECK_SSIZE(cuFileRead(fh, mem, 4096, FSIZE + 10, 0), 0);
    /* A write then read back through pread. */
    fill_pattern(mem, 9000, 0, 44);
    CHECK_SSIZE(cuFileWrite(fh, mem, 9000, 5000, 0), 9000);
    static unsigned char check[9000];
    CHECK(pread(fd, check, sizeof check, 5000) == (ssize_t)sizeof check);
    CHECK(matches_pattern(check, sizeof check, 0, 44));

    /* Bad input: unknown handle, NULL buffer, negative offsets (-1/EINVAL),
     * sizes beyond ssize_t. */
    CHECK_SSIZE(cuFileRead((CUfileHandle_t)(uintptr_t)999, mem, 16, 0, 0), -CU_FILE_HANDLE_NOT_REGISTERED);
    CHECK_SSIZE(cuFileRead(NULL, mem, 16, 0, 0), -CU_FILE_HANDLE_NOT_REGISTERED);
    CHECK_SSIZE(cuFileRead(fh, NULL, 16, 0, 0), -CU_FILE_INVALID_VALUE);
    CHECK_ERRNO(cuFileRead(fh, mem, 16, -1, 0), EINVAL);
    CHECK_ERRNO(cuFileRead(fh, mem, 16, 0, -5), EINVAL);
    CHECK_ERRNO(cuFileWrite(fh, mem, 16, -4096, 0), EINVAL);
    CHECK_SSIZE(cuFileRead(fh, mem, (size_t)-1, 0, 0), -CU_FILE_INVALID_VALUE);
    /* A read beyond a registered buffer's end. */
    CHECK(cuFileRead(fh, mem, 65536, 0, 100) < 0);

    /* Vectored I/O. */
    static unsigned char a[3000], b[5000], c[100];
    CUfileIOVec_t v[3] = {{a, sizeof a}, {b, sizeof b}, {c, sizeof c}};
    CHECK_SSIZE(cuFileReadv(fh, v, 3, 20000, 0), 8100);
    CHECK(matches_pattern(a, sizeof a, 20000, 3));
    CHECK(matches_pattern(b, sizeof b, 23000, 3));
    CHECK(matches_pattern(c, sizeof c, 28000, 3));
    CHECK_SSIZE(cuFileReadv(fh, v, 3, FSIZE - 4000, 0), 4000); /* stops at EOF */
    fill_pattern(a, sizeof a, 0, 61);
    fill_pattern(b, sizeof b, sizeof a, 61);
    CHECK_SSIZE(cuFileWritev(fh, v, 2, 100000, 0), 8000);
    static unsigned char back[8000];
    CHECK(pread(fd, back, sizeof back, 100000) == (ssize_t)sizeof back);
    CHECK(matches_pattern(back, sizeof back, 0, 61));
    CHECK_SSIZE(cuFileReadv(fh, v, 0, 0, 0), -CU_FILE_INVALID_VALUE);
    CHECK_SSIZE(cuFileReadv(fh, v, 1025, 0, 0), -CU_FILE_INVALID_VALUE);
    CHECK_SSIZE(cuFileReadv(fh, NULL, 1, 0, 0), -CU_FILE_INVALID_VALUE);
    CHECK_SSIZE(cuFileReadv(fh, v, 1, 0, 1), -CU_FILE_INVALID_VALUE);
    CHECK_ERRNO(cuFileWritev(fh, v, 1, -1, 0), EINVAL);
    CHECK_SSIZE(cuFileWritev((CUfileHandle_t)(uintptr_t)999, v, 1, 0, 0), -CU_FILE_HANDLE_NOT_REGISTERED);

    /* cuFile's rule: the wrong direction for the fd's open mode is an invalid
       open flag (hipFile, like pread, gives -1 with errno EBADF). */
    int rofd = open_mode(dir, "io.bin", O_RDONLY);
    int wofd = open_mode(dir, "io.bin", O_WRONLY);
    CUfileHandle_t rofh = NULL, wofh = NULL;
    CHECK_OK(register_fd(&rofh, rofd));
    CHECK_OK(register_fd(&wofh, wofd));
    CHECK_SSIZE(cuFileWrite(rofh, mem, 16, 0, 0), -CU_FILE_INVALID_FILE_OPEN_FLAG);
    CHECK_SSIZE(cuFileRead(wofh, mem, 16, 0, 0), -CU_FILE_INVALID_FILE_OPEN_FLAG);
    CHECK_SSIZE(cuFileRead(rofh, mem, 16, 0, 0), 16);
    cuFileHandleDeregister(rofh);
    cuFileHandleDeregister(wofh);
    close(rofd);
    close(wofd);

    /* Deregistering frees the fd for registration again; unknown handles are ignored. */
    cuFileHandleDeregister(fh);
    cuFileHandleDeregister(fh);
    cuFileHandleDeregister(NULL);
    CHECK_SSIZE(cuFileRead(fh, mem, 16, 0, 0), -CU_FILE_HANDLE_NOT_REGISTERED);
    CHECK_OK(register_fd(&fh2, fd));
    CHECK_SSIZE(cuFileRead(fh2, mem, 16, 0, 0), 16);
    CHECK_OK(cuFileBufDeregister(mem));
    cuFileHandleDeregister(fh2);
    close(fd);
}

/* USERSPACE_FS: the callbacks get the fd back as the handle. */
static unsigned char store[65536];
static int calls_read, calls_write;

static const char *fs_type(const void *h) {
    (void)h;
    return "testfs";
}

static ssize_t cb_read(const void *h, char *buf, size_t n, __loff_t off, const cufileRDMAInfo_t *info) {
    CHECK((intptr_t)h == 1234);
    CHECK(info == NULL);
    calls_read++;
    if (off >= (__loff_t)sizeof store) return 0;
    if (n > sizeof store - (size_t)off) n = sizeof store - (size_t)off;
    memcpy(buf, store + off, n);
    return (ssize_t)n;
}

static ssize_t cb_write(const void *h, const char *buf, size_t n, __loff_t off, const cufileRDMAInfo_t *info) {
    (void)h;
    (void)info;
    calls_write++;
    if (off > 60000) return -ENOSPC;
    memcpy(store + off, buf, n);
    return (ssize_t)n;
}

static void userspace_fs(void) {
    CUfileFSOps_t ops;
    memset(&ops, 0, sizeof ops);
    ops.fs_type = fs_type;
    ops.read = cb_read;
    ops.write = cb_write;
    CUfileDescr_t d;
    memset(&d, 0, sizeof d);
    d.type = CU_FILE_HANDLE_TYPE_USERSPACE_FS;
    d.handle.fd = 1234;
    d.fs_ops = &ops;
    CUfileHandle_t fh;
    CHECK_OK(cuFileHandleRegister(&fh, &d));
    fill_pattern(store, sizeof store, 0, 9);
    memset(mem, 0, 8192);
    CHECK_SSIZE(cuFileRead(fh, mem, 8192, 100, 0), 8192);
    CHECK(matches_pattern(mem, 8192, 100, 9));
    CHECK(calls_read > 0);
    fill_pattern(mem, 512, 0, 10);
    CHECK_SSIZE(cuFileWrite(fh, mem, 512, 1000, 0), 512);
    CHECK(calls_write > 0 && matches_pattern(store + 1000, 512, 0, 10));
    /* A callback's -errno is the call's -1/errno. */
    CHECK_ERRNO(cuFileWrite(fh, mem, 512, 61000, 0), ENOSPC);
    cuFileHandleDeregister(fh);
}

int main(int argc, char **argv) {
    const char *dir = test_dir(argc, argv);
    closed_driver();
    handles_and_buffers(dir);
    userspace_fs();
    CHECK_OK(cuFileDriverClose());
    CHECK(cuFileUseCount() == 0);
    printf("handles, buffers, read/write/readv/writev, USERSPACE_FS checked\n");
    return 0;
}
