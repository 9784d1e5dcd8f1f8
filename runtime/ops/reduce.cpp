// Reductions: planning, dispatch, autograd.
#include "runtime/ops/reduce.h"

#include <optional>

#include "kernels/cpu/reduce.h"
#include "runtime/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"
#include "runtime/ops/reduction_plan.h"

#if EMBER_WITH_CUDA
#include "kernels/cuda/batch_norm.h"
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
    const cuda::StreamOnDevice stream(x.device().index);
    if (plan.leading != 1) {
      // (leading, outer, reduce, 1), floating (plan_sum): per-channel sums of (N, C, H W), one
      // read on batch norm's plan (conv2d's bias gradient), in acc_t, then rounded once.
      NoGradGuard no_grad;
      dispatch_floating(x.dtype(), "sum", [&]<typename T>() {
        using Acc = acc_t<T>;
        const Tensor sums =
            empty({plan.outer},
                  TensorOptions(std::is_same_v<Acc, double> ? DType::f64 : DType::f32, x.device()));
        kernels::cuda::channel_sums<T>(static_cast<const T*>(plan.input.data_ptr()),
                                       static_cast<Acc*>(sums.data_ptr()), plan.leading, plan.outer,
                                       plan.reduce, stream);
        Tensor flat = out.reshape({plan.outer});
        flat.copy_(sums);
      });
      return out;
    }
    dispatch_all(x.dtype(), "sum", [&]<typename T>() {
      using Out = kernels::cpu::sum_output_t<T>;
      kernels::cuda::sum<T>(static_cast<const T*>(plan.input.data_ptr()),
                            static_cast<Out*>(out.data_ptr()), plan.outer, plan.reduce, plan.inner,
                            stream);
    });
#endif
    return out;
  }
  dispatch_all(x.dtype(), "sum", [&]<typename T>() {
    using Out = kernels::cpu::sum_output_t<T>;
    const T* in = static_cast<const T*>(plan.input.data_ptr());
    Out* result = static_cast<Out*>(out.data_ptr());
    if (plan.leading != 1) {  // 0 too: an empty leading dim leaves every sum 0
      kernels::cpu::sum_leading<T>(in, result, plan.leading, plan.outer, plan.reduce, plan.inner);
    } else {
      kernels::cpu::sum<T>(in, result, plan.outer, plan.reduce, plan.inner);
    }
  });
  return out;
}

// The CPU's sum takes a leading reduced dim (sum_leading), the GPU's where the last reduced run
// ends the shape, in a floating dtype (channel_sums); otherwise the plan copies.
ReductionPlan plan_sum(const Tensor& x, const Dims& dims, bool keepdim, const char* op) {
  ReductionPlan plan = plan_reduction(x, dims, keepdim, op, true);
  if (plan.leading != 1 && x.is_cuda() &&
      (plan.inner != 1 || !is_floating(x.dtype()) || x.numel() == 0))
    plan = plan_reduction(x, dims, keepdim, op, false);
  return plan;
}

// The reduced dims as a list (for the ops that backward calls).
Dims reduced_dims(const ReductionPlan& plan) {
  Dims dims;
  for (size_t d = 0; d < plan.reduced.size(); ++d) {
    if (plan.reduced[d]) dims.push_back(static_cast<int64_t>(d));
  }
  return dims;
}

void require_nonempty_reduction(const ReductionPlan& plan, const Tensor& x, const char* op) {
  EMBER_CHECK(plan.reduce > 0, op, ": cannot reduce over a dim of size 0 (input ", describe(x),
              "): the result would have no value; reduce over non-empty dims");
}

// amax / amin. Backward: the gradient goes to the elements equal to the result, split evenly.
Tensor extreme(const Tensor& x, const Dims& dims, bool keepdim, bool is_max) {
  const char* name = is_max ? "max" : "min";
  // bool: "any" / "all", on 0/1 bytes (PyTorch returns bool too).
  if (x.dtype() == DType::boolean)
    return extreme(x.to(DType::u8), dims, keepdim, is_max).to(DType::boolean);
  const ReductionPlan plan = plan_reduction(x, dims, keepdim, name);
  require_nonempty_reduction(plan, x, name);
  Tensor out = empty(plan.out_shape, TensorOptions(x.dtype(), x.device()));
  dispatch_numeric(x.dtype(), name, [&]<typename T>() {
    const T* in = static_cast<const T*>(plan.input.data_ptr());
    T* result = static_cast<T*>(out.data_ptr());
#if EMBER_WITH_CUDA
    if (x.is_cuda()) {
      const cuda::StreamOnDevice stream(x.device().index);
      if (is_max) {
        kernels::cuda::amax<T>(in, result, plan.outer, plan.reduce, plan.inner, stream);
      } else {
        kernels::cuda::amin<T>(in, result, plan.outer, plan.reduce, plan.inner, stream);
      }
      return;
    }
#endif
    if (is_max) {
      kernels::cpu::amax<T>(in, result, plan.outer, plan.reduce, plan.inner);
    } else {
      kernels::cpu::amin<T>(in, result, plan.outer, plan.reduce, plan.inner);
    }
  });
  if (any_requires_grad({&x})) {
    const Shape keep_shape = plan.keepdim_shape;
    const Dims reduced = reduced_dims(plan);
    // Without dims this is torch.max(x), whose gradient goes to the NaN elements when the result
    // is NaN; with dims, torch.amax(x, dims), which compares with == alone and so gives NaN
    // (0 winners, 0 / 0) to every element of such a slice. PyTorch's own two conventions.
    const bool nan_wins = dims.empty();
    record(is_max ? OpId::max : OpId::min, {x}, out, {x, out},
           [keep_shape, reduced, nan_wins](const Tensor& g,
                                           const std::vector<Tensor>& s) -> std::vector<Tensor> {
             const Tensor result = s[1].reshape(keep_shape);
             Tensor winners = eq(s[0], result).to(g.dtype());
             if (nan_wins)  // a NaN is never == anything: the two masks never overlap
               winners =
                   winners + (ne(s[0], s[0]).to(g.dtype()) * ne(result, result).to(g.dtype()));
             const Tensor share = winners / sum(winners, reduced, true);
             return {g.reshape(keep_shape) * share};
           });
  }
  return out;
}

Tensor arg_extreme(const Tensor& x, std::optional<int64_t> dim, bool keepdim, bool is_max) {
  const char* name = is_max ? "argmax" : "argmin";
  NoGradGuard no_grad;
  // Without a dim the index is into the flattened tensor.
  const Tensor source = dim ? x : x.reshape({x.numel()});
  const ReductionPlan plan = plan_reduction(source, {dim.value_or(0)}, keepdim && dim, name);
  require_nonempty_reduction(plan, x, name);
  Tensor out = empty(plan.out_shape, TensorOptions(DType::i64, x.device()));
  dispatch_numeric(x.dtype(), name, [&]<typename T>() {
    const T* in = static_cast<const T*>(plan.input.data_ptr());
    auto* result = static_cast<int64_t*>(out.data_ptr());
#if EMBER_WITH_CUDA
    if (x.is_cuda()) {
      const cuda::StreamOnDevice stream(x.device().index);
      if (is_max) {
        kernels::cuda::argmax<T>(in, result, plan.outer, plan.reduce, plan.inner, stream);
      } else {
        kernels::cuda::argmin<T>(in, result, plan.outer, plan.reduce, plan.inner, stream);
      }
      return;
    }
#endif
    if (is_max) {
      kernels::cpu::argmax<T>(in, result, plan.outer, plan.reduce, plan.inner);
    } else {
      kernels::cpu::argmin<T>(in, result, plan.outer, plan.reduce, plan.inner);
    }
  });
  if (!dim && keepdim) return out.reshape(Shape(static_cast<size_t>(x.dim()), 1));
  return out;
}

// The index from argmax / argmin, the value read back through gather: gather's backward sends
// the gradient to exactly that element.
ValuesAndIndices extreme_with_indices(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  if (x.dim() == 0) {  // a 0-d tensor is its own extreme, as in PyTorch (dim 0 or -1)
    EMBER_CHECK(dim == 0 || dim == -1, is_max ? "max" : "min", ": dim ", dim,
                " is out of range for a 0-d tensor (expected 0 or -1)");
    return {x.clone(), zeros({}, TensorOptions(DType::i64, x.device()))};
  }
  Tensor indices = arg_extreme(x, dim, true, is_max);  // (..., 1, ...)
  Tensor values = gather(x, dim, indices);
  if (!keepdim) {
    const int64_t d = dim < 0 ? dim + x.dim() : dim;
    values = values.squeeze(d);
    indices = indices.squeeze(d);
  }
  return {values, indices};
}

}  // namespace

Tensor sum(const Tensor& x_in, const Dims& dims, bool keepdim) {
  const Tensor x = autocast_fp32(x_in);
  const ReductionPlan plan = plan_sum(x, dims, keepdim, "sum");
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
  const ReductionPlan plan = plan_sum(x, dims, keepdim, "mean");
  const double count = static_cast<double>(reduced_count(plan));
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

Tensor max(const Tensor& x, const Dims& dims, bool keepdim) {
  return extreme(x, dims, keepdim, true);
}

Tensor min(const Tensor& x, const Dims& dims, bool keepdim) {
  return extreme(x, dims, keepdim, false);
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme(x, dim, keepdim, true);
}

Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme(x, dim, keepdim, false);
}

ValuesAndIndices max_with_indices(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_with_indices(x, dim, keepdim, true);
}

ValuesAndIndices min_with_indices(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_with_indices(x, dim, keepdim, false);
}

}  // namespace ember
