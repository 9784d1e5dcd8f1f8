// GradScaler (skip on Inf/NaN, backoff, growth, errors, state) and gradient clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/amp.h"
#include "optim/optim.h"
#include "runtime/ops.h"

namespace ember::optim {
namespace {

Tensor param_with_grad(const std::vector<float>& values, const std::vector<float>& grad,
                       DType dtype = DType::f32) {
  Tensor p = from_vector(values, {static_cast<int64_t>(values.size())}).to(dtype);
  p.requires_grad_();
  p.set_grad(from_vector(grad, p.sizes()).to(dtype));
  return p;
}

void expect_error(const std::function<void()>& fn, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing '" << text << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(GradScaler, DefaultsArePyTorchs) {
  GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.options().growth_factor, 2.0);
  EXPECT_EQ(scaler.options().backoff_factor, 0.5);
  EXPECT_EQ(scaler.options().growth_interval, 2000);
  EXPECT_TRUE(scaler.is_enabled());
  const Tensor loss = scalar_tensor(1.5, DType::f32);
  EXPECT_EQ(scaler.scale(loss).item<double>(), 1.5 * 65536.0);
}

TEST(GradScaler, UnscalesThenSteps) {
  GradScaler scaler;
  const float s = 65536.0f;
  Tensor p = param_with_grad({1, 2, 3}, {0.5f * s, -1.0f * s, 2.0f * s});
  SGD sgd({p}, {.lr = 0.1});
  EXPECT_TRUE(scaler.step(sgd));
  scaler.update();
  EXPECT_EQ(to_vector<float>(p.grad()), (std::vector<float>{0.5f, -1.0f, 2.0f}));
  EXPECT_EQ(to_vector<float>(p), (std::vector<float>{1 - 0.05f, 2 + 0.1f, 3 - 0.2f}));
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(GradScaler, InfInOneGradientSkipsTheStepAndHalvesTheScale) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    GradScaler scaler;
    Tensor a = param_with_grad({1, 2}, {1, 2});
    Tensor b = param_with_grad({3, 4, 5}, {1, bad, 3});
    Adam adam({a, b}, AdamOptions{.lr = 0.1});
    EXPECT_FALSE(scaler.step(adam));
    EXPECT_EQ(to_vector<float>(a), (std::vector<float>{1, 2}));
    EXPECT_EQ(to_vector<float>(b), (std::vector<float>{3, 4, 5}));
    EXPECT_EQ(adam.state(0, 0).step, 0);  // the optimizer never ran
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 32768.0);
    EXPECT_EQ(scaler.growth_tracker(), 0);
  }
}

TEST(GradScaler, ScaleDoublesAfterGrowthIntervalGoodSteps) {
  GradScaler scaler({.init_scale = 8.0, .growth_interval = 3});
  Tensor p = param_with_grad({1}, {1});
  SGD sgd({p}, {.lr = 0.0});
  const std::vector<double> scales = {8, 8, 16, 16, 16, 32};
  for (size_t i = 0; i < scales.size(); ++i) {
    p.set_grad(ones({1}));
    scaler.step(sgd);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), scales[i]) << "after step " << i + 1;
  }
  // An overflow resets the count of good steps.
  p.set_grad(full({1}, std::numeric_limits<double>::infinity()));
  scaler.step(sgd);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 16.0);
  for (int i = 0; i < 2; ++i) {
    p.set_grad(ones({1}));
    scaler.step(sgd);
    scaler.update();
  }
  EXPECT_EQ(scaler.get_scale(), 16.0);
  EXPECT_EQ(scaler.growth_tracker(), 2);
}

// An overflow part-way through an interval starts the count of good steps again: two good steps,
// an Inf, then growth_interval more good steps before the scale grows (not one).
TEST(GradScaler, OverflowInTheMiddleOfAnIntervalRestartsTheCount) {
  GradScaler scaler({.init_scale = 8.0, .growth_interval = 3});
  Tensor p = param_with_grad({1}, {1});
  SGD sgd({p}, {.lr = 0.0});
  auto step_with_grad = [&](float grad) {
    p.set_grad(full({1}, static_cast<double>(grad)));
    scaler.step(sgd);
    scaler.update();
  };
  step_with_grad(1);
  step_with_grad(1);
  ASSERT_EQ(scaler.growth_tracker(), 2);
  step_with_grad(std::numeric_limits<float>::infinity());
  EXPECT_EQ(scaler.get_scale(), 4.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  step_with_grad(1);
  step_with_grad(1);
  EXPECT_EQ(scaler.get_scale(), 4.0) << "grew after 2 good steps since the overflow";
  step_with_grad(1);
  EXPECT_EQ(scaler.get_scale(), 8.0);
}

// PyTorch's _amp_update_scale_: a growth that would overflow f32 leaves the scale where it is
// (an infinite scale would make every gradient Inf and could never back off again).
TEST(GradScaler, GrowthThatWouldOverflowF32KeepsTheScale) {
  const double largest_power_of_two = std::ldexp(1.0, 127);  // 2^127; 2^128 is Inf in f32
  GradScaler scaler({.init_scale = largest_power_of_two, .growth_interval = 1});
  Tensor p = param_with_grad({1}, {0});  // a zero gradient stays finite at any scale
  SGD sgd({p}, {.lr = 0.0});
  EXPECT_TRUE(scaler.step(sgd));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), largest_power_of_two);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

// As in PyTorch, unscale_ divides every gradient, also those after one holding an Inf: what reads
// the gradients next (clipping, a gradient-norm log) sees unscaled values everywhere.
TEST(GradScaler, UnscaleDividesEveryGradientEvenAfterAnInf) {
  GradScaler scaler({.init_scale = 4.0});
  Tensor a = param_with_grad({0}, {std::numeric_limits<float>::infinity()});
  Tensor b = param_with_grad({0, 0}, {8, -2});
  SGD sgd({a, b});
  scaler.unscale_(sgd);
  EXPECT_EQ(to_vector<float>(b.grad()), (std::vector<float>{2, -0.5f}));
  EXPECT_FALSE(scaler.step(sgd));
}

TEST(GradScaler, UnscaleBeforeClipEqualsClippingTheUnscaledGradients) {
  const std::vector<float> g1 = {3.0f, -4.0f, 1.5f}, g2 = {0.25f, 12.0f};
  // Scaled gradients, unscaled by the scaler, then clipped.
  GradScaler scaler({.init_scale = 1024.0});
  std::vector<float> s1 = g1, s2 = g2;
  for (float& v : s1)
    v *= 1024.0f;
  for (float& v : s2)
    v *= 1024.0f;
  Tensor a = param_with_grad({0, 0, 0}, s1), b = param_with_grad({0, 0}, s2);
  SGD sgd({a, b}, {.lr = 1.0});
  scaler.unscale_(sgd);
  const Tensor norm_scaled = clip_grad_norm_({a, b}, 1.0);
  // The same gradients never scaled.
  Tensor c = param_with_grad({0, 0, 0}, g1), d = param_with_grad({0, 0}, g2);
  const Tensor norm_plain = clip_grad_norm_({c, d}, 1.0);
  EXPECT_EQ(norm_scaled.item<double>(), norm_plain.item<double>());
  EXPECT_EQ(to_vector<float>(a.grad()), to_vector<float>(c.grad()));
  EXPECT_EQ(to_vector<float>(b.grad()), to_vector<float>(d.grad()));
  // step() does not unscale a second time.
  EXPECT_TRUE(scaler.step(sgd));
  const std::vector<float> clipped = to_vector<float>(c.grad());
  EXPECT_EQ(to_vector<float>(a), (std::vector<float>{-clipped[0], -clipped[1], -clipped[2]}));
}

TEST(GradScaler, MisuseIsAnErrorAsInPyTorch) {
  GradScaler scaler;
  Tensor p = param_with_grad({1}, {1});
  SGD sgd({p});
  scaler.unscale_(sgd);
  expect_error([&] { scaler.unscale_(sgd); }, "unscale_() has already been called");
  scaler.step(sgd);
  expect_error([&] { scaler.step(sgd); }, "step() has already been called");
  expect_error([&] { scaler.unscale_(sgd); }, "after step()");
  scaler.update();
  scaler.unscale_(sgd);  // fine again after update()
  GradScaler fresh;
  expect_error([&] { fresh.update(); }, "no inf checks were recorded");
  expect_error([&] { GradScaler({.backoff_factor = 1.5}); }, "backoff_factor");
}

TEST(GradScaler, LowPrecisionGradientsAreUnscaledInPlace) {
  for (DType dtype : {DType::f16, DType::bf16}) {
    GradScaler scaler({.init_scale = 256.0});
    Tensor p = param_with_grad({1, 2}, {512, -128}, dtype);
    SGD sgd({p}, {.lr = 0.5});
    EXPECT_TRUE(scaler.step(sgd));
    EXPECT_EQ(to_vector<float>(p.grad()), (std::vector<float>{2, -0.5}));
    EXPECT_EQ(to_vector<float>(p), (std::vector<float>{0, 2.25}));
    scaler.update();
    Tensor q = param_with_grad({1}, {70000}, DType::f16);  // overflows f16: Inf
    SGD sgd2({q});
    EXPECT_FALSE(scaler.step(sgd2));
  }
}

TEST(GradScaler, DisabledScalerIsTransparent) {
  GradScaler scaler({.enabled = false});
  const Tensor loss = scalar_tensor(2.0, DType::f32);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  Tensor p = param_with_grad({1}, {std::numeric_limits<float>::infinity()});
  SGD sgd({p}, {.lr = 0.0});
  EXPECT_TRUE(scaler.step(sgd));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_TRUE(scaler.state_dict().empty());
  // Loading an enabled scaler's state changes nothing (PyTorch's load_state_dict returns).
  GradScaler enabled({.init_scale = 8.0});
  scaler.load_state_dict(enabled.state_dict());
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_FALSE(scaler.is_enabled());
}

TEST(GradScaler, StateDictRoundTrip) {
  GradScaler scaler({.init_scale = 1000.5, .growth_interval = 7});
  Tensor p = param_with_grad({1}, {1});
  SGD sgd({p});
  scaler.step(sgd);
  scaler.update();
  GradScaler restored;
  restored.load_state_dict(scaler.state_dict());
  EXPECT_EQ(restored.get_scale(), 1000.5);
  EXPECT_EQ(restored.growth_tracker(), 1);
  EXPECT_EQ(restored.options().growth_interval, 7);
  expect_error([&] { restored.load_state_dict({}); }, "saved from a disabled GradScaler");
}

// A resumed run keeps the saved run's factors, not the defaults of the scaler it loads into: an
// Inf backs off by the saved 0.25, a good step grows by the saved 4.
TEST(GradScaler, StateDictRoundTripKeepsTheGrowthAndBackoffFactors) {
  GradScaler saved(
      {.init_scale = 64.0, .growth_factor = 4.0, .backoff_factor = 0.25, .growth_interval = 1});
  GradScaler restored;  // defaults: growth 2, backoff 0.5, interval 2000
  restored.load_state_dict(saved.state_dict());
  EXPECT_EQ(restored.options().growth_factor, 4.0);
  EXPECT_EQ(restored.options().backoff_factor, 0.25);
  Tensor p = param_with_grad({1}, {std::numeric_limits<float>::infinity()});
  SGD sgd({p}, {.lr = 0.0});
  restored.step(sgd);
  restored.update();
  EXPECT_EQ(restored.get_scale(), 16.0);
  p.set_grad(ones({1}));
  restored.step(sgd);
  restored.update();
  EXPECT_EQ(restored.get_scale(), 64.0);
}

// load_state_dict holds a checkpoint to the constructor's rules: a growth_interval of 0 would
// never grow the scale, a scale of 0 would zero every gradient and never recover.
TEST(GradScaler, LoadStateDictRefusesWhatTheConstructorRefuses) {
  GradScaler source;
  const Metadata good = source.state_dict();
  Metadata zero_interval = good;
  zero_interval["scaler.growth_interval"] = "0";
  GradScaler target;
  expect_error([&] { target.load_state_dict(zero_interval); }, "scaler.growth_interval");
  Metadata zero_scale = good;
  zero_scale["scaler.scale"] = "0";
  expect_error([&] { target.load_state_dict(zero_scale); }, "out-of-range values (scale 0");
  EXPECT_EQ(target.get_scale(), 65536.0) << "a refused state leaves the scaler as it was";
  EXPECT_EQ(target.options().growth_interval, 2000);
}

TEST(AmpKernel, FindsANonFiniteValueAnywhereInALargeGradient) {
  std::vector<float> grad(100001, 2.0f);
  EXPECT_FALSE(kernels::cpu::amp_unscale_and_check(grad.data(), 100001, 0.5f));
  EXPECT_EQ(grad[77777], 1.0f);
  grad[100000] = std::nanf("");
  EXPECT_TRUE(kernels::cpu::amp_unscale_and_check(grad.data(), 100001, 0.5f));
  EXPECT_EQ(grad[0], 0.5f);  // the whole gradient is still unscaled
}

// ---- clipping -----------------------------------------------------------------------------------

TEST(ClipGradNorm, ScalesToMaxNormAndReturnsTheTotalNorm) {
  Tensor a = param_with_grad({0, 0}, {3, 4}), b = param_with_grad({0}, {12});
  const Tensor total = clip_grad_norm_({a, b}, 6.5);
  EXPECT_NEAR(total.item<double>(), 13.0, 1e-6);
  const double coef = 6.5 / (13.0 + 1e-6);
  EXPECT_NEAR(to_vector<float>(a.grad())[0], 3 * coef, 1e-6);
  EXPECT_NEAR(to_vector<float>(a.grad())[1], 4 * coef, 1e-6);
  EXPECT_NEAR(to_vector<float>(b.grad())[0], 12 * coef, 1e-5);
}

TEST(ClipGradNorm, F64GradientsKeepF64Precision) {
  // The norm is computed and returned in f64 when a gradient is f64 (PyTorch: the gradients'
  // dtype); in f32 it would be off by about 1e-8 here.
  Tensor a = from_vector(std::vector<double>{0, 0, 0}, {3}, DType::f64);
  a.requires_grad_();
  a.set_grad(from_vector(std::vector<double>{0.1, 1.0 / 3.0, 4.4}, {3}, DType::f64));
  const double expected = std::sqrt(0.1 * 0.1 + 1.0 / 9.0 + 4.4 * 4.4);
  const Tensor total = clip_grad_norm_({a}, 1.0);
  EXPECT_EQ(total.dtype(), DType::f64);
  EXPECT_NEAR(total.item<double>(), expected, 1e-15 * expected);
  const double coef = 1.0 / (expected + 1e-6);
  EXPECT_NEAR(to_vector<double>(a.grad())[2], 4.4 * coef, 1e-15);
  // f32 gradients: an f32 norm, as before.
  Tensor b = param_with_grad({0}, {3});
  EXPECT_EQ(clip_grad_norm_({b}, 1.0).dtype(), DType::f32);
}

TEST(ClipGradNorm, SmallNormsAreLeftAlone) {
  Tensor a = param_with_grad({0, 0}, {0.3f, -0.4f});
  Tensor no_grad = from_vector(std::vector<float>{1}, {1});
  no_grad.requires_grad_();
  const Tensor total = clip_grad_norm_({a, no_grad}, 1.0);
  EXPECT_NEAR(total.item<double>(), 0.5, 1e-7);
  EXPECT_EQ(to_vector<float>(a.grad()), (std::vector<float>{0.3f, -0.4f}));
  EXPECT_EQ(clip_grad_norm_({no_grad}, 1.0).item<double>(), 0.0);
}

TEST(ClipGradNorm, InfinityNormAndOneNorm) {
  Tensor a = param_with_grad({0, 0}, {-5, 1}), b = param_with_grad({0}, {2});
  EXPECT_NEAR(clip_grad_norm_({a, b}, 100.0, kInfNorm).item<double>(), 5.0, 1e-6);
  EXPECT_NEAR(clip_grad_norm_({a, b}, 100.0, 1.0).item<double>(), 8.0, 1e-6);
  const Tensor inf_total = clip_grad_norm_({a, b}, 1.0, kInfNorm);
  EXPECT_NEAR(to_vector<float>(a.grad())[0], -5.0 / (5.0 + 1e-6), 1e-6);
  Tensor bad = param_with_grad({0}, {std::numeric_limits<float>::infinity()});
  expect_error([&] { clip_grad_norm_({bad}, 1.0, 2.0, true); }, "non-finite");
}

TEST(ClipGradValue, ClampsEveryElement) {
  Tensor a = param_with_grad({0, 0, 0}, {-3, 0.5f, 7});
  clip_grad_value_({a}, 1.0);
  EXPECT_EQ(to_vector<float>(a.grad()), (std::vector<float>{-1, 0.5f, 1}));
}

}  // namespace
}  // namespace ember::optim
