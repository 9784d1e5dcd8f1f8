// What the batch-norm-and-ReLU fusion tests share (tests/nn on the CPU, tests/cuda on a GPU): one
// training or eval step of a model, and the comparison of a fused step with the two layers run
// apart.
//
// Header-only; compiles in every build.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "nn/nn.h"
#include "runtime/autograd/node.h"
#include "runtime/ops.h"

namespace ember::testing {

// Sets the fusion switch for a scope, and restores it when the scope ends.
class FusionSwitch {
 public:
  explicit FusionSwitch(bool fuse) : before_(nn::fuse_batch_norm_relu()) {
    nn::set_fuse_batch_norm_relu(fuse);
  }
  ~FusionSwitch() { nn::set_fuse_batch_norm_relu(before_); }
  FusionSwitch(const FusionSwitch&) = delete;
  FusionSwitch& operator=(const FusionSwitch&) = delete;

 private:
  bool before_;
};

inline std::vector<double> values_of(const Tensor& t) {
  return to_vector<double>(t.detach().to(Device::cpu()).to(DType::f64).contiguous());
}

// Equal values, NaN where the other has NaN (-0 equals +0: see batch_norm_relu's contract).
inline void expect_same_values(const Tensor& actual, const Tensor& expected,
                               const std::string& what) {
  const std::vector<double> a = values_of(actual), e = values_of(expected);
  ASSERT_EQ(a.size(), e.size()) << what;
  int64_t differ = 0, first = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = std::isnan(a[i]) ? std::isnan(e[i]) : a[i] == e[i];
    if (!same && differ++ == 0) first = static_cast<int64_t>(i);
  }
  EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << a.size() << " values differ, the "
                       << "first at " << first << " (" << (first >= 0 ? a[first] : 0.0)
                       << " against " << (first >= 0 ? e[first] : 0.0) << ")";
}

// A batch norm and a ReLU, as in resnet9's blocks.
inline std::shared_ptr<nn::Sequential> batch_norm_relu_block(int64_t channels) {
  return nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      nn::make<nn::BatchNorm2d>(channels), nn::make<nn::ReLU>()});
}

// A step of `model` on a leaf copy of x: the output, the input's gradient, and the model's
// parameters' gradients and buffers after it. The loss is a weighted sum, so that every output
// element has a gradient of its own.
struct StepResult {
  Tensor output, input_grad;
  NamedTensors gradients, buffers;
};
inline StepResult step(nn::Module& model, const Tensor& x_values, bool training) {
  model.train(training);
  model.zero_grad();
  Tensor x = x_values.clone().requires_grad_(true);
  StepResult result;
  result.output = model.forward(x);
  const Tensor weights = (arange(result.output.numel()).to(DType::f64) * 0.01 + 1.0)
                             .reshape(result.output.sizes())
                             .to(result.output.device(), result.output.dtype());
  sum(result.output * weights).backward();
  result.input_grad = x.grad();
  for (const auto& [name, p] : model.named_parameters())
    result.gradients.emplace_back(name, p.grad().clone());
  for (const auto& [name, b] : model.named_buffers())
    result.buffers.emplace_back(name, b.clone());
  return result;
}

inline void expect_same_steps(const StepResult& fused, const StepResult& separate,
                              const std::string& what) {
  expect_same_values(fused.output, separate.output, what + ", output");
  expect_same_values(fused.input_grad, separate.input_grad, what + ", input gradient");
  ASSERT_EQ(fused.gradients.size(), separate.gradients.size());
  for (size_t i = 0; i < fused.gradients.size(); ++i)
    expect_same_values(fused.gradients[i].second, separate.gradients[i].second,
                       what + ", gradient of " + fused.gradients[i].first);
  ASSERT_EQ(fused.buffers.size(), separate.buffers.size());
  for (size_t i = 0; i < fused.buffers.size(); ++i)
    expect_same_values(fused.buffers[i].second, separate.buffers[i].second,
                       what + ", buffer " + fused.buffers[i].first);
}

inline const char* grad_fn_name(const Tensor& t) {
  return t.grad_fn() ? t.grad_fn()->name() : "(none)";
}

// The step of a copy of `model` on x with the fusion on, against that of another copy with it off.
// Checks that the fused run went through batch_norm_relu's node and the other through relu's.
inline void expect_fused_step_like_separate(const nn::Module& model, const Tensor& x, bool training,
                                            const std::string& what) {
  auto fused_model = model.clone(), separate_model = model.clone();
  StepResult fused, separate;
  {
    FusionSwitch on(true);
    fused = step(*fused_model, x, training);
    EXPECT_STREQ(grad_fn_name(fused.output), "batch_norm_relu") << what;
  }
  {
    FusionSwitch off(false);
    separate = step(*separate_model, x, training);
    EXPECT_STREQ(grad_fn_name(separate.output), "relu") << what;
  }
  expect_same_steps(fused, separate, what);
}

}  // namespace ember::testing
