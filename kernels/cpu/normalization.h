// CPU layer norm and batch norm: forward with saved statistics, and the closed-form backward.
// Statistics (mean, rstd = 1 / sqrt(var + eps), var) are kept in acc_t<T>: f32 for f16/bf16.
#pragma once

#include <cstdint>

#include "kernels/common/scalar_types.h"

namespace ember::kernels::cpu {

// ---- layer norm: each row of x normalised over its `cols` values ----
// x (rows, cols) -> y (rows, cols); mean, rstd (rows); weight, bias (cols) or null.
template <typename T>
void layer_norm(const T* x, const T* weight, const T* bias, T* y, acc_t<T>* mean, acc_t<T>* rstd,
                int64_t rows, int64_t cols, double eps);

// With xhat = (x - mean) rstd and gw = grad_out * weight (or grad_out):
//   grad_x = rstd (gw - mean(gw) - xhat mean(gw xhat))                 (rows, cols)
//   grad_weight = sum over rows of grad_out xhat; grad_bias = sum over rows of grad_out  (cols)
// grad_x, grad_weight and grad_bias may each be null (not wanted); weight null means 1.
template <typename T>
void layer_norm_backward(const T* grad_out, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                         const T* weight, T* grad_x, T* grad_weight, T* grad_bias, int64_t rows,
                         int64_t cols);

// ---- batch norm: x viewed as (batch, channels, spatial), statistics per channel ----
// Per channel c: mean and biased variance over the batch * spatial values.
template <typename T>
void batch_norm_statistics(const T* x, acc_t<T>* mean, acc_t<T>* variance, int64_t batch,
                           int64_t channels, int64_t spatial);

// y = x scale[c] + shift[c] (the normalisation and the affine folded into one per channel).
// relu: y = relu(x scale[c] + shift[c]), the ReLU applied in acc_t<T> before the rounding to T
// (the values of batch norm then relu; a negative value that rounds to -0 in f16 or bf16 comes out
// +0 where the two ops give -0).
template <typename T>
void batch_norm_apply(const T* x, const acc_t<T>* scale, const acc_t<T>* shift, T* y, int64_t batch,
                      int64_t channels, int64_t spatial, bool relu);

// training: grad_x = w rstd (g - mean(g) - xhat mean(g xhat)), means over (batch, spatial);
// eval (the statistics are constants): grad_x = g w rstd.
// grad_weight = sum(g xhat), grad_bias = sum(g) per channel; grad_x, grad_weight and grad_bias may
// each be null (not wanted); weight null = 1.
// weight, grad_weight and grad_bias are in acc_t<T>, as mixed-precision batch norm keeps its
// affine parameters in f32 under f16/bf16 activations (cuDNN's and PyTorch's convention).
// relu_out, when not null, is the output of batch_norm_apply with relu: g is taken as 0 where
// relu_out <= 0 (a NaN passes g on), ReLU's backward folded into the loads of g.
template <typename T>
void batch_norm_backward(const T* grad_out, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                         const acc_t<T>* weight, T* grad_x, acc_t<T>* grad_weight,
                         acc_t<T>* grad_bias, int64_t batch, int64_t channels, int64_t spatial,
                         bool training, const T* relu_out);

}  // namespace ember::kernels::cpu
