// Gradients at the edge values where PyTorch's autograd formulas make a choice (a NaN input, 0^0,
// ties, a constant): ember makes the same one. Each was found different by
// bench/conformance_vs_libtorch.cpp (bench/results/conformance-libtorch-2026-11-27.md); the
// expected values are LibTorch 1.13's.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "runtime/ops.h"

namespace ember {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor leaf(const std::vector<double>& values, DType dtype = DType::f64) {
  Tensor t = from_vector(values, {static_cast<int64_t>(values.size())}, DType::f64).to(dtype);
  t.requires_grad_();
  return t;
}

// Equal, NaN where the expected value is NaN.
void expect_same(const std::vector<double>& actual, const std::vector<double>& expected,
                 const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(actual[i])) << what << "[" << i << "]: " << actual[i];
    } else {
      EXPECT_EQ(actual[i], expected[i]) << what << "[" << i << "]";
    }
  }
}

TEST(EdgeGradients, ReluPassesTheGradientOnAtNaN) {
  // PyTorch's threshold_backward zeroes where the output is <= 0: not at NaN. Both the fused
  // kernel (f32) and the formula on ember ops (f64) are covered.
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor x = leaf({-1, 0, 2, kNaN}, dtype);
    sum(relu(x) * 3.0).backward();
    expect_same(to_vector<double>(x.grad()), {0, 0, 3, 3}, dtype_name(dtype));
  }
}

TEST(EdgeGradients, MaximumAndMinimumWithANaNGiveTheGradientToBoth) {
  // where(a == b, g / 2, g), 0 where an input loses: with a NaN nothing compares true.
  Tensor a = leaf({kNaN, -1, kNaN, 2, 1});
  Tensor b = leaf({0, kNaN, kNaN, 2, 5});
  sum(maximum(a, b)).backward();
  expect_same(to_vector<double>(a.grad()), {1, 1, 1, 0.5, 0}, "maximum: a");
  expect_same(to_vector<double>(b.grad()), {1, 1, 1, 0.5, 1}, "maximum: b");
  Tensor c = leaf({kNaN, 3, 1});
  Tensor d = leaf({0, 3, 5});
  sum(minimum(c, d)).backward();
  expect_same(to_vector<double>(c.grad()), {1, 0.5, 1}, "minimum: a");
  expect_same(to_vector<double>(d.grad()), {1, 0.5, 0}, "minimum: b");
}

TEST(EdgeGradients, PowAtAZeroBase) {
  // d/da a^b = b a^(b-1), taken as 0 where b == 0; d/db = a^b ln a, taken as 0 where a == 0 and
  // b >= 0 only: 0^-1 gives inf * -inf = -inf.
  Tensor a = leaf({0, 0, 0, 2});
  Tensor b = leaf({0, 2, -1, 0});
  sum(pow(a, b)).backward();
  expect_same(to_vector<double>(a.grad()), {0, 0, -kInf, 0}, "d/d base");
  expect_same(to_vector<double>(b.grad()), {0, 0, -kInf, std::log(2.0)}, "d/d exponent");
}

TEST(EdgeGradients, SignIsDifferentiableWithAZeroGradient) {
  Tensor x = leaf({-2, 0, 3});
  const Tensor y = sign(x);
  EXPECT_TRUE(y.requires_grad());
  sum(y * 5.0 + x).backward();
  expect_same(to_vector<double>(x.grad()), {1, 1, 1}, "sign");
}

}  // namespace
}  // namespace ember
