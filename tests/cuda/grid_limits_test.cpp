// The row, reduction and normalisation kernels at sizes past their launch limits, against the CPU:
// more rows than one grid holds (the kernels cap the grid at 65535 blocks and walk the rest in a
// grid-stride loop), more column tiles than 65535, more channels than 65535, more pooled planes
// than 65535, and enough rows that layer_norm's weight / bias column sums must grow their row
// chunks to keep gridDim.y <= 65535. The op cases (tests/common/op_cases_*.cpp) stay small and
// never reach these paths.
//
// f64 throughout: the sums over ~10^5..10^7 values then agree to 1e-10 whatever the order, so a
// mismatch means a row, tile or channel was skipped, done twice, or written out of place.
//
// Without a visible GPU every test here skips, saying why. Written without a GPU (never run).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/common/op_cases.h"
#include "tests/cuda/cpu_vs_cuda.h"
#include "tests/cuda/support.h"

namespace ember::testing {
namespace {

// f64 sums over 10^5..10^7 values agree to 1e-10 (100 x cuda_tolerance(f64)) in any order.
constexpr double kTolerance = 1e-10;
constexpr double kToleranceScale = 100;
// One more than the rows a capped grid covers in one sweep: warp-per-row kernels hold 8 rows per
// block (kernels/cuda/row_reduce.cuh), block-per-row kernels one.
constexpr int64_t kMaxBlocks = 65535;
constexpr int64_t kWarpModeRows = 8 * kMaxBlocks + 37;
constexpr int64_t kBlockModeRows = kMaxBlocks + 3;

Tensor random_f64(const Shape& shape, Generator& generator, double low = -2.0, double high = 2.0) {
  return uniform(shape, low, high, TensorOptions(DType::f64), &generator);
}

// Targets (k * 5 + 1) % classes, every 7th ignored.
Tensor targets(int64_t count, int64_t classes) {
  std::vector<int64_t> values(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k)
    values[static_cast<size_t>(k)] = k % 7 == 6 ? -100 : (k * 5 + 1) % classes;
  return from_vector(values, {count}, DType::i64);
}

TEST(CudaGridLimits, WarpPerRowKernelsWalkMoreRowsThanTheGridHolds) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(41);
  const Tensor x = random_f64({kWarpModeRows, 3}, generator);
  const Tensor weight = random_f64({3}, generator, 0.5, 1.5);
  const Tensor bias = random_f64({3}, generator);
  expect_same_forward_and_backward(
      "softmax of " + describe(x), [](const Inputs& in) { return softmax(in[0], 1); }, {x}, {true},
      kToleranceScale);
  expect_same_forward_and_backward(
      "log_softmax of " + describe(x), [](const Inputs& in) { return log_softmax(in[0], 1); }, {x},
      {true}, kToleranceScale);
  expect_same_forward_and_backward(
      "layer_norm of " + describe(x),
      [](const Inputs& in) { return layer_norm(in[0], {3}, in[1], in[2], 1e-5); },
      {x, weight, bias}, {true, true, true}, kToleranceScale);
  CrossEntropyOptions options;
  options.reduction = Reduction::none;
  options.label_smoothing = 0.1;
  expect_same_forward_and_backward(
      "cross_entropy of " + describe(x),
      [options](const Inputs& in) { return cross_entropy(in[0], in[1], options); },
      {x, targets(kWarpModeRows, 3)}, {true, false}, kToleranceScale);
}

TEST(CudaGridLimits, BlockPerRowKernelsWalkMoreRowsThanTheGridHolds) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(42);
  // 1026 f64 values: a multiple of the 2-wide 16-byte vector, so the vectorised path runs.
  const Tensor x = random_f64({kBlockModeRows, 1026}, generator);
  expect_same_forward_and_backward(
      "softmax of " + describe(x), [](const Inputs& in) { return softmax(in[0], 1); }, {x}, {true},
      kToleranceScale);
  const Tensor weight = random_f64({1026}, generator, 0.5, 1.5);
  expect_same_forward_and_backward(
      "layer_norm of " + describe(x),
      [](const Inputs& in) { return layer_norm(in[0], {1026}, in[1], Tensor(), 1e-5); },
      {x, weight}, {true, true}, kToleranceScale);
}

TEST(CudaGridLimits, LayerNormParameterGradientsOverMoreRowChunksThanGridDimYHolds) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(43);
  // 128-row chunks would need 65537 blocks along y: the chunks must grow to 129 rows.
  const int64_t rows = 128 * kMaxBlocks + 129;
  const Tensor x = random_f64({rows, 2}, generator);
  const Tensor weight = random_f64({2}, generator, 0.5, 1.5);
  const Tensor bias = random_f64({2}, generator);
  expect_same_forward_and_backward(
      "layer_norm of " + describe(x),
      [](const Inputs& in) { return layer_norm(in[0], {2}, in[1], in[2], 1e-5); },
      {x, weight, bias}, {false, true, true}, kToleranceScale);
}

TEST(CudaGridLimits, ReductionsWalkMoreRowsAndTilesThanTheGridHolds) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(44);
  // (70001, 5) along dim 1: a block per row, 70001 rows. (70001, 3, 33) along dim 1: 2 tiles of
  // 32 columns per outer index, 140002 tiles.
  const std::vector<Tensor> inputs = {random_f64({70001, 5}, generator),
                                      random_f64({70001, 3, 33}, generator)};
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> reductions = {
      {"sum", [](const Tensor& x) { return sum(x, {1}); }},
      {"max", [](const Tensor& x) { return max(x, {1}); }},
      {"argmin", [](const Tensor& x) { return argmin(x, 1); }},
      {"var", [](const Tensor& x) { return var(x, {1}); }},
      {"logsumexp", [](const Tensor& x) { return logsumexp(x, {1}); }},
      {"norm 3", [](const Tensor& x) { return norm(x, 3.0, {1}); }},
  };
  for (const Tensor& x : inputs) {
    for (const auto& [name, f] : reductions) {
      const Tensor cpu = f(x);
      const Tensor cuda = f(x.to(Device::cuda(0)));
      EXPECT_EQ(mismatch(cuda, cpu, kTolerance), "") << name << " of " << describe(x);
    }
  }
}

TEST(CudaGridLimits, BatchNormWalksMoreChannelsThanTheGridHolds) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(45);
  const int64_t channels = kMaxBlocks + 2;
  const Tensor x = random_f64({3, channels}, generator);
  const Tensor weight = random_f64({channels}, generator, 0.5, 1.5);
  const Tensor bias = random_f64({channels}, generator);
  expect_same_forward_and_backward(
      "batch_norm (training) of " + describe(x),
      [](const Inputs& in) {
        return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true, 0.1, 1e-5);
      },
      {x, weight, bias}, {true, true, true}, kToleranceScale);
}

// 2x2 max pooling tiles walk planes along gridDim.y (kernels/cuda/pooling.cu), capped at 65535:
// planes of 256 outputs or more, one a block; and planes of 4 outputs, 64 a block, so that the
// walk starts past 64 * 65535 planes. (67M values each, 0.5 GB in f64.)
TEST(CudaGridLimits, MaxPool2x2WalksMorePlanesThanTheGridHolds) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(46);
  for (const Shape& shape :
       std::vector<Shape>{{kMaxBlocks + 2, 1, 32, 32}, {64 * kMaxBlocks + 3, 1, 4, 4}}) {
    const Tensor x = random_f64(shape, generator);
    expect_same_forward_and_backward(
        "max_pool2d 2x2 of " + describe(x),
        [](const Inputs& in) { return max_pool2d(in[0], {.kernel_size = 2}); }, {x}, {true},
        kToleranceScale);
  }
}

}  // namespace
}  // namespace ember::testing
