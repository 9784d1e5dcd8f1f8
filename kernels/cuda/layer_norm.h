// CUDA layer norm: forward with saved statistics and the closed-form backward, queued on
// `stream`. The same contract as the layer norm half of kernels/cpu/normalization.h: statistics
// (mean, rstd = 1 / sqrt(var + eps)) in acc_t<T>, f32 for f16/bf16; a two-pass variance.
//
//   x (rows, cols) -> y (rows, cols); mean, rstd (rows); weight, bias (cols) or null
//
// One warp per row up to 1024 columns, one block per longer row (kernels/cuda/row_reduce.cuh).
// grad_weight / grad_bias are column sums over the rows: chunks of rows summed per column tile
// into an f32 (f64) scratch buffer, then the chunks summed per column and cast, with no atomics,
// so the result is deterministic.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/scalar_types.h"

namespace ember::kernels::cuda {

template <typename T>
void layer_norm(const T* x, const T* weight, const T* bias, T* y, acc_t<T>* mean, acc_t<T>* rstd,
                int64_t rows, int64_t cols, double eps, cudaStream_t stream);

// With xhat = (x - mean) rstd and gw = grad_out * weight (or grad_out):
//   grad_x = rstd (gw - mean(gw) - xhat mean(gw xhat))                 (rows, cols)
//   grad_weight = sum over rows of grad_out xhat; grad_bias = sum over rows of grad_out  (cols)
// grad_x, grad_weight, grad_bias may each be null (not wanted); weight null means 1.
template <typename T>
void layer_norm_backward(const T* grad_out, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                         const T* weight, T* grad_x, T* grad_weight, T* grad_bias, int64_t rows,
                         int64_t cols, cudaStream_t stream);

}  // namespace ember::kernels::cuda
