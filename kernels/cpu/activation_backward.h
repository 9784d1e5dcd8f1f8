// CPU fused activation backward: one pass over memory instead of a chain of elementwise ops.
#pragma once

#include "kernels/common/op_kinds.h"
#include "kernels/common/strided_layout.h"

namespace ember::kernels::cpu {

// grad_in = grad_out * f'(saved); operands {grad_in, grad_out, saved}, saved being the forward's
// input x or output y as ActivationGrad says. f64 computes on libm (the gradient-check
// precision); f16/bf16 compute in f32.
template <typename T>
void activation_backward(ActivationGrad op, const StridedLayout& layout, T* grad_in,
                         const T* grad_out, const T* saved);

}  // namespace ember::kernels::cpu
