// Sequential runs a batch norm followed by a ReLU as one batch_norm_relu: the same outputs, running
// statistics and gradients as the two layers one after the other, in every floating dtype, in
// training and in eval; only exact BatchNorm and ReLU layers fuse; the switch turns it off.
// (tests/cuda/batch_norm_relu_test.cpp checks the same on a GPU.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>

#include "nn/nn.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/common/fusion_steps.h"

namespace ember::testing {
namespace {

TEST(BatchNormReluFusion, SequentialGivesTheValuesAndGradientsOfTheTwoLayers) {
  for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    for (bool training : {true, false}) {
      manual_seed(7);
      auto model = batch_norm_relu_block(5);
      model->to(dtype);
      // Planes of 7 x 9 = 63 values: the CPU kernels' vector loops and their odd tails.
      const Tensor x = (randn({4, 5, 7, 9}) * 2.0 + 0.3).to(dtype);
      expect_fused_step_like_separate(
          *model, x, training, std::string(dtype_name(dtype)) + (training ? " training" : " eval"));
    }
  }
}

// In eval the statistics are constants, so a NaN input stays one value's NaN: relu keeps it, and
// ReLU's backward passes the gradient on through it (PyTorch's threshold_backward), fused or not.
TEST(BatchNormReluFusion, ANanOutputPassesTheGradientOnAsReluDoes) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    manual_seed(11);
    auto model = batch_norm_relu_block(3);
    model->to(dtype);
    Tensor x = randn({2, 3, 4, 4});
    x.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
    x = x.to(dtype);
    expect_fused_step_like_separate(*model, x, false, std::string(dtype_name(dtype)) + " NaN");
    FusionSwitch on(true);
    const StepResult fused = step(*model, x, false);
    EXPECT_TRUE(std::isnan(values_of(fused.output)[5]));
    EXPECT_FALSE(std::isnan(values_of(fused.input_grad)[5]))
        << "the gradient at a NaN output is passed on (times w rstd), not dropped or NaN";
  }
}

class ShiftedBatchNorm2d : public nn::BatchNorm2d {
 public:
  using BatchNorm2d::BatchNorm2d;
  Tensor forward(const Tensor& x) override { return BatchNorm2d::forward(x) - 100.0; }
};
class DoubledReLU : public nn::ReLU {
 public:
  Tensor forward(const Tensor& x) override { return ReLU::forward(x) * 2.0; }
};

TEST(BatchNormReluFusion, OnlyExactBatchNormAndReluLayersFuse) {
  FusionSwitch on(true);
  nn::BatchNorm1d bn1(3);
  nn::BatchNorm2d bn2(3);
  ShiftedBatchNorm2d shifted(3);
  nn::ReLU relu;
  DoubledReLU doubled;
  nn::GELU gelu;
  EXPECT_TRUE(nn::fusable_with_relu(bn1, relu));
  EXPECT_TRUE(nn::fusable_with_relu(bn2, relu));
  EXPECT_FALSE(nn::fusable_with_relu(shifted, relu)) << "a subclass may override forward";
  EXPECT_FALSE(nn::fusable_with_relu(bn2, doubled));
  EXPECT_FALSE(nn::fusable_with_relu(bn2, gelu));
  EXPECT_FALSE(nn::fusable_with_relu(relu, bn2));
  nn::set_fuse_batch_norm_relu(false);
  EXPECT_FALSE(nn::fusable_with_relu(bn2, relu));
  nn::set_fuse_batch_norm_relu(true);

  // The override still runs inside a Sequential: every value is shifted below 0, then ReLU's 0.
  manual_seed(3);
  nn::Sequential model({nn::make<ShiftedBatchNorm2d>(2), nn::make<nn::ReLU>()});
  const Tensor y = model.forward(randn({2, 2, 3, 3}).requires_grad_(true));
  EXPECT_EQ(values_of(max(y))[0], 0.0);
  EXPECT_STREQ(grad_fn_name(y), "relu");
}

// The switch is read once, on first use, from EMBER_FUSE_BN_RELU: 0 turns it off, and a bad value
// is an exception that says what it expected. Each case runs in a process of its own.
TEST(BatchNormReluFusion, TheEnvironmentSwitchIsReadOnFirstUse) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("EMBER_FUSE_BN_RELU", "0", 1);
        std::exit(nn::fuse_batch_norm_relu() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        unsetenv("EMBER_FUSE_BN_RELU");
        std::exit(nn::fuse_batch_norm_relu() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("EMBER_FUSE_BN_RELU", "on", 1);
        try {
          nn::fuse_batch_norm_relu();
        } catch (const Error& error) {
          std::cerr << error.what() << std::endl;
          std::exit(0);
        }
        std::exit(1);
      },
      ::testing::ExitedWithCode(0), "EMBER_FUSE_BN_RELU='on': expected 1 \\(");
}

}  // namespace
}  // namespace ember::testing
