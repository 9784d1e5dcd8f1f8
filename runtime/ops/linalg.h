// Matrix products through OpenBLAS (f32, f64); f16 and bf16 compute with f32 accumulation.
#pragma once

#include "runtime/tensor.h"

namespace ember {

// torch.matmul: a (..., n, k) @ b (..., k, m) -> (..., n, m), batch dims broadcast; a 1-D
// operand is a vector (prepended / appended 1, removed from the result).
// Error: `matmul: shapes (4,3) and (5,2) cannot be multiplied (3 != 5)`.
Tensor matmul(const Tensor& a, const Tensor& b);
// a (B, n, k) @ b (B, k, m) -> (B, n, m); no broadcasting.
Tensor bmm(const Tensor& a, const Tensor& b);
// x (..., in) @ weight (out, in)^T + bias (out) -> (..., out). `bias` may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace ember
