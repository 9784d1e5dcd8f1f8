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

namespace ember::cuda {

// Throws ember::Error for a failed CUDA call, after clearing CUDA's per-thread last-error slot:
// left there, the next kernel launch's check would report this failure as its own.
[[noreturn]] inline void throw_failed_call(cudaError_t status, const char* call, const char* file,
                                           int line) {
  static_cast<void>(cudaGetLastError());
  ::ember::throw_error(::ember::kernels::cuda::cuda_error_message(status, call, file, line));
}

// For EMBER_CUDA_QUERY: true when completed, false while running (cudaErrorNotReady, which also
// lands in the last-error slot: cleared), else the error.
inline bool query_result(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return true;
  if (status != cudaErrorNotReady) throw_failed_call(status, call, file, line);
  static_cast<void>(cudaGetLastError());
  return false;
}

}  // namespace ember::cuda

#define EMBER_CUDA_CHECK(call)                                                         \
  do {                                                                                 \
    const cudaError_t ember_cuda_status_ = (call);                                     \
    if (ember_cuda_status_ != cudaSuccess)                                             \
      ::ember::cuda::throw_failed_call(ember_cuda_status_, #call, __FILE__, __LINE__); \
  } while (false)

// EMBER_CUDA_QUERY(cudaEventQuery(event)) (or cudaStreamQuery): true when the work has completed,
// false while it runs; any other status throws as EMBER_CUDA_CHECK does.
#define EMBER_CUDA_QUERY(call) ::ember::cuda::query_result((call), #call, __FILE__, __LINE__)
