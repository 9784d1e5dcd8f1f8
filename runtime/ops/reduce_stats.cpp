// Statistical reductions: variance, standard deviation, logsumexp, p-norms.
#include <cmath>
#include <optional>

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

Dims reduced_dims(const ReductionPlan& plan) {
  Dims dims;
  for (size_t d = 0; d < plan.reduced.size(); ++d) {
    if (plan.reduced[d]) dims.push_back(static_cast<int64_t>(d));
  }
  return dims;
}

// The checks every statistic shares: a floating-point tensor.
void check_statistic_input(const Tensor& x, const char* op) {
  EMBER_CHECK(is_floating(x.dtype()), op, ": expected a floating-point tensor, got ", describe(x),
              " (convert it with to(DType::f32) first)");
}

#if EMBER_WITH_CUDA
using Stream = cudaStream_t;
#else
using Stream = void*;  // never used: there are no CUDA tensors without CUDA
#endif

// Plans `op` over dims, allocates the result and runs `kernel(T* in, T* out, stream)` on it;
// stream is null for a CPU tensor, the device's current stream for a CUDA one.
template <typename Kernel>
Tensor run_statistic(const ReductionPlan& plan, const Tensor& x, const char* op, Kernel kernel) {
  Tensor out = empty(plan.out_shape, TensorOptions(x.dtype(), x.device()));
  Stream stream = nullptr;
#if EMBER_WITH_CUDA
  std::optional<cuda::StreamOnDevice> on_device;  // x's device current while the kernel runs
  if (x.is_cuda()) {
    on_device.emplace(x.device().index);
    stream = on_device->get();
  }
#endif
  dispatch_floating(x.dtype(), op, [&]<typename T>() {
    kernel.template operator()<T>(static_cast<const T*>(plan.input.data_ptr()),
                                  static_cast<T*>(out.data_ptr()), stream);
  });
  return out;
}

}  // namespace

namespace {

// var, and the gradient of either var or std = sqrt(var) (`is_std`) recorded on the result.
Tensor variance_or_deviation(const Tensor& x, const Dims& dims, int64_t correction, bool keepdim,
                             bool is_std) {
  const char* name = is_std ? "std" : "var";
  check_statistic_input(x, name);
  EMBER_CHECK(correction >= 0, name, ": correction must be >= 0, got ", correction);
  const ReductionPlan plan = plan_reduction(x, dims, keepdim, name);
  Tensor out = run_statistic(
      plan, x, name, [&]<typename T>(const T* in, T* result, [[maybe_unused]] Stream stream) {
#if EMBER_WITH_CUDA
        if (x.is_cuda()) {
          kernels::cuda::variance<T>(in, result, plan.outer, plan.reduce, plan.inner, correction,
                                     stream);
          return;
        }
#endif
        kernels::cpu::variance<T>(in, result, plan.outer, plan.reduce, plan.inner, correction);
      });
  if (is_std) {
    NoGradGuard no_grad;
    out = sqrt(out);
  }
  if (any_requires_grad({&x})) {
    // d var / dx = 2 (x - mean) / (n - correction); d std / d var = 1 / (2 std), taken as 0
    // where std is 0 (a constant row), as PyTorch's std_backward does: not inf * 0 = NaN.
    const Shape keep_shape = plan.keepdim_shape;
    const Dims reduced = reduced_dims(plan);
    const double divisor = static_cast<double>(std::max<int64_t>(0, plan.reduce - correction));
    // std's node saves its result too; var's does not, so that var's result may still be
    // changed in place before backward (as in PyTorch).
    std::vector<Tensor> saved = {x};
    if (is_std) saved.push_back(out);
    record(is_std ? OpId::std : OpId::var, {x}, out, saved,
           [keep_shape, reduced, divisor, is_std](
               const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             Tensor g_var = g.reshape(keep_shape);
             if (is_std) {
               const Tensor deviation = s[1].reshape(keep_shape);
               g_var = where(eq(deviation, 0), zeros_like(g_var), g_var / (2.0 * deviation));
             }
             const Tensor centred = s[0] - mean(s[0], reduced, true);
             return {g_var * centred * (2.0 / divisor)};
           });
  }
  return out;
}

}  // namespace

Tensor var(const Tensor& x, const Dims& dims, int64_t correction, bool keepdim) {
  return variance_or_deviation(x, dims, correction, keepdim, false);
}

Tensor std(const Tensor& x, const Dims& dims, int64_t correction, bool keepdim) {
  return variance_or_deviation(x, dims, correction, keepdim, true);
}

Tensor logsumexp(const Tensor& x_in, const Dims& dims, bool keepdim) {
  const Tensor x = autocast_fp32(x_in);
  check_statistic_input(x, "logsumexp");
  const ReductionPlan plan = plan_reduction(x, dims, keepdim, "logsumexp");
  Tensor out = run_statistic(
      plan, x, "logsumexp",
      [&]<typename T>(const T* in, T* result, [[maybe_unused]] Stream stream) {
#if EMBER_WITH_CUDA
        if (x.is_cuda()) {
          kernels::cuda::logsumexp<T>(in, result, plan.outer, plan.reduce, plan.inner, stream);
          return;
        }
#endif
        kernels::cpu::logsumexp<T>(in, result, plan.outer, plan.reduce, plan.inner);
      });
  if (any_requires_grad({&x})) {
    // d/dx = softmax(x) = exp(x - logsumexp(x))
    const Shape keep_shape = plan.keepdim_shape;
    record(OpId::logsumexp, {x}, out, {x, out},
           [keep_shape](const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             return {g.reshape(keep_shape) * exp(s[0] - s[1].reshape(keep_shape))};
           });
  }
  return out;
}

Tensor norm(const Tensor& x_in, double p, const Dims& dims, bool keepdim) {
  const Tensor x = autocast_fp32(x_in);
  check_statistic_input(x, "norm");
  EMBER_CHECK(!std::isnan(p), "norm: p must be a number, got NaN");
  const ReductionPlan plan = plan_reduction(x, dims, keepdim, "norm");
  Tensor out = run_statistic(
      plan, x, "norm", [&]<typename T>(const T* in, T* result, [[maybe_unused]] Stream stream) {
#if EMBER_WITH_CUDA
        if (x.is_cuda()) {
          kernels::cuda::norm<T>(in, result, plan.outer, plan.reduce, plan.inner, p, stream);
          return;
        }
#endif
        kernels::cpu::norm<T>(in, result, plan.outer, plan.reduce, plan.inner, p);
      });
  if (any_requires_grad({&x})) {
    const Shape keep_shape = plan.keepdim_shape;
    const Dims reduced = reduced_dims(plan);
    record(OpId::norm, {x}, out, {x, out},
           [keep_shape, reduced, p](const Tensor& g,
                                    const std::vector<Tensor>& s) -> std::vector<Tensor> {
             const Tensor& in = s[0];
             const Tensor g_keep = g.reshape(keep_shape);
             const Tensor y = s[1].reshape(keep_shape);
             if (p == 0) return {zeros_like(in) * g_keep};
             if (p == 1) return {g_keep * sign(in)};
             if (std::isinf(p)) {
               // Like max |x|: the elements that reach it share the gradient evenly.
               const Tensor winners = eq(abs(in), y).to(g.dtype());
               return {g_keep * sign(in) * winners / sum(winners, reduced, true)};
             }
             // d/dx (sum |x|^p)^(1/p) = sign(x) |x|^(p-1) / y^(p-1); a zero norm has zero
             // gradient (every x is 0 there, so dividing by 1 instead gives it).
             const Tensor safe_y = where(eq(y, 0.0), ones_like(y), y);
             if (p == 2) return {g_keep * in / safe_y};
             return {g_keep * sign(in) * pow(abs(in), p - 1) / pow(safe_y, p - 1)};
           });
  }
  return out;
}

}  // namespace ember
