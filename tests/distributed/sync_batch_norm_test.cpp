// SyncBatchNorm: with a group of one it is BatchNorm2d (values, gradients, running statistics)
// and passes a finite-difference check; under mpirun each rank holding a slice of a batch gets
// what BatchNorm2d gives on the whole batch in one process. convert_sync_batchnorm swaps layers
// in place, keeping their tensors.
#include <gtest/gtest.h>

#include <cmath>

#include "distributed/sync_batch_norm.h"
#include "distributed/world.h"
#include "nn/nn.h"
#include "runtime/autograd/gradcheck.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/common/expect_error.h"

namespace ember::dist {
namespace {

// A group of this rank alone: the one-process behaviour, whatever the world size.
ProcessGroupPtr own_group() {
  static ProcessGroupPtr group = world()->split(world()->rank(), 0);
  return group;
}

// Weights that make every output element's gradient different.
Tensor distinct(const Shape& shape, DType dtype) {
  const int64_t n = shape_numel(shape);
  return arange(1, n + 1, 1, TensorOptions(dtype)).reshape(shape) / static_cast<double>(n);
}

void expect_close(const Tensor& got, const Tensor& expected, double tolerance,
                  const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_TRUE(expected.defined()) << what;
  ASSERT_EQ(got.sizes(), expected.sizes()) << what;
  EXPECT_TRUE(allclose(got.to(DType::f64), expected.to(DType::f64), tolerance, tolerance))
      << what << ": max difference "
      << max(abs(got.to(DType::f64) - expected.to(DType::f64))).item<double>();
}

// Affine parameters away from their (1, 0) defaults.
void set_affine(nn::Module& module, DType dtype) {
  NoGradGuard no_grad;
  module.to(dtype);
  for (auto& [name, p] : module.named_parameters()) {
    Tensor target = p;
    target.copy_(name == "weight" ? distinct(p.sizes(), dtype) + 0.5 : distinct(p.sizes(), dtype));
  }
}

void check_group_of_one_equals_batch_norm(DType dtype, double tolerance, bool affine) {
  SCOPED_TRACE(std::string(dtype_name(dtype)) + (affine ? " affine" : " no affine"));
  auto reference = nn::make<nn::BatchNorm2d>(3, 1e-5, 0.2, affine);
  auto synced = nn::make<SyncBatchNorm>(3, own_group(), 1e-5, 0.2, affine);
  set_affine(*reference, dtype);
  set_affine(*synced, dtype);
  Generator generator(21);
  const Tensor data = randn({4, 3, 5, 3}, dtype, &generator) * 2.0 + 1.0;
  for (int step = 0; step < 2; ++step) {
    Tensor x = data.clone().requires_grad_(), x_reference = data.clone().requires_grad_();
    const Tensor y = (*synced)(x), y_reference = (*reference)(x_reference);
    expect_close(y, y_reference, tolerance, "output");
    sum(y * distinct(y.sizes(), dtype)).backward();
    sum(y_reference * distinct(y.sizes(), dtype)).backward();
    expect_close(x.grad(), x_reference.grad(), tolerance, "input gradient");
    if (affine) {
      expect_close(synced->weight.grad(), reference->weight.grad(), tolerance, "weight gradient");
      expect_close(synced->bias.grad(), reference->bias.grad(), tolerance, "bias gradient");
    }
  }
  const NamedTensors got = synced->state_dict(), expected = reference->state_dict();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].first, expected[k].first);
    expect_close(got[k].second, expected[k].second, tolerance, got[k].first);
  }
  synced->eval();
  reference->eval();
  expect_close((*synced)(data), (*reference)(data), tolerance, "eval output");
}

TEST(SyncBatchNorm, AGroupOfOneIsBatchNorm2d) {
  check_group_of_one_equals_batch_norm(DType::f64, 1e-12, true);
  check_group_of_one_equals_batch_norm(DType::f64, 1e-12, false);
  check_group_of_one_equals_batch_norm(DType::f32, 1e-5, true);
}

TEST(SyncBatchNorm, GradientMatchesFiniteDifferences) {
  Generator generator(5);
  const Tensor x = randn({3, 2, 3, 2}, DType::f64, &generator).requires_grad_();
  const Tensor weight = (rand({2}, DType::f64, &generator) + 0.5).requires_grad_();
  const Tensor bias = randn({2}, DType::f64, &generator).requires_grad_();
  const Tensor cotangent = distinct({3, 2, 3, 2}, DType::f64);
  auto affine = [&](const std::vector<Tensor>& in) {
    return sync_batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true, 0.1, 1e-5, own_group()) *
           cotangent;
  };
  GradcheckResult result = gradcheck(affine, {x, weight, bias});
  EXPECT_TRUE(result.ok) << result.message;
  auto plain = [&](const std::vector<Tensor>& in) {
    return sync_batch_norm(in[0], Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5,
                           own_group()) *
           cotangent;
  };
  result = gradcheck(plain, {x});
  EXPECT_TRUE(result.ok) << result.message;
  // (N, C) input, as BatchNorm1d's.
  const Tensor rows = randn({5, 2}, DType::f64, &generator).requires_grad_();
  auto two_dims = [&](const std::vector<Tensor>& in) {
    return sync_batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true, 0.1, 1e-5, own_group()) *
           distinct({5, 2}, DType::f64);
  };
  result = gradcheck(two_dims, {rows, weight, bias});
  EXPECT_TRUE(result.ok) << result.message;
}

// rows[r]: how many rows of the whole batch rank r holds.
void check_slices_match_the_whole_batch(const std::vector<int64_t>& rows, DType dtype,
                                        double tolerance) {
  const ProcessGroupPtr group = world();
  const int rank = group->rank();
  int64_t total = 0, start = 0;
  for (int r = 0; r < group->size(); ++r) {
    if (r < rank) start += rows[static_cast<size_t>(r)];
    total += rows[static_cast<size_t>(r)];
  }
  const int64_t mine = rows[static_cast<size_t>(rank)];
  SCOPED_TRACE("rank " + std::to_string(rank) + " holds " + std::to_string(mine) + " of " +
               std::to_string(total) + " rows");
  Generator generator(77);  // the same whole batch on every rank
  const Tensor data = randn({total, 3, 4, 3}, dtype, &generator) * 1.5 - 0.5;
  const Tensor cotangent = distinct(data.sizes(), dtype);

  auto reference = nn::make<nn::BatchNorm2d>(3, 1e-5, 0.3);
  set_affine(*reference, dtype);
  auto synced = nn::make<SyncBatchNorm>(3, group, 1e-5, 0.3);
  set_affine(*synced, dtype);

  Tensor x_all = data.clone().requires_grad_();
  const Tensor y_all = (*reference)(x_all);
  sum(y_all * cotangent).backward();

  Tensor x = data.narrow(0, start, mine).clone().requires_grad_();
  const Tensor y = (*synced)(x);
  sum(y * cotangent.narrow(0, start, mine)).backward();

  expect_close(y, y_all.narrow(0, start, mine), tolerance, "output slice");
  expect_close(x.grad(), x_all.grad().narrow(0, start, mine), tolerance, "input gradient slice");
  // Each rank holds its share of the parameter gradients; their sum is the whole batch's.
  for (auto [got, expected, what] : {std::tuple{synced->weight, reference->weight, "weight"},
                                     std::tuple{synced->bias, reference->bias, "bias"}}) {
    Tensor summed = got.grad().clone();
    group->allreduce(summed, ReduceOp::sum)->wait();
    expect_close(summed, expected.grad(), tolerance, std::string(what) + " gradient");
  }
  expect_close(synced->running_mean, reference->running_mean, tolerance, "running_mean");
  expect_close(synced->running_var, reference->running_var, tolerance, "running_var");
}

TEST(SyncBatchNorm, SlicesOfABatchMatchBatchNorm2dOnTheWholeBatch) {
  const int size = world()->size();
  if (size == 1) GTEST_SKIP() << "needs several ranks (run under mpirun -np 2 or 4)";
  std::vector<int64_t> uneven(static_cast<size_t>(size), 2);
  uneven[0] = 3;
  check_slices_match_the_whole_batch(uneven, DType::f64, 1e-12);
  check_slices_match_the_whole_batch(uneven, DType::f32, 1e-5);
  // A rank may hold no rows at all.
  std::vector<int64_t> one_empty(static_cast<size_t>(size), 1);
  one_empty[static_cast<size_t>(size - 1)] = 0;
  one_empty[0] = 2;
  check_slices_match_the_whole_batch(one_empty, DType::f64, 1e-12);
}

// In eval the running statistics normalise and nothing is counted or updated, as BatchNorm2d.
TEST(SyncBatchNorm, EvalLeavesTheBufferAlone) {
  auto reference = nn::make<nn::BatchNorm2d>(3, 1e-5, 0.2);
  auto synced = nn::make<SyncBatchNorm>(3, own_group(), 1e-5, 0.2);
  Generator generator(8);
  const Tensor data = randn({4, 3, 2, 2}, DType::f64, &generator);
  reference->to(DType::f64);
  synced->to(DType::f64);
  (*reference)(data);
  (*synced)(data);
  reference->eval();
  synced->eval();
  expect_close((*synced)(data * 3.0), (*reference)(data * 3.0), 1e-12, "eval output");
  const NamedTensors got = synced->state_dict(), expected = reference->state_dict();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t k = 0; k < got.size(); ++k)
    expect_close(got[k].second, expected[k].second, 1e-12, got[k].first);
  EXPECT_EQ(synced->num_batches_tracked.item<int64_t>(), 1);
}

// Converting keeps the batch norm's eps and momentum, and clone() keeps them and affine.
TEST(SyncBatchNorm, ConvertAndCloneKeepEpsMomentumAndAffine) {
  auto batch_norm = nn::make<nn::BatchNorm2d>(3, 1e-3, 0.4);
  auto converted =
      std::dynamic_pointer_cast<SyncBatchNorm>(convert_sync_batchnorm(batch_norm, own_group()));
  ASSERT_NE(converted, nullptr);
  EXPECT_EQ(converted->eps, 1e-3);
  EXPECT_EQ(converted->momentum, 0.4);
  auto reference = nn::make<nn::BatchNorm2d>(3, 1e-3, 0.4);
  Generator generator(9);
  const Tensor x = randn({4, 3, 2, 2}, DType::f32, &generator) * 0.01;
  expect_close((*converted)(x), (*reference)(x), 1e-5, "output");
  expect_close(converted->running_mean, reference->running_mean, 1e-6, "running_mean");
  expect_close(converted->running_var, reference->running_var, 1e-6, "running_var");

  auto plain = nn::make<SyncBatchNorm>(3, own_group(), 1e-3, 0.4, /*affine=*/false);
  auto copy = std::dynamic_pointer_cast<SyncBatchNorm>(plain->clone());
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->eps, 1e-3);
  EXPECT_EQ(copy->momentum, 0.4);
  EXPECT_FALSE(copy->weight.defined());
  EXPECT_FALSE(copy->bias.defined());
  EXPECT_EQ(copy->parameters().size(), 0u);
}

// A constant channel has variance 0 (PyTorch's Welford statistics give exactly 0): the one-pass
// E[x^2] - E[x]^2 can round below 0 far from zero, which must not reach rsqrt even with a tiny eps.
TEST(SyncBatchNorm, AConstantChannelFarFromZeroStaysFiniteWithATinyEps) {
  const std::vector<double> levels = {1000.01, 1000.02, 1000.03, 1000.05, 1000.08, 1000.1};
  const int64_t channels = static_cast<int64_t>(levels.size());
  const Tensor x = from_vector(levels, {1, channels, 1, 1}, TensorOptions(DType::f64))
                       .expand({6, channels, 1, 1})
                       .contiguous();
  const Tensor running_mean = zeros({channels}, DType::f64);
  const Tensor running_var = ones({channels}, DType::f64);
  const Tensor y = sync_batch_norm(x, running_mean, running_var, Tensor(), Tensor(), true, 0.1,
                                   1e-12, own_group());
  for (double value : to_vector<double>(y))
    EXPECT_TRUE(std::isfinite(value) && std::abs(value) < 1e-3) << value;
  EXPECT_GE(min(running_var).item<double>(), 0.9 - 1e-12);  // (1 - 0.1) * 1 + 0.1 * 0
}

// bf16 inputs normalise in f32 (as PyTorch's batch norm accumulates half types in float): the
// output is the f32 computation on the same values, rounded once.
TEST(SyncBatchNorm, Bf16InputsNormaliseInF32) {
  Generator generator(13);
  const Tensor x = (randn({4, 3, 3, 3}, DType::f32, &generator) * 3.0 + 100.0).to(DType::bf16);
  // Affine values that bf16 holds exactly.
  const Tensor weight = from_vector(std::vector<float>{0.5f, 1.25f, 2.0f}, {3});
  const Tensor bias = from_vector(std::vector<float>{0.25f, -0.5f, 1.0f}, {3});
  const Tensor y = sync_batch_norm(x, Tensor(), Tensor(), weight.to(DType::bf16),
                                   bias.to(DType::bf16), true, 0.1, 1e-5, own_group());
  const Tensor y_f32 = sync_batch_norm(x.to(DType::f32), Tensor(), Tensor(), weight, bias, true,
                                       0.1, 1e-5, own_group());
  EXPECT_EQ(y.dtype(), DType::bf16);
  expect_close(y, y_f32.to(DType::bf16), 0.0, "bf16 output");
}

class TypedHandles : public nn::Module {
 public:
  TypedHandles() { norm = register_module("norm", nn::make<nn::BatchNorm2d>(2)); }
  std::string type_name() const override { return "TypedHandles"; }
  std::shared_ptr<nn::BatchNorm2d> norm;
};

TEST(SyncBatchNorm, ConvertReplacesEveryBatchNormKeepingItsTensors) {
  auto model = nn::resnet9(3, 10, 2);
  for (auto& [name, m] : model->named_modules()) {
    if (dynamic_cast<nn::Dropout*>(m) != nullptr) m->eval();  // outputs must be comparable
  }
  nn::ModulePtr reference = model->clone();
  const NamedTensors before = model->state_dict();
  size_t batch_norms = 0;
  for (auto& [name, m] : model->named_modules())
    batch_norms += dynamic_cast<nn::BatchNorm*>(m) != nullptr;
  ASSERT_EQ(batch_norms, 8u);

  nn::ModulePtr converted = convert_sync_batchnorm(model, own_group());
  EXPECT_EQ(converted, model);  // in place
  size_t synced = 0, left = 0;
  for (auto& [name, m] : converted->named_modules()) {
    synced += dynamic_cast<SyncBatchNorm*>(m) != nullptr;
    left += dynamic_cast<nn::BatchNorm*>(m) != nullptr;
  }
  EXPECT_EQ(synced, 8u);
  EXPECT_EQ(left, 0u);
  const NamedTensors after = converted->state_dict();
  ASSERT_EQ(after.size(), before.size());
  for (size_t k = 0; k < after.size(); ++k) {
    EXPECT_EQ(after[k].first, before[k].first);
    EXPECT_TRUE(after[k].second.is_same(before[k].second)) << after[k].first;
  }
  Generator generator(3);
  const Tensor x = randn({2, 3, 32, 32}, {}, &generator);
  expect_close((*converted)(x), (*reference)(x), 1e-5, "converted output");

  // A batch norm at the root becomes a new module; one behind a typed handle is refused.
  auto root = nn::make<nn::BatchNorm1d>(4);
  root->eval();
  auto root_converted =
      std::dynamic_pointer_cast<SyncBatchNorm>(convert_sync_batchnorm(root, own_group()));
  ASSERT_NE(root_converted, nullptr);
  EXPECT_TRUE(root_converted->weight.is_same(root->weight));
  EXPECT_FALSE(root_converted->is_training());
  EXPECT_ERROR_WITH(convert_sync_batchnorm(nn::make<TypedHandles>(), own_group()), "TypedHandles",
                    "cannot replace its child 'norm'");
}

TEST(SyncBatchNorm, BadInputsAreRefusedClearly) {
  EXPECT_ERROR_WITH(SyncBatchNorm(3, nullptr), "SyncBatchNorm", "process group is empty");
  SyncBatchNorm norm(3, own_group());
  EXPECT_ERROR_WITH(norm.forward(zeros({3})), "SyncBatchNorm", "(N, C, ...)");
  EXPECT_ERROR_WITH(norm.forward(zeros({1, 3})), "more than 1 value per channel");
  EXPECT_ERROR_WITH(norm.forward(zeros({2, 4, 2})), "running_mean", "4 channels");
  EXPECT_NE(norm.clone()->str().find("SyncBatchNorm(3"), std::string::npos);
}

}  // namespace
}  // namespace ember::dist
