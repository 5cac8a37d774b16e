/* ABI layout: every struct size/offset and every enum value and macro of
 * the spec, checked at compile time so that drift fails the build. */
#include <hipfile.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define SA(c) _Static_assert(c, #c)

/* hipFile 0.5: the parameter enums' tags carry _t, as upstream spells them. */
static enum hipFileSizeTConfigParameter_t size_tag = hipFileParamPollthresholdSizeKB;
static enum hipFileBoolConfigParameter_t bool_tag = hipFileParamStreamMemopsBypass;
static enum hipFileStringConfigParameter_t string_tag = hipFileParamLogDir;

/* hipFile 0.5 statistics: the layouts of cuFile 1.15. */
SA(HIPFILE_MAX_GPUS == 16 && HIPFILE_GPU_UUID_LEN == 16);
SA(sizeof(hipFileOpCounter_t) == 16);
SA(sizeof(hipFileStatsLevel1_t) == 512);
SA(offsetof(hipFileStatsLevel1_t, read_bytes) == 96);
SA(offsetof(hipFileStatsLevel1_t, read_lat_sum_us) == 160);
SA(offsetof(hipFileStatsLevel1_t, batch_submit_ops) == 176);
SA(offsetof(hipFileStatsLevel1_t, batch_total_submit_ops) == 400);
SA(offsetof(hipFileStatsLevel1_t, batch_read_bytes) == 416);
SA(offsetof(hipFileStatsLevel1_t, last_batch_write_bytes) == 504);
SA(sizeof(hipFileStatsLevel2_t) == 1024);
SA(offsetof(hipFileStatsLevel2_t, read_size_kb_hist) == 512);
SA(offsetof(hipFileStatsLevel2_t, write_size_kb_hist) == 768);
SA(sizeof(hipFilePerGpuStats_t) == 248);
SA(offsetof(hipFilePerGpuStats_t, read_bytes) == 16);
SA(offsetof(hipFilePerGpuStats_t, write_bytes) == 120);
SA(offsetof(hipFilePerGpuStats_t, reg_bytes) == 240);
SA(sizeof(hipFileStatsLevel3_t) == 5000);
SA(offsetof(hipFileStatsLevel3_t, num_gpus) == 1024);
SA(offsetof(hipFileStatsLevel3_t, per_gpu_stats) == 1032);

/* versions and errors */
SA(HIPFILE_VERSION_MAJOR == 0 && HIPFILE_VERSION_MINOR == 5 && HIPFILE_VERSION_PATCH == 0);
SA(HIPFILE_BASE_ERR == 5000);
SA(hipFileSuccess == 0);
SA(hipFileDriverNotInitialized == 5001);
SA(hipFileDriverInvalidProps == 5002);
SA(hipFileDriverUnsupportedLimit == 5003);
SA(hipFileDriverVersionMismatch == 5004);
SA(hipFileDriverVersionReadError == 5005);
SA(hipFileDriverClosing == 5006);
SA(hipFilePlatformNotSupported == 5007);
SA(hipFileIONotSupported == 5008);
SA(hipFileDeviceNotSupported == 5009);
SA(hipFileDriverError == 5010);
SA(hipFileHipDriverError == 5011);
SA(hipFileHipPointerInvalid == 5012);
SA(hipFileHipMemoryTypeInvalid == 5013);
SA(hipFileHipPointerRangeError == 5014);
SA(hipFileHipContextMismatch == 5015);
SA(hipFileInvalidMappingSize == 5016);
SA(hipFileInvalidMappingRange == 5017);
SA(hipFileInvalidFileType == 5018);
SA(hipFileInvalidFileOpenFlag == 5019);
SA(hipFileDIONotSet == 5020);
SA(hipFileInvalidValue == 5022);
SA(hipFileMemoryAlreadyRegistered == 5023);
SA(hipFileMemoryNotRegistered == 5024);
SA(hipFilePermissionDenied == 5025);
SA(hipFileDriverAlreadyOpen == 5026);
SA(hipFileHandleNotRegistered == 5027);
SA(hipFileHandleAlreadyRegistered == 5028);
SA(hipFileDeviceNotFound == 5029);
SA(hipFileInternalError == 5030);
SA(hipFileGetNewFDFailed == 5031);
SA(hipFileDriverSetupError == 5033);
SA(hipFileIODisabled == 5034);
SA(hipFileBatchSubmitFailed == 5035);
SA(hipFileGPUMemoryPinningFailed == 5036);
SA(hipFileBatchFull == 5037);
SA(hipFileAsyncNotSupported == 5038);
SA(hipFileIOMaxError == 5039);
SA(sizeof(hipFileOpError_t) == 4);
SA(sizeof(hipError_t) == 4);
SA(sizeof(hipFileError_t) == 8);
SA(offsetof(hipFileError_t, err) == 0);
SA(offsetof(hipFileError_t, hip_drv_err) == 4);

/* handle types and descriptors */
SA(sizeof(hoff_t) == 8);
SA(sizeof(hipFileHandle_t) == sizeof(void *));
SA(sizeof(hipFileBatchHandle_t) == sizeof(void *));
SA(hipFileHandleTypeOpaqueFD == 1);
SA(hipFileHandleTypeOpaqueWin32 == 2);
SA(hipFileHandleTypeUserspaceFS == 3);
SA(sizeof(hipFileDescr_t) == 24);
SA(offsetof(hipFileDescr_t, type) == 0);
SA(offsetof(hipFileDescr_t, handle) == 8);
SA(offsetof(hipFileDescr_t, handle.fd) == 8);
SA(offsetof(hipFileDescr_t, handle.hFile) == 8);
SA(offsetof(hipFileDescr_t, fs_ops) == 16);
SA(sizeof(hipFileRDMAInfo_t) == 16);
SA(offsetof(hipFileRDMAInfo_t, version) == 0);
SA(offsetof(hipFileRDMAInfo_t, desc_len) == 4);
SA(offsetof(hipFileRDMAInfo_t, desc_str) == 8);
SA(HIPFILE_RDMA_REGISTER == 1);
SA(HIPFILE_RDMA_RELAXED_ORDERING == 2);
SA(sizeof(hipFileFSOps_t) == 40);
SA(offsetof(hipFileFSOps_t, fs_type) == 0);
SA(offsetof(hipFileFSOps_t, getRDMADeviceList) == 8);
SA(offsetof(hipFileFSOps_t, getRDMADevicePriority) == 16);
SA(offsetof(hipFileFSOps_t, read) == 24);
SA(offsetof(hipFileFSOps_t, write) == 32);

/* driver properties */
SA(sizeof(hipFileDriverProps_t) == 72);
SA(offsetof(hipFileDriverProps_t, nvfs.major_version) == 0);
SA(offsetof(hipFileDriverProps_t, nvfs.minor_version) == 4);
SA(offsetof(hipFileDriverProps_t, nvfs.poll_thresh_size) == 8);
SA(offsetof(hipFileDriverProps_t, nvfs.max_direct_io_size) == 16);
SA(offsetof(hipFileDriverProps_t, nvfs.driver_status_flags) == 24);
SA(offsetof(hipFileDriverProps_t, nvfs.driver_control_flags) == 28);
SA(offsetof(hipFileDriverProps_t, feature_flags) == 32);
SA(offsetof(hipFileDriverProps_t, max_device_cache_size) == 40);
SA(offsetof(hipFileDriverProps_t, per_buffer_cache_size) == 48);
SA(offsetof(hipFileDriverProps_t, max_device_pinned_mem_size) == 56);
SA(offsetof(hipFileDriverProps_t, max_batch_io_count) == 64);
SA(offsetof(hipFileDriverProps_t, max_batch_io_timeout_msecs) == 68);
SA(sizeof(((hipFileDriverProps_t *)0)->max_device_cache_size) == 8);
SA(hipFileLustreSupported == 0 && hipFileWekaFSSupported == 1 && hipFileNFSSupported == 2);
SA(hipFileGPFSSupported == 3 && hipFileNVMeSupported == 4 && hipFileNVMeoFSupported == 5);
SA(hipFileSCSISupported == 6 && hipFileScaleFluxCSDSupported == 7);
SA(hipFileNVMeshSupported == 8 && hipFileBeeGFSSupported == 9);
SA(hipFileNVMeP2PSupported == 11 && hipFileScatefsSupported == 12);
SA(hipFileUsePollMode == 0 && hipFileAllowCompatMode == 1);
SA(hipFileDynRoutingSupported == 0 && hipFileBatchIOSupported == 1);
SA(hipFileStreamsSupported == 2 && hipFileParallelIOSupported == 3);

/* batch */
SA(hipFileBatchRead == 0 && hipFileBatchWrite == 1);
SA(hipFileWaiting == 1 && hipFilePending == 2 && hipFileInvalid == 4 && hipFileCanceled == 8);
SA(hipFileComplete == 16 && hipFileTimeout == 32 && hipFileFailed == 64);
SA(hipFileBatch == 1);
SA(sizeof(hipFileIOParams_t) == 64);
SA(offsetof(hipFileIOParams_t, mode) == 0);
SA(offsetof(hipFileIOParams_t, u) == 8);
SA(offsetof(hipFileIOParams_t, u.batch.devPtr_base) == 8);
SA(offsetof(hipFileIOParams_t, u.batch.file_offset) == 16);
SA(offsetof(hipFileIOParams_t, u.batch.devPtr_offset) == 24);
SA(offsetof(hipFileIOParams_t, u.batch.size) == 32);
SA(offsetof(hipFileIOParams_t, fh) == 40);
SA(offsetof(hipFileIOParams_t, opcode) == 48);
SA(offsetof(hipFileIOParams_t, cookie) == 56);
SA(sizeof(hipFileIOEvents_t) == 24);
SA(offsetof(hipFileIOEvents_t, cookie) == 0);
SA(offsetof(hipFileIOEvents_t, status) == 8);
SA(offsetof(hipFileIOEvents_t, ret) == 16);

/* streams */
SA(HIPFILE_STREAM_FIXED_BUF_OFFSET == 1);
SA(HIPFILE_STREAM_FIXED_FILE_OFFSET == 2);
SA(HIPFILE_STREAM_FIXED_FILE_SIZE == 4);
SA(HIPFILE_STREAM_PAGE_ALIGNED_INPUTS == 8);
SA(HIPFILE_STREAM_FLAGS_MASK == 0xf);
SA(sizeof(hipStream_t) == sizeof(void *));

/* parameters: ordinals from 0 in the spec's order */
SA(hipFileParamProfileStats == 0);
SA(hipFileParamExecutionMaxIOQueueDepth == 1);
SA(hipFileParamExecutionMaxIOThreads == 2);
SA(hipFileParamExecutionMinIOThresholdSizeKB == 3);
SA(hipFileParamExecutionMaxRequestParallelism == 4);
SA(hipFileParamPropertiesMaxDirectIOSizeKB == 5);
SA(hipFileParamPropertiesMaxDeviceCacheSizeKB == 6);
SA(hipFileParamPropertiesPerBufferCacheSizeKB == 7);
SA(hipFileParamPropertiesMaxDevicePinnedMemSizeKB == 8);
SA(hipFileParamPropertiesIOBatchsize == 9);
SA(hipFileParamPollthresholdSizeKB == 10);
SA(hipFileParamPropertiesBatchIOTimeoutMs == 11);
SA(hipFileParamPropertiesUsePollMode == 0);
SA(hipFileParamPropertiesAllowCompatMode == 1);
SA(hipFileParamForceCompatMode == 2);
SA(hipFileParamFsMiscApiCheckAggressive == 3);
SA(hipFileParamExecutionParallelIO == 4);
SA(hipFileParamProfileNvtx == 5);
SA(hipFileParamPropertiesAllowSystemMemory == 6);
SA(hipFileParamUsePcip2pdma == 7);
SA(hipFileParamPreferIOUring == 8);
SA(hipFileParamForceOdirectMode == 9);
SA(hipFileParamSkipTopologyDetection == 10);
SA(hipFileParamStreamMemopsBypass == 11);
SA(hipFileParamLoggingLevel == 0);
SA(hipFileParamEnvLogfilePath == 1);
SA(hipFileParamLogDir == 2);

int main(void) {
    if (size_tag != 10 || bool_tag != 11 || string_tag != 2) return 1;
    /* The error macros, evaluated at run time. */
    hipFileError_t e = {hipFileHipDriverError, (hipError_t)700};
    if (!IS_HIP_DRV_ERR(e) || HIP_DRV_ERR(e) != 700) return 1;
    if (!IS_HIPFILE_ERR(-5027) || IS_HIPFILE_ERR(-1) || IS_HIPFILE_ERR(5000)) return 1;
    if (strcmp(HIPFILE_ERRSTR(-5027), "File handle for GPU IO is not registered") != 0) return 1;
    puts("layout: ok");
    return 0;
}
