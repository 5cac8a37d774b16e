/* cufile.h's layouts and numbers (cuFile 1.15 as hipfs implements it),
 * checked at compile time, and printed at run time for the log. */
#include <cufile.h>
#include <stddef.h>
#include <stdio.h>

#define SA(c) _Static_assert(c, #c)

SA(CUFILE_VERSION == 1150);
SA(CUFILEOP_BASE_ERR == 5000);
SA(CU_FILE_SUCCESS == 0);
SA(CU_FILE_DRIVER_NOT_INITIALIZED == 5001);
SA(CU_FILE_NVFS_DRIVER_ERROR == 5010);
SA(CU_FILE_CUDA_DRIVER_ERROR == 5011);
SA(CU_FILE_DIO_NOT_SET == 5020);
SA(CU_FILE_INVALID_VALUE == 5022);
SA(CU_FILE_HANDLE_NOT_REGISTERED == 5027);
SA(CU_FILE_INTERNAL_ERROR == 5030);
SA(CU_FILE_GETNEWFD_FAILED == 5031);
SA(CU_FILE_NVFS_SETUP_ERROR == 5033);
SA(CU_FILE_ASYNC_NOT_SUPPORTED == 5038);
SA(CU_FILE_INTERNAL_BATCH_SETUP_ERROR == 5039);
SA(CU_FILE_INTERNAL_BATCH_CANCEL_ERROR == 5042);
SA(CU_FILE_NOMEM_ERROR == 5043);
SA(CU_FILE_IO_ERROR == 5044);
SA(CU_FILE_INTERNAL_BUF_REGISTER_ERROR == 5045);
SA(CU_FILE_HASH_OPR_ERROR == 5046);
SA(CU_FILE_INVALID_CONTEXT_ERROR == 5047);
SA(CU_FILE_NVFS_INTERNAL_DRIVER_ERROR == 5048);
SA(CU_FILE_BATCH_NOCOMPAT_ERROR == 5049);
SA(CU_FILE_IO_MAX_ERROR == 5050);

SA(sizeof(CUfileError_t) == 8);
SA(offsetof(CUfileError_t, cu_err) == 4);
SA(sizeof(CUresult) == 4);

SA(sizeof(CUfileDrvProps_t) == 56);
SA(offsetof(CUfileDrvProps_t, nvfs.poll_thresh_size) == 8);
SA(offsetof(CUfileDrvProps_t, nvfs.max_direct_io_size) == 16);
SA(offsetof(CUfileDrvProps_t, nvfs.dstatusflags) == 24);
SA(offsetof(CUfileDrvProps_t, nvfs.dcontrolflags) == 28);
SA(offsetof(CUfileDrvProps_t, fflags) == 32);
SA(offsetof(CUfileDrvProps_t, max_device_cache_size) == 36);
SA(offsetof(CUfileDrvProps_t, per_buffer_cache_size) == 40);
SA(offsetof(CUfileDrvProps_t, max_device_pinned_mem_size) == 44);
SA(offsetof(CUfileDrvProps_t, max_batch_io_size) == 48);
SA(offsetof(CUfileDrvProps_t, max_batch_io_timeout_msecs) == 52);
SA(CU_FILE_VIRTIOFS_SUPPORTED == 13 && CU_FILE_PANFS_SUPPORTED == 14 && CU_FILE_MAX_TARGET_TYPES == 15);
SA(CU_FILE_NVME_SUPPORTED == 4 && CU_FILE_SCSI_SUPPORTED == 6 && CU_FILE_NVME_P2P_SUPPORTED == 11);
SA(CU_FILE_USE_POLL_MODE == 0 && CU_FILE_ALLOW_COMPAT_MODE == 1);
SA(CU_FILE_VANILLA_POSIX_IO_MODE == 2 && CU_FILE_POSIX_IO_MODE == 2 && CU_FILE_FALLBACK_IO_MODE == 4);
SA(CU_FILE_BATCH_IO_SUPPORTED == 1 && CU_FILE_STREAMS_SUPPORTED == 2 && CU_FILE_P2P_SUPPORTED == 4);

SA(sizeof(CUfileDescr_t) == 24);
SA(offsetof(CUfileDescr_t, handle) == 8);
SA(offsetof(CUfileDescr_t, fs_ops) == 16);
SA(sizeof(CUfileFSOps_t) == 40);
SA(offsetof(CUfileFSOps_t, write) == 32);
SA(sizeof(cufileRDMAInfo_t) == 16);
SA(CU_FILE_HANDLE_TYPE_OPAQUE_FD == 1 && CU_FILE_HANDLE_TYPE_OPAQUE_WIN32 == 2 &&
   CU_FILE_HANDLE_TYPE_USERSPACE_FS == 3);
SA(CU_FILE_RDMA_REGISTER == 1 && CU_FILE_RDMA_RELAXED_ORDERING == 2);

SA(sizeof(CUfileIOParams_t) == 64);
SA(offsetof(CUfileIOParams_t, u) == 8);
SA(offsetof(CUfileIOParams_t, u.batch.file_offset) == 16);
SA(offsetof(CUfileIOParams_t, u.batch.devPtr_offset) == 24);
SA(offsetof(CUfileIOParams_t, u.batch.size) == 32);
SA(offsetof(CUfileIOParams_t, fh) == 40);
SA(offsetof(CUfileIOParams_t, opcode) == 48);
SA(offsetof(CUfileIOParams_t, cookie) == 56);
SA(sizeof(CUfileIOEvents_t) == 24);
SA(offsetof(CUfileIOEvents_t, status) == 8);
SA(offsetof(CUfileIOEvents_t, ret) == 16);
SA(CUFILE_READ == 0 && CUFILE_WRITE == 1 && CUFILE_BATCH == 1);
SA(CUFILE_WAITING == 1 && CUFILE_PENDING == 2 && CUFILE_INVALID == 4 && CUFILE_CANCELED == 8 &&
   CUFILE_COMPLETE == 16 && CUFILE_TIMEOUT == 32 && CUFILE_FAILED == 64);
SA(sizeof(CUfileIOVec_t) == 16);
SA(CU_FILE_STREAM_FIXED_BUF_OFFSET == 1 && CU_FILE_STREAM_FIXED_FILE_OFFSET == 2 &&
   CU_FILE_STREAM_FIXED_FILE_SIZE == 4 && CU_FILE_STREAM_PAGE_ALIGNED_INPUTS == 8);

SA(CUFILE_PARAM_PROFILE_STATS == 0 && CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB == 5 &&
   CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB == 10 && CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS == 11);
SA(CUFILE_PARAM_STREAM_MEMOPS_BYPASS == 11 && CUFILE_PARAM_PROPERTIES_POSIX_IO_MODE == 12 &&
   CUFILE_PARAM_GDS_FALLBACK_IO == 13);
SA(CUFILE_PARAM_LOG_DIR == 2 && CUFILE_PARAM_RDMA_TRANSPORT == 3);
SA(CUFILE_PARAM_POSIX_POOL_SLAB_SIZE_KB == 0 && CUFILE_PARAM_GPU_BOUNCE_BUFFER_SLAB_COUNT == 3);

SA(CUFILE_GPU_UUID_LEN == 16 && CUFILE_MAX_GPUS == 16);
SA(sizeof(CUfileOpCounter_t) == 16);
SA(sizeof(CUfileStatsLevel1_t) == 512);
SA(offsetof(CUfileStatsLevel1_t, read_bytes) == 96);
SA(offsetof(CUfileStatsLevel1_t, read_lat_sum_us) == 160);
SA(offsetof(CUfileStatsLevel1_t, batch_submit_ops) == 176);
SA(offsetof(CUfileStatsLevel1_t, batch_total_submit_ops) == 400);
SA(offsetof(CUfileStatsLevel1_t, batch_read_bytes) == 416);
SA(offsetof(CUfileStatsLevel1_t, last_batch_write_bytes) == 504);
SA(sizeof(CUfileStatsLevel2_t) == 1024);
SA(offsetof(CUfileStatsLevel2_t, write_size_kb_hist) == 768);
SA(sizeof(CUfilePerGpuStats_t) == 248);
SA(offsetof(CUfilePerGpuStats_t, writes_bytes) == 120);
SA(offsetof(CUfilePerGpuStats_t, reg_bytes) == 240);
SA(sizeof(CUfileStatsLevel3_t) == 5000);
SA(offsetof(CUfileStatsLevel3_t, num_gpus) == 1024);
SA(offsetof(CUfileStatsLevel3_t, per_gpu_stats) == 1032);

int main(void) {
    printf("CUfileDrvProps_t %zu, CUfileStatsLevel1/2/3_t %zu/%zu/%zu, CUfileIOParams_t %zu\n",
           sizeof(CUfileDrvProps_t), sizeof(CUfileStatsLevel1_t), sizeof(CUfileStatsLevel2_t),
           sizeof(CUfileStatsLevel3_t), sizeof(CUfileIOParams_t));
    return 0;
}
