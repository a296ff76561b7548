// trainloop_cuda.cu: the device table of pr_main for the CUDA target (pr_device_cuda,
// PrDevice in pipert.h): what trainloop.c's step end, checkpoints and initialisation do on the
// device. The device is this rank's local rank on its machine (Open MPI's
// OMPI_COMM_WORLD_LOCAL_RANK, 0 for a one-rank program) modulo the GPUs it has, so that ranks of
// a host-staged (--comm mpi) pipeline may share one GPU; pr_cu_init stops the program without a
// GPU, and pr_cu_check_plan_memory when the plan and the pool do not fit, both before any region.
// The sum of squares lands in a device double allocated at the start and is read back at once.
#include "cuda_common.cuh"

#include <stdlib.h>

static double *sumsq_out; // device double: pr_cu_sumsq's result

static void cu_start(uint64_t plan_bytes, size_t scratch) {
  const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  int local = lr && *lr ? atoi(lr) : 0, count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) count = 1; // pr_cu_init says why
  pr_cu_init(local % count, 1, scratch);
  pr_cu_check_plan_memory(plan_bytes + sizeof(double));
  sumsq_out = (double *)pr_cu_alloc_region("the sum of squares", sizeof(double));
}

static double cu_sumsq(const float *g, int64_t n) {
  double s = 0;
  pr_cu_sumsq(sumsq_out, g, n);
  pr_cu_download(&s, sumsq_out, sizeof s);
  return s;
}

static void cu_finish(void) {
  pr_cu_free_region(sumsq_out);
  sumsq_out = NULL;
  pr_cu_finish();
}

static void cu_upload(void *dev, const void *host, size_t bytes) {
  if (bytes) pr_cu_upload(dev, host, bytes);
}

static void cu_download(void *host, const void *dev, size_t bytes) {
  if (bytes) pr_cu_download(host, dev, bytes);
}

extern "C" const PrDevice pr_device_cuda = {
    "cuda",   cu_start,         pr_cu_alloc_region, pr_cu_free_region,  cu_upload, cu_download,
    cu_sumsq, pr_cu_adamw_step, pr_cu_sgd_step,     pr_cu_check_status, cu_finish,
};
