// Picks the kernel instantiation for a fused optimizer step: the gradient's element type, and the
// low-precision parameter the new master is written into (none for an f32 parameter).
#pragma once

#include "kernels/common/scalar_types.h"
#include "runtime/tensor.h"

namespace ember::optim {

// `fn.template operator()<Grad, Model>(const Grad* grad, Model* model)`; model is null (and Model
// is float) when there is no low-precision parameter.
template <typename Fn>
void dispatch_fused(const Tensor& grad, const Tensor& model, const char* op, Fn&& fn) {
  switch (grad.dtype()) {
    case DType::f32:
      EMBER_CHECK(!model.defined(), op, ": an f32 gradient for a low-precision parameter");
      return fn.template operator()<float, float>(grad.data<float>(), nullptr);
    case DType::f16:
      return fn.template operator()<Half, Half>(grad.data<Half>(), model.data<Half>());
    case DType::bf16:
      return fn.template operator()<BFloat16, BFloat16>(grad.data<BFloat16>(),
                                                        model.data<BFloat16>());
    default:
      EMBER_FAIL(op, ": the fused path takes f32, f16 or bf16 gradients, got ", describe(grad));
  }
}

// `fn.template operator()<Grad, Model>()` for a fused step on CUDA: Model is float (no
// low-precision parameter) for an f32 gradient, else the gradient's type.
template <typename Fn>
void dispatch_fused_cuda(DType grad_dtype, const char* op, Fn&& fn) {
  switch (grad_dtype) {
    case DType::f32:
      return fn.template operator()<float, float>();
    case DType::f16:
      return fn.template operator()<Half, Half>();
    case DType::bf16:
      return fn.template operator()<BFloat16, BFloat16>();
    default:
      EMBER_FAIL(op, ": the fused path takes f32, f16 or bf16 gradients, got ", grad_dtype);
  }
}

}  // namespace ember::optim
