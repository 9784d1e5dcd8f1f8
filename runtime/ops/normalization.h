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

}  // namespace ember
