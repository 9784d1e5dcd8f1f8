// CUDA batch norm: the same three kernels, contracts and statistics types as
// kernels/cpu/normalization.h (batch_norm_*), queued on `stream`.
//
//   x (batch, channels, spatial) dense; mean, variance, rstd, scale, shift (channels) in acc_t<T>
//
// The per-channel reductions are split across several blocks per channel (batch_norm_plan.h) and
// accumulate in acc_t<T> (f32 for f16 / bf16). The variance comes from Welford's one-pass
// statistics merged across threads and blocks (kernels/common/welford.h): the CPU's two passes
// (the mean, then squared deviations from it) give the same values up to rounding, and neither
// loses a large mean to cancellation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/scalar_types.h"

namespace ember::kernels::cuda {

// Per channel: mean and biased variance over the batch * spatial values.
template <typename T>
void batch_norm_statistics(const T* x, acc_t<T>* mean, acc_t<T>* variance, int64_t batch,
                           int64_t channels, int64_t spatial, cudaStream_t stream);

// Training mode, everything the forward needs per channel from one read of x and one small
// kernel (instead of a tensor op for each): mean, rstd = 1 / sqrt(var + eps), scale = rstd weight,
// shift = bias - mean scale, and running_mean, running_var updated in place with PyTorch's rule
// (r = (1 - momentum) r + momentum s, the running variance taking the unbiased batch variance).
// weight, bias null mean 1, 0; running_mean, running_var null mean not tracked. All (channels).
// Needs batch * spatial > 1 (the unbiased variance divides by it minus one), which the runtime
// checks before it gets here, as PyTorch does ("expected more than 1 value per channel").
template <typename Acc>
struct BatchNormChannels {
  const Acc* weight = nullptr;
  const Acc* bias = nullptr;
  Acc* running_mean = nullptr;
  Acc* running_var = nullptr;
  double eps = 1e-5, momentum = 0.1;
  Acc* mean = nullptr;   // out
  Acc* rstd = nullptr;   // out
  Acc* scale = nullptr;  // out
  Acc* shift = nullptr;  // out
};
template <typename T>
void batch_norm_training_statistics(const T* x, const BatchNormChannels<acc_t<T>>& channel_args,
                                    int64_t batch, int64_t channels, int64_t spatial,
                                    cudaStream_t stream);

// y = x scale[c] + shift[c]; relu: y = relu(x scale[c] + shift[c]), the ReLU applied before the
// rounding to T (as the CPU's batch_norm_apply).
template <typename T>
void batch_norm_apply(const T* x, const acc_t<T>* scale, const acc_t<T>* shift, T* y, int64_t batch,
                      int64_t channels, int64_t spatial, bool relu, cudaStream_t stream);

// training: grad_x = w rstd (g - mean(g) - xhat mean(g xhat)); eval: grad_x = g w rstd.
// grad_weight = sum(g xhat), grad_bias = sum(g) per channel; grad_x, grad_weight, grad_bias may be
// null (not wanted); weight null means 1.
// weight, grad_weight and grad_bias are in acc_t<T> (the affine parameters stay f32 under 16-bit
// activations). relu_out, when not null, is batch_norm_apply's output with relu: g is taken as 0
// where relu_out <= 0 (a NaN passes g on), ReLU's backward folded into the loads of g.
template <typename T>
void batch_norm_backward(const T* grad_out, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                         const acc_t<T>* weight, T* grad_x, acc_t<T>* grad_weight,
                         acc_t<T>* grad_bias, int64_t batch, int64_t channels, int64_t spatial,
                         bool training, const T* relu_out, cudaStream_t stream);

// Per channel: the sum of x over (batch, spatial), accumulated in acc_t<T> and written to
// sums (channels) -- conv2d's bias gradient, from one read of x on batch norm's reduction plan
// (a sum over dims {0, 2, 3} would first copy x into (channels, batch, spatial)).
template <typename T>
void channel_sums(const T* x, acc_t<T>* sums, int64_t batch, int64_t channels, int64_t spatial,
                  cudaStream_t stream);

}  // namespace ember::kernels::cuda
