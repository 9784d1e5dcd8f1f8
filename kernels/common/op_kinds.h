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
};

enum class BinaryOp {
  add,  // a + alpha * b
  sub,  // a - alpha * b
  mul,
  div,
  pow,
  maximum,
  minimum,
};

enum class CompareOp { eq, ne, lt, le, gt, ge };

}  // namespace ember::kernels
