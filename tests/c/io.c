/* Handle and buffer registration errors, and read/write round trips at
 * awkward offsets with host memory, checked against pread/pwrite. */
#include "check.h"
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define FILE_SIZE (3 * 1024 * 1024 + 777)

static void before_open(void) {
    static char mem[64];
    /* Reads before the driver is open: -1 / EINVAL, whatever the handle. */
    CHECK_ERRNO(hipFileRead(NULL, mem, 10, 0, 0), EINVAL);
    CHECK_ERRNO(hipFileWrite((hipFileHandle_t)(uintptr_t)42, mem, 10, 0, 0), EINVAL);
    CHECK_ERR(hipFileBufDeregister(mem), hipFileDriverClosing);
}

static void handle_errors(const char *dir) {
    hipFileHandle_t fh = NULL, fh2 = NULL;
    hipFileDescr_t d;
    const char *path = make_file(dir, "errors.dat", 4096, 2);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);

    memset(&d, 0, sizeof d);
    d.type = hipFileHandleTypeOpaqueFD;
    d.handle.fd = fd;
    CHECK_ERR(hipFileHandleRegister(NULL, &d), hipFileInvalidValue);
    CHECK_ERR(hipFileHandleRegister(&fh, NULL), hipFileInvalidValue);
    d.handle.fd = -1;
    CHECK_ERR(hipFileHandleRegister(&fh, &d), hipFileInvalidValue);
    d.handle.fd = fd;
    d.type = (hipFileFileHandleType_t)7;
    CHECK_ERR(hipFileHandleRegister(&fh, &d), hipFileInvalidValue);
    d.type = hipFileHandleTypeOpaqueWin32;
    d.handle.hFile = (void *)0x1234;
    CHECK_ERR(hipFileHandleRegister(&fh, &d), hipFileIONotSupported);
    /* USERSPACE_FS needs fs_ops (this fd is on no hipfs mount). */
    d.type = hipFileHandleTypeUserspaceFS;
    d.handle.fd = fd;
    d.fs_ops = NULL;
    CHECK_ERR(hipFileHandleRegister(&fh, &d), hipFileInvalidValue);
    /* Not a regular file. */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0);
    CHECK_ERR(register_fd(&fh, dfd), hipFileInvalidFileType);
    close(dfd);
    /* A closed fd. */
    int tmp = dup(fd);
    close(tmp);
    CHECK_ERR(register_fd(&fh, tmp), hipFileInvalidValue);
    /* None of the failures opened the driver. */
    CHECK(hipFileUseCount() == 0);

    CHECK_OK(register_fd(&fh, fd));
    CHECK(hipFileUseCount() == 1);
    CHECK_ERR(register_fd(&fh2, fd), hipFileHandleAlreadyRegistered);
    /* Deregistering frees the fd for registration again; unknown handles are ignored. */
    hipFileHandleDeregister(fh);
    hipFileHandleDeregister(fh);
    hipFileHandleDeregister(NULL);
    hipFileHandleDeregister((hipFileHandle_t)(uintptr_t)0xdeadbeef);
    static char mem[16];
    CHECK_SSIZE(hipFileRead(fh, mem, 16, 0, 0), -hipFileHandleNotRegistered);
    CHECK_SSIZE(hipFileRead(NULL, mem, 16, 0, 0), -hipFileHandleNotRegistered);
    CHECK_OK(register_fd(&fh2, fd));
    CHECK(fh2 != fh);
    CHECK_SSIZE(hipFileRead(fh2, mem, 16, 0, 0), 16);
    /* Bad arguments to read/write. */
    CHECK_SSIZE(hipFileRead(fh2, NULL, 16, 0, 0), -hipFileInvalidValue);
    /* Negative offsets: -1 with errno EINVAL (hipFile 0.4.0's rule, as pread). */
    CHECK_ERRNO(hipFileRead(fh2, mem, 16, -1, 0), EINVAL);
    CHECK_ERRNO(hipFileRead(fh2, mem, 16, 0, -5), EINVAL);
    CHECK_ERRNO(hipFileWrite(fh2, mem, 16, -4096, 0), EINVAL);
    CHECK_SSIZE(hipFileRead(fh2, mem, (size_t)-1, 0, 0), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileRead(fh2, mem, 0, 0, 0), 0);
    /* Writing through a read-only fd is a system error: -1 with errno. */
    CHECK_ERRNO(hipFileWrite(fh2, mem, 16, 0, 0), EBADF);
    hipFileHandleDeregister(fh2);
    close(fd);
    CHECK_OK(hipFileDriverClose());
}

static void buffer_errors(void) {
    long page = sysconf(_SC_PAGESIZE);
    static char mem[4096];
    CHECK_ERR(hipFileBufRegister(NULL, 4096, 0), hipFileInvalidValue);
    CHECK_ERR(hipFileBufRegister(mem, 0, 0), hipFileInvalidValue);
    CHECK_ERR(hipFileBufRegister(mem, sizeof mem, 0x40), hipFileInvalidValue);
    CHECK(hipFileUseCount() == 0);
    CHECK_OK(hipFileBufRegister(mem, sizeof mem, 0));
    CHECK(hipFileUseCount() == 1);
    CHECK_ERR(hipFileBufRegister(mem, sizeof mem, 0), hipFileMemoryAlreadyRegistered);
    CHECK_ERR(hipFileBufDeregister(mem + 1), hipFileMemoryNotRegistered);
    CHECK_ERR(hipFileBufDeregister(NULL), hipFileInvalidValue);
    CHECK_OK(hipFileBufDeregister(mem));
    CHECK_ERR(hipFileBufDeregister(mem), hipFileMemoryNotRegistered);

    /* A range running past the end of its mapping. */
    char *two = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(two != MAP_FAILED);
    CHECK(munmap(two + page, page) == 0);
    CHECK_ERR(hipFileBufRegister(two, 2 * page, 0), hipFileHipPointerRangeError);
    CHECK_ERR(hipFileBufRegister(two, (size_t)-1, 0), hipFileHipPointerRangeError);
    CHECK_OK(hipFileBufRegister(two, page, HIPFILE_RDMA_RELAXED_ORDERING));
    CHECK_OK(hipFileBufDeregister(two));
    munmap(two, page);
    CHECK_OK(hipFileDriverClose());
}

static int ranges_equal(const unsigned char *a, const unsigned char *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            fprintf(stderr, "first difference at byte %zu: %u != %u\n", i, a[i], b[i]);
            return 0;
        }
    return 1;
}

/* Reads `size` bytes at `foff` into `buf + boff` through hipFileRead and
 * compares them with pread of the same range. */
static void read_matches_pread(hipFileHandle_t fh, int fd, unsigned char *buf, size_t size,
                               off_t foff, off_t boff) {
    unsigned char *want = malloc(size + 1);
    CHECK(want != NULL);
    ssize_t exp = pread(fd, want, size, foff);
    CHECK(exp >= 0);
    memset(buf + boff, 0xa5, size);
    ssize_t got = hipFileRead(fh, buf, size, foff, boff);
    if (got != exp) FAIL("read %zu at %lld (+%lld): got %zd, pread %zd", size, (long long)foff, (long long)boff, got, exp);
    CHECK(ranges_equal(buf + boff, want, (size_t)exp));
    /* Bytes past a short read are untouched. */
    for (size_t i = (size_t)exp; i < size; i++) CHECK(buf[boff + i] == 0xa5);
    free(want);
}

static void round_trips(const char *dir, int extra_flags, const char *name) {
    const char *path = make_file(dir, name, FILE_SIZE, 3);
    int fd = open(path, O_RDWR | extra_flags);
    if (fd < 0 && extra_flags) {
        printf("io: %s: O_DIRECT not supported here (%s); skipped\n", name, strerror(errno));
        return;
    }
    CHECK(fd >= 0);
    int plain = open(path, O_RDWR);
    CHECK(plain >= 0);
    hipFileHandle_t fh = NULL;
    CHECK_OK(register_fd(&fh, fd));
    size_t cap = FILE_SIZE + 8192;
    unsigned char *unreg = malloc(cap);
    unsigned char *reg = aligned_alloc(4096, cap);
    CHECK(unreg && reg);
    CHECK_OK(hipFileBufRegister(reg, cap, 0));

    struct { size_t size; off_t foff, boff; } cases[] = {
        {1, 0, 0},         {1, 4095, 1},         {4096, 4096, 0},       {12345, 4095, 7},
        {65537, 511, 4093}, {1 << 20, 1, 3},    {FILE_SIZE, 0, 0},     {2 * 1024 * 1024 + 3, 1000000, 4097},
        /* Across and past end of file: short, then zero. */
        {10000, FILE_SIZE - 1234, 13}, {4096, FILE_SIZE, 0}, {100, FILE_SIZE + 5000, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        read_matches_pread(fh, plain, unreg, cases[i].size, cases[i].foff, cases[i].boff);
        read_matches_pread(fh, plain, reg, cases[i].size, cases[i].foff, cases[i].boff);
    }
    /* Past the end of a registered buffer: refused. */
    CHECK_SSIZE(hipFileRead(fh, reg, 4096, 0, (off_t)cap - 100), -hipFileInvalidValue);

    /* Writes at awkward offsets, checked with pread; buffers both kinds. */
    struct { size_t size; off_t foff, boff; unsigned seed; } w[] = {
        {1, 3, 0, 11}, {4097, 4095, 5, 12}, {300001, 77777, 4095, 13}, {8192, 8192, 0, 14},
        /* Extends the file. */
        {5000, FILE_SIZE - 10, 3, 15},
    };
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
        unsigned char *src = (i % 2) ? reg : unreg;
        fill_pattern(src + w[i].boff, w[i].size, 0, w[i].seed);
        CHECK_SSIZE(hipFileWrite(fh, src, w[i].size, w[i].foff, w[i].boff), w[i].size);
        unsigned char *back = malloc(w[i].size);
        CHECK(back != NULL);
        CHECK(pread(plain, back, w[i].size, w[i].foff) == (ssize_t)w[i].size);
        CHECK(ranges_equal(back, src + w[i].boff, w[i].size));
        free(back);
        /* And back through hipFileRead into the other buffer. */
        read_matches_pread(fh, plain, (i % 2) ? unreg : reg, w[i].size, w[i].foff, 1);
    }
    struct stat st;
    CHECK(fstat(plain, &st) == 0);
    CHECK(st.st_size == FILE_SIZE - 10 + 5000);

    CHECK_OK(hipFileBufDeregister(reg));
    hipFileHandleDeregister(fh);
    free(unreg);
    free(reg);
    close(fd);
    close(plain);
    printf("io: %s round trips ok\n", name);
}

/* Several threads reading different ranges through one handle at once. */
struct reader {
    hipFileHandle_t fh;
    int fd;
    unsigned idx;
    int ok;
};

static void *reader_main(void *arg) {
    struct reader *r = arg;
    size_t size = 200000 + r->idx * 1111;
    unsigned char *got = malloc(size), *want = malloc(size);
    r->ok = got && want;
    for (unsigned round = 0; r->ok && round < 20; round++) {
        off_t off = (off_t)((r->idx * 7919 + round * 104729) % (FILE_SIZE - size));
        ssize_t n = hipFileRead(r->fh, got, size, off, 0);
        r->ok = n == (ssize_t)size && pread(r->fd, want, size, off) == (ssize_t)size &&
                memcmp(got, want, size) == 0;
    }
    free(got);
    free(want);
    return NULL;
}

static void concurrent_reads(const char *dir) {
    const char *path = make_file(dir, "threads.dat", FILE_SIZE, 4);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    hipFileHandle_t fh = NULL;
    CHECK_OK(register_fd(&fh, fd));
    pthread_t t[6];
    struct reader r[6];
    for (unsigned i = 0; i < 6; i++) {
        r[i] = (struct reader){fh, fd, i, 0};
        CHECK(pthread_create(&t[i], NULL, reader_main, &r[i]) == 0);
    }
    for (unsigned i = 0; i < 6; i++) {
        CHECK(pthread_join(t[i], NULL) == 0);
        CHECK(r[i].ok);
    }
    hipFileHandleDeregister(fh);
    close(fd);
    puts("io: 6 threads x 20 concurrent reads ok");
}

int main(int argc, char **argv) {
    const char *dir = test_dir(argc, argv);
    before_open();
    handle_errors(dir);
    CHECK(hipFileUseCount() == 0);
    buffer_errors();
    CHECK_OK(hipFileDriverOpen());
    round_trips(dir, 0, "buffered.dat");
    round_trips(dir, O_DIRECT, "direct.dat");
    concurrent_reads(dir);
    CHECK_OK(hipFileDriverClose());
    puts("io: ok");
    return 0;
}
