// Op cases: elementwise unary and binary ops, selection, conversions.
#include "tests/common/op_cases.h"

namespace ember::testing {
namespace {

using Inputs = std::vector<Tensor>;

OpCase unary_case(const std::string& name, OpId op, Tensor (*f)(const Tensor&), bool away_from_zero,
                  double low = -1.0, double high = 1.0) {
  OpCase c;
  c.name = name;
  c.op = op;
  c.make_inputs = [away_from_zero, low, high](DType dtype, Device device, Generator& g) -> Inputs {
    if (away_from_zero) return {random_away_from_zero({5, 7}, dtype, device, g)};
    return {random_input({5, 7}, dtype, device, g, low, high)};
  };
  c.fn = [f](const Inputs& in) { return f(in[0]); };
  c.differentiable = {true};
  return c;
}

OpCase binary_case(const std::string& name, OpId op, Tensor (*f)(const Tensor&, const Tensor&),
                   Shape a_shape, Shape b_shape, bool positive_a = false, bool b_away = false) {
  OpCase c;
  c.name = name;
  c.op = op;
  c.make_inputs = [=](DType dtype, Device device, Generator& g) -> Inputs {
    Tensor a = positive_a ? random_input(a_shape, dtype, device, g, 0.5, 2.0)
                          : random_input(a_shape, dtype, device, g);
    Tensor b = b_away ? random_away_from_zero(b_shape, dtype, device, g)
                      : random_input(b_shape, dtype, device, g);
    return {a, b};
  };
  c.fn = [f](const Inputs& in) { return f(in[0], in[1]); };
  c.differentiable = {true, true};
  return c;
}

Tensor add_alpha(const Tensor& a, const Tensor& b) {
  return add(a, b, 2.5);
}
Tensor sub_alpha(const Tensor& a, const Tensor& b) {
  return sub(a, b, 0.5);
}
Tensor exp_fn(const Tensor& x) {
  return exp(x);
}
Tensor log_fn(const Tensor& x) {
  return log(x);
}
Tensor sqrt_fn(const Tensor& x) {
  return sqrt(x);
}
Tensor rsqrt_fn(const Tensor& x) {
  return rsqrt(x);
}
Tensor gelu_erf(const Tensor& x) {
  return gelu(x);
}
Tensor gelu_tanh(const Tensor& x) {
  return gelu(x, GeluApproximation::tanh);
}
Tensor pow_three(const Tensor& x) {
  return pow(x, 3);
}
Tensor pow_fraction(const Tensor& x) {
  return pow(x, 1.5);
}
Tensor clamp_both(const Tensor& x) {
  return clamp(x, -0.5, 0.4);
}
Tensor pow_fn(const Tensor& a, const Tensor& b) {
  return pow(a, b);
}
Tensor pow_of_number(const Tensor& x) {
  return pow(2.5, x);
}
Tensor log1p_fn(const Tensor& x) {
  return log1p(x);
}
Tensor expm1_fn(const Tensor& x) {
  return expm1(x);
}
Tensor leaky_relu_fn(const Tensor& x) {
  return leaky_relu(x, 0.2);
}
// beta 2, threshold 3: inputs in [-3, 3] reach both the curve and the linear region (beta x > 3).
Tensor softplus_fn(const Tensor& x) {
  return softplus(x, 2.0, 3.0);
}

}  // namespace

EMBER_OP_CASES(elementwise) {
  std::vector<OpCase> cases = {
      unary_case("neg", OpId::neg, neg, false),
      unary_case("abs", OpId::abs, abs, true),
      unary_case("sign", OpId::sign, sign, true),
      unary_case("exp", OpId::exp, exp_fn, false),
      unary_case("log", OpId::log, log_fn, false, 0.5, 2.0),
      unary_case("sqrt", OpId::sqrt, sqrt_fn, false, 0.5, 2.0),
      unary_case("rsqrt", OpId::rsqrt, rsqrt_fn, false, 0.5, 2.0),
      unary_case("sin", OpId::sin, sin, false, -3.0, 3.0),
      unary_case("cos", OpId::cos, cos, false, -3.0, 3.0),
      unary_case("tanh", OpId::tanh, tanh, false, -2.0, 2.0),
      unary_case("sigmoid", OpId::sigmoid, sigmoid, false, -3.0, 3.0),
      unary_case("relu", OpId::relu, relu, true),
      unary_case("gelu/erf", OpId::gelu, gelu_erf, false, -3.0, 3.0),
      unary_case("gelu/tanh", OpId::gelu, gelu_tanh, false, -3.0, 3.0),
      unary_case("silu", OpId::silu, silu, false, -3.0, 3.0),
      unary_case("erf", OpId::erf, erf, false, -2.0, 2.0),
      unary_case("log1p", OpId::log1p, log1p_fn, false, -0.5, 2.0),
      unary_case("expm1", OpId::expm1, expm1_fn, false, -2.0, 2.0),
      unary_case("leaky_relu", OpId::leaky_relu, leaky_relu_fn, true),
      unary_case("softplus/both_regions", OpId::log1p, softplus_fn, false, -3.0, 3.0),
      unary_case("reciprocal", OpId::reciprocal, reciprocal, true),
      unary_case("pow_scalar/int", OpId::pow_scalar, pow_three, false),
      unary_case("pow_scalar/fraction", OpId::pow_scalar, pow_fraction, false, 0.5, 2.0),
      unary_case("clamp", OpId::clamp, clamp_both, false),
      binary_case("add/same_shape", OpId::add, add_alpha, {4, 6}, {4, 6}),
      binary_case("add/broadcast_rows", OpId::add, add_alpha, {3, 5}, {5}),
      binary_case("add/broadcast_both", OpId::add, add_alpha, {3, 1, 4}, {2, 1}),
      binary_case("add/scalar_tensor", OpId::add, add_alpha, {3, 4}, {}),
      binary_case("sub/broadcast", OpId::sub, sub_alpha, {2, 3, 4}, {3, 1}),
      binary_case("mul/broadcast", OpId::mul, mul, {3, 4}, {3, 1}),
      binary_case("div/broadcast", OpId::div, div, {3, 4}, {4}, false, true),
      binary_case("pow/tensor", OpId::pow, pow_fn, {3, 4}, {3, 4}, true, false),
      unary_case("pow/number_base", OpId::pow, pow_of_number, false, -2.0, 2.0),
      binary_case("maximum", OpId::maximum, maximum, {4, 5}, {4, 5}),
      binary_case("minimum/broadcast", OpId::minimum, minimum, {4, 5}, {5}),
  };

  OpCase where_case;
  where_case.name = "where";
  where_case.op = OpId::where;
  where_case.make_inputs = [](DType dtype, Device device, Generator& g) -> std::vector<Tensor> {
    Tensor condition = bernoulli({4, 5}, 0.5, DType::boolean, &g).to(device);
    return {condition, random_input({4, 5}, dtype, device, g), random_input({5}, dtype, device, g)};
  };
  where_case.fn = [](const std::vector<Tensor>& in) { return where(in[0], in[1], in[2]); };
  where_case.differentiable = {false, true, true};
  cases.push_back(where_case);

  // A number on either side: the tensor side alone gets a gradient.
  OpCase where_number = where_case;
  where_number.name = "where/number";
  where_number.make_inputs = [](DType dtype, Device device, Generator& g) -> std::vector<Tensor> {
    return {bernoulli({3, 4}, 0.5, DType::boolean, &g).to(device),
            random_input({3, 4}, dtype, device, g), random_input({4}, dtype, device, g)};
  };
  where_number.fn = [](const std::vector<Tensor>& in) {
    return where(in[0], in[1], 0.25) * where(in[0], -1.5, in[2]);
  };
  cases.push_back(where_number);

  OpCase masked;
  masked.name = "masked_fill";
  masked.op = OpId::masked_fill;
  masked.make_inputs = [](DType dtype, Device device, Generator& g) -> std::vector<Tensor> {
    return {random_input({4, 5}, dtype, device, g),
            bernoulli({5}, 0.5, DType::boolean, &g).to(device)};
  };
  masked.fn = [](const std::vector<Tensor>& in) { return masked_fill(in[0], in[1], -3.0); };
  masked.differentiable = {true, false};
  cases.push_back(masked);

  OpCase to_f32;
  to_f32.name = "to_dtype";
  to_f32.op = OpId::to_dtype;
  to_f32.make_inputs = [](DType dtype, Device device, Generator& g) -> std::vector<Tensor> {
    return {random_input({3, 7}, dtype, device, g)};
  };
  // f64 -> f32 -> f64 loses precision: the gradient check runs in f64 -> f64 (identity),
  // the CUDA comparison goes through the other dtypes.
  to_f32.fn = [](const std::vector<Tensor>& in) {
    return in[0].dtype() == DType::f64 ? in[0].to(DType::f32).to(DType::f64) * 1.0
                                       : in[0].to(DType::f32);
  };
  to_f32.differentiable = {true};
  to_f32.gradcheck_eps = 1e-2;  // the f32 round trip is linear up to rounding
  to_f32.gradcheck_atol = 1e-4;
  cases.push_back(to_f32);

  OpCase clone_case;
  clone_case.name = "clone";
  clone_case.op = OpId::clone;
  clone_case.make_inputs = [](DType dtype, Device device, Generator& g) -> std::vector<Tensor> {
    return {random_input({3, 4}, dtype, device, g)};
  };
  clone_case.fn = [](const std::vector<Tensor>& in) { return in[0].t().clone() * 2.0; };
  clone_case.differentiable = {true};
  cases.push_back(clone_case);
  return cases;
}

}  // namespace ember::testing
