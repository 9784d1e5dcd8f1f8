// Autocast: a thread-local mixed-precision region, as torch.autocast.
//
//   { AutocastGuard autocast(DType::bf16);  logits = model(x); }   // matmuls in bf16
//
// Ops call one of the three helpers on their floating-point inputs at entry, following PyTorch's
// op lists:
//   - lower precision (matmul, mm, bmm, linear, conv2d): f32 inputs run in the autocast dtype;
//   - f32 (softmax, log_softmax, layer_norm, the losses, exp, log, pow, rsqrt, reciprocal, sum,
//     logsumexp, norm): f16/bf16 inputs run in f32;
//   - promote (cat, stack, where): mixed inputs run in the widest floating dtype among them.
// f64 tensors and non-floating tensors are never cast. Outside a region the helpers do nothing.
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace ember {

bool autocast_enabled();
DType autocast_dtype();  // f16 or bf16

class AutocastGuard {
 public:
  // `dtype` must be f16 or bf16. `enabled = false` switches autocast off inside the region.
  explicit AutocastGuard(DType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool previous_enabled_;
  DType previous_dtype_;
};

// Inside a region: f32/f16/bf16 -> the autocast dtype. Differentiable (the cast is recorded).
Tensor autocast_lower(const Tensor& t);
// Inside a region: f16/bf16 -> f32.
Tensor autocast_fp32(const Tensor& t);
// Inside a region: all floating inputs -> the widest floating dtype among them.
std::vector<Tensor> autocast_promote(const std::vector<Tensor>& tensors);

}  // namespace ember
