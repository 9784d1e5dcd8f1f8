#include "optim/grad_clip.h"

#include <cmath>
#include <limits>

#include "runtime/ops.h"

namespace ember::optim {

namespace {

std::vector<Tensor> defined_grads(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& param : params) {
    const Tensor grad = param.grad();
    if (grad.defined()) grads.push_back(grad);
  }
  return grads;
}

// f64 when any gradient is f64, else f32: a 16-bit gradient's squares would overflow in 16 bits
// (PyTorch sums them in f32 too, inside its norm kernel), and f64 gradients keep their precision.
DType norm_dtype(const std::vector<Tensor>& grads) {
  for (const Tensor& grad : grads)
    if (grad.dtype() == DType::f64) return DType::f64;
  return DType::f32;
}

// The norm_type-norm of all gradients seen as one vector, as a 0-d tensor of `dtype`:
// sum_i ||g_i||_p^p in `dtype`, then the p-th root.
Tensor total_grad_norm(const std::vector<Tensor>& grads, double norm_type, DType dtype) {
  if (std::isinf(norm_type)) {
    // max |g| over every element; NaN propagates, as torch.max does. Exact in any dtype.
    double largest = 0.0;
    for (const Tensor& grad : grads)
      for (double value : to_vector<double>(grad)) {
        const double magnitude = std::abs(value);
        if (std::isnan(magnitude) || std::isnan(largest)) {
          largest = std::numeric_limits<double>::quiet_NaN();
        } else if (magnitude > largest) {
          largest = magnitude;
        }
      }
    return scalar_tensor(largest, dtype);
  }
  // On the gradients' device: a host 0-d tensor meeting a CUDA one is copied there, and a host to
  // device copy waits for the GPU.
  Tensor total = scalar_tensor(0.0, TensorOptions(dtype, grads.front().device()));
  for (const Tensor& grad : grads) {
    const Tensor magnitude = abs(grad.to(dtype));
    const Tensor powered = norm_type == 1.0   ? magnitude
                           : norm_type == 2.0 ? square(magnitude)
                                              : pow(magnitude, norm_type);
    total = add(total, sum(powered));
  }
  if (norm_type == 1.0) return total;
  if (norm_type == 2.0) return sqrt(total);
  return pow(total, 1.0 / norm_type);
}

}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  NoGradGuard no_grad;
  EMBER_CHECK(norm_type > 0.0, "clip_grad_norm_: norm_type must be positive (or inf), got ",
              norm_type);
  std::vector<Tensor> grads = defined_grads(params);
  if (grads.empty()) return scalar_tensor(0.0, DType::f32);
  const Tensor total_norm = total_grad_norm(grads, norm_type, norm_dtype(grads));
  if (error_if_nonfinite) {
    const double value = total_norm.item_double();
    EMBER_CHECK(std::isfinite(value), "clip_grad_norm_: the total norm of order ", norm_type,
                " of the gradients is non-finite (", value,
                "), so it cannot be clipped; pass error_if_nonfinite = false to clip anyway");
  }
  // Always multiplied (by a coefficient clamped to 1), as PyTorch does, so that the result does
  // not depend on a host-side comparison.
  const Tensor clip_coef =
      div(scalar_tensor(max_norm, TensorOptions(total_norm.dtype(), total_norm.device())),
          add(total_norm, 1e-6));
  const Tensor clamped = clamp(clip_coef, std::nullopt, 1.0);
  for (Tensor& grad : grads)
    grad.mul_(clamped);
  return total_norm;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  NoGradGuard no_grad;
  for (Tensor& grad : defined_grads(params))
    grad.copy_(clamp(grad, -clip_value, clip_value));
}

}  // namespace ember::optim
