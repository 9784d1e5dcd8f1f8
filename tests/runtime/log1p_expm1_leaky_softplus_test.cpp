// log1p, expm1, leaky_relu and softplus: their values where the naive forms fail (tiny x for
// log(1 + x) and exp(x) - 1, overflow in softplus), their edge values as PyTorch gives them, and
// their gradients. (The f64 finite-difference checks are op cases in tests/common.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "nn/layers.h"
#include "runtime/ops.h"
#include "tests/common/expect_error.h"

namespace ember {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor f32(const std::vector<float>& values) {
  return from_vector(values, {static_cast<int64_t>(values.size())});
}

TEST(Log1pExpm1, KeepTinyArgumentsAndFollowTheEdgeValues) {
  const std::vector<float> tiny = {1e-10f, -1e-10f, 1e-30f, 3e-8f};
  const std::vector<float> log1p_tiny = to_vector<float>(log1p(f32(tiny)));
  const std::vector<float> expm1_tiny = to_vector<float>(expm1(f32(tiny)));
  for (size_t i = 0; i < tiny.size(); ++i) {
    // log(1 + x) and exp(x) - 1 would give 0 (or 3.6e-8 for 3e-8): the first-order term is x.
    EXPECT_NEAR(log1p_tiny[i], tiny[i], 1e-7 * std::abs(tiny[i])) << tiny[i];
    EXPECT_NEAR(expm1_tiny[i], tiny[i], 1e-7 * std::abs(tiny[i])) << tiny[i];
  }
  const std::vector<float> l = to_vector<float>(log1p(f32({-1.0f, -2.0f, kInf, 0.0f})));
  EXPECT_EQ(l[0], -kInf);
  EXPECT_TRUE(std::isnan(l[1]));
  EXPECT_EQ(l[2], kInf);
  EXPECT_EQ(l[3], 0.0f);
  const std::vector<float> e = to_vector<float>(expm1(f32({-kInf, 100.0f, 1.0f})));
  EXPECT_EQ(e[0], -1.0f);
  EXPECT_EQ(e[1], kInf);
  EXPECT_NEAR(e[2], std::expm1(1.0), 1e-6);
  // Integers compute in f32, as exp and log do.
  EXPECT_EQ(log1p(ones({2}, DType::i64)).dtype(), DType::f32);
}

TEST(Log1pExpm1, GradientsAreTheDerivatives) {
  Tensor x =
      from_vector(std::vector<double>{-0.5, 0.0, 1e-9, 3.0}, {4}, DType::f64).requires_grad_();
  sum(log1p(x) + expm1(x)).backward();
  const std::vector<double> xs = {-0.5, 0.0, 1e-9, 3.0};
  const std::vector<double> grad = to_vector<double>(x.grad());
  for (size_t i = 0; i < xs.size(); ++i)
    EXPECT_NEAR(grad[i], 1.0 / (1.0 + xs[i]) + std::exp(xs[i]), 1e-14) << xs[i];
}

// PyTorch: x > 0 ? x : slope x, NaN passes; the gradient is 1 where x > 0, else the slope (0
// included).
TEST(LeakyRelu, ValuesAndGradientAsPyTorch) {
  const std::vector<float> y = to_vector<float>(leaky_relu(f32({-2.0f, 0.0f, 3.0f, kNaN}), 0.1));
  EXPECT_FLOAT_EQ(y[0], -0.2f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 3.0f);
  EXPECT_TRUE(std::isnan(y[3]));
  Tensor x = f32({-2.0f, 0.0f, 3.0f}).requires_grad_();
  sum(leaky_relu(x, 0.25)).backward();
  EXPECT_EQ(to_vector<float>(x.grad()), (std::vector<float>{0.25f, 0.25f, 1.0f}));
  nn::LeakyReLU layer(0.2);
  EXPECT_FLOAT_EQ(to_vector<float>(layer.forward(f32({-1.0f})))[0], -0.2f);
  EXPECT_EQ(layer.extra_repr(), "negative_slope=0.2");
}

// log(1 + exp(beta x)) / beta, x itself past the threshold; the gradient sigmoid(beta x) (1 in the
// linear region), finite everywhere: exp never sees a value past the threshold.
TEST(Softplus, ValuesAndGradientsWithoutOverflow) {
  const std::vector<double> xs = {-30.0, -1.0, 0.0, 2.0, 25.0, 1000.0};
  Tensor x = from_vector(xs, {6}, DType::f64).requires_grad_();
  const Tensor y = softplus(x);
  sum(y).backward();
  const std::vector<double> got = to_vector<double>(y), grad = to_vector<double>(x.grad());
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = xs[i] > 20.0 ? xs[i] : std::log1p(std::exp(xs[i]));
    const double slope = xs[i] > 20.0 ? 1.0 : 1.0 / (1.0 + std::exp(-xs[i]));
    EXPECT_NEAR(got[i], want, 1e-15 * std::max(1.0, std::abs(want))) << xs[i];
    EXPECT_NEAR(grad[i], slope, 1e-15) << xs[i];
  }
  EXPECT_GT(got[0], 0.0);  // 9.4e-14, not 0
  // beta 2, threshold 5: 0.5 log(1 + exp(2 x)), linear past x = 2.5; f32 stays finite at 1e30.
  Tensor z = f32({1.0f, 3.0f, 1e30f}).requires_grad_();
  const std::vector<float> zs = to_vector<float>(softplus(z, 2.0, 5.0));
  EXPECT_NEAR(zs[0], 0.5 * std::log1p(std::exp(2.0)), 1e-6);
  EXPECT_EQ(zs[1], 3.0f);
  EXPECT_EQ(zs[2], 1e30f);
  sum(softplus(z, 2.0, 5.0)).backward();
  const std::vector<float> zg = to_vector<float>(z.grad());
  EXPECT_NEAR(zg[0], 1.0 / (1.0 + std::exp(-2.0)), 1e-6);
  EXPECT_EQ(zg[1], 1.0f);
  EXPECT_EQ(zg[2], 1.0f);
  nn::Softplus layer(2.0, 5.0);
  EXPECT_EQ(layer.extra_repr(), "beta=2, threshold=5");
  EXPECT_ERROR_WITH(softplus(z, 0.0), "softplus", "beta must be finite and non-zero, got 0");
  EXPECT_ERROR_WITH(softplus(ones({2}, DType::i64)), "softplus", "floating-point");
}

}  // namespace
}  // namespace ember
