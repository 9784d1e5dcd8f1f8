// Gradient clipping (torch.nn.utils.clip_grad_norm_ / clip_grad_value_). Parameters without a
// gradient are skipped.
#pragma once

#include <limits>
#include <vector>

#include "runtime/tensor.h"

namespace ember::optim {

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// Scales every gradient by min(1, max_norm / (total_norm + 1e-6)), where total_norm is the
// norm_type-norm of all gradients seen as one vector (norm_type = kInfNorm: the largest |g|).
// Returns total_norm from before the clipping, a 0-d tensor computed in f64 when any gradient is
// f64, else in f32 (f16/bf16 gradients too: PyTorch would return their own dtype). With
// error_if_nonfinite, a NaN or Inf total norm is an error (and no gradient is changed).
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every gradient element to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace ember::optim
