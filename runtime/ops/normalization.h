// Softmax and normalisation layers' functional forms. Under autocast these run in f32.
#pragma once

#include "runtime/tensor.h"

namespace ember {

// Along `dim`; numerically stable (max subtracted first).
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// x (..., *normalized_shape) normalised over the trailing normalized_shape dims, then
// * weight + bias (both of normalized_shape, or undefined).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// x (N, C, ...) normalised per channel C. training: batch statistics (biased variance) are used
// and, when running_mean / running_var are defined, updated in place:
//   running = (1 - momentum) running + momentum batch_stat (unbiased variance), as PyTorch.
// eval: the running statistics are used. weight, bias (C) may be undefined.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5);

// relu(batch_norm(...)) in batch norm's own passes over memory (two forward, two backward), where
// the two ops take three each way: the ReLU is applied before the output is rounded to x's dtype,
// and its backward folds into batch norm's reads of the gradient (from the saved output). The same
// values as the two ops, except that a negative value that rounds to -0 in f16 or bf16 comes out
// +0; the same gradients, bit for bit. nn::Sequential calls it for a BatchNorm followed by a ReLU
// (nn::set_fuse_batch_norm_relu).
Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training,
                       double momentum = 0.1, double eps = 1e-5);

}  // namespace ember
