// Elementwise ops: unary math, broadcasting binary arithmetic, comparisons, selection and in-place
// arithmetic (copies and conversions: runtime/ops/copy.h). All accept non-contiguous inputs.
#pragma once

#include <optional>

#include "kernels/common/op_kinds.h"
#include "runtime/tensor.h"

namespace ember {

// PyTorch's result_type: dims > 0 outrank 0-d tensors, which outrank bare numbers; a lower rank
// only changes the result when it brings a higher category (bool < integer < floating).
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, const Scalar& b);

// ---- unary: integer inputs give f32 results, except neg, abs and square ----
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
enum class GeluApproximation { none, tanh };  // erf form, or the tanh approximation
Tensor gelu(const Tensor& x, GeluApproximation approximation = GeluApproximation::none);
Tensor silu(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor log1p(const Tensor& x);  // log(1 + x), accurate for tiny x
Tensor expm1(const Tensor& x);  // exp(x) - 1, accurate for tiny x
// x > 0 ? x : negative_slope x, as torch.nn.functional.leaky_relu.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// log(1 + exp(beta x)) / beta, and x where beta x > threshold, as torch.nn.functional.softplus.
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor pow(const Tensor& x, const Scalar& exponent);
Tensor square(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor sign(const Tensor& x);  // gradient zero, as in PyTorch
// Bounds promote like numbers: an integer tensor with a floating bound gives f32, as in PyTorch.
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);

// ---- binary, broadcasting ----
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);  // a - alpha * b
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division: integers give f32
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Scalar& base, const Tensor& exponent);  // base ** exponent, as torch.pow(2, t)
Tensor maximum(const Tensor& a, const Tensor& b);        // NaN propagates
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Scalar& b);
Tensor sub(const Tensor& a, const Scalar& b);
Tensor sub(const Scalar& a, const Tensor& b);  // a - b
Tensor mul(const Tensor& a, const Scalar& b);
Tensor div(const Tensor& a, const Scalar& b);

// ---- comparisons: bool results ----
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Scalar& b);
Tensor ne(const Tensor& a, const Scalar& b);
Tensor lt(const Tensor& a, const Scalar& b);
Tensor le(const Tensor& a, const Scalar& b);
Tensor gt(const Tensor& a, const Scalar& b);
Tensor ge(const Tensor& a, const Scalar& b);
// True when a and b have the same shape and every |a - b| <= atol + rtol * |b| (NaN fails).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

// ---- selection ----
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);  // condition: bool
// A number in place of one side promotes like a number: where(c, int tensor, 0.5) is f32.
Tensor where(const Tensor& condition, const Tensor& a, const Scalar& b);
Tensor where(const Tensor& condition, const Scalar& a, const Tensor& b);
// Two numbers: the condition's shape and device, the dtype of the numbers promoted together
// (where(c, 1, 0) is i64, where(c, 1.0, 0) f32), as torch.where(c, 1.0, 0).
Tensor where(const Tensor& condition, const Scalar& a, const Scalar& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);  // mask: bool

// ---- in-place: self = op(self, other); bumps self's version ----
void binary_inplace(kernels::BinaryOp op, Tensor& self, const Tensor& other, const Scalar& alpha);
// self = op(self, number): add, sub, mul, div. The number meets self as a 0-d tensor of the
// result's dtype, except one that an f16/bf16 self cannot hold, kept in f32 as PyTorch does.
void binary_inplace(kernels::BinaryOp op, Tensor& self, const Scalar& other);

// ---- operators ----
inline Tensor operator-(const Tensor& x) {
  return neg(x);
}
inline Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
inline Tensor operator+(const Tensor& a, const Scalar& b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, const Scalar& b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, const Scalar& b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, const Scalar& b) {
  return div(a, b);
}
inline Tensor operator+(const Scalar& a, const Tensor& b) {
  return add(b, a);
}
inline Tensor operator-(const Scalar& a, const Tensor& b) {
  return sub(a, b);
}
inline Tensor operator*(const Scalar& a, const Tensor& b) {
  return mul(b, a);
}
Tensor operator/(const Scalar& a, const Tensor& b);
inline Tensor operator<(const Tensor& a, const Tensor& b) {
  return lt(a, b);
}
inline Tensor operator<=(const Tensor& a, const Tensor& b) {
  return le(a, b);
}
inline Tensor operator>(const Tensor& a, const Tensor& b) {
  return gt(a, b);
}
inline Tensor operator>=(const Tensor& a, const Tensor& b) {
  return ge(a, b);
}
inline Tensor operator<(const Tensor& a, const Scalar& b) {
  return lt(a, b);
}
inline Tensor operator<=(const Tensor& a, const Scalar& b) {
  return le(a, b);
}
inline Tensor operator>(const Tensor& a, const Scalar& b) {
  return gt(a, b);
}
inline Tensor operator>=(const Tensor& a, const Scalar& b) {
  return ge(a, b);
}

}  // namespace ember
