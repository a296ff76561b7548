// cuda_check.h: cudaCheck / cublasCheck / ncclCheck for the CUDA runtime (internal). A failing call
// goes through pr_fail, the runtime's one error path:
//     FILE:LINE: rank R: error: CALL failed: NAME (DESCRIPTION)
//     HINT: ...
// and the program (the whole job in a pipeline) stops. ncclCheck is only defined where nccl.h was
// included first (the NCCL transport is not written yet).
#ifndef PIPERT_CUDA_CHECK_H
#define PIPERT_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "pipert.h"
}

#define PR_CU_HINT                                                                                 \
  "check the GPU with nvidia-smi; an illegal address or launch failure in a kernel is a pipec "    \
  "bug (rerun under compute-sanitizer)"

#define cudaCheck(call)                                                                            \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      pr_fail(__FILE__, __LINE__, PR_CU_HINT, "%s failed: %s (%s)", #call, cudaGetErrorName(e_),   \
              cudaGetErrorString(e_));                                                             \
  } while (0)

// After a kernel launch: the launch's own errors (bad configuration); execution errors surface
// at the next synchronising call.
#define cudaCheckLaunch() cudaCheck(cudaGetLastError())

#define cublasCheck(call)                                                                          \
  do {                                                                                             \
    cublasStatus_t s_ = (call);                                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                               \
      pr_fail(__FILE__, __LINE__, "a cuBLAS failure on valid shapes is a pipec bug",               \
              "%s failed: %s (%s)", #call, cublasGetStatusName(s_), cublasGetStatusString(s_));    \
  } while (0)

#ifdef NCCL_H_
#define ncclCheck(call)                                                                            \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess)                                                                         \
      pr_fail(__FILE__, __LINE__, "rerun with NCCL_DEBUG=INFO to see why", "%s failed: %s (%s)",   \
              #call, ncclGetErrorString(r_), ncclGetLastError(NULL));                              \
  } while (0)
#endif

#endif // PIPERT_CUDA_CHECK_H
