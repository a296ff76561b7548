// cuda_device.cu: the device a rank runs on (the checks before any work: a GPU at all, enough of
// them, enough free memory for the plan), its stream and cuBLAS handle, the regions (one
// cudaMalloc each, zeroed), the scratch pool and the status flag of bad ids.
#include "cuda_common.cuh"

static int dev = -1;          // the selected device (-1: pr_cu_init not called)
static cudaStream_t stream;   // every kernel's stream
static cublasHandle_t handle; // cuBLAS, on that stream, pedantic fp32 math
static void *pool;            // the scratch pool
static size_t pool_bytes;     // its size
static int *status_flag;      // device int raised by a kernel on a bad id

void pr_cu_init(int device, int needed, size_t scratch_bytes) {
  prCheck(dev < 0, "this is a pipec bug", "pr_cu_init called twice");
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  prCheck(e == cudaSuccess && count > 0,
          "run on a machine with an NVIDIA GPU and its driver (nvidia-smi lists it), or compile "
          "for the CPU (pipec compile without --target cuda)",
          "no CUDA device: %s", e == cudaSuccess ? "none found" : cudaGetErrorString(e));
  prCheck(needed <= count && device >= 0 && device < count,
          "run fewer ranks per machine (one GPU each), or --comm mpi to share a GPU",
          "this job needs %d GPUs on this machine (rank %d uses device %d) but it has %d", needed,
          pr_rank, device, count);
  cudaCheck(cudaSetDevice(device));
  dev = device;
  cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasCheck(cublasCreate(&handle));
  cublasCheck(cublasSetStream(handle, stream));
  // fp32 parity: no TF32 or other reduced-precision path, whatever NVIDIA_TF32_OVERRIDE says.
  cublasCheck(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH));
  pool_bytes = scratch_bytes;
  pool = pr_cu_alloc_region("the kernels' scratch", scratch_bytes);
  status_flag = (int *)pr_cu_alloc_region("the status flag", sizeof(int));
}

void pr_cu_finish(void) {
  if (dev < 0) return;
  cudaCheck(cudaStreamSynchronize(stream));
  pr_cu_free_region(pool);
  pool = NULL;
  pr_cu_free_region(status_flag);
  status_flag = NULL;
  cublasCheck(cublasDestroy(handle));
  cudaCheck(cudaStreamDestroy(stream));
  dev = -1;
}

static void need_init(void) {
  prCheck(dev >= 0, "this is a pipec bug", "a CUDA kernel was called before pr_cu_init");
}

cudaStream_t pr_cu_s(void) {
  need_init();
  return stream;
}
cublasHandle_t pr_cu_h(void) {
  need_init();
  return handle;
}
void *pr_cu_stream(void) {
  return (void *)pr_cu_s();
}
void *pr_cu_cublas(void) {
  return (void *)pr_cu_h();
}
int pr_cu_device(void) {
  return dev;
}
int *pr_cu_status_flag(void) {
  need_init();
  return status_flag;
}
size_t pr_cu_scratch_size(void) {
  return pool_bytes;
}

void pr_cu_synchronize(void) {
  cudaCheck(cudaStreamSynchronize(pr_cu_s()));
}

void *pr_cu_take_scratch(size_t bytes, const char *what) {
  need_init();
  prCheck(bytes <= pool_bytes, "this is a pipec bug (the plan's scratch is too small)",
          "%s needs %zu bytes of device scratch, the pool holds %zu", what, bytes, pool_bytes);
  return pool;
}

void pr_cu_check_plan_memory(uint64_t plan_bytes) {
  need_init();
  size_t free_b = 0, total_b = 0;
  cudaCheck(cudaMemGetInfo(&free_b, &total_b));
  prCheck(plan_bytes <= free_b,
          "reduce the batch size or the model, use more pipeline stages, or free the GPU (other "
          "processes in nvidia-smi)",
          "the memory plan needs %.1f MiB on device %d but only %.1f MiB of its %.1f MiB are free",
          (double)plan_bytes / 1048576.0, dev, (double)free_b / 1048576.0,
          (double)total_b / 1048576.0);
}

void *pr_cu_alloc_region(const char *what, size_t bytes) {
  size_t rounded = bytes == 0 ? 256 : (bytes + 255) & ~(size_t)255;
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, rounded);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError(); // not sticky: clear it
    pr_fail(__FILE__, __LINE__, "reduce the batch size or the model, or use more pipeline stages",
            "out of device memory allocating %zu bytes (%.1f MiB) for %s", bytes,
            (double)bytes / 1048576.0, what ? what : "a region");
  }
  cudaCheck(e);
  cudaCheck(cudaMemsetAsync(p, 0, rounded, dev >= 0 ? stream : 0));
  if (dev >= 0)
    cudaCheck(cudaStreamSynchronize(stream));
  else
    cudaCheck(cudaDeviceSynchronize());
  return p;
}

void pr_cu_free_region(void *p) {
  if (p) cudaCheck(cudaFree(p));
}

void pr_cu_upload(void *dst, const void *src, size_t bytes) {
  cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, pr_cu_s()));
  cudaCheck(cudaStreamSynchronize(stream));
}
void pr_cu_download(void *dst, const void *src, size_t bytes) {
  cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, pr_cu_s()));
  cudaCheck(cudaStreamSynchronize(stream));
}

void pr_cu_check_status(void) {
  int flag = 0;
  cudaCheck(cudaStreamSynchronize(pr_cu_s()));
  cudaCheck(cudaMemcpy(&flag, status_flag, sizeof flag, cudaMemcpyDeviceToHost));
  prCheck(flag == 0, "check the data: every token id must be below the model's vocabulary",
          "%s outside [0, V) on the GPU this step",
          flag == 1   ? "an embedding id"
          : flag == 2 ? "a cross_entropy target"
                      : "an id");
}

// out = out + t (the acc step of kernels computing into scratch)
__global__ void add_into_k(float *out, const float *t, int64_t n) {
  GRID_FOR(i, n) out[i] = out[i] + t[i];
}
void pr_cu_add_into(float *out, const float *t, int64_t n) {
  if (n <= 0) return;
  add_into_k<<<pr_cu_blocks(n), PR_CU_THREADS, 0, pr_cu_s()>>>(out, t, n);
  cudaCheckLaunch();
}
