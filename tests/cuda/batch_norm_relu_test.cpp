// nn::Sequential's fused batch norm and ReLU on a GPU: the same outputs, running statistics and
// gradients as the two layers run apart, in f32, f16 and bf16, training and eval, on planes that
// take the kernels' 16-byte vectors and planes that do not; a NaN output passes its gradient on.
// (The CPU's twin is tests/nn/batch_norm_relu_fusion_test.cpp; CudaOpCaseTest compares
// batch_norm_relu itself with the CPU.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/common/fusion_steps.h"
#include "tests/cuda/support.h"

namespace ember::testing {
namespace {

TEST(CudaBatchNormRelu, FusedStepGivesTheValuesAndGradientsOfTheTwoLayers) {
  EMBER_SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  // 16 x 14 = 224 values a plane: 16-byte vectors in every dtype; 7 x 9 = 63: one value at a time.
  for (const Shape& shape : {Shape{8, 6, 16, 14}, Shape{3, 5, 7, 9}}) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      for (bool training : {true, false}) {
        manual_seed(5);
        auto model = batch_norm_relu_block(shape[1]);
        model->to(gpu, dtype);
        const Tensor x = (randn(shape) * 2.0 + 0.3).to(gpu, dtype);
        expect_fused_step_like_separate(*model, x, training,
                                        describe(x) + (training ? " training" : " eval"));
      }
    }
  }
}

TEST(CudaBatchNormRelu, ANanOutputPassesTheGradientOnAsReluDoes) {
  EMBER_SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    manual_seed(11);
    auto model = batch_norm_relu_block(3);
    model->to(gpu, dtype);
    Tensor x = randn({2, 3, 4, 8});
    x.data<float>()[13] = std::numeric_limits<float>::quiet_NaN();  // inside a vector
    x = x.to(gpu, dtype);
    expect_fused_step_like_separate(*model, x, false, describe(x) + " with a NaN, eval");
    FusionSwitch on(true);
    const StepResult fused = step(*model, x, false);
    EXPECT_TRUE(std::isnan(values_of(fused.output)[13]));
    EXPECT_FALSE(std::isnan(values_of(fused.input_grad)[13]))
        << "the gradient at a NaN output is passed on (times w rstd), not dropped or NaN";
  }
}

}  // namespace
}  // namespace ember::testing
