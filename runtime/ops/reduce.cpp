// Reductions: planning, dispatch, autograd.
#include "runtime/ops/reduce.h"

#include "kernels/cpu/reduce.h"
#include "runtime/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"
#include "runtime/ops/reduction_plan.h"

#if EMBER_WITH_CUDA
#include "kernels/cuda/reduce.h"
#include "runtime/cuda/stream.h"
#endif

namespace ember {
namespace {

// The sum over the plan, without autograd.
Tensor sum_kernel(const ReductionPlan& plan, const Tensor& x) {
  const DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::i64;
  Tensor out = empty(plan.out_shape, TensorOptions(out_dtype, x.device()));
  if (x.is_cuda()) {
#if EMBER_WITH_CUDA
    dispatch_all(x.dtype(), "sum", [&]<typename T>() {
      using Out = kernels::cpu::sum_output_t<T>;
      kernels::cuda::sum<T>(static_cast<const T*>(plan.input.data_ptr()),
                            static_cast<Out*>(out.data_ptr()), plan.outer, plan.reduce, plan.inner,
                            cuda::current_stream(x.device().index));
    });
#endif
    return out;
  }
  dispatch_all(x.dtype(), "sum", [&]<typename T>() {
    using Out = kernels::cpu::sum_output_t<T>;
    kernels::cpu::sum<T>(static_cast<const T*>(plan.input.data_ptr()),
                         static_cast<Out*>(out.data_ptr()), plan.outer, plan.reduce, plan.inner);
  });
  return out;
}

}  // namespace

Tensor sum(const Tensor& x_in, const Dims& dims, bool keepdim) {
  const Tensor x = autocast_fp32(x_in);
  const ReductionPlan plan = plan_reduction(x, dims, keepdim, "sum");
  Tensor out = sum_kernel(plan, x);
  if (any_requires_grad({&x})) {
    Shape in_shape = x.sizes(), keep_shape = plan.keepdim_shape;
    record(
        OpId::sum, {x}, out, {},
        [in_shape, keep_shape](const Tensor& g, const std::vector<Tensor>&) -> std::vector<Tensor> {
          return {g.reshape(keep_shape).expand(in_shape)};
        });
  }
  return out;
}

Tensor mean(const Tensor& x, const Dims& dims, bool keepdim) {
  EMBER_CHECK(is_floating(x.dtype()), "mean: expected a floating-point tensor, got ", describe(x),
              " (convert it with to(DType::f32) first)");
  const ReductionPlan plan = plan_reduction(x, dims, keepdim, "mean");
  const double count = static_cast<double>(plan.reduce);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = sum_kernel(plan, x);
    out.mul_(1.0 / count);
  }
  if (any_requires_grad({&x})) {
    Shape in_shape = x.sizes(), keep_shape = plan.keepdim_shape;
    record(OpId::mean, {x}, out, {},
           [in_shape, keep_shape, count](const Tensor& g,
                                         const std::vector<Tensor>&) -> std::vector<Tensor> {
             return {(g * (1.0 / count)).reshape(keep_shape).expand(in_shape)};
           });
  }
  return out;
}

}  // namespace ember
