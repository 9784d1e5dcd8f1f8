// CUDA 2-D pooling over dense planes, with the contracts of kernels/cpu/pooling.h, queued on
// `stream`:  x (planes = N C, H, W) -> y (planes, P, Q).
//
// Forward: one thread per output element, walking its window like the CPU kernel. Backward: one
// thread per INPUT element, gathering from the outputs whose windows hold it (no atomics, so the
// result is deterministic), accumulated in acc_t<T> and rounded once.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/pool_windows.h"  // Pool2dGeometry, shared by both backends

namespace ember::kernels::cuda {

template <typename T>
void max_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y, int64_t* indices,
                        cudaStream_t stream);
template <typename T>
void max_pool2d_backward(const Pool2dGeometry& g, const T* grad_y, const int64_t* indices,
                         T* grad_x, cudaStream_t stream);

template <typename T>
void avg_pool2d_forward(const Pool2dGeometry& g, bool count_include_pad, const T* x, T* y,
                        cudaStream_t stream);
template <typename T>
void avg_pool2d_backward(const Pool2dGeometry& g, bool count_include_pad, const T* grad_y,
                         T* grad_x, cudaStream_t stream);

template <typename T>
void adaptive_avg_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y, cudaStream_t stream);
template <typename T>
void adaptive_avg_pool2d_backward(const Pool2dGeometry& g, const T* grad_y, T* grad_x,
                                  cudaStream_t stream);

}  // namespace ember::kernels::cuda
