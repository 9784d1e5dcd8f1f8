// CUDA fused activation backward: the same ops and semantics as kernels/cpu/activation_backward.h,
// one pass over memory instead of the chain of elementwise kernels the ember-op formula launches.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/common/op_kinds.h"
#include "kernels/common/strided_layout.h"

namespace ember::kernels::cuda {

// grad_in = grad_out * f'(saved); operands {grad_in, grad_out, saved} (all the same shape),
// saved being the forward's input x or output y as ActivationGrad says. f16/bf16 compute in f32,
// f64 in f64. grad_in may alias grad_out or saved.
template <typename T>
void activation_backward(ActivationGrad op, const StridedLayout& layout, T* grad_in,
                         const T* grad_out, const T* saved, cudaStream_t stream);

}  // namespace ember::kernels::cuda
