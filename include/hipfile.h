/*
 * hipfile.h - the hipFile C API (AMD hipFile 0.5 line, a one-to-one rename
 * of NVIDIA cuFile), implemented by hipfs' libhipfile.so.
 *
 * Build:  cc prog.c $(pkg-config --cflags --libs hipfile)
 *
 * HIP runtime types: when the HIP runtime headers are available and a HIP
 * platform is selected (__HIP_PLATFORM_AMD__, __HIP_PLATFORM_NVIDIA__, or
 * compiling as HIP), <hip/hip_runtime_api.h> provides hipError_t and
 * hipStream_t. Otherwise this header declares ABI-compatible stand-ins
 * (hipError_t is an int-sized enum, hipStream_t an opaque pointer; with
 * __HIP_PLATFORM_NVIDIA__ and only CUDA installed, hipStream_t is
 * cudaStream_t), so C programs compile on machines without ROCm. Include
 * <hip/hip_runtime_api.h> before this header if you include it at all.
 *
 * Return conventions: functions returning hipFileError_t return it by
 * value; hipFileRead/hipFileWrite return bytes moved (short only at end of
 * file), -1 with errno set for a system error, or -hipFileOpError_t (e.g.
 * -5027) for a hipFile error; a negative offset, and any call before the
 * driver is open, returns -1 with errno = EINVAL.
 *
 * Thread safety: every function may be called from any thread. The
 * hipFileFSOps_t callbacks are called from the calling thread or from the
 * library's worker threads, and must be thread-safe.
 */
#ifndef HIPFILE_H
#define HIPFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

/* Strict ISO C modes hide struct timespec in <time.h>; the batch API only
 * needs it declared. */
struct timespec;

#if defined(HIP_INCLUDE_HIP_HIP_RUNTIME_API_H)
/* The application already included the HIP runtime API. */
#define HIPFILE_HAVE_HIP_RUNTIME 1
#elif defined(__has_include)
#if defined(__HIP_PLATFORM_NVIDIA__)
/* HIP on NVIDIA wraps the CUDA runtime, so it needs the CUDA headers too. */
#if __has_include(<hip/hip_runtime_api.h>) && __has_include(<cuda_runtime_api.h>)
#include <hip/hip_runtime_api.h>
#define HIPFILE_HAVE_HIP_RUNTIME 1
#elif __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
#define HIPFILE_CUDA_STREAM 1
#endif
#elif (defined(__HIP_PLATFORM_AMD__) || defined(__HIP__)) && __has_include(<hip/hip_runtime_api.h>)
#include <hip/hip_runtime_api.h>
#define HIPFILE_HAVE_HIP_RUNTIME 1
#endif
#endif

#ifndef HIPFILE_HAVE_HIP_RUNTIME
/* Stand-ins with the HIP runtime's ABI (an int-sized enum; a pointer). */
typedef enum hipError_t {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorNotInitialized = 3,
    hipErrorInvalidDevice = 101,
    hipErrorNoDevice = 100,
    hipErrorNotSupported = 801,
    hipErrorUnknown = 999
} hipError_t;
#ifdef HIPFILE_CUDA_STREAM
typedef cudaStream_t hipStream_t;
#else
typedef struct ihipStream_t *hipStream_t;
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ---------------------------------------------------------- */
#define HIPFILE_VERSION_MAJOR 0
#define HIPFILE_VERSION_MINOR 5
#define HIPFILE_VERSION_PATCH 0

/* ---- errors ----------------------------------------------------------- */
#define HIPFILE_BASE_ERR 5000

typedef enum hipFileOpError {
    hipFileSuccess = 0,
    hipFileDriverNotInitialized = HIPFILE_BASE_ERR + 1,
    hipFileDriverInvalidProps = HIPFILE_BASE_ERR + 2,
    hipFileDriverUnsupportedLimit = HIPFILE_BASE_ERR + 3,
    hipFileDriverVersionMismatch = HIPFILE_BASE_ERR + 4,
    hipFileDriverVersionReadError = HIPFILE_BASE_ERR + 5,
    hipFileDriverClosing = HIPFILE_BASE_ERR + 6,
    hipFilePlatformNotSupported = HIPFILE_BASE_ERR + 7,
    hipFileIONotSupported = HIPFILE_BASE_ERR + 8,
    hipFileDeviceNotSupported = HIPFILE_BASE_ERR + 9,
    hipFileDriverError = HIPFILE_BASE_ERR + 10,
    hipFileHipDriverError = HIPFILE_BASE_ERR + 11,
    hipFileHipPointerInvalid = HIPFILE_BASE_ERR + 12,
    hipFileHipMemoryTypeInvalid = HIPFILE_BASE_ERR + 13,
    hipFileHipPointerRangeError = HIPFILE_BASE_ERR + 14,
    hipFileHipContextMismatch = HIPFILE_BASE_ERR + 15,
    hipFileInvalidMappingSize = HIPFILE_BASE_ERR + 16,
    hipFileInvalidMappingRange = HIPFILE_BASE_ERR + 17,
    hipFileInvalidFileType = HIPFILE_BASE_ERR + 18,
    hipFileInvalidFileOpenFlag = HIPFILE_BASE_ERR + 19,
    hipFileDIONotSet = HIPFILE_BASE_ERR + 20,
    /* 5021 is unused */
    hipFileInvalidValue = HIPFILE_BASE_ERR + 22,
    hipFileMemoryAlreadyRegistered = HIPFILE_BASE_ERR + 23,
    hipFileMemoryNotRegistered = HIPFILE_BASE_ERR + 24,
    hipFilePermissionDenied = HIPFILE_BASE_ERR + 25,
    hipFileDriverAlreadyOpen = HIPFILE_BASE_ERR + 26,
    hipFileHandleNotRegistered = HIPFILE_BASE_ERR + 27,
    hipFileHandleAlreadyRegistered = HIPFILE_BASE_ERR + 28,
    hipFileDeviceNotFound = HIPFILE_BASE_ERR + 29,
    hipFileInternalError = HIPFILE_BASE_ERR + 30,
    hipFileGetNewFDFailed = HIPFILE_BASE_ERR + 31,
    /* 5032 is unused */
    hipFileDriverSetupError = HIPFILE_BASE_ERR + 33,
    hipFileIODisabled = HIPFILE_BASE_ERR + 34,
    hipFileBatchSubmitFailed = HIPFILE_BASE_ERR + 35,
    hipFileGPUMemoryPinningFailed = HIPFILE_BASE_ERR + 36,
    hipFileBatchFull = HIPFILE_BASE_ERR + 37,
    hipFileAsyncNotSupported = HIPFILE_BASE_ERR + 38,
    hipFileIOMaxError = HIPFILE_BASE_ERR + 39
} hipFileOpError_t;

typedef struct hipFileError {
    hipFileOpError_t err;
    hipError_t hip_drv_err; /* meaningful when err == hipFileHipDriverError */
} hipFileError_t;

/* The string for a code; unknown codes give "Unknown hipFile error". Static. */
const char *hipFileGetOpErrorString(hipFileOpError_t status);

#define IS_HIPFILE_ERR(status) (abs((status)) > HIPFILE_BASE_ERR)
#define HIPFILE_ERRSTR(status) hipFileGetOpErrorString((hipFileOpError_t)abs((status)))
#define IS_HIP_DRV_ERR(status) ((status).err == hipFileHipDriverError)
#define HIP_DRV_ERR(status) ((status).hip_drv_err)

/* ---- types ------------------------------------------------------------ */
typedef off_t hoff_t;
typedef void *hipFileHandle_t;
typedef void *hipFileBatchHandle_t;

typedef enum hipFileFileHandleType {
    hipFileHandleTypeOpaqueFD = 1,    /* a POSIX fd */
    hipFileHandleTypeOpaqueWin32 = 2, /* not supported on Linux: hipFileIONotSupported */
    hipFileHandleTypeUserspaceFS = 3  /* an fd served by hipFileFSOps_t callbacks */
} hipFileFileHandleType_t;

/*
 * RDMA descriptor (hipFileRDMAInfo_t), version 1.
 *
 * desc_str is a NUL-terminated ASCII string, desc_len its length without
 * the NUL. It describes the whole registered buffer the request lies in:
 *
 *     hipfs-rdma:v1:<transport>:addr=0x<hex>,len=<decimal>,rkey=0x<hex>
 *
 * the ASCII form of hipfs_rdma::RemoteDescriptor (address, length, remote
 * key, and the device/transport that issued the key: "verbs" or "tcp").
 * Host memory registered with HIPFILE_RDMA_REGISTER that no RDMA transport
 * claimed is described with transport "host" and rkey 0x0: process-local
 * memory that the filesystem may access directly at the buffer pointer.
 * Parsers must check the "hipfs-rdma:v1:" prefix and ignore fields they do
 * not know.
 */
typedef struct hipFileRDMAInfo {
    int version; /* 1 */
    int desc_len;
    const char *desc_str;
} hipFileRDMAInfo_t;

#define HIPFILE_RDMA_REGISTER 1
#define HIPFILE_RDMA_RELAXED_ORDERING (1 << 1)

/*
 * Userspace filesystem callbacks (hipFileHandleTypeUserspaceFS).
 *
 * `handle` is the registered fd cast to void *; the library never does I/O
 * on that fd itself. read/write get the request's buffer pointer, length and
 * file offset; rdma_info is NULL when the buffer has no RDMA registration
 * (the pointer is then host-accessible memory, a bounce buffer for device
 * memory), else it describes the registration (see "RDMA descriptor") and
 * the pointer is the request's address inside it. They return bytes moved
 * (short only at end of file) or a negative errno, which hipFileRead/Write
 * report as -1 with that errno. fs_type may return a static name.
 * getRDMADeviceList and getRDMADevicePriority are accepted but not called
 * (this library does not route between RDMA devices). The table is copied
 * at registration.
 */
typedef struct hipFileFSOps {
    const char *(*fs_type)(void *handle);
    int (*getRDMADeviceList)(void *handle, struct sockaddr **hostaddrs);
    int (*getRDMADevicePriority)(void *handle, char *, size_t, hoff_t, struct sockaddr *hostaddr);
    ssize_t (*read)(void *handle, char *, size_t, hoff_t, hipFileRDMAInfo_t *);
    ssize_t (*write)(void *handle, const char *, size_t, hoff_t, hipFileRDMAInfo_t *);
} hipFileFSOps_t;

typedef struct hipFileDescr {
    hipFileFileHandleType_t type;
    union {
        int fd;      /* OpaqueFD, UserspaceFS: >= 0 */
        void *hFile; /* OpaqueWin32 */
    } handle;
    const hipFileFSOps_t *fs_ops; /* UserspaceFS: required; ignored otherwise */
} hipFileDescr_t;

/* ---- driver ----------------------------------------------------------- */
typedef enum hipFileDriverStatusFlags {
    hipFileLustreSupported = 0,
    hipFileWekaFSSupported = 1,
    hipFileNFSSupported = 2,
    hipFileGPFSSupported = 3,
    hipFileNVMeSupported = 4,
    hipFileNVMeoFSupported = 5,
    hipFileSCSISupported = 6,
    hipFileScaleFluxCSDSupported = 7,
    hipFileNVMeshSupported = 8,
    hipFileBeeGFSSupported = 9,
    /* 10 is reserved */
    hipFileNVMeP2PSupported = 11,
    hipFileScatefsSupported = 12
} hipFileDriverStatusFlags_t;

typedef enum hipFileDriverControlFlags {
    hipFileUsePollMode = 0,
    hipFileAllowCompatMode = 1
} hipFileDriverControlFlags_t;

typedef enum hipFileFeatureFlags {
    hipFileDynRoutingSupported = 0,
    hipFileBatchIOSupported = 1,
    hipFileStreamsSupported = 2,
    hipFileParallelIOSupported = 3
} hipFileFeatureFlags_t;

/* Sizes in KiB. The three cache sizes are 64-bit (cuFile uses unsigned). */
typedef struct hipFileDriverProps {
    struct {
        unsigned int major_version;
        unsigned int minor_version;
        uint64_t poll_thresh_size;
        uint64_t max_direct_io_size;
        unsigned int driver_status_flags;  /* bits: hipFileDriverStatusFlags_t */
        unsigned int driver_control_flags; /* bits: hipFileDriverControlFlags_t */
    } nvfs;
    unsigned int feature_flags; /* bits: hipFileFeatureFlags_t */
    uint64_t max_device_cache_size;
    uint64_t per_buffer_cache_size;
    uint64_t max_device_pinned_mem_size;
    unsigned int max_batch_io_count; /* 128 */
    unsigned int max_batch_io_timeout_msecs;
} hipFileDriverProps_t;

/* ---- batch ------------------------------------------------------------ */
typedef enum hipFileOpcode {
    hipFileBatchRead = 0,
    hipFileBatchWrite = 1
} hipFileOpcode_t;

typedef enum hipFileStatus {
    hipFileWaiting = 1,
    hipFilePending = 2,
    hipFileInvalid = 4,
    hipFileCanceled = 8,
    hipFileComplete = 16,
    hipFileTimeout = 32,
    hipFileFailed = 64
} hipFileStatus_t;

typedef enum hipFileBatchMode {
    hipFileBatch = 1
} hipFileBatchMode_t;

typedef struct hipFileIOParams {
    hipFileBatchMode_t mode; /* hipFileBatch */
    union {
        struct {
            void *devPtr_base;
            int64_t file_offset;
            int64_t devPtr_offset;
            size_t size;
        } batch;
    } u;
    hipFileHandle_t fh;
    hipFileOpcode_t opcode;
    void *cookie; /* returned untouched in the operation's event */
} hipFileIOParams_t;

typedef struct hipFileIOEvents {
    void *cookie;
    hipFileStatus_t status;
    size_t ret; /* bytes when Complete; a negative error (-errno or -hipFileOpError_t) cast when Failed */
} hipFileIOEvents_t;

/* ---- streams ---------------------------------------------------------- */
#define HIPFILE_STREAM_FIXED_BUF_OFFSET 1
#define HIPFILE_STREAM_FIXED_FILE_OFFSET 2
#define HIPFILE_STREAM_FIXED_FILE_SIZE 4
#define HIPFILE_STREAM_PAGE_ALIGNED_INPUTS 8
#define HIPFILE_STREAM_FLAGS_MASK 0xf
/* Registration is optional: I/O on a stream never registered behaves as on
 * one registered with flags 0. Registering a registered stream, or
 * deregistering one that is not, is hipFileInvalidValue. */

/* ---- parameters (set only while the driver is closed) ------------------ */
typedef enum hipFileSizeTConfigParameter_t {
    hipFileParamProfileStats = 0,
    hipFileParamExecutionMaxIOQueueDepth,
    hipFileParamExecutionMaxIOThreads,
    hipFileParamExecutionMinIOThresholdSizeKB,
    hipFileParamExecutionMaxRequestParallelism,
    hipFileParamPropertiesMaxDirectIOSizeKB,
    hipFileParamPropertiesMaxDeviceCacheSizeKB,
    hipFileParamPropertiesPerBufferCacheSizeKB,
    hipFileParamPropertiesMaxDevicePinnedMemSizeKB,
    hipFileParamPropertiesIOBatchsize,
    hipFileParamPollthresholdSizeKB,
    hipFileParamPropertiesBatchIOTimeoutMs
} hipFileSizeTConfigParameter_t;

typedef enum hipFileBoolConfigParameter_t {
    hipFileParamPropertiesUsePollMode = 0,
    hipFileParamPropertiesAllowCompatMode,
    hipFileParamForceCompatMode,
    hipFileParamFsMiscApiCheckAggressive,
    hipFileParamExecutionParallelIO,
    hipFileParamProfileNvtx,
    hipFileParamPropertiesAllowSystemMemory,
    hipFileParamUsePcip2pdma,
    hipFileParamPreferIOUring,
    hipFileParamForceOdirectMode,
    hipFileParamSkipTopologyDetection,
    hipFileParamStreamMemopsBypass,
    /* hipfs extension: OPAQUE_FD handles on a hipfs mount read and write the
       server directly (default true; env HIPFS_OPAQUE_FD_DIRECT). */
    hipFileParamHipfsOpaqueFdDirect = 100
} hipFileBoolConfigParameter_t;

typedef enum hipFileStringConfigParameter_t {
    hipFileParamLoggingLevel = 0,
    hipFileParamEnvLogfilePath,
    hipFileParamLogDir
} hipFileStringConfigParameter_t;

/* ---- statistics (hipFile 0.5; the layouts of cuFile 1.15) -------------- */
#define HIPFILE_MAX_GPUS 16
#define HIPFILE_GPU_UUID_LEN 16

typedef struct hipFileOpCounter {
    uint64_t ok;
    uint64_t err;
} hipFileOpCounter_t;

/* 512 bytes. Rates and averages are computed when the snapshot is taken. */
typedef struct hipFileStatsLevel1 {
    hipFileOpCounter_t read_ops;
    hipFileOpCounter_t write_ops;
    hipFileOpCounter_t hdl_register_ops;
    hipFileOpCounter_t hdl_deregister_ops;
    hipFileOpCounter_t buf_register_ops;
    hipFileOpCounter_t buf_deregister_ops;
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
    hipFileOpCounter_t batch_submit_ops;
    hipFileOpCounter_t batch_complete_ops;
    hipFileOpCounter_t batch_setup_ops;
    hipFileOpCounter_t batch_cancel_ops;
    hipFileOpCounter_t batch_destroy_ops;
    hipFileOpCounter_t batch_enqueued_ops;
    hipFileOpCounter_t batch_posix_enqueued_ops;
    hipFileOpCounter_t batch_processed_ops;
    hipFileOpCounter_t batch_posix_processed_ops;
    hipFileOpCounter_t batch_nvfs_submit_ops;
    hipFileOpCounter_t batch_p2p_submit_ops;
    hipFileOpCounter_t batch_aio_submit_ops;
    hipFileOpCounter_t batch_iouring_submit_ops;
    hipFileOpCounter_t batch_mixed_io_submit_ops;
    hipFileOpCounter_t batch_total_submit_ops;
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
} hipFileStatsLevel1_t;

/* 1024 bytes. Histograms of sizes: bucket 0 is under 1 KiB, bucket i is
 * [2^(i-1), 2^i) KiB, the last takes everything larger. */
typedef struct hipFileStatsLevel2 {
    hipFileStatsLevel1_t basic;
    uint64_t read_size_kb_hist[32];
    uint64_t write_size_kb_hist[32];
} hipFileStatsLevel2_t;

/* 248 bytes. */
typedef struct hipFilePerGpuStats {
    char uuid[HIPFILE_GPU_UUID_LEN];
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
    uint64_t write_bytes;
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
} hipFilePerGpuStats_t;

/* 5000 bytes. hipfs keeps process-wide figures and reports them as GPU 0's
 * (num_gpus 1) when a GPU runtime is active, num_gpus 0 otherwise. */
typedef struct hipFileStatsLevel3 {
    hipFileStatsLevel2_t detailed;
    uint32_t num_gpus;
    hipFilePerGpuStats_t per_gpu_stats[HIPFILE_MAX_GPUS];
} hipFileStatsLevel3_t;

/* ---- functions -------------------------------------------------------- */
hipFileError_t hipFileDriverOpen(void);
hipFileError_t hipFileDriverClose(void);
int64_t hipFileUseCount(void);
hipFileError_t hipFileDriverGetProperties(hipFileDriverProps_t *props);
hipFileError_t hipFileDriverSetPollMode(bool poll, size_t poll_threshold_size_kb);
hipFileError_t hipFileDriverSetMaxDirectIOSize(size_t max_direct_io_size_kb);
hipFileError_t hipFileDriverSetMaxCacheSize(size_t max_cache_size_kb);
hipFileError_t hipFileDriverSetMaxPinnedMemSize(size_t max_pinned_size_kb);

hipFileError_t hipFileHandleRegister(hipFileHandle_t *fh, hipFileDescr_t *descr);
void hipFileHandleDeregister(hipFileHandle_t fh);

hipFileError_t hipFileBufRegister(const void *buffer_base, size_t length, int flags);
hipFileError_t hipFileBufDeregister(const void *buffer_base);

ssize_t hipFileRead(hipFileHandle_t fh, void *buffer_base, size_t size, hoff_t file_offset,
                    hoff_t buffer_offset);
ssize_t hipFileWrite(hipFileHandle_t fh, const void *buffer_base, size_t size, hoff_t file_offset,
                     hoff_t buffer_offset);

hipFileError_t hipFileBatchIOSetUp(hipFileBatchHandle_t *batch_idp, unsigned max_nr);
/* nr must be 1..max_nr (nr == 0 is hipFileInvalidValue); all or nothing. */
hipFileError_t hipFileBatchIOSubmit(hipFileBatchHandle_t batch_idp, unsigned nr,
                                    hipFileIOParams_t *iocbp, unsigned int flags);
/* *nr must be > 0 and min_nr <= *nr (else hipFileInvalidValue); timeout
 * is relative, NULL waits without limit. */
hipFileError_t hipFileBatchIOGetStatus(hipFileBatchHandle_t batch_idp, unsigned min_nr,
                                       unsigned *nr, hipFileIOEvents_t *iocbp,
                                       struct timespec *timeout);
hipFileError_t hipFileBatchIOCancel(hipFileBatchHandle_t batch_idp);
void hipFileBatchIODestroy(hipFileBatchHandle_t batch_idp);

hipFileError_t hipFileReadAsync(hipFileHandle_t fh, void *buffer_base, size_t *size_p,
                                hoff_t *file_offset_p, hoff_t *buffer_offset_p,
                                ssize_t *bytes_read_p, hipStream_t stream);
hipFileError_t hipFileWriteAsync(hipFileHandle_t fh, void *buffer_base, size_t *size_p,
                                 hoff_t *file_offset_p, hoff_t *buffer_offset_p,
                                 ssize_t *bytes_written_p, hipStream_t stream);
hipFileError_t hipFileStreamRegister(hipStream_t stream, unsigned flags);
hipFileError_t hipFileStreamDeregister(hipStream_t stream);

hipFileError_t hipFileGetVersion(unsigned *major, unsigned *minor, unsigned *patch);

hipFileError_t hipFileGetParameterSizeT(hipFileSizeTConfigParameter_t param, size_t *value);
hipFileError_t hipFileGetParameterBool(hipFileBoolConfigParameter_t param, bool *value);
hipFileError_t hipFileGetParameterString(hipFileStringConfigParameter_t param, char *desc_str,
                                         int len);
hipFileError_t hipFileSetParameterSizeT(hipFileSizeTConfigParameter_t param, size_t value);
hipFileError_t hipFileSetParameterBool(hipFileBoolConfigParameter_t param, bool value);
hipFileError_t hipFileSetParameterString(hipFileStringConfigParameter_t param,
                                         const char *desc_str);

/* Snapshots of the statistics this library collected. The level is
 * HIPFILE_STATS_LEVEL (0 = off, the default; 1..3), read once; asking for
 * a level above it, or passing NULL, is hipFileInvalidValue. */
hipFileError_t hipFileGetStatsL1(hipFileStatsLevel1_t *stats);
hipFileError_t hipFileGetStatsL2(hipFileStatsLevel2_t *stats);
hipFileError_t hipFileGetStatsL3(hipFileStatsLevel3_t *stats);

#ifdef __cplusplus
}
#endif

#endif /* HIPFILE_H */
