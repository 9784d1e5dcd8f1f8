// The CUDA elementwise loop: a grid-stride walk over a StridedLayout that hands each element's
// per-operand offsets (in elements) to a functor.
//
//   launch_strided<2>("unary<<<>>>", layout, UnaryBody<T>{...}, stream);
//
// `body(offsets)` handles one element: offsets[k] is operand k's offset from its base pointer.
// A flat layout (every operand dense, one dim) uses the linear index itself for every operand.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/strided_layout.h"
#include "kernels/cuda/launch.h"

namespace ember::kernels::cuda {

template <int N>
__device__ __forceinline__ void strided_offsets(const StridedLayout& layout, int64_t linear,
                                                int64_t (&offsets)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k)
    offsets[k] = 0;
  for (int d = layout.ndim - 1; d >= 0; --d) {
    const int64_t size = layout.sizes[d];
    const int64_t index = linear % size;
    linear /= size;
#pragma unroll
    for (int k = 0; k < N; ++k)
      offsets[k] += index * layout.strides[k][d];
  }
}

// The layout travels by value as a kernel parameter (488 bytes, well under the 4 KiB limit).
template <int N, typename Body>
__global__ void strided_kernel(StridedLayout layout, int64_t numel, bool flat, Body body) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel;
       i += step) {
    int64_t offsets[N];
    if (flat) {
#pragma unroll
      for (int k = 0; k < N; ++k)
        offsets[k] = i;
    } else {
      strided_offsets<N>(layout, i, offsets);
    }
    body(offsets);
  }
}

template <int N, typename Body>
void launch_strided(const char* what, const StridedLayout& layout, const Body& body,
                    cudaStream_t stream) {
  const int64_t numel = layout.numel();
  if (numel == 0) return;
  strided_kernel<N, Body>
      <<<blocks_for(numel), kThreadsPerBlock, 0, stream>>>(layout, numel, layout.is_flat(), body);
  EMBER_CUDA_CHECK_LAUNCH(what);
}

}  // namespace ember::kernels::cuda
