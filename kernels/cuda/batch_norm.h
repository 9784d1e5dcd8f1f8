// CUDA batch norm: the same three kernels, contracts and statistics types as
// kernels/cpu/normalization.h (batch_norm_*), queued on `stream`.
//
//   x (batch, channels, spatial) dense; mean, variance, rstd, scale, shift (channels) in acc_t<T>
//
// Per-channel reductions run one block per channel over its batch * spatial values, accumulating
// in acc_t<T> (f32 for f16 / bf16); the mean comes first, then the squared deviations from it, as
// on the CPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/scalar_types.h"

namespace ember::kernels::cuda {

// Per channel: mean and biased variance over the batch * spatial values.
template <typename T>
void batch_norm_statistics(const T* x, acc_t<T>* mean, acc_t<T>* variance, int64_t batch,
                           int64_t channels, int64_t spatial, cudaStream_t stream);

// y = x scale[c] + shift[c].
template <typename T>
void batch_norm_apply(const T* x, const acc_t<T>* scale, const acc_t<T>* shift, T* y, int64_t batch,
                      int64_t channels, int64_t spatial, cudaStream_t stream);

// training: grad_x = w rstd (g - mean(g) - xhat mean(g xhat)); eval: grad_x = g w rstd.
// grad_weight = sum(g xhat), grad_bias = sum(g) per channel; grad_x, grad_weight, grad_bias may be
// null (not wanted); weight null means 1.
template <typename T>
void batch_norm_backward(const T* grad_out, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                         const T* weight, T* grad_x, T* grad_weight, T* grad_bias, int64_t batch,
                         int64_t channels, int64_t spatial, bool training, cudaStream_t stream);

}  // namespace ember::kernels::cuda
