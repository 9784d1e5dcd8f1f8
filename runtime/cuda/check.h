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
