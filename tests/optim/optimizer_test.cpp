// SGD, Adam and AdamW against PyTorch's documented algorithms (plain double loops), fused against
// reference paths, f32 master weights for f16/bf16 models, state dicts, groups and errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "optim/optim.h"
#include "runtime/io/checkpoint.h"
#include "runtime/ops.h"
#include "tests/common/expect_error.h"

namespace ember::optim {
namespace {

constexpr int kSize = 37;

// A deterministic gradient for step `step` (1-based), element i.
double grad_value(int step, int i) {
  return 0.5 * std::sin(0.7 * i + 1.3 * step) + 0.1 * std::cos(0.3 * i) - 0.05 * step;
}

std::vector<double> initial_values(int n) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i)
    v[i] = std::cos(0.37 * i) - 0.2;
  return v;
}

Tensor make_param(const std::vector<double>& values, DType dtype = DType::f32) {
  std::vector<float> f(values.begin(), values.end());
  Tensor p = from_vector(f, {static_cast<int64_t>(f.size())}).to(dtype);
  p.requires_grad_();
  return p;
}

void set_step_grad(const Tensor& param, int step) {
  std::vector<float> g(param.numel());
  for (size_t i = 0; i < g.size(); ++i)
    g[i] = static_cast<float>(grad_value(step, static_cast<int>(i)));
  param.set_grad(from_vector(g, param.sizes()).to(param.dtype()));
}

void expect_near_vec(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << "element " << i;
}

// ---- SGD ---------------------------------------------------------------------------------------

struct SgdCase {
  double momentum, dampening, weight_decay;
  bool nesterov, maximize;
};

std::vector<double> sgd_expected(const SgdCase& c, double lr, int steps) {
  std::vector<double> p = initial_values(kSize), buf(kSize, 0.0);
  for (int t = 1; t <= steps; ++t) {
    for (int i = 0; i < kSize; ++i) {
      double d = grad_value(t, i);
      if (c.maximize) d = -d;
      d += c.weight_decay * p[i];
      if (c.momentum != 0) {
        buf[i] = t == 1 ? d : c.momentum * buf[i] + (1 - c.dampening) * d;
        d = c.nesterov ? d + c.momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
  }
  return p;
}

class SgdTest : public ::testing::TestWithParam<std::tuple<SgdCase, bool>> {};

TEST_P(SgdTest, ThreeStepsMatchPyTorchsAlgorithm) {
  const auto [c, fused] = GetParam();
  Tensor p = make_param(initial_values(kSize));
  SGD sgd({p}, {.lr = 0.1,
                .momentum = c.momentum,
                .dampening = c.dampening,
                .weight_decay = c.weight_decay,
                .nesterov = c.nesterov,
                .maximize = c.maximize,
                .fused = fused});
  for (int t = 1; t <= 3; ++t) {
    set_step_grad(p, t);
    sgd.step();
  }
  expect_near_vec(to_vector<float>(p), sgd_expected(c, 0.1, 3), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Configs, SgdTest,
                         ::testing::Combine(::testing::Values(SgdCase{0.0, 0.0, 0.0, false, false},
                                                              SgdCase{0.9, 0.0, 0.0, false, false},
                                                              SgdCase{0.9, 0.0, 0.0, true, false},
                                                              SgdCase{0.9, 0.1, 0.01, false, false},
                                                              SgdCase{0.9, 0.0, 0.01, true, false},
                                                              SgdCase{0.5, 0.0, 0.1, false, true},
                                                              SgdCase{0.0, 0.0, 0.1, false, false}),
                                            ::testing::Bool()));

// ---- Adam, AdamW -------------------------------------------------------------------------------

struct AdamCase {
  bool decoupled, amsgrad, maximize;
  double weight_decay;
};

std::vector<double> adam_expected(const AdamCase& c, double lr, double beta1, double beta2,
                                  double eps, int steps) {
  std::vector<double> p = initial_values(kSize), m(kSize, 0.0), v(kSize, 0.0), vmax(kSize, 0.0);
  for (int t = 1; t <= steps; ++t) {
    for (int i = 0; i < kSize; ++i) {
      double g = grad_value(t, i);
      if (c.maximize) g = -g;
      if (c.decoupled) {
        p[i] *= 1 - lr * c.weight_decay;
      } else {
        g += c.weight_decay * p[i];
      }
      m[i] = beta1 * m[i] + (1 - beta1) * g;
      v[i] = beta2 * v[i] + (1 - beta2) * g * g;
      const double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
      vmax[i] = std::max(vmax[i], v[i]);
      const double vhat = (c.amsgrad ? vmax[i] : v[i]) / bc2;
      p[i] -= lr * (m[i] / bc1) / (std::sqrt(vhat) + eps);
    }
  }
  return p;
}

class AdamTest : public ::testing::TestWithParam<std::tuple<AdamCase, bool>> {};

TEST_P(AdamTest, ThreeStepsMatchPyTorchsAlgorithm) {
  const auto [c, fused] = GetParam();
  Tensor p = make_param(initial_values(kSize));
  AdamOptions options;
  options.lr = 0.01;
  options.beta1 = 0.8;
  options.beta2 = 0.95;
  options.eps = 1e-6;
  options.weight_decay = c.weight_decay;
  options.amsgrad = c.amsgrad;
  options.maximize = c.maximize;
  options.fused = fused;
  std::unique_ptr<Optimizer> adam;
  if (c.decoupled) {
    AdamWOptions w;
    static_cast<AdamOptions&>(w) = options;
    adam = std::make_unique<AdamW>(std::vector<Tensor>{p}, w);
    EXPECT_EQ(adam->name(), "AdamW");
  } else {
    adam = std::make_unique<Adam>(std::vector<Tensor>{p}, options);
    EXPECT_EQ(adam->name(), "Adam");
  }
  for (int t = 1; t <= 3; ++t) {
    set_step_grad(p, t);
    adam->step();
  }
  expect_near_vec(to_vector<float>(p), adam_expected(c, 0.01, 0.8, 0.95, 1e-6, 3), 1e-6);
  EXPECT_EQ(adam->state(0, 0).step, 3);
  EXPECT_EQ(adam->state(0, 0).tensors.count("max_exp_avg_sq"), c.amsgrad ? 1u : 0u);
}

INSTANTIATE_TEST_SUITE_P(Configs, AdamTest,
                         ::testing::Combine(::testing::Values(AdamCase{false, false, false, 0.0},
                                                              AdamCase{false, false, false, 0.1},
                                                              AdamCase{false, true, false, 0.1},
                                                              AdamCase{false, false, true, 0.0},
                                                              AdamCase{true, false, false, 0.1},
                                                              AdamCase{true, true, false, 0.1},
                                                              AdamCase{true, true, true, 0.05}),
                                            ::testing::Bool()));

TEST(AdamW, DefaultsArePyTorchs) {
  Tensor p = make_param(initial_values(4));
  AdamW adamw({p});
  const ParamGroup& g = adamw.param_groups()[0];
  EXPECT_DOUBLE_EQ(g.lr, 1e-3);
  EXPECT_DOUBLE_EQ(g.weight_decay, 1e-2);
  EXPECT_DOUBLE_EQ(g.beta1, 0.9);
  EXPECT_DOUBLE_EQ(g.beta2, 0.999);
  EXPECT_DOUBLE_EQ(g.eps, 1e-8);
  Adam adam({make_param(initial_values(4))});
  EXPECT_DOUBLE_EQ(adam.param_groups()[0].weight_decay, 0.0);
}

// ---- fused == reference, bit for bit ------------------------------------------------------------

// Random parameters and gradients large enough for the kernels' OpenMP split.
std::vector<Tensor> random_params(const std::vector<int64_t>& sizes, uint64_t seed) {
  manual_seed(seed);
  std::vector<Tensor> params;
  for (int64_t n : sizes) {
    Tensor p = randn({n});
    p.requires_grad_();
    params.push_back(p);
  }
  return params;
}

std::vector<Tensor> clone_params(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) {
    Tensor c = p.detach().clone();
    c.requires_grad_();
    out.push_back(c);
  }
  return out;
}

void set_random_grads(std::vector<Tensor>& a, std::vector<Tensor>& b, uint64_t seed) {
  manual_seed(seed);
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor g = randn(a[i].sizes()).to(a[i].dtype());
    a[i].set_grad(g.clone());
    b[i].set_grad(g.clone());
  }
}

void expect_bit_equal(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = to_vector<float>(a), y = to_vector<float>(b);
  ASSERT_EQ(x.size(), y.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < x.size(); ++i)
    mismatches += std::memcmp(&x[i], &y[i], sizeof(float)) != 0;
  EXPECT_EQ(mismatches, 0u) << "of " << x.size();
}

// Parameters a (stepped by fused) and b (by reference), and every state tensor, bit for bit.
void expect_same_params_and_state(const std::vector<Tensor>& a, const Optimizer& fused,
                                  const std::vector<Tensor>& b, const Optimizer& reference) {
  for (size_t i = 0; i < a.size(); ++i) {
    expect_bit_equal(a[i], b[i]);
    for (const auto& [key, tensor] : fused.state(0, i).tensors)
      expect_bit_equal(tensor, reference.state(0, i).tensors.at(key));
  }
}

template <typename Make>
void check_fused_equals_reference(Make make) {
  std::vector<Tensor> a = random_params({100003, 7, 1}, 11);
  std::vector<Tensor> b = clone_params(a);
  std::unique_ptr<Optimizer> fused = make(a, true);
  std::unique_ptr<Optimizer> reference = make(b, false);
  EXPECT_TRUE(fused->fused());
  EXPECT_FALSE(reference->fused());
  for (int step = 0; step < 5; ++step) {
    set_random_grads(a, b, 100 + step);
    fused->step();
    reference->step();
  }
  expect_same_params_and_state(a, *fused, b, *reference);
}

TEST(FusedOptimizers, SgdEqualsReferenceBitForBit) {
  for (bool nesterov : {false, true}) {
    check_fused_equals_reference([&](std::vector<Tensor> params, bool fused) {
      return std::make_unique<SGD>(params, SGDOptions{.lr = 0.05,
                                                      .momentum = 0.9,
                                                      .dampening = nesterov ? 0.0 : 0.1,
                                                      .weight_decay = 1e-3,
                                                      .nesterov = nesterov,
                                                      .fused = fused});
    });
  }
}

// The fused step is a vectorised loop compiled per ISA (AVX-512 on this machine); with amsgrad
// two passes per chunk. Both must match.
TEST(FusedOptimizers, AdamEqualsReferenceBitForBit) {
  for (bool amsgrad : {false, true}) {
    for (bool maximize : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "amsgrad " << amsgrad << ", maximize " << maximize);
      check_fused_equals_reference([&](std::vector<Tensor> params, bool fused) {
        AdamOptions o;
        o.lr = 3e-3;
        o.weight_decay = 0.01;
        o.amsgrad = amsgrad;
        o.maximize = maximize;
        o.fused = fused;
        return std::make_unique<Adam>(params, o);
      });
    }
  }
}

// amsgrad's running maximum keeps a NaN (torch.maximum propagates it) and an infinity: a gradient
// with NaN and infinities in one step, and a NaN put into the maximum alone (its v stays finite),
// leave the same values, bit for bit, in both paths.
TEST(FusedOptimizers, AmsgradCarriesNaNAndInfinityAsTheReferenceDoes) {
  std::vector<Tensor> a = random_params({100003}, 12);
  std::vector<Tensor> b = clone_params(a);
  AdamOptions o;
  o.lr = 3e-3;
  o.amsgrad = true;
  o.fused = true;
  Adam fused(a, o);
  o.fused = false;
  Adam reference(b, o);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int step = 0; step < 4; ++step) {
    set_random_grads(a, b, 200 + step);
    if (step == 1) {
      std::vector<float> g = to_vector<float>(a[0].grad());
      g[5] = nan;
      g[70001] = inf;
      g[70002] = -inf;
      a[0].set_grad(from_vector(g, {100003}));
      b[0].set_grad(from_vector(g, {100003}));
    }
    if (step == 2) {
      for (Adam* adam : {&fused, &reference})
        adam->state(0, 0).tensors.at("max_exp_avg_sq").data<float>()[9] = nan;
    }
    fused.step();
    reference.step();
  }
  const std::vector<float> max_v = to_vector<float>(fused.state(0, 0).tensors.at("max_exp_avg_sq"));
  EXPECT_TRUE(std::isnan(max_v[5]));
  EXPECT_TRUE(std::isnan(max_v[9]));
  EXPECT_TRUE(std::isnan(to_vector<float>(a[0])[9]));
  EXPECT_EQ(max_v[70001], inf);
  EXPECT_EQ(max_v[70002], inf);
  expect_same_params_and_state(a, fused, b, reference);
}

TEST(FusedOptimizers, AdamWEqualsReferenceBitForBit) {
  for (double beta1 : {0.9, 0.3}) {  // 0.3: torch.lerp's other form (weight >= 0.5)
    for (bool amsgrad : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "beta1 " << beta1 << ", amsgrad " << amsgrad);
      check_fused_equals_reference([&](std::vector<Tensor> params, bool fused) {
        AdamWOptions o;
        o.lr = 3e-3;
        o.beta1 = beta1;
        o.amsgrad = amsgrad;
        o.fused = fused;
        return std::make_unique<AdamW>(params, o);
      });
    }
  }
}

// ---- master weights -----------------------------------------------------------------------------

// The model in low precision, and an f32 twin fed the same (low-precision) gradients and stepped
// by the reference path (ember ops), which the fused kernels match bit for bit.
void expect_model_follows_an_f32_master(DType dtype, bool fused, int size) {
  Tensor model = make_param(initial_values(size), dtype);
  Tensor twin = model.detach().to(DType::f32).clone();
  twin.requires_grad_();
  AdamWOptions o;
  o.lr = 0.01;
  o.fused = fused;
  AdamWOptions reference = o;
  reference.fused = false;
  AdamW low({model}, o), high({twin}, reference);
  ASSERT_EQ(low.state(0, 0).tensors.count("master"), 1u);
  EXPECT_EQ(low.master_param(0, 0).dtype(), DType::f32);
  for (int t = 1; t <= 4; ++t) {
    set_step_grad(model, t);
    twin.set_grad(model.grad().to(DType::f32));
    low.step();
    high.step();
  }
  EXPECT_EQ(model.dtype(), dtype);
  expect_bit_equal(low.master_param(0, 0), twin);
  // The model holds the master rounded to nearest even.
  expect_bit_equal(model.to(DType::f32), twin.detach().to(dtype).to(DType::f32));
  // The master moved by less than the low-precision spacing in places, which a low-precision
  // update would have lost: the master differs from the model somewhere.
  EXPECT_FALSE(allclose(low.master_param(0, 0), model.to(DType::f32), 0.0, 0.0));
}

class MasterWeightsTest : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(MasterWeightsTest, LowPrecisionModelFollowsAnF32Master) {
  const auto [dtype, fused] = GetParam();
  // 70001: the fused step's thread slices and f32 chunks, a partial chunk at the end of each.
  for (int size : {kSize, 70001}) {
    SCOPED_TRACE("size " + std::to_string(size));
    expect_model_follows_an_f32_master(dtype, fused, size);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MasterWeightsTest,
                         ::testing::Combine(::testing::Values(DType::f16, DType::bf16),
                                            ::testing::Bool()));

TEST(MasterWeights, SgdMatchesTheF32Twin) {
  Tensor model = make_param(initial_values(kSize), DType::bf16);
  Tensor twin = model.detach().to(DType::f32).clone();
  twin.requires_grad_();
  SGD low({model}, {.lr = 0.1, .momentum = 0.9}), high({twin}, {.lr = 0.1, .momentum = 0.9});
  for (int t = 1; t <= 3; ++t) {
    set_step_grad(model, t);
    twin.set_grad(model.grad().to(DType::f32));
    low.step();
    high.step();
  }
  expect_bit_equal(low.master_param(0, 0), twin);
  expect_bit_equal(model.to(DType::f32), twin.detach().to(DType::bf16).to(DType::f32));
}

// ---- state dicts --------------------------------------------------------------------------------

namespace fs = std::filesystem;

class StateDictTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ember_optim_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

template <typename Make>
void check_round_trip(const std::string& path, Make make) {
  std::vector<Tensor> a = random_params({33, 5}, 3);
  std::vector<Tensor> b = clone_params(a);
  std::unique_ptr<Optimizer> uninterrupted = make(a);
  std::unique_ptr<Optimizer> first = make(b);
  for (int step = 0; step < 3; ++step) {
    set_random_grads(a, b, 200 + step);
    uninterrupted->step();
    first->step();
  }
  const StateDict saved = first->state_dict();
  save_checkpoint(path, saved.tensors, saved.metadata);
  // A fresh optimizer over parameters restored from the saved values.
  std::vector<Tensor> c = clone_params(b);
  std::unique_ptr<Optimizer> resumed = make(c);
  resumed->load_state_dict(load_checkpoint(path));
  for (int step = 3; step < 6; ++step) {
    set_random_grads(a, c, 200 + step);
    uninterrupted->step();
    resumed->step();
  }
  for (size_t i = 0; i < a.size(); ++i)
    expect_bit_equal(a[i], c[i]);
  EXPECT_EQ(resumed->state(0, 0).step, 6);
}

TEST_F(StateDictTest, AdamRoundTripContinuesBitExactly) {
  check_round_trip(file("adam.ckpt"), [](std::vector<Tensor> params) {
    AdamOptions o;
    o.lr = 0.0123456789012345678;  // needs all 17 digits to read back exactly
    o.amsgrad = true;
    o.weight_decay = 0.01;
    return std::make_unique<Adam>(params, o);
  });
}

TEST_F(StateDictTest, SgdRoundTripContinuesBitExactly) {
  check_round_trip(file("sgd.ckpt"), [](std::vector<Tensor> params) {
    return std::make_unique<SGD>(params, SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
  });
}

TEST_F(StateDictTest, HyperParametersAndNamesAreRecorded) {
  Tensor w = make_param(initial_values(3)), b = make_param(initial_values(2));
  AdamW adamw(NamedParameters{{"layer.weight", w}, {"layer.bias", b}}, AdamWOptions{});
  adamw.param_groups()[0].lr = 0.1 / 3.0;
  const StateDict state = adamw.state_dict();
  EXPECT_EQ(state.metadata.at("optim.type"), "AdamW");
  EXPECT_EQ(state.metadata.at("optim.group.0.num_params"), "2");
  EXPECT_EQ(std::stod(state.metadata.at("optim.group.0.lr")), 0.1 / 3.0);
  EXPECT_EQ(state.metadata.at("optim.group.0.param.1.name"), "layer.bias");
  EXPECT_TRUE(state.tensors.empty());  // no step taken yet

  AdamW other(NamedParameters{{"layer.weight", make_param(initial_values(3))},
                              {"layer.bias", make_param(initial_values(2))}},
              AdamWOptions{});
  other.load_state_dict(state);
  EXPECT_EQ(other.param_groups()[0].lr, 0.1 / 3.0);
}

TEST(StateDictErrors, MismatchesAreRefusedWithClearMessages) {
  Tensor p = make_param(initial_values(4)), q = make_param(initial_values(3));
  Adam adam({p, q});
  set_step_grad(p, 1);
  set_step_grad(q, 1);
  adam.step();
  const StateDict state = adam.state_dict();

  const auto expect_error = [](auto fn, const std::string& text) {
    try {
      fn();
      ADD_FAILURE() << "expected an error containing '" << text << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  SGD sgd({make_param(initial_values(4)), make_param(initial_values(3))});
  expect_error([&] { sgd.load_state_dict(state); }, "the state dict is for optimizer 'Adam'");

  Adam one({make_param(initial_values(4))});
  expect_error([&] { one.load_state_dict(state); }, "wrong number of parameters");

  Adam shapes({make_param(initial_values(4)), make_param(initial_values(5))});
  expect_error([&] { shapes.load_state_dict(state); }, "shape mismatch for 'state.0.1.exp_avg'");
  // Nothing was half-loaded.
  EXPECT_EQ(shapes.state(0, 0).step, 0);

  StateDict no_type = state;
  no_type.metadata.erase("optim.type");
  Adam fresh({make_param(initial_values(4)), make_param(initial_values(3))});
  expect_error([&] { fresh.load_state_dict(no_type); }, "unknown optimizer type");

  StateDict unknown = state;
  unknown.tensors.emplace_back("state.0.0.velocity", zeros({4}));
  expect_error([&] { fresh.load_state_dict(unknown); }, "unknown state 'velocity'");

  // A parameter's state is whole or absent: without its moments, a stepped parameter would resume
  // from zeros; without its step, from step 0 (Adam's bias correction restarted).
  auto without = [&](const std::string& name) {
    StateDict partial = state;
    std::erase_if(partial.tensors, [&](const auto& entry) { return entry.first == name; });
    return partial;
  };
  expect_error([&] { fresh.load_state_dict(without("state.0.1.exp_avg_sq")); },
               "no 'state.0.1.exp_avg_sq', though that parameter has taken 1 steps");
  expect_error([&] { fresh.load_state_dict(without("state.0.0.step")); },
               "state tensors for 'state.0.0.*' but no 'state.0.0.step'");
  StateDict bad_step = state;
  for (auto& [name, tensor] : bad_step.tensors)
    if (name == "state.0.0.step") tensor = scalar_tensor(-1.0, DType::f64);
  expect_error([&] { fresh.load_state_dict(bad_step); }, "should hold a step count, got -1");
  EXPECT_EQ(fresh.state(0, 0).step, 0);  // nothing was half-loaded
  // A parameter that never stepped has no state at all: that loads.
  StateDict never_stepped = without("state.0.1.exp_avg");
  std::erase_if(never_stepped.tensors,
                [](const auto& entry) { return entry.first.rfind("state.0.1.", 0) == 0; });
  fresh.load_state_dict(never_stepped);
  EXPECT_EQ(fresh.state(0, 0).step, 1);
  EXPECT_EQ(fresh.state(0, 1).step, 0);
}

// ---- groups, zero_grad, errors ------------------------------------------------------------------

TEST(ParamGroups, EachGroupUsesItsOwnLearningRate) {
  Tensor a = make_param(initial_values(kSize)), b = make_param(initial_values(kSize));
  SGDOptions o{.lr = 0.1};
  ParamGroup slow = o.group({b});
  slow.lr = 0.01;
  SGD sgd({o.group({a}), slow});
  ASSERT_EQ(sgd.param_groups().size(), 2u);
  set_step_grad(a, 1);
  set_step_grad(b, 1);
  sgd.step();
  expect_near_vec(to_vector<float>(a), sgd_expected({0, 0, 0, false, false}, 0.1, 1), 1e-6);
  expect_near_vec(to_vector<float>(b), sgd_expected({0, 0, 0, false, false}, 0.01, 1), 1e-6);
  // A scheduler-style change of one group's lr takes effect on the next step.
  sgd.param_groups()[1].lr = 0.0;
  const std::vector<float> before = to_vector<float>(b);
  set_step_grad(b, 2);
  sgd.step();
  EXPECT_EQ(to_vector<float>(b), before);
}

TEST(ParamGroups, ParametersWithoutGradientsAreSkipped) {
  Tensor a = make_param(initial_values(5)), b = make_param(initial_values(5));
  Adam adam({a, b}, AdamOptions{.lr = 0.1});
  set_step_grad(a, 1);
  adam.step();
  EXPECT_EQ(to_vector<float>(b), to_vector<float>(make_param(initial_values(5))));
  EXPECT_EQ(adam.state(0, 1).step, 0);
  EXPECT_EQ(adam.state(0, 0).step, 1);
}

TEST(ZeroGrad, SetToNoneOrZeroInPlace) {
  Tensor p = make_param(initial_values(4));
  SGD sgd({p});
  set_step_grad(p, 1);
  sgd.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(p.grad().defined());
  EXPECT_EQ(to_vector<float>(p.grad()), std::vector<float>(4, 0.0f));
  sgd.zero_grad();
  EXPECT_FALSE(p.grad().defined());
  sgd.zero_grad();  // no gradient: nothing to do
  EXPECT_FALSE(p.grad().defined());
}

TEST(ZeroGrad, WorksAfterBackward) {
  Tensor p = make_param(initial_values(4));
  sum(mul(p, p)).backward();
  SGD sgd({p}, {.lr = 0.5});
  sgd.step();  // p -= 0.5 * 2p = 0
  EXPECT_EQ(to_vector<float>(p), std::vector<float>(4, 0.0f));
  sgd.zero_grad(false);
  EXPECT_EQ(to_vector<float>(p.grad()), std::vector<float>(4, 0.0f));
}

// A parameter whose data is replaced with another size no longer fits the state its optimizer
// made for it (moments after a step, an f16/bf16 master from the start): the step refuses it,
// where the fused kernels read and wrote past the smaller of the two.
TEST(StepErrors, AParameterResizedUnderItsOptimizerIsRefused) {
  for (const bool fused : {true, false}) {
    for (const DType dtype : {DType::f32, DType::bf16}) {
      for (const bool step_first : {true, false}) {
        for (const int kind : {0, 1, 2}) {  // SGD with momentum, Adam, AdamW
          Tensor p = make_param(initial_values(8), dtype);
          std::unique_ptr<Optimizer> optimizer;
          if (kind == 0) {
            optimizer = std::make_unique<SGD>(
                std::vector<Tensor>{p}, SGDOptions{.lr = 0.1, .momentum = 0.9, .fused = fused});
          } else if (kind == 1) {
            optimizer = std::make_unique<Adam>(std::vector<Tensor>{p}, AdamOptions{.fused = fused});
          } else {
            AdamWOptions options;
            options.fused = fused;
            optimizer = std::make_unique<AdamW>(std::vector<Tensor>{p}, options);
          }
          const std::string what = optimizer->name() + (fused ? " fused " : " reference ") +
                                   dtype_name(dtype) + (step_first ? ", after a step" : "");
          if (step_first) {
            p.set_grad(ones({8}, dtype));
            optimizer->step();
          }
          p.set_data(zeros({3}, dtype));
          p.set_grad(ones({3}, dtype));
          const bool has_state = step_first || dtype == DType::bf16;
          if (!has_state) {
            optimizer->step();  // no state yet: it is made for the new size
            continue;
          }
          SCOPED_TRACE(what);
          EXPECT_ERROR_WITH(optimizer->step(), "no longer matches its", "Make a new optimizer");
        }
      }
    }
  }
}

// model.to(f16) after the optimizer was built (the parameter had no f32 master then): the next
// step makes the master from the parameter's current values and updates it as any f16 one.
TEST(StepErrors, AParameterMadeSixteenBitAfterTheOptimizerGetsItsMasterAtTheNextStep) {
  for (const bool fused : {true, false}) {
    Tensor p = make_param(initial_values(8));
    Adam adam({p}, AdamOptions{.fused = fused});
    p.set_data(p.detach().to(DType::f16));
    p.set_grad(ones({8}, DType::f16));
    adam.step();
    EXPECT_EQ(p.dtype(), DType::f16);
    EXPECT_EQ(adam.master_param(0, 0).dtype(), DType::f32);
    const Tensor moved = abs(p.to(DType::f32) - make_param(initial_values(8)).detach());
    EXPECT_GT(min(moved).item<double>(), 0.0) << (fused ? "fused" : "reference");
  }
}

TEST(HyperParameterErrors, BadValuesAreRefused) {
  const auto expect_error = [](auto fn, const std::string& text) {
    try {
      fn();
      ADD_FAILURE() << "expected an error containing '" << text << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  const auto p = [] { return std::vector<Tensor>{make_param(initial_values(3))}; };
  expect_error([&] { SGD(p(), {.lr = -0.1}); }, "SGD: invalid learning rate -0.1");
  expect_error([&] { SGD(p(), {.momentum = -1}); }, "invalid momentum");
  expect_error([&] { SGD(p(), {.lr = 0.1, .nesterov = true}); }, "Nesterov momentum requires");
  expect_error([&] { Adam(p(), {.lr = -1.0}); }, "Adam: invalid learning rate -1");
  expect_error([&] { Adam(p(), {.beta1 = 1.0}); }, "invalid beta1 1 (expected 0 <= beta1 < 1)");
  expect_error([&] { Adam(p(), {.beta2 = -0.1}); }, "invalid beta2 -0.1");
  expect_error([&] { Adam(p(), {.eps = -1e-8}); }, "invalid epsilon");
  AdamWOptions bad;
  bad.weight_decay = -1;
  expect_error([&] { AdamW(p(), bad); }, "AdamW: invalid weight_decay");
  Tensor shared = make_param(initial_values(3));
  expect_error([&] { SGD({shared, shared}); }, "appears twice");
  Tensor non_leaf = mul(make_param(initial_values(3)), 2.0);
  expect_error([&] { SGD({non_leaf}); }, "non-leaf");
  expect_error([&] { SGD(std::vector<Tensor>{}); }, "no parameters");
}

}  // namespace
}  // namespace ember::optim
