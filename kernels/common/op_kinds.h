// The op families shared by the CPU and CUDA kernels, so both backends name them alike.
#pragma once

namespace ember::kernels {

enum class UnaryOp {
  neg,
  abs,
  exp,
  log,
  sqrt,
  rsqrt,
  sin,
  cos,
  tanh,
  sigmoid,
  relu,
  gelu_erf,
  gelu_tanh,
  silu,
  pow_scalar,  // x^p, p passed as the kernel's scalar
  sign,
  reciprocal,
  square,
  erf,
  log1p,       // log(1 + x), accurate for tiny x
  expm1,       // exp(x) - 1, accurate for tiny x
  leaky_relu,  // x > 0 ? x : slope x, the slope passed as the kernel's scalar
};

enum class BinaryOp {
  add,  // a + alpha * b
  sub,  // a - alpha * b
  mul,
  div,  // a / (alpha * b): alpha is 1 but for a number kept in f32 (b then 1), x / s
  pow,
  maximum,
  minimum,
};

enum class CompareOp { eq, ne, lt, le, gt, ge };

// The fused backward of an activation: grad_in = grad_out * f'(...), from the tensor the forward
// saved (its input x or its output y).
enum class ActivationGrad {
  relu,       // from y: 0 where y <= 0, else grad_out (NaN y passes it on, as in PyTorch)
  gelu_erf,   // from x
  gelu_tanh,  // from x
  silu,       // from x
  sigmoid,    // from y: y (1 - y)
  tanh,       // from y: 1 - y^2
};

}  // namespace ember::kernels
