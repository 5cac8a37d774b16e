/*
 * cufile.h - the NVIDIA cuFile C API as implemented by hipfs' libcufile.so.0,
 * a drop-in for programs written against NVIDIA's cuFile (layouts and
 * numbers of cuFile 1.15; cuFileGetVersion reports 1150). Written for hipfs
 * from the public interface description; it is not NVIDIA's header.
 *
 * Build:  cc prog.c $(pkg-config --cflags hipfile) -lcufile
 *
 * CUDA types: with <cuda.h> available this header includes it (CUresult,
 * CUstream). Otherwise it declares ABI-compatible stand-ins (CUresult is an
 * int-sized enum, CUstream an opaque pointer), so C programs compile on
 * machines without the CUDA toolkit.
 *
 * Return conventions: functions returning CUfileError_t return it by
 * value; cu_err holds a CUDA driver CUresult when err is
 * CU_FILE_CUDA_DRIVER_ERROR. cuFileRead/cuFileWrite/cuFileReadv/cuFileWritev
 * return bytes moved (short only at end of file), -1 with errno for a
 * system error (and for a negative offset, EINVAL), or -CUfileOpError (e.g.
 * -5027) otherwise; before the driver is open they return -1, errno EINVAL.
 *
 * Where hipfs differs from NVIDIA's library, docs/CUFILE.md says so.
 */
#ifndef HIPFS_CUFILE_H
#define HIPFS_CUFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

struct timespec;

#if defined(__CUDA_API_VERSION_INTERNAL) || defined(__cuda_cuda_h__)
#define CUFILE_HAVE_CUDA_H 1
#elif defined(__has_include)
#if __has_include(<cuda.h>)
#include <cuda.h>
#define CUFILE_HAVE_CUDA_H 1
#endif
#endif

#ifndef CUFILE_HAVE_CUDA_H
typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;
typedef struct CUstream_st *CUstream;
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ---------------------------------------------------------- */
/* 1000 * major + 10 * minor of the cuFile level implemented. */
#define CUFILE_VERSION 1150

/* ---- errors ----------------------------------------------------------- */
#define CUFILEOP_BASE_ERR 5000

typedef enum CUfileOpError {
    CU_FILE_SUCCESS = 0,
    CU_FILE_DRIVER_NOT_INITIALIZED = CUFILEOP_BASE_ERR + 1,
    CU_FILE_DRIVER_INVALID_PROPS = CUFILEOP_BASE_ERR + 2,
    CU_FILE_DRIVER_UNSUPPORTED_LIMIT = CUFILEOP_BASE_ERR + 3,
    CU_FILE_DRIVER_VERSION_MISMATCH = CUFILEOP_BASE_ERR + 4,
    CU_FILE_DRIVER_VERSION_READ_ERROR = CUFILEOP_BASE_ERR + 5,
    CU_FILE_DRIVER_CLOSING = CUFILEOP_BASE_ERR + 6,
    CU_FILE_PLATFORM_NOT_SUPPORTED = CUFILEOP_BASE_ERR + 7,
    CU_FILE_IO_NOT_SUPPORTED = CUFILEOP_BASE_ERR + 8,
    CU_FILE_DEVICE_NOT_SUPPORTED = CUFILEOP_BASE_ERR + 9,
    CU_FILE_NVFS_DRIVER_ERROR = CUFILEOP_BASE_ERR + 10,
    CU_FILE_CUDA_DRIVER_ERROR = CUFILEOP_BASE_ERR + 11,
    CU_FILE_CUDA_POINTER_INVALID = CUFILEOP_BASE_ERR + 12,
    CU_FILE_CUDA_MEMORY_TYPE_INVALID = CUFILEOP_BASE_ERR + 13,
    CU_FILE_CUDA_POINTER_RANGE_ERROR = CUFILEOP_BASE_ERR + 14,
    CU_FILE_CUDA_CONTEXT_MISMATCH = CUFILEOP_BASE_ERR + 15,
    CU_FILE_INVALID_MAPPING_SIZE = CUFILEOP_BASE_ERR + 16,
    CU_FILE_INVALID_MAPPING_RANGE = CUFILEOP_BASE_ERR + 17,
    CU_FILE_INVALID_FILE_TYPE = CUFILEOP_BASE_ERR + 18,
    CU_FILE_INVALID_FILE_OPEN_FLAG = CUFILEOP_BASE_ERR + 19,
    CU_FILE_DIO_NOT_SET = CUFILEOP_BASE_ERR + 20,
    /* 5021 is unused */
    CU_FILE_INVALID_VALUE = CUFILEOP_BASE_ERR + 22,
    CU_FILE_MEMORY_ALREADY_REGISTERED = CUFILEOP_BASE_ERR + 23,
    CU_FILE_MEMORY_NOT_REGISTERED = CUFILEOP_BASE_ERR + 24,
    CU_FILE_PERMISSION_DENIED = CUFILEOP_BASE_ERR + 25,
    CU_FILE_DRIVER_ALREADY_OPEN = CUFILEOP_BASE_ERR + 26,
    CU_FILE_HANDLE_NOT_REGISTERED = CUFILEOP_BASE_ERR + 27,
    CU_FILE_HANDLE_ALREADY_REGISTERED = CUFILEOP_BASE_ERR + 28,
    CU_FILE_DEVICE_NOT_FOUND = CUFILEOP_BASE_ERR + 29,
    CU_FILE_INTERNAL_ERROR = CUFILEOP_BASE_ERR + 30,
    CU_FILE_GETNEWFD_FAILED = CUFILEOP_BASE_ERR + 31,
    /* 5032 is unused */
    CU_FILE_NVFS_SETUP_ERROR = CUFILEOP_BASE_ERR + 33,
    CU_FILE_IO_DISABLED = CUFILEOP_BASE_ERR + 34,
    CU_FILE_BATCH_SUBMIT_FAILED = CUFILEOP_BASE_ERR + 35,
    CU_FILE_GPU_MEMORY_PINNING_FAILED = CUFILEOP_BASE_ERR + 36,
    CU_FILE_BATCH_FULL = CUFILEOP_BASE_ERR + 37,
    CU_FILE_ASYNC_NOT_SUPPORTED = CUFILEOP_BASE_ERR + 38,
    CU_FILE_INTERNAL_BATCH_SETUP_ERROR = CUFILEOP_BASE_ERR + 39,
    CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR = CUFILEOP_BASE_ERR + 40,
    CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR = CUFILEOP_BASE_ERR + 41,
    CU_FILE_INTERNAL_BATCH_CANCEL_ERROR = CUFILEOP_BASE_ERR + 42,
    CU_FILE_NOMEM_ERROR = CUFILEOP_BASE_ERR + 43,
    CU_FILE_IO_ERROR = CUFILEOP_BASE_ERR + 44,
    CU_FILE_INTERNAL_BUF_REGISTER_ERROR = CUFILEOP_BASE_ERR + 45,
    CU_FILE_HASH_OPR_ERROR = CUFILEOP_BASE_ERR + 46,
    CU_FILE_INVALID_CONTEXT_ERROR = CUFILEOP_BASE_ERR + 47,
    CU_FILE_NVFS_INTERNAL_DRIVER_ERROR = CUFILEOP_BASE_ERR + 48,
    CU_FILE_BATCH_NOCOMPAT_ERROR = CUFILEOP_BASE_ERR + 49,
    CU_FILE_IO_MAX_ERROR = CUFILEOP_BASE_ERR + 50
} CUfileOpError;

typedef struct CUfileError {
    CUfileOpError err;
    CUresult cu_err;
} CUfileError_t;

#define IS_CUFILE_ERR(err) (abs(err) > CUFILEOP_BASE_ERR)
#define CUFILE_ERRSTR(err) cufileop_status_error((CUfileOpError)abs(err))
#define IS_CUDA_ERR(status) ((status).err == CU_FILE_CUDA_DRIVER_ERROR)
#define CU_FILE_CUDA_ERR(status) ((status).cu_err)

/* The string for a code; the library exports no string function (as
 * NVIDIA's), so this is compiled into the caller. */
static inline const char *cufileop_status_error(CUfileOpError status) {
    switch ((int)status) {
    case CU_FILE_SUCCESS: return "cufile success";
    case CU_FILE_DRIVER_NOT_INITIALIZED: return "nvidia-fs driver is not loaded";
    case CU_FILE_DRIVER_INVALID_PROPS: return "invalid property";
    case CU_FILE_DRIVER_UNSUPPORTED_LIMIT: return "property range error";
    case CU_FILE_DRIVER_VERSION_MISMATCH: return "nvidia-fs driver version mismatch";
    case CU_FILE_DRIVER_VERSION_READ_ERROR: return "nvidia-fs driver version read error";
    case CU_FILE_DRIVER_CLOSING: return "driver shutdown in progress";
    case CU_FILE_PLATFORM_NOT_SUPPORTED: return "GPUDirect Storage not supported on current platform";
    case CU_FILE_IO_NOT_SUPPORTED: return "GPUDirect Storage not supported on current file";
    case CU_FILE_DEVICE_NOT_SUPPORTED: return "GPUDirect Storage not supported on current GPU";
    case CU_FILE_NVFS_DRIVER_ERROR: return "nvidia-fs driver ioctl error";
    case CU_FILE_CUDA_DRIVER_ERROR: return "CUDA Driver API error";
    case CU_FILE_CUDA_POINTER_INVALID: return "invalid device pointer";
    case CU_FILE_CUDA_MEMORY_TYPE_INVALID: return "invalid pointer memory type";
    case CU_FILE_CUDA_POINTER_RANGE_ERROR: return "pointer range exceeds allocated address range";
    case CU_FILE_CUDA_CONTEXT_MISMATCH: return "cuda context mismatch";
    case CU_FILE_INVALID_MAPPING_SIZE: return "access beyond maximum pinned size";
    case CU_FILE_INVALID_MAPPING_RANGE: return "access beyond mapped size";
    case CU_FILE_INVALID_FILE_TYPE: return "unsupported file type";
    case CU_FILE_INVALID_FILE_OPEN_FLAG: return "unsupported file open flags";
    case CU_FILE_DIO_NOT_SET: return "fd direct IO not set";
    case CU_FILE_INVALID_VALUE: return "invalid arguments";
    case CU_FILE_MEMORY_ALREADY_REGISTERED: return "device pointer already registered";
    case CU_FILE_MEMORY_NOT_REGISTERED: return "device pointer lookup failure";
    case CU_FILE_PERMISSION_DENIED: return "driver or file access error";
    case CU_FILE_DRIVER_ALREADY_OPEN: return "driver is already open";
    case CU_FILE_HANDLE_NOT_REGISTERED: return "file descriptor is not registered";
    case CU_FILE_HANDLE_ALREADY_REGISTERED: return "file descriptor is already registered";
    case CU_FILE_DEVICE_NOT_FOUND: return "GPU device not found";
    case CU_FILE_INTERNAL_ERROR: return "internal error";
    case CU_FILE_GETNEWFD_FAILED: return "failed to obtain new file descriptor";
    case CU_FILE_NVFS_SETUP_ERROR: return "NVFS driver initialization error";
    case CU_FILE_IO_DISABLED: return "GPUDirect Storage disabled by config on current file";
    case CU_FILE_BATCH_SUBMIT_FAILED: return "failed to submit batch operation";
    case CU_FILE_GPU_MEMORY_PINNING_FAILED: return "failed to allocate pinned GPU memory";
    case CU_FILE_BATCH_FULL: return "queue full for batch operation";
    case CU_FILE_ASYNC_NOT_SUPPORTED: return "cuFile stream operation not supported";
    case CU_FILE_INTERNAL_BATCH_SETUP_ERROR: return "batch setup internal error";
    case CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR: return "batch submit internal error";
    case CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR: return "batch get-status internal error";
    case CU_FILE_INTERNAL_BATCH_CANCEL_ERROR: return "batch cancel internal error";
    case CU_FILE_NOMEM_ERROR: return "out of memory";
    case CU_FILE_IO_ERROR: return "I/O error";
    case CU_FILE_INTERNAL_BUF_REGISTER_ERROR: return "buffer registration internal error";
    case CU_FILE_HASH_OPR_ERROR: return "hash operation error";
    case CU_FILE_INVALID_CONTEXT_ERROR: return "invalid CUDA context";
    case CU_FILE_NVFS_INTERNAL_DRIVER_ERROR: return "nvidia-fs internal driver error";
    case CU_FILE_BATCH_NOCOMPAT_ERROR: return "batch not supported in compatibility mode";
    default: return "unknown cufile error";
    }
}

/* ---- driver properties ------------------------------------------------ */
enum CUfileDriverStatusFlags {
    CU_FILE_LUSTRE_SUPPORTED = 0,
    CU_FILE_WEKAFS_SUPPORTED = 1,
    CU_FILE_NFS_SUPPORTED = 2,
    CU_FILE_GPFS_SUPPORTED = 3,
    CU_FILE_NVME_SUPPORTED = 4,
    CU_FILE_NVMEOF_SUPPORTED = 5,
    CU_FILE_SCSI_SUPPORTED = 6,
    CU_FILE_SCALEFLUX_CSD_SUPPORTED = 7,
    CU_FILE_NVMESH_SUPPORTED = 8,
    CU_FILE_BEEGFS_SUPPORTED = 9,
    /* 10 is unused */
    CU_FILE_NVME_P2P_SUPPORTED = 11, /* deprecated */
    CU_FILE_SCATEFS_SUPPORTED = 12,
    CU_FILE_VIRTIOFS_SUPPORTED = 13,
    CU_FILE_PANFS_SUPPORTED = 14,
    CU_FILE_MAX_TARGET_TYPES = 15
};
typedef enum CUfileDriverStatusFlags CUfileDriverStatusFlags_t;

/* Bit numbers of nvfs.dcontrolflags (tested as 1 << flag). */
enum CUfileDriverControlFlags {
    CU_FILE_USE_POLL_MODE = 0,
    CU_FILE_ALLOW_COMPAT_MODE = 1,
    CU_FILE_VANILLA_POSIX_IO_MODE = 2,
    CU_FILE_FALLBACK_IO_MODE = 4
};
typedef enum CUfileDriverControlFlags CUfileDriverControlFlags_t;
#define CU_FILE_POSIX_IO_MODE CU_FILE_VANILLA_POSIX_IO_MODE

/* Bit numbers of fflags. */
enum CUfileFeatureFlags {
    CU_FILE_DYN_ROUTING_SUPPORTED = 0,
    CU_FILE_BATCH_IO_SUPPORTED = 1,
    CU_FILE_STREAMS_SUPPORTED = 2,
    CU_FILE_PARALLEL_IO_SUPPORTED = 3,
    CU_FILE_P2P_SUPPORTED = 4
};
typedef enum CUfileFeatureFlags CUfileFeatureFlags_t;

/* 56 bytes; sizes in KiB. */
typedef struct CUfileDrvProps {
    struct {
        unsigned int major_version;
        unsigned int minor_version;
        size_t poll_thresh_size;
        size_t max_direct_io_size;
        unsigned int dstatusflags;
        unsigned int dcontrolflags;
    } nvfs;
    unsigned int fflags;
    unsigned int max_device_cache_size;
    unsigned int per_buffer_cache_size;
    unsigned int max_device_pinned_mem_size;
    unsigned int max_batch_io_size;
    unsigned int max_batch_io_timeout_msecs;
} CUfileDrvProps_t;

/* ---- file handles ----------------------------------------------------- */
typedef struct sockaddr sockaddr_t;

typedef struct cufileRDMAInfo {
    int version;
    int desc_len;
    const char *desc_str;
} cufileRDMAInfo_t;

#define CU_FILE_RDMA_REGISTER 1
#define CU_FILE_RDMA_RELAXED_ORDERING (1 << 1)

/* USERSPACE_FS callbacks (offsets are loff_t, spelled __loff_t so that
 * strict ISO C modes compile); `handle` is the registered fd cast to a pointer.
 * They are called from the calling thread or the library's workers. */
typedef struct CUfileFSOps {
    const char *(*fs_type)(const void *handle);
    int (*getRDMADeviceList)(const void *handle, sockaddr_t **hostaddrs);
    int (*getRDMADevicePriority)(const void *handle, char *, size_t, __loff_t, const sockaddr_t *hostaddr);
    ssize_t (*read)(const void *handle, char *, size_t, __loff_t, const cufileRDMAInfo_t *);
    ssize_t (*write)(const void *handle, const char *, size_t, __loff_t, const cufileRDMAInfo_t *);
} CUfileFSOps_t;

enum CUfileFileHandleType {
    CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1,
    CU_FILE_HANDLE_TYPE_OPAQUE_WIN32 = 2,
    CU_FILE_HANDLE_TYPE_USERSPACE_FS = 3
};

typedef struct CUfileDescr_t {
    enum CUfileFileHandleType type;
    union {
        int fd;
        void *handle;
    } handle;
    const CUfileFSOps_t *fs_ops;
} CUfileDescr_t;

typedef void *CUfileHandle_t;

/* ---- driver ----------------------------------------------------------- */
CUfileError_t cuFileDriverOpen(void);
/* As in NVIDIA's header, callers of cuFileDriverClose bind to
 * cuFileDriverClose_v2; both symbols exist and do the same. */
CUfileError_t cuFileDriverClose(void);
#define cuFileDriverClose cuFileDriverClose_v2
CUfileError_t cuFileDriverClose(void);
long cuFileUseCount(void);
CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *props);
CUfileError_t cuFileDriverSetPollMode(bool poll, size_t poll_threshold_size);
CUfileError_t cuFileDriverSetMaxDirectIOSize(size_t max_direct_io_size);
CUfileError_t cuFileDriverSetMaxCacheSize(size_t max_cache_size);
CUfileError_t cuFileDriverSetMaxPinnedMemSize(size_t max_pinned_size);
CUfileError_t cuFileGetVersion(int *version);
/* hipfs maps no BAR: reports the device-pinned memory limit (KiB). */
CUfileError_t cuFileGetBARSizeInKB(int gpuIndex, size_t *barSize);

/* ---- handles, buffers, I/O -------------------------------------------- */
CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr);
void cuFileHandleDeregister(CUfileHandle_t fh);
CUfileError_t cuFileBufRegister(const void *bufPtr_base, size_t length, int flags);
CUfileError_t cuFileBufDeregister(const void *bufPtr_base);
ssize_t cuFileRead(CUfileHandle_t fh, void *bufPtr_base, size_t size, off_t file_offset, off_t bufPtr_offset);
ssize_t cuFileWrite(CUfileHandle_t fh, const void *bufPtr_base, size_t size, off_t file_offset,
                    off_t bufPtr_offset);

typedef struct CUfileIOVec {
    void *base;
    size_t len;
} CUfileIOVec_t;

/* 1..1024 entries, filled (or written) in order from file_offset; flags 0. */
ssize_t cuFileReadv(CUfileHandle_t fh, const CUfileIOVec_t *iov, int iovcnt, off_t file_offset,
                    unsigned int flags);
ssize_t cuFileWritev(CUfileHandle_t fh, const CUfileIOVec_t *iov, int iovcnt, off_t file_offset,
                     unsigned int flags);

/* ---- batch ------------------------------------------------------------ */
typedef enum CUfileOpcode { CUFILE_READ = 0, CUFILE_WRITE = 1 } CUfileOpcode_t;

typedef enum CUFILEStatus_enum {
    CUFILE_WAITING = 0x000001,
    CUFILE_PENDING = 0x000002,
    CUFILE_INVALID = 0x000004,
    CUFILE_CANCELED = 0x000008,
    CUFILE_COMPLETE = 0x0000010,
    CUFILE_TIMEOUT = 0x0000020,
    CUFILE_FAILED = 0x0000040
} CUfileStatus_t;

typedef enum cufileBatchMode { CUFILE_BATCH = 1 } CUfileBatchMode_t;

typedef struct CUfileIOParams {
    CUfileBatchMode_t mode;
    union {
        struct {
            void *devPtr_base;
            off_t file_offset;
            off_t devPtr_offset;
            size_t size;
        } batch;
    } u;
    CUfileHandle_t fh;
    CUfileOpcode_t opcode;
    void *cookie;
} CUfileIOParams_t;

typedef struct CUfileIOEvents {
    void *cookie;
    CUfileStatus_t status;
    size_t ret; /* bytes, or a negative error cast to size_t */
} CUfileIOEvents_t;

typedef void *CUfileBatchHandle_t;

CUfileError_t cuFileBatchIOSetUp(CUfileBatchHandle_t *batch_idp, unsigned nr);
/* nr 1..128; all or nothing. */
CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr, CUfileIOParams_t *iocbp,
                                  unsigned int flags);
/* 0 < *nr, min_nr <= *nr; timeout relative. NULL, or a malformed timespec
 * (negative seconds, nanoseconds outside 0..1e9), waits without limit for
 * min_nr events, never longer than the batch can still produce. */
CUfileError_t cuFileBatchIOGetStatus(CUfileBatchHandle_t batch_idp, unsigned min_nr, unsigned *nr,
                                     CUfileIOEvents_t *iocbp, struct timespec *timeout);
CUfileError_t cuFileBatchIOCancel(CUfileBatchHandle_t batch_idp);
void cuFileBatchIODestroy(CUfileBatchHandle_t batch_idp);

/* ---- stream-ordered I/O ----------------------------------------------- */
#define CU_FILE_STREAM_FIXED_BUF_OFFSET 1
#define CU_FILE_STREAM_FIXED_FILE_OFFSET 2
#define CU_FILE_STREAM_FIXED_FILE_SIZE 4
#define CU_FILE_STREAM_PAGE_ALIGNED_INPUTS 8

/* An unregistered stream acts as one registered with flags 0; NULL is the
 * legacy default stream. */
CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p, off_t *file_offset_p,
                              off_t *bufPtr_offset_p, ssize_t *bytes_read_p, CUstream stream);
CUfileError_t cuFileWriteAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p, off_t *file_offset_p,
                               off_t *bufPtr_offset_p, ssize_t *bytes_written_p, CUstream stream);
/* Registering a registered stream, or deregistering an unknown one, is
 * CU_FILE_INVALID_VALUE. */
CUfileError_t cuFileStreamRegister(CUstream stream, unsigned flags);
CUfileError_t cuFileStreamDeregister(CUstream stream);

/* ---- parameters (set while the driver is closed) ----------------------- */
typedef enum CUFileSizeTConfigParameter_t {
    CUFILE_PARAM_PROFILE_STATS = 0,
    CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH,
    CUFILE_PARAM_EXECUTION_MAX_IO_THREADS,
    CUFILE_PARAM_EXECUTION_MIN_IO_THRESHOLD_SIZE_KB,
    CUFILE_PARAM_EXECUTION_MAX_REQUEST_PARALLELISM,
    CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB,
    CUFILE_PARAM_PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB,
    CUFILE_PARAM_PROPERTIES_PER_BUFFER_CACHE_SIZE_KB,
    CUFILE_PARAM_PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB,
    CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE,
    CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB,
    CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS
} CUFileSizeTConfigParameter_t;

typedef enum CUFileBoolConfigParameter_t {
    CUFILE_PARAM_PROPERTIES_USE_POLL_MODE = 0,
    CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE,
    CUFILE_PARAM_FORCE_COMPAT_MODE,
    CUFILE_PARAM_FS_MISC_API_CHECK_AGGRESSIVE,
    CUFILE_PARAM_EXECUTION_PARALLEL_IO,
    CUFILE_PARAM_PROFILE_NVTX,
    CUFILE_PARAM_PROPERTIES_ALLOW_SYSTEM_MEMORY,
    CUFILE_PARAM_USE_PCIP2PDMA,
    CUFILE_PARAM_PREFER_IO_URING,
    CUFILE_PARAM_FORCE_ODIRECT_MODE,
    CUFILE_PARAM_SKIP_TOPOLOGY_DETECTION,
    CUFILE_PARAM_STREAM_MEMOPS_BYPASS,
    /* Stored and read back; they change nothing in hipfs. */
    CUFILE_PARAM_PROPERTIES_POSIX_IO_MODE,
    CUFILE_PARAM_GDS_FALLBACK_IO
} CUFileBoolConfigParameter_t;

typedef enum CUFileStringConfigParameter_t {
    CUFILE_PARAM_LOGGING_LEVEL = 0,
    CUFILE_PARAM_ENV_LOGFILE_PATH,
    CUFILE_PARAM_LOG_DIR,
    CUFILE_PARAM_RDMA_TRANSPORT
} CUFileStringConfigParameter_t;

typedef enum CUFileArrayConfigParameter_t {
    CUFILE_PARAM_POSIX_POOL_SLAB_SIZE_KB = 0,
    CUFILE_PARAM_POSIX_POOL_SLAB_COUNT,
    CUFILE_PARAM_GPU_BOUNCE_BUFFER_SLAB_SIZE_KB,
    CUFILE_PARAM_GPU_BOUNCE_BUFFER_SLAB_COUNT
} CUFileArrayConfigParameter_t;

CUfileError_t cuFileGetParameterSizeT(CUFileSizeTConfigParameter_t param, size_t *value);
CUfileError_t cuFileSetParameterSizeT(CUFileSizeTConfigParameter_t param, size_t value);
CUfileError_t cuFileGetParameterBool(CUFileBoolConfigParameter_t param, bool *value);
CUfileError_t cuFileSetParameterBool(CUFileBoolConfigParameter_t param, bool value);
/* Copies at most len - 1 bytes and a NUL. */
CUfileError_t cuFileGetParameterString(CUFileStringConfigParameter_t param, char *desc_str, int len);
CUfileError_t cuFileSetParameterString(CUFileStringConfigParameter_t param, const char *desc_str);
CUfileError_t cuFileGetParameterMinMaxValue(CUFileSizeTConfigParameter_t param, size_t *min_value,
                                            size_t *max_value);
/* 1..16 (size KiB, count) pairs; Get needs len == the number set (4
 * defaults before any Set). Stored and read back only. */
CUfileError_t cuFileSetParameterPosixPoolSlabArray(const size_t *size_values, const size_t *count_values,
                                                   int len);
CUfileError_t cuFileGetParameterPosixPoolSlabArray(size_t *size_values, size_t *count_values, int len);
CUfileError_t cuFileSetParameterGpuBounceBufferSlabArray(const size_t *size_values,
                                                         const size_t *count_values, int len);
CUfileError_t cuFileGetParameterGpuBounceBufferSlabArray(size_t *size_values, size_t *count_values,
                                                         int len);

/* ---- statistics (cuFile 1.15 layouts) ---------------------------------- */
#define CUFILE_GPU_UUID_LEN 16
#define CUFILE_MAX_GPUS 16

typedef struct CUfileOpCounter {
    uint64_t ok;
    uint64_t err;
} CUfileOpCounter_t;

typedef struct CUfileStatsLevel1 {
    CUfileOpCounter_t read_ops;
    CUfileOpCounter_t write_ops;
    CUfileOpCounter_t hdl_register_ops;
    CUfileOpCounter_t hdl_deregister_ops;
    CUfileOpCounter_t buf_register_ops;
    CUfileOpCounter_t buf_deregister_ops;
    uint64_t read_bytes;
    uint64_t write_bytes;
    uint64_t read_bw_bytes_per_sec;
    uint64_t write_bw_bytes_per_sec;
    uint64_t read_lat_avg_us;
    uint64_t write_lat_avg_us;
    uint64_t read_ops_per_sec;
    uint64_t write_ops_per_sec;
    uint64_t read_lat_sum_us;
    uint64_t write_lat_sum_us;
    CUfileOpCounter_t batch_submit_ops;
    CUfileOpCounter_t batch_complete_ops;
    CUfileOpCounter_t batch_setup_ops;
    CUfileOpCounter_t batch_cancel_ops;
    CUfileOpCounter_t batch_destroy_ops;
    CUfileOpCounter_t batch_enqueued_ops;
    CUfileOpCounter_t batch_posix_enqueued_ops;
    CUfileOpCounter_t batch_processed_ops;
    CUfileOpCounter_t batch_posix_processed_ops;
    CUfileOpCounter_t batch_nvfs_submit_ops;
    CUfileOpCounter_t batch_p2p_submit_ops;
    CUfileOpCounter_t batch_aio_submit_ops;
    CUfileOpCounter_t batch_iouring_submit_ops;
    CUfileOpCounter_t batch_mixed_io_submit_ops;
    CUfileOpCounter_t batch_total_submit_ops;
    uint64_t batch_read_bytes;
    uint64_t batch_write_bytes;
    uint64_t batch_read_bw_bytes;
    uint64_t batch_write_bw_bytes;
    uint64_t batch_submit_lat_avg_us;
    uint64_t batch_completion_lat_avg_us;
    uint64_t batch_submit_ops_per_sec;
    uint64_t batch_complete_ops_per_sec;
    uint64_t batch_submit_lat_sum_us;
    uint64_t batch_completion_lat_sum_us;
    uint64_t last_batch_read_bytes;
    uint64_t last_batch_write_bytes;
} CUfileStatsLevel1_t;

/* Bucket 0: under 1 KiB; bucket i: [2^(i-1), 2^i) KiB; the last takes the rest. */
typedef struct CUfileStatsLevel2 {
    CUfileStatsLevel1_t basic;
    uint64_t read_size_kb_hist[32];
    uint64_t write_size_kb_hist[32];
} CUfileStatsLevel2_t;

typedef struct CUfilePerGpuStats {
    char uuid[CUFILE_GPU_UUID_LEN];
    uint64_t read_bytes;
    uint64_t read_bw_bytes_per_sec;
    uint64_t read_utilization;
    uint64_t read_duration_us;
    uint64_t n_total_reads;
    uint64_t n_p2p_reads;
    uint64_t n_nvfs_reads;
    uint64_t n_posix_reads;
    uint64_t n_unaligned_reads;
    uint64_t n_dr_reads;
    uint64_t n_sparse_regions;
    uint64_t n_inline_regions;
    uint64_t n_reads_err;
    uint64_t writes_bytes;
    uint64_t write_bw_bytes_per_sec;
    uint64_t write_utilization;
    uint64_t write_duration_us;
    uint64_t n_total_writes;
    uint64_t n_p2p_writes;
    uint64_t n_nvfs_writes;
    uint64_t n_posix_writes;
    uint64_t n_unaligned_writes;
    uint64_t n_dr_writes;
    uint64_t n_writes_err;
    uint64_t n_mmap;
    uint64_t n_mmap_ok;
    uint64_t n_mmap_err;
    uint64_t n_mmap_free;
    uint64_t reg_bytes;
} CUfilePerGpuStats_t;

typedef struct CUfileStatsLevel3 {
    CUfileStatsLevel2_t detailed;
    uint32_t num_gpus;
    CUfilePerGpuStats_t per_gpu_stats[CUFILE_MAX_GPUS];
} CUfileStatsLevel3_t;

/* Levels 0 (off) .. 3; counting runs while the level is above 0 and
 * cuFileStatsStop has not been called since cuFileStatsStart. A query above
 * the current level is CU_FILE_INVALID_VALUE. */
CUfileError_t cuFileSetStatsLevel(int level);
CUfileError_t cuFileGetStatsLevel(int *level);
CUfileError_t cuFileStatsStart(void);
CUfileError_t cuFileStatsStop(void);
CUfileError_t cuFileStatsReset(void);
CUfileError_t cuFileGetStatsL1(CUfileStatsLevel1_t *stats);
CUfileError_t cuFileGetStatsL2(CUfileStatsLevel2_t *stats);
CUfileError_t cuFileGetStatsL3(CUfileStatsLevel3_t *stats);

#ifdef __cplusplus
}
#endif

#endif /* HIPFS_CUFILE_H */
