// Every differentiable op passes a finite-difference gradient check in f64, and gives the same
// result when its inputs are laid out with strides.
#include <gtest/gtest.h>

#include "runtime/autograd/gradcheck.h"
#include "tests/common/op_cases.h"

namespace ember::testing {
namespace {

TEST(Gradcheck, EveryDifferentiableOpHasAGradientCheck) {
  std::string missing;
  for (size_t i = 0; i < kNumDifferentiableOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    bool found = false;
    for (const OpCase& c : op_case_registry())
      found = found || (c.op == op && c.differentiable_op);
    if (!found) missing += std::string(" ") + op_name(op);
  }
  EXPECT_TRUE(missing.empty())
      << "differentiable ops (runtime/autograd/op_list.h) without an op case in tests/common:"
      << missing;
}

class OpCaseTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OpCaseTest, GradientMatchesFiniteDifferences) {
  const OpCase& c = find_op_case(GetParam());
  if (!c.differentiable_op) GTEST_SKIP() << "not differentiable";
  if (c.needs_cuda && cuda_device_count() == 0) GTEST_SKIP() << "needs a CUDA device";
  Generator generator(1234);
  std::vector<Tensor> inputs = c.make_inputs(DType::f64, Device::cpu(), generator);
  ASSERT_EQ(inputs.size(), c.differentiable.size()) << "case " << c.name;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (c.differentiable[i]) inputs[i].requires_grad_(true);
  }
  GradcheckOptions options;
  options.eps = c.gradcheck_eps;
  options.atol = c.gradcheck_atol;
  options.rtol = c.gradcheck_rtol;
  const GradcheckResult result = gradcheck(c.fn, inputs, options);
  EXPECT_TRUE(result.ok) << c.name << ": " << result.message;
}

TEST_P(OpCaseTest, StridedInputsGiveTheSameResult) {
  const OpCase& c = find_op_case(GetParam());
  if (c.needs_cuda && cuda_device_count() == 0) GTEST_SKIP() << "needs a CUDA device";
  for (DType dtype : {DType::f64, DType::f32}) {
    Generator generator(99);
    const std::vector<Tensor> inputs = c.make_inputs(dtype, Device::cpu(), generator);
    std::vector<Tensor> strided;
    for (const Tensor& t : inputs)
      strided.push_back(strided_copy(t));
    for (const Tensor& t : strided) {
      if (t.dim() > 0 && t.size(-1) > 1) {
        ASSERT_FALSE(t.is_contiguous());
      }
    }
    const Tensor expected = c.fn(inputs);
    const Tensor actual = c.fn(strided);
    ASSERT_EQ(expected.sizes(), actual.sizes()) << c.name;
    EXPECT_TRUE(allclose(actual, expected, 1e-6, 1e-6)) << c.name << " in " << dtype;
  }
}

// Each input's gradient alone (the others constant, as `x * 0.5` or `x * mask` are) is the one it
// gets when every input takes one, and the constants get none: ops may skip the gradients nobody
// needs (binary ops do), but never change the others.
TEST_P(OpCaseTest, EachInputAloneGetsTheSameGradient) {
  const OpCase& c = find_op_case(GetParam());
  if (!c.differentiable_op) GTEST_SKIP() << "not differentiable";
  if (c.needs_cuda && cuda_device_count() == 0) GTEST_SKIP() << "needs a CUDA device";
  Generator generator(4321);
  const std::vector<Tensor> values = c.make_inputs(DType::f64, Device::cpu(), generator);
  // Fresh leaves holding `values`, those marked in `takes_grad` requiring a gradient; returns
  // their gradients after a backward pass of a weighted sum of the op's output.
  auto gradients = [&](const std::vector<bool>& takes_grad) {
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < values.size(); ++i) {
      inputs.push_back(values[i].clone());
      if (takes_grad[i]) inputs[i].requires_grad_(true);
    }
    const Tensor out = c.fn(inputs);
    sum(out * distinct_weights(out)).backward();
    std::vector<Tensor> grads;
    for (const Tensor& input : inputs)
      grads.push_back(input.grad());
    return grads;
  };
  const std::vector<Tensor> together = gradients(c.differentiable);
  for (size_t i = 0; i < values.size(); ++i) {
    if (!c.differentiable[i]) continue;
    std::vector<bool> alone(values.size(), false);
    alone[i] = true;
    const std::vector<Tensor> grads = gradients(alone);
    for (size_t j = 0; j < values.size(); ++j) {
      if (j != i) {
        EXPECT_FALSE(grads[j].defined()) << c.name << ": input " << j << " got a gradient";
      } else {
        ASSERT_TRUE(grads[i].defined()) << c.name << ": input " << i << " alone got no gradient";
        ASSERT_TRUE(together[i].defined()) << c.name << ": input " << i;
        EXPECT_TRUE(allclose(grads[i], together[i], 1e-12, 1e-12))
            << c.name << ": input " << i << "'s gradient alone differs from it among the others";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpCaseTest, ::testing::ValuesIn(op_case_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return test_name_of(info.param);
                         });

}  // namespace
}  // namespace ember::testing
