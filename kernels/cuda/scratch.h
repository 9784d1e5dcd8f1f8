// A stream-ordered scratch buffer for a kernel's intermediate results (partial sums and the
// like): allocated with cudaMallocAsync on the stream, freed with cudaFreeAsync on the same stream
// when the object goes out of scope, so that a launch check that throws in between does not leak
// it. Holds at least one element, so that `data` is a valid pointer for empty work too.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/check.h"

namespace ember::kernels::cuda {

template <typename T>
struct Scratch {
  T* data = nullptr;
  cudaStream_t stream;

  Scratch(int64_t count, cudaStream_t s) : stream(s) {
    const size_t elements = static_cast<size_t>(count > 0 ? count : 1);
    EMBER_CUDA_KERNEL_CHECK(
        cudaMallocAsync(reinterpret_cast<void**>(&data), elements * sizeof(T), stream));
  }
  ~Scratch() { static_cast<void>(cudaFreeAsync(data, stream)); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

}  // namespace ember::kernels::cuda
