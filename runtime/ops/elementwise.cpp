// Elementwise ops: checks, type promotion, dispatch to the device's kernel, autograd.
#include "runtime/ops/elementwise.h"

#include <cmath>

#include "kernels/common/convert.h"
#include "kernels/cpu/activation_backward.h"
#include "kernels/cpu/elementwise.h"
#include "runtime/autocast.h"
#include "runtime/autograd/engine.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"
#include "runtime/ops/layout.h"

#if EMBER_WITH_CUDA
#include "kernels/cuda/activation_backward.h"
#include "kernels/cuda/elementwise.h"
#include "runtime/cuda/stream.h"
#endif

namespace ember {

using kernels::ActivationGrad;
using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::UnaryOp;

namespace {

enum class Category { boolean = 0, integer = 1, floating = 2 };

Category category_of(DType d) {
  if (d == DType::boolean) return Category::boolean;
  return is_floating(d) ? Category::floating : Category::integer;
}

// PyTorch's combine_categories: `higher` has the higher priority (more dims).
DType combine(DType higher, DType lower) {
  if (category_of(higher) >= category_of(lower)) return higher;
  // The lower-priority operand brings a higher category: it decides the category, and within a
  // floating category keeps its own dtype (an i64 tensor plus an f16 0-d tensor is f16).
  if (category_of(lower) == Category::floating) return lower;
  return promote_types(higher, lower);
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  EMBER_CHECK(a.device() == b.device(), op, ": expected all tensors on the same device, got ",
              describe(a), " and ", describe(b));
}

// A 0-d CPU tensor may meet a tensor on another device (like a Python number): move it there.
Tensor on_device_of(const Tensor& x, const Tensor& reference) {
  if (x.device() != reference.device() && x.dim() == 0 && x.is_cpu())
    return x.to(reference.device());
  return x;
}

void launch_binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha,
                   const char* name) {
  const kernels::StridedLayout layout = make_layout(out, {&a, &b}, name);
  if (out.is_cuda()) {
#if EMBER_WITH_CUDA
    dispatch_numeric(out.dtype(), name, [&]<typename T>() {
      kernels::cuda::binary<T>(
          op, layout, static_cast<T*>(out.data_ptr()), static_cast<const T*>(a.data_ptr()),
          static_cast<const T*>(b.data_ptr()), alpha, cuda::StreamOnDevice(out.device().index));
    });
    return;
#endif
  }
  dispatch_numeric(out.dtype(), name, [&]<typename T>() {
    kernels::cpu::binary<T>(op, layout, static_cast<T*>(out.data_ptr()),
                            static_cast<const T*>(a.data_ptr()),
                            static_cast<const T*>(b.data_ptr()), alpha);
  });
}

void launch_unary(UnaryOp op, const Tensor& out, const Tensor& in, double scalar,
                  const char* name) {
  const kernels::StridedLayout layout = make_layout(out, {&in}, name);
  if (out.is_cuda()) {
#if EMBER_WITH_CUDA
    dispatch_numeric(out.dtype(), name, [&]<typename T>() {
      kernels::cuda::unary<T>(op, layout, static_cast<T*>(out.data_ptr()),
                              static_cast<const T*>(in.data_ptr()), scalar,
                              cuda::StreamOnDevice(out.device().index));
    });
    return;
#endif
  }
  dispatch_numeric(out.dtype(), name, [&]<typename T>() {
    kernels::cpu::unary<T>(op, layout, static_cast<T*>(out.data_ptr()),
                           static_cast<const T*>(in.data_ptr()), scalar);
  });
}

const char* unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg:
      return "neg";
    case UnaryOp::abs:
      return "abs";
    case UnaryOp::exp:
      return "exp";
    case UnaryOp::log:
      return "log";
    case UnaryOp::sqrt:
      return "sqrt";
    case UnaryOp::rsqrt:
      return "rsqrt";
    case UnaryOp::sin:
      return "sin";
    case UnaryOp::cos:
      return "cos";
    case UnaryOp::tanh:
      return "tanh";
    case UnaryOp::sigmoid:
      return "sigmoid";
    case UnaryOp::relu:
      return "relu";
    case UnaryOp::gelu_erf:
      return "gelu";
    case UnaryOp::gelu_tanh:
      return "gelu";
    case UnaryOp::silu:
      return "silu";
    case UnaryOp::pow_scalar:
      return "pow";
    case UnaryOp::sign:
      return "sign";
    case UnaryOp::reciprocal:
      return "reciprocal";
    case UnaryOp::square:
      return "square";
    case UnaryOp::erf:
      return "erf";
    case UnaryOp::log1p:
      return "log1p";
    case UnaryOp::expm1:
      return "expm1";
    case UnaryOp::leaky_relu:
      return "leaky_relu";
  }
  return "?";
}

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return "add";
    case BinaryOp::sub:
      return "sub";
    case BinaryOp::mul:
      return "mul";
    case BinaryOp::div:
      return "div";
    case BinaryOp::pow:
      return "pow";
    case BinaryOp::maximum:
      return "maximum";
    case BinaryOp::minimum:
      return "minimum";
  }
  return "?";
}

OpId binary_op_id(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return OpId::add;
    case BinaryOp::sub:
      return OpId::sub;
    case BinaryOp::mul:
      return OpId::mul;
    case BinaryOp::div:
      return OpId::div;
    case BinaryOp::pow:
      return OpId::pow;
    case BinaryOp::maximum:
      return OpId::maximum;
    case BinaryOp::minimum:
      return OpId::minimum;
  }
  return OpId::add;
}

// Which inputs of a binary op take a gradient: `x * 0.5` or `x * mask` needs none for the
// constant, and computing it would cost a full-size product (and, for a broadcast constant, a
// reduction back to its shape) that the engine then drops.
struct NeedsGrad {
  bool a = true;
  bool b = true;
};

// Gradients of a binary op at (a, b) with output `out`, for the cotangent g; undefined for an
// input that needs none. Shapes are the broadcast shape: the engine sums them back to each
// input's shape.
std::vector<Tensor> binary_backward(BinaryOp op, const Tensor& g, const Tensor& a, const Tensor& b,
                                    const Tensor& out, double alpha, NeedsGrad needs) {
  auto only = [&](auto grad_a, auto grad_b) -> std::vector<Tensor> {
    return {needs.a ? grad_a() : Tensor(), needs.b ? grad_b() : Tensor()};
  };
  switch (op) {
    case BinaryOp::add:
      return only([&] { return g; }, [&] { return alpha == 1.0 ? g : g * alpha; });
    case BinaryOp::sub:
      return only([&] { return g; }, [&] { return g * (-alpha); });
    case BinaryOp::mul:
      return only([&] { return g * b; }, [&] { return g * a; });
    case BinaryOp::div:  // out = a / (alpha b)
      return only([&] { return alpha == 1.0 ? g / b : g / b / alpha; },
                  [&] { return -g * out / b; });
    case BinaryOp::pow:
      // d/da = b a^(b-1), taken as 0 where b == 0 (0^0 would give 0 * inf); d/db = out ln(a),
      // taken as 0 where a == 0 and b >= 0 (0^-1 keeps inf * -inf = -inf). PyTorch's
      // pow_backward_self and pow_backward_exponent.
      return only(
          [&] {
            const Tensor grad = g * b * pow(a, sub(b, 1));
            return where(eq(b, 0), zeros_like(grad), grad);
          },
          [&] {
            const Tensor grad = g * out * log(a);
            return where(eq(a, 0), where(ge(b, 0), zeros_like(grad), grad), grad);
          });
    case BinaryOp::maximum:
    case BinaryOp::minimum: {
      // The larger (smaller) input takes the gradient; ties split it evenly; an input that
      // loses to the other gets 0. PyTorch's formula: where(a == b, g / 2, g), with 0 where a
      // loses. With a NaN nothing compares true, so both inputs take all of g.
      const bool is_max = op == BinaryOp::maximum;
      const Tensor kept = where(eq(a, b), g * 0.5, g);  // masks and g: the broadcast shape
      const auto unless = [&](const Tensor& loses) { return where(loses, zeros_like(kept), kept); };
      return only([&] { return unless(is_max ? lt(a, b) : gt(a, b)); },
                  [&] { return unless(is_max ? gt(a, b) : lt(a, b)); });
    }
  }
  return {};
}

Tensor binary_op(BinaryOp op, const Tensor& a_in, const Tensor& b_in, const Scalar& alpha) {
  const char* name = binary_name(op);
  const Tensor a = on_device_of(a_in, b_in);
  const Tensor b = on_device_of(b_in, a_in);
  check_same_device(a, b, name);
  EMBER_CHECK(op != BinaryOp::sub || (a.dtype() != DType::boolean && b.dtype() != DType::boolean),
              "sub: subtraction with a bool tensor is not supported (", describe(a), ", ",
              describe(b),
              "); to invert a mask use eq(mask, false), as PyTorch's ~ or logical_not");
  DType dtype = result_type(a, b);
  if (op == BinaryOp::div && !is_floating(dtype)) dtype = DType::f32;
  if (dtype == DType::boolean) {
    // PyTorch's bool arithmetic: add and maximum are "or", mul and minimum "and" (computed on
    // 0/1 bytes, then any non-zero is true). pow has no bool form.
    EMBER_CHECK(op != BinaryOp::pow, name, ": not supported for two bool tensors (", describe(a),
                ", ", describe(b), "); convert them to an integer dtype first");
    return binary_op(op, a.to(DType::u8), b.to(DType::u8), alpha).to(DType::boolean);
  }
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  const Tensor ca = a.to(dtype), cb = b.to(dtype);
  Tensor out = empty(shape, TensorOptions(dtype, a.device()));
  {
    NoGradGuard no_grad;
    launch_binary(op, out, ca, cb, alpha.to_double(), name);
  }
  if (any_requires_grad({&ca, &cb})) {
    const double alpha_value = alpha.to_double();
    const bool needs_inputs = op != BinaryOp::add && op != BinaryOp::sub;
    const bool needs_out = op == BinaryOp::div || op == BinaryOp::pow;
    const NeedsGrad needs{ca.requires_grad(), cb.requires_grad()};
    std::vector<Tensor> saved;
    if (needs_inputs) saved = {ca, cb};
    if (needs_out) saved.push_back(out);
    record(binary_op_id(op), {ca, cb}, out, saved,
           [op, alpha_value, needs_inputs, needs_out, needs](
               const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             const Tensor none;
             return binary_backward(op, g, needs_inputs ? s[0] : none, needs_inputs ? s[1] : none,
                                    needs_out ? s[2] : none, alpha_value, needs);
           });
  }
  return out;
}

// A bare number as a 0-d tensor of the dtype it meets `x` with.
Tensor wrap_scalar(const Tensor& x, const Scalar& s) {
  return scalar_tensor(s, TensorOptions(result_type(x, s), x.device()));
}

// Whether `x * s` or `x / s` must keep the number out of x's dtype: x is f16 or bf16, the result
// is of its dtype, and the number is not one of its values (0.1, 1/3, 257 in bf16). PyTorch's mul
// and div kernels read such a number in f32 (its opmath type, `original_scalar_value`), where a
// 0-d tensor of x's dtype would round it first: x * (1/3) in bf16 multiplied by 0.333984375, 0.2%
// too much, before rounding again. Such numbers go to the kernels as their f32 `alpha` instead
// (kernels compute 16-bit types in f32). (PyTorch's add and sub read the number in the tensor's
// dtype, bf16 + 0.3 adding 0.30078125; ember's do too.)
bool keeps_number_in_f32(const Tensor& x, const Scalar& s) {
  if (x.dtype() != DType::f16 && x.dtype() != DType::bf16) return false;
  if (s.kind() == Scalar::Kind::boolean || result_type(x, s) != x.dtype()) return false;
  const double value = s.to_double();
  if (std::isnan(value)) return false;  // a NaN is a NaN in every dtype
  const float as_f32 = static_cast<float>(value);
  const double held = x.dtype() == DType::f16
                          ? static_cast<double>(convert<float>(Half(as_f32)))
                          : static_cast<double>(convert<float>(BFloat16(as_f32)));
  return held != value;
}

// A 0-d tensor of x's dtype and device holding v (exact: -0 and 1 are values of every dtype).
Tensor exact_constant(const Tensor& x, double v) {
  return scalar_tensor(v, TensorOptions(x.dtype(), x.device()));
}

// Integer inputs to a floating-point function compute in f32.
Tensor floating_input(const Tensor& x) {
  return is_floating(x.dtype()) ? x : x.to(DType::f32);
}

// g * f'(saved) in one fused kernel pass (CPU or CUDA), or an undefined tensor where the caller
// must build it from ember ops (mixed devices, a dtype or shape mismatch, or grad mode on). The
// engine runs every backward formula under NoGradGuard (runtime/autograd/engine.cpp: no
// higher-order gradients), so the fused path is the one taken there; a formula evaluated with grad
// mode on would need a differentiable result, which the kernel does not record.
Tensor fused_activation_grad(ActivationGrad op, const Tensor& g, const Tensor& saved) {
  if (grad_enabled() || g.device() != saved.device() || g.dtype() != saved.dtype() ||
      !is_floating(g.dtype()) || g.sizes() != saved.sizes())
    return Tensor();
#if !EMBER_WITH_CUDA
  if (!g.is_cpu()) return Tensor();
#endif
  Tensor grad_in = empty(saved.sizes(), TensorOptions(saved.dtype(), saved.device()));
  const kernels::StridedLayout layout = make_layout(grad_in, {&g, &saved}, "activation backward");
  if (g.is_cuda()) {
#if EMBER_WITH_CUDA
    dispatch_floating(g.dtype(), "activation backward", [&]<typename T>() {
      kernels::cuda::activation_backward<T>(
          op, layout, static_cast<T*>(grad_in.data_ptr()), static_cast<const T*>(g.data_ptr()),
          static_cast<const T*>(saved.data_ptr()), cuda::StreamOnDevice(g.device().index));
    });
    return grad_in;
#endif
  }
  dispatch_floating(g.dtype(), "activation backward", [&]<typename T>() {
    kernels::cpu::activation_backward<T>(op, layout, static_cast<T*>(grad_in.data_ptr()),
                                         static_cast<const T*>(g.data_ptr()),
                                         static_cast<const T*>(saved.data_ptr()));
  });
  return grad_in;
}

Tensor unary_op(
    UnaryOp op, OpId id, const Tensor& x_in, double scalar, bool keep_integers, bool save_input,
    bool save_output,
    std::function<Tensor(const Tensor& g, const Tensor& x, const Tensor& y)> derivative) {
  const char* name = unary_name(op);
  (void)id;
  const Tensor x = keep_integers ? x_in : floating_input(x_in);
  EMBER_CHECK(x.dtype() != DType::boolean, name, ": not supported for bool tensors");
  Tensor out = empty(x.sizes(), TensorOptions(x.dtype(), x.device()));
  launch_unary(op, out, x, scalar, name);
  if (derivative && any_requires_grad({&x})) {
    std::vector<Tensor> saved;
    if (save_input) saved.push_back(x);
    if (save_output) saved.push_back(out);
    record(id, {x}, out, saved,
           [derivative, save_input, save_output](
               const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             const Tensor none;
             const Tensor& xs = save_input ? s[0] : none;
             const Tensor& ys = save_output ? s[save_input ? 1 : 0] : none;
             return {derivative(g, xs, ys)};
           });
  }
  return out;
}

Tensor compare_op(CompareOp op, const Tensor& a_in, const Tensor& b_in, const char* name) {
  const Tensor a = on_device_of(a_in, b_in);
  const Tensor b = on_device_of(b_in, a_in);
  check_same_device(a, b, name);
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  NoGradGuard no_grad;
  // bool compares as u8 (false < true), on every device: the kernels have no bool instances.
  const DType promoted = result_type(a, b);
  const DType dtype = promoted == DType::boolean ? DType::u8 : promoted;
  const Tensor ca = a.to(dtype), cb = b.to(dtype);
  Tensor out = empty(shape, TensorOptions(DType::boolean, a.device()));
  const kernels::StridedLayout layout = make_layout(out, {&ca, &cb}, name);
  dispatch_all(dtype, name, [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      EMBER_FAIL(name, ": internal error: bool operands reached the kernels");  // mapped to u8
    } else if (out.is_cuda()) {
#if EMBER_WITH_CUDA
      kernels::cuda::compare<T>(op, layout, out.data<bool>(), static_cast<const T*>(ca.data_ptr()),
                                static_cast<const T*>(cb.data_ptr()),
                                cuda::StreamOnDevice(out.device().index));
#else
      EMBER_FAIL(name, ": this build of ember has no CUDA support, but got ", describe(out));
#endif
    } else {
      kernels::cpu::compare<T>(op, layout, out.data<bool>(), static_cast<const T*>(ca.data_ptr()),
                               static_cast<const T*>(cb.data_ptr()));
    }
  });
  return out;
}

}  // namespace

// ---- type promotion ----------------------------------------------------------------------------

DType result_type(const Tensor& a, const Tensor& b) {
  const bool a_dims = a.dim() > 0, b_dims = b.dim() > 0;
  if (a_dims == b_dims) return promote_types(a.dtype(), b.dtype());
  return a_dims ? combine(a.dtype(), b.dtype()) : combine(b.dtype(), a.dtype());
}

DType result_type(const Tensor& a, const Scalar& b) {
  return combine(a.dtype(), b.default_dtype());
}

// ---- unary -------------------------------------------------------------------------------------

Tensor neg(const Tensor& x) {
  return unary_op(UnaryOp::neg, OpId::neg, x, 0, true, false, false,
                  [](const Tensor& g, const Tensor&, const Tensor&) { return -g; });
}

Tensor abs(const Tensor& x) {
  return unary_op(UnaryOp::abs, OpId::abs, x, 0, true, true, false,
                  [](const Tensor& g, const Tensor& in, const Tensor&) { return g * sign(in); });
}

Tensor exp(const Tensor& x) {
  return unary_op(UnaryOp::exp, OpId::exp, autocast_fp32(x), 0, false, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& y) { return g * y; });
}

Tensor log(const Tensor& x) {
  return unary_op(UnaryOp::log, OpId::log, autocast_fp32(x), 0, false, true, false,
                  [](const Tensor& g, const Tensor& in, const Tensor&) { return g / in; });
}

Tensor sqrt(const Tensor& x) {
  return unary_op(UnaryOp::sqrt, OpId::sqrt, x, 0, false, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& y) { return g / (y * 2.0); });
}

Tensor rsqrt(const Tensor& x) {
  // y = x^-1/2, dy/dx = -y^3 / 2
  return unary_op(
      UnaryOp::rsqrt, OpId::rsqrt, autocast_fp32(x), 0, false, false, true,
      [](const Tensor& g, const Tensor&, const Tensor& y) { return g * (y * y * y) * (-0.5); });
}

Tensor sin(const Tensor& x) {
  return unary_op(UnaryOp::sin, OpId::sin, x, 0, false, true, false,
                  [](const Tensor& g, const Tensor& in, const Tensor&) { return g * cos(in); });
}

Tensor cos(const Tensor& x) {
  return unary_op(UnaryOp::cos, OpId::cos, x, 0, false, true, false,
                  [](const Tensor& g, const Tensor& in, const Tensor&) { return -g * sin(in); });
}

Tensor tanh(const Tensor& x) {
  return unary_op(UnaryOp::tanh, OpId::tanh, x, 0, false, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& y) {
                    if (Tensor fused = fused_activation_grad(ActivationGrad::tanh, g, y);
                        fused.defined())
                      return fused;
                    return g * (1.0 - y * y);
                  });
}

Tensor sigmoid(const Tensor& x) {
  return unary_op(UnaryOp::sigmoid, OpId::sigmoid, x, 0, false, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& y) {
                    if (Tensor fused = fused_activation_grad(ActivationGrad::sigmoid, g, y);
                        fused.defined())
                      return fused;
                    return g * y * (1.0 - y);
                  });
}

Tensor relu(const Tensor& x) {
  return unary_op(UnaryOp::relu, OpId::relu, x, 0, true, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& y) {
                    if (Tensor fused = fused_activation_grad(ActivationGrad::relu, g, y);
                        fused.defined())
                      return fused;
                    // 0 where y <= 0 (PyTorch's threshold_backward): a NaN y passes g on.
                    return where(le(y, 0), zeros_like(g), g);
                  });
}

Tensor gelu(const Tensor& x, GeluApproximation approximation) {
  if (approximation == GeluApproximation::none) {
    // d/dx x Phi(x) = Phi(x) + x phi(x)
    return unary_op(UnaryOp::gelu_erf, OpId::gelu, x, 0, false, true, false,
                    [](const Tensor& g, const Tensor& in, const Tensor&) {
                      if (Tensor fused = fused_activation_grad(ActivationGrad::gelu_erf, g, in);
                          fused.defined())
                        return fused;
                      const Tensor cdf = (erf(in * 0.70710678118654752440) + 1.0) * 0.5;
                      const Tensor pdf = exp(in * in * (-0.5)) * 0.39894228040143267794;
                      return g * (cdf + in * pdf);
                    });
  }
  return unary_op(UnaryOp::gelu_tanh, OpId::gelu, x, 0, false, true, false,
                  [](const Tensor& g, const Tensor& in, const Tensor&) {
                    if (Tensor fused = fused_activation_grad(ActivationGrad::gelu_tanh, g, in);
                        fused.defined())
                      return fused;
                    constexpr double k = 0.79788456080286535588, c = 0.044715;
                    const Tensor x2 = in * in;
                    const Tensor t = tanh((in + in * x2 * c) * k);
                    const Tensor dinner = (x2 * (3.0 * c) + 1.0) * k;
                    return g * ((t + 1.0) * 0.5 + in * (1.0 - t * t) * dinner * 0.5);
                  });
}

Tensor erf(const Tensor& x) {
  // d/dx erf(x) = 2/sqrt(pi) exp(-x^2)
  return unary_op(UnaryOp::erf, OpId::erf, x, 0, false, true, false,
                  [](const Tensor& g, const Tensor& in, const Tensor&) {
                    return g * exp(in * in * (-1.0)) * 1.12837916709551257390;
                  });
}

Tensor log1p(const Tensor& x) {
  // d/dx log(1 + x) = 1 / (1 + x)
  return unary_op(UnaryOp::log1p, OpId::log1p, autocast_fp32(x), 0, false, true, false,
                  [](const Tensor& g, const Tensor& in, const Tensor&) { return g / (in + 1.0); });
}

Tensor expm1(const Tensor& x) {
  // d/dx (exp(x) - 1) = exp(x) = y + 1
  return unary_op(UnaryOp::expm1, OpId::expm1, autocast_fp32(x), 0, false, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& y) { return g * (y + 1.0); });
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  // 1 where x > 0, else the slope (at 0 too, as PyTorch's leaky_relu_backward).
  return unary_op(UnaryOp::leaky_relu, OpId::leaky_relu, x, negative_slope, false, true, false,
                  [negative_slope](const Tensor& g, const Tensor& in, const Tensor&) {
                    return where(gt(in, 0), g, g * negative_slope);
                  });
}

Tensor softplus(const Tensor& x_in, double beta, double threshold) {
  EMBER_CHECK(beta != 0.0 && std::isfinite(beta),
              "softplus: beta must be finite and non-zero, got ", beta);
  const Tensor x = autocast_fp32(x_in);
  EMBER_CHECK(is_floating(x.dtype()), "softplus: expected a floating-point tensor, got ",
              describe(x));
  // log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (PyTorch's linear
  // region). The log1p branch reads beta x clamped to the threshold, so that exp cannot overflow
  // there: an inf in the branch where() discards would still turn its zero gradient into NaN.
  const Tensor scaled = x * beta;
  const Tensor curved = log1p(exp(clamp(scaled, std::nullopt, threshold))) * (1.0 / beta);
  return where(gt(scaled, threshold), x, curved);
}

Tensor silu(const Tensor& x) {
  return unary_op(UnaryOp::silu, OpId::silu, x, 0, false, true, false,
                  [](const Tensor& g, const Tensor& in, const Tensor&) {
                    if (Tensor fused = fused_activation_grad(ActivationGrad::silu, g, in);
                        fused.defined())
                      return fused;
                    const Tensor s = sigmoid(in);
                    return g * s * (in * (1.0 - s) + 1.0);
                  });
}

Tensor pow(const Tensor& x_in, const Scalar& exponent) {
  const double p = exponent.to_double();
  // An integer exponent keeps an integer tensor's dtype (bool becomes i64), as PyTorch; a
  // negative one is refused there, as PyTorch does.
  EMBER_CHECK(x_in.dtype() != DType::boolean || exponent.kind() != Scalar::Kind::boolean,
              "pow: not supported for a bool tensor to a bool power (", describe(x_in), ")");
  const bool keep_integers = !exponent.is_floating();
  const Tensor x = keep_integers && x_in.dtype() == DType::boolean ? x_in.to(DType::i64) : x_in;
  EMBER_CHECK(!keep_integers || p >= 0 || is_floating(x.dtype()), "pow: integers to negative ",
              "integer powers are not allowed (", describe(x_in), " to the power ",
              exponent.to_int(), "); convert the tensor to a floating dtype first");
  return unary_op(UnaryOp::pow_scalar, OpId::pow_scalar, autocast_fp32(x), p, keep_integers, true,
                  false, [p](const Tensor& g, const Tensor& in, const Tensor&) {
                    if (p == 0.0) return zeros_like(g);
                    return g * pow(in, p - 1.0) * p;
                  });
}

Tensor square(const Tensor& x) {
  return pow(x, 2);
}

Tensor reciprocal(const Tensor& x) {
  return unary_op(UnaryOp::reciprocal, OpId::reciprocal, autocast_fp32(x), 0, false, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& y) { return -g * y * y; });
}

Tensor sign(const Tensor& x) {
  // Differentiable with a zero gradient, as in PyTorch: a loss that passes through sign still
  // reaches the inputs before it, with nothing from this path.
  return unary_op(UnaryOp::sign, OpId::sign, x, 0, true, false, false,
                  [](const Tensor& g, const Tensor&, const Tensor&) { return zeros_like(g); });
}

Tensor clamp(const Tensor& x_in, std::optional<Scalar> min, std::optional<Scalar> max) {
  EMBER_CHECK(min || max, "clamp: at least one of min and max must be given");
  // The bounds promote like numbers (PyTorch's result_type): an integer tensor clamped to
  // floating bounds gives f32, to integer bounds keeps its dtype (bool: i64).
  Tensor x = x_in;
  if (min) x = x.to(result_type(x, *min));
  if (max) x = x.to(result_type(x, *max));
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x;
    if (min) out = maximum(out, scalar_tensor(*min, TensorOptions(x.dtype(), x.device())));
    if (max) out = minimum(out, scalar_tensor(*max, TensorOptions(x.dtype(), x.device())));
  }
  if (any_requires_grad({&x})) {
    const std::optional<double> low = min ? std::optional(min->to_double()) : std::nullopt;
    const std::optional<double> high = max ? std::optional(max->to_double()) : std::nullopt;
    record(OpId::clamp, {x}, out, {x},
           [low, high](const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             Tensor pass = ones_like(g);
             if (low) pass = pass * ge(s[0], *low).to(g.dtype());
             if (high) pass = pass * le(s[0], *high).to(g.dtype());
             return {g * pass};
           });
  }
  return out;
}

// ---- binary ------------------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  return binary_op(BinaryOp::add, a, b, alpha);
}
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  return binary_op(BinaryOp::sub, a, b, alpha);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary_op(BinaryOp::mul, a, b, 1);
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary_op(BinaryOp::div, a, b, 1);
}
Tensor pow(const Tensor& a, const Tensor& b) {
  return binary_op(BinaryOp::pow, autocast_fp32(a), autocast_fp32(b), 1);
}
Tensor pow(const Scalar& base, const Tensor& exponent) {
  return pow(wrap_scalar(exponent, base), exponent);
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary_op(BinaryOp::maximum, a, b, 1);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary_op(BinaryOp::minimum, a, b, 1);
}
Tensor add(const Tensor& a, const Scalar& b) {
  return add(a, wrap_scalar(a, b));
}
Tensor sub(const Tensor& a, const Scalar& b) {
  EMBER_CHECK(b.kind() != Scalar::Kind::boolean, "sub: subtraction with a bool is not supported (",
              describe(a), " - a bool); to invert a mask use eq(mask, false)");
  return sub(a, wrap_scalar(a, b));
}
Tensor sub(const Scalar& a, const Tensor& b) {
  EMBER_CHECK(a.kind() != Scalar::Kind::boolean, "sub: subtraction with a bool is not supported (",
              "a bool - ", describe(b), "); to invert a mask use eq(mask, false)");
  return sub(wrap_scalar(b, a), b);  // not -b + a: -b of an unsigned tensor wraps
}
// With a number an f16/bf16 tensor cannot hold (keeps_number_in_f32), the number is the kernels'
// alpha: x * s is -0 + s x (-0, not +0, keeps the sign of a product that is -0), x / s is
// x / (s 1). One rounding, from f32, as PyTorch's kernels (for x / s its CUDA kernel multiplies
// by the reciprocal instead; its CPU kernel divides, as here).
Tensor mul(const Tensor& a, const Scalar& b) {
  if (keeps_number_in_f32(a, b)) return add(exact_constant(a, -0.0), a, b);
  return mul(a, wrap_scalar(a, b));
}
Tensor div(const Tensor& a, const Scalar& b) {
  if (keeps_number_in_f32(a, b)) return binary_op(BinaryOp::div, a, exact_constant(a, 1.0), b);
  return div(a, wrap_scalar(a, b));
}
Tensor operator/(const Scalar& a, const Tensor& b) {
  return div(wrap_scalar(b, a), b);
}

// ---- comparisons -------------------------------------------------------------------------------

Tensor eq(const Tensor& a, const Tensor& b) {
  return compare_op(CompareOp::eq, a, b, "eq");
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return compare_op(CompareOp::ne, a, b, "ne");
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return compare_op(CompareOp::lt, a, b, "lt");
}
Tensor le(const Tensor& a, const Tensor& b) {
  return compare_op(CompareOp::le, a, b, "le");
}
Tensor gt(const Tensor& a, const Tensor& b) {
  return compare_op(CompareOp::gt, a, b, "gt");
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return compare_op(CompareOp::ge, a, b, "ge");
}
Tensor eq(const Tensor& a, const Scalar& b) {
  return eq(a, wrap_scalar(a, b));
}
Tensor ne(const Tensor& a, const Scalar& b) {
  return ne(a, wrap_scalar(a, b));
}
Tensor lt(const Tensor& a, const Scalar& b) {
  return lt(a, wrap_scalar(a, b));
}
Tensor le(const Tensor& a, const Scalar& b) {
  return le(a, wrap_scalar(a, b));
}
Tensor gt(const Tensor& a, const Scalar& b) {
  return gt(a, wrap_scalar(a, b));
}
Tensor ge(const Tensor& a, const Scalar& b) {
  return ge(a, wrap_scalar(a, b));
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.sizes() != b.sizes()) return false;
  NoGradGuard no_grad;
  const Tensor x = a.to(Device::cpu()).to(DType::f64), y = b.to(Device::cpu()).to(DType::f64);
  const Tensor close = le(abs(x - y), abs(y) * rtol + atol);
  return sum(close.to(DType::i64)).item<int64_t>() == a.numel();
}

// ---- selection ---------------------------------------------------------------------------------

Tensor where(const Tensor& condition, const Tensor& a_in, const Tensor& b_in) {
  EMBER_CHECK(condition.dtype() == DType::boolean, "where: condition must be a bool tensor, got ",
              describe(condition));
  const std::vector<Tensor> promoted = autocast_promote({a_in, b_in});
  const Tensor a = on_device_of(promoted[0], promoted[1]),
               b = on_device_of(promoted[1], promoted[0]);
  check_same_device(a, b, "where");
  check_same_device(condition, a, "where");
  const DType dtype = result_type(a, b);
  const Shape shape =
      broadcast_shapes(condition.sizes(), broadcast_shapes(a.sizes(), b.sizes(), "where"), "where");
  const Tensor ca = a.to(dtype), cb = b.to(dtype);
  Tensor out = empty(shape, TensorOptions(dtype, a.device()));
  const kernels::StridedLayout layout = make_layout(out, {&condition, &ca, &cb}, "where");
  if (out.is_cuda()) {
#if EMBER_WITH_CUDA
    dispatch_all(dtype, "where", [&]<typename T>() {
      kernels::cuda::where<T>(layout, static_cast<T*>(out.data_ptr()), condition.data<bool>(),
                              static_cast<const T*>(ca.data_ptr()),
                              static_cast<const T*>(cb.data_ptr()),
                              cuda::StreamOnDevice(out.device().index));
    });
#endif
  } else {
    dispatch_all(dtype, "where", [&]<typename T>() {
      kernels::cpu::where<T>(layout, static_cast<T*>(out.data_ptr()), condition.data<bool>(),
                             static_cast<const T*>(ca.data_ptr()),
                             static_cast<const T*>(cb.data_ptr()));
    });
  }
  if (any_requires_grad({&ca, &cb})) {
    record(OpId::where, {ca, cb}, out, {condition},
           [](const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             const Tensor zero = zeros({}, TensorOptions(g.dtype(), g.device()));
             return {where(s[0], g, zero), where(s[0], zero, g)};
           });
  }
  return out;
}

Tensor where(const Tensor& condition, const Tensor& a, const Scalar& b) {
  return where(condition, a, wrap_scalar(a, b));
}

Tensor where(const Tensor& condition, const Scalar& a, const Tensor& b) {
  return where(condition, wrap_scalar(b, a), b);
}

Tensor where(const Tensor& condition, const Scalar& a, const Scalar& b) {
  const DType dtype = promote_types(a.default_dtype(), b.default_dtype());
  const TensorOptions options(dtype, condition.device());
  return where(condition, scalar_tensor(a, options), scalar_tensor(b, options));
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  EMBER_CHECK(mask.dtype() == DType::boolean, "masked_fill: mask must be a bool tensor, got ",
              describe(mask));
  const Shape shape = broadcast_shapes(x.sizes(), mask.sizes(), "masked_fill");
  EMBER_CHECK(shape == x.sizes(), "masked_fill: mask of shape ", shape_str(mask.sizes()),
              " does not broadcast to the input's shape ", shape_str(x.sizes()));
  Tensor out;
  {
    NoGradGuard no_grad;
    out = where(mask, scalar_tensor(value, TensorOptions(x.dtype(), x.device())), x);
  }
  if (any_requires_grad({&x})) {
    record(OpId::masked_fill, {x}, out, {mask},
           [](const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             return {where(s[0], zeros({}, TensorOptions(g.dtype(), g.device())), g)};
           });
  }
  return out;
}

// ---- in-place ----------------------------------------------------------------------------------

namespace {

// self = op(self, other), or op(other, self) when self_second.
void binary_inplace_ordered(BinaryOp op, Tensor& self, const Tensor& other_in, const Scalar& alpha,
                            bool self_second) {
  const char* name = binary_name(op);
  const Tensor other = on_device_of(other_in, self);
  check_same_device(self, other, name);
  const Shape shape = broadcast_shapes(self.sizes(), other.sizes(), name);
  EMBER_CHECK(shape == self.sizes(), name, "_: the result of shape ", shape_str(shape),
              " does not fit the in-place target of shape ", shape_str(self.sizes()));
  DType dtype = result_type(self, other);
  if (op == BinaryOp::div && !is_floating(dtype)) dtype = DType::f32;
  EMBER_CHECK(dtype == self.dtype() || is_floating(self.dtype()) ||
                  dtype == promote_types(self.dtype(), dtype),
              name, "_: result type ", dtype, " cannot be stored in the in-place target of dtype ",
              self.dtype());
  EMBER_CHECK(category_of(dtype) <= category_of(self.dtype()), name, "_: result type ", dtype,
              " cannot be cast to the in-place target's dtype ", self.dtype());

  const bool track = any_requires_grad({&self, &other});
  if (track) {
    EMBER_CHECK(!(self.is_leaf() && self.requires_grad()), name,
                "_: a leaf tensor that requires grad cannot be modified in place (", describe(self),
                "); wrap optimizer-style updates in NoGradGuard");
    EMBER_CHECK(!self.is_view(), name,
                "_: in-place ops on views of tensors that take part in autograd are not supported "
                "by ember; use the out-of-place op");
  }
  // An operand that shares memory with self, other than self itself (a[1:] += a[:-1], or a row
  // of self broadcast over it), is read as it was before the write, as copy_ and NumPy do: the
  // kernels write in chunks and threads, so reading while writing would depend on their order.
  // (PyTorch refuses such a partial overlap instead.)
  Tensor cother = other.to(self.dtype());
  if (cother.storage() == self.storage() && !cother.is_same(self)) cother = cother.clone();
  // Backward needs self's value from before the write when the op multiplies by it.
  Tensor old_self;
  if (track && (op == BinaryOp::mul || op == BinaryOp::div || op == BinaryOp::pow ||
                op == BinaryOp::maximum || op == BinaryOp::minimum)) {
    NoGradGuard no_grad;
    old_self = self.clone();
  }
  const Edge old_edge = track ? gradient_edge(self) : Edge{};
  if (dtype != self.dtype()) {
    // A result wider than self (bf16 += f32, f32 *= f64): computed in the result's dtype and
    // rounded once into self, as PyTorch casts its common dtype to the output. other rounded to
    // self's dtype first would round twice. (Backward still sees other in self's dtype.)
    NoGradGuard no_grad;
    const Tensor wide_self = self.to(dtype), wide_other = other.to(dtype);
    const Tensor result = empty(self.sizes(), TensorOptions(dtype, self.device()));
    launch_binary(op, result, self_second ? wide_other : wide_self,
                  self_second ? wide_self : wide_other, alpha.to_double(), name);
    copy_into(self, result);
  } else if (self_second) {
    launch_binary(op, self, cother, self, alpha.to_double(), name);
  } else {
    launch_binary(op, self, self, cother, alpha.to_double(), name);
  }
  self.bump_version();
  if (!track) return;
  // The node sees self's old value through a detached stand-in that carries self's old edge.
  Tensor before = old_self.defined() ? old_self : self.detach();
  if (old_edge) {
    before.impl()->autograd = std::make_shared<AutogradMeta>();
    before.impl()->autograd->requires_grad = true;
    before.impl()->autograd->grad_fn = old_edge.node;
    before.impl()->autograd->output_nr = old_edge.output;
  }
  const double alpha_value = alpha.to_double();
  std::vector<Tensor> saved;
  if (old_self.defined()) saved = {old_self, cother};
  const bool needs_out = op == BinaryOp::div || op == BinaryOp::pow;
  if (needs_out) saved.push_back(self.clone());
  if (self_second) {
    // Only add reaches here (a number kept in f32): its gradients need no saved inputs.
    EMBER_CHECK(op == BinaryOp::add, name, "_: internal error: self as the second operand");
    const NeedsGrad needs{cother.requires_grad(), before.requires_grad()};
    record(binary_op_id(op), {cother, before}, self, {},
           [alpha_value, needs](const Tensor& g, const std::vector<Tensor>&) {
             const Tensor none;
             return binary_backward(BinaryOp::add, g, none, none, none, alpha_value, needs);
           });
    return;
  }
  const NeedsGrad needs{before.requires_grad(), cother.requires_grad()};
  record(binary_op_id(op), {before, cother}, self, saved,
         [op, alpha_value, needs_out, needs](const Tensor& g,
                                             const std::vector<Tensor>& s) -> std::vector<Tensor> {
           const Tensor none;
           return binary_backward(op, g, s.empty() ? none : s[0], s.empty() ? none : s[1],
                                  needs_out ? s[2] : none, alpha_value, needs);
         });
}

}  // namespace

void binary_inplace(BinaryOp op, Tensor& self, const Tensor& other, const Scalar& alpha) {
  binary_inplace_ordered(op, self, other, alpha, false);
}

void binary_inplace(BinaryOp op, Tensor& self, const Scalar& other) {
  const char* name = binary_name(op);
  if (keeps_number_in_f32(self, other)) {  // as the out-of-place ops above
    const double s = other.to_double();
    if (op == BinaryOp::mul)
      return binary_inplace_ordered(BinaryOp::add, self, exact_constant(self, -0.0), s, true);
    if (op == BinaryOp::div)
      return binary_inplace_ordered(op, self, exact_constant(self, 1.0), s, false);
  }
  EMBER_CHECK(op != BinaryOp::sub || other.kind() != Scalar::Kind::boolean, name,
              "_: subtraction with a bool is not supported; to invert a mask use eq(mask, false)");
  binary_inplace_ordered(
      op, self, scalar_tensor(other, TensorOptions(result_type(self, other), self.device())), 1,
      false);
}

}  // namespace ember
