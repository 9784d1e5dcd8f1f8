// EMBER_CUDA_CHECK(call): runs a CUDA runtime call and throws ember::Error if it fails, naming the
// call, file and line, CUDA's own message, and a hint:
//
//   EMBER_CUDA_CHECK(cudaMalloc(&ptr, nbytes));
//   -> CUDA error: cudaMalloc(&ptr, nbytes) failed at runtime/cuda/allocator.cpp:57: out of memory
//      (cudaErrorMemoryAllocation); is a GPU visible? check nvidia-smi and CUDA_VISIBLE_DEVICES
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/check.h"
#include "runtime/error.h"

#define EMBER_CUDA_CHECK(call)                                                                   \
  do {                                                                                           \
    const cudaError_t ember_cuda_status_ = (call);                                               \
    if (ember_cuda_status_ != cudaSuccess) {                                                     \
      /* Clear CUDA's last-error slot, or the next launch check would report this failure. */    \
      static_cast<void>(cudaGetLastError());                                                     \
      ::ember::throw_error(::ember::kernels::cuda::cuda_error_message(ember_cuda_status_, #call, \
                                                                      __FILE__, __LINE__));      \
    }                                                                                            \
  } while (false)

// EMBER_CUDA_QUERY(cudaEventQuery(event)) (or cudaStreamQuery): true when the work has completed,
// false while it runs. A cudaErrorNotReady also lands in CUDA's per-thread last-error slot, where
// the next kernel launch's check would report it as its own failure: cleared here. Any other
// status throws as EMBER_CUDA_CHECK does.
#define EMBER_CUDA_QUERY(call) ::ember::cuda::query_result((call), #call, __FILE__, __LINE__)

namespace ember::cuda {

inline bool query_result(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return true;
  static_cast<void>(cudaGetLastError());
  if (status == cudaErrorNotReady) return false;
  ::ember::throw_error(::ember::kernels::cuda::cuda_error_message(status, call, file, line));
}

}  // namespace ember::cuda
