// The row-wise ops on CUDA against the CPU, beyond the forward comparison of every op case
// (cuda_test.cpp): backward passes (softmax, log_softmax, layer_norm with its weight and bias
// gradients, cross_entropy, nll_loss, mse_loss, binary_cross_entropy_with_logits, dropout), rows
// holding -inf, +inf and NaN, targets that are all ignore_index, dropout's mask bit for bit, and
// the errors for inputs on different devices.
//
// Without a visible GPU every test here skips, saying why.
//
// Written without a GPU: the first GPU run must check, besides these tests passing,
//   ember_cuda_tests --gtest_filter='CudaRows*:*softmax*:*layer_norm*:*cross_entropy*:*nll*'
// (the op cases of tests/common/op_cases_rows.cpp cover each kernel strategy: warp / block per row,
// 16-byte / scalar loads, strided lines) and compute-sanitizer on the same filter (memcheck,
// racecheck: the block reductions share memory between calls).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/common/op_cases.h"
#include "tests/cuda/cpu_vs_cuda.h"
#include "tests/cuda/support.h"

namespace ember::testing {
namespace {

const std::vector<DType> kFloatDTypes = {DType::f32, DType::f64, DType::f16, DType::bf16};

Tensor class_targets(int64_t count, int64_t classes, int64_t ignore_every) {
  std::vector<int64_t> values(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    const bool ignored = ignore_every > 0 && k % ignore_every == ignore_every - 1;
    values[k] = ignored ? -100 : (k * 5 + 1) % classes;
  }
  return from_vector(values, {count}, DType::i64);
}

// ---- backward passes ----------------------------------------------------------------------------

// distinct_weights moved to sum to 1 along `dim` (up to their rounding to out's dtype), made on
// the host. log_softmax's input gradient is g - exp(y) sum(g): with distinct_weights (sum(g) about
// 1.8 n) a one-ulp flip of a 16-bit y, which either device may round either way, moves it by up
// to 7 times the tolerance (a host emulation, 2026-11-27); with sum(g) = 1 it stays within one.
Tensor weights_summing_to_one(const Tensor& out, int64_t dim) {
  const Tensor host_like = zeros(out.sizes(), DType::f64);
  const Tensor w = distinct_weights(host_like);
  const double n = static_cast<double>(out.size(dim));
  return (w - mean(w, {dim}, true) + 1.0 / n).to(out.dtype());
}

TEST(CudaRows, SoftmaxBackwardMatchesTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(21);
  struct Case {
    Shape shape;
    int64_t dim;
  };
  // Rows for each strategy (warp / block, scalar / 16-byte loads), strided lines, many rows.
  const std::vector<Case> cases = {
      {{4, 1}, -1},     {{5, 3}, -1},   {{3, 1023}, -1},  {{2, 1024}, -1}, {{2, 4097}, -1},
      {{1, 32768}, -1}, {{2, 4096}, 1}, {{3, 513, 7}, 1}, {{700, 33}, -1}, {{4, 6, 5}, 0}};
  for (const Case& c : cases) {
    for (DType dtype : kFloatDTypes) {
      const Tensor x = uniform(c.shape, -4.0, 4.0, DType::f64, &generator).to(dtype);
      for (bool log : {false, true}) {
        const int64_t dim = c.dim;
        const bool sixteen_bit = dtype == DType::f16 || dtype == DType::bf16;
        Cotangent cotangent;
        if (log && sixteen_bit)
          cotangent = [dim](const Tensor& out) { return weights_summing_to_one(out, dim); };
        expect_same_forward_and_backward(
            std::string(log ? "log_softmax" : "softmax") + " of " + describe(x) + " along " +
                std::to_string(dim),
            [=](const Inputs& in) { return log ? log_softmax(in[0], dim) : softmax(in[0], dim); },
            {x}, {true}, 1.0, cotangent);
      }
    }
  }
}

TEST(CudaRows, SoftmaxOfATransposedInputMatchesTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(22);
  const Tensor x = uniform({1024, 6}, -3.0, 3.0, DType::f64, &generator).to(DType::f32);
  expect_same_forward_and_backward(
      "softmax of a transposed input",
      [](const Inputs& in) { return softmax(in[0].transpose(0, 1), -1); }, {x}, {true});
  expect_same_forward_and_backward(
      "log_softmax of a transposed input",
      [](const Inputs& in) { return log_softmax(in[0].transpose(0, 1), 1); }, {x}, {true});
}

TEST(CudaRows, LayerNormBackwardMatchesTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(23);
  // Rows for each strategy; 1000 rows: several row chunks in the weight/bias column sums.
  const std::vector<Shape> shapes = {{4, 1},    {5, 3},     {3, 1023},  {2, 1024},
                                     {2, 4097}, {2, 32768}, {1000, 64}, {300, 7, 12}};
  for (const Shape& shape : shapes) {
    const int64_t cols = shape.back();
    for (DType dtype : kFloatDTypes) {
      const Tensor x = uniform(shape, -2.0, 2.0, DType::f64, &generator).to(dtype);
      const Tensor weight = uniform({cols}, 0.5, 1.5, DType::f64, &generator).to(dtype);
      const Tensor bias = uniform({cols}, -1.0, 1.0, DType::f64, &generator).to(dtype);
      // The column sums of grad_weight / grad_bias add up many rows: a little more room. Rows of
      // one value: x - mean is 0 and the input gradient's exact value 0, but rstd = 1/sqrt(eps)
      // = 316 magnifies the rounding residue of g w - mean(g w), which the CPU fuses into an FMA
      // (1.1 to 1.5 times 1e-5 on the CPU alone).
      const double scale = shape[0] >= 300 ? 4.0 : cols == 1 ? 10.0 : 1.0;
      expect_same_forward_and_backward(
          "layer_norm (affine) of " + describe(x),
          [cols](const Inputs& in) { return layer_norm(in[0], {cols}, in[1], in[2], 1e-5); },
          {x, weight, bias}, {true, true, true}, scale);
      expect_same_forward_and_backward(
          "layer_norm (weight only) of " + describe(x),
          [cols](const Inputs& in) { return layer_norm(in[0], {cols}, in[1], Tensor(), 1e-5); },
          {x, weight}, {true, true}, scale);
      expect_same_forward_and_backward(
          "layer_norm (bias only, x without grad) of " + describe(x),
          [cols](const Inputs& in) { return layer_norm(in[0], {cols}, Tensor(), in[1], 1e-5); },
          {x, bias}, {false, true}, scale);
      expect_same_forward_and_backward(
          "layer_norm (plain) of " + describe(x),
          [cols](const Inputs& in) { return layer_norm(in[0], {cols}, Tensor(), Tensor(), 1e-5); },
          {x}, {true}, scale);
    }
  }
}

TEST(CudaRows, LayerNormOfConstantAndOffsetRowsMatchesTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  // A constant row (variance 0, rstd = 1 / sqrt(eps)) and rows far from 0 (the two-pass
  // variance keeps its precision where E[x^2] - E[x]^2 would not).
  const Tensor constant = full({3, 100}, 2.5, TensorOptions(DType::f32));
  Generator generator(24);
  const Tensor offset = uniform({4, 4097}, 1000.0, 1001.0, DType::f64, &generator).to(DType::f32);
  for (const Tensor& x : {constant, offset}) {
    const Tensor cpu = layer_norm(x, {x.size(1)}, Tensor(), Tensor(), 1e-5);
    const Tensor cuda = layer_norm(x.to(Device::cuda(0)), {x.size(1)}, Tensor(), Tensor(), 1e-5);
    // Summation order differs; E[x^2] - E[x]^2 would be off by O(1) here.
    const std::string error = mismatch(cuda, cpu, 2e-3);
    EXPECT_TRUE(error.empty()) << "layer_norm of " << describe(x) << ": " << error;
  }
}

TEST(CudaRows, CrossEntropyBackwardMatchesTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(25);
  struct Case {
    int64_t batch, classes, ignore_every;
  };
  const std::vector<Case> cases = {{4, 1, 0},    {5, 3, 2},     {3, 1023, 0}, {2, 1024, 2},
                                   {2, 4097, 0}, {2, 32768, 0}, {700, 10, 3}};
  for (const Case& c : cases) {
    for (DType dtype : kFloatDTypes) {
      const Tensor logits =
          uniform({c.batch, c.classes}, -3.0, 3.0, DType::f64, &generator).to(dtype);
      const Tensor target = class_targets(c.batch, c.classes, c.ignore_every);
      for (Reduction reduction : {Reduction::mean, Reduction::sum, Reduction::none}) {
        for (double smoothing : {0.0, 0.1}) {
          CrossEntropyOptions options;
          options.reduction = reduction;
          options.label_smoothing = smoothing;
          expect_same_forward_and_backward(
              "cross_entropy of " + describe(logits) + ", reduction " +
                  std::to_string(static_cast<int>(reduction)) + ", smoothing " +
                  std::to_string(smoothing),
              [options](const Inputs& in) { return cross_entropy(in[0], in[1], options); },
              {logits, target}, {true, false});
        }
      }
      expect_same_forward_and_backward(
          "nll_loss of log_softmax of " + describe(logits),
          [](const Inputs& in) { return nll_loss(log_softmax(in[0], 1), in[1]); }, {logits, target},
          {true, false});
    }
  }
}

TEST(CudaRows, SpatialCrossEntropyAndI32TargetsMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(26);
  // (N, C, H, W) logits: the positions kernel (inner > 1); i32 targets are widened on CUDA.
  const Tensor logits = uniform({2, 5, 3, 4}, -2.0, 2.0, DType::f64, &generator).to(DType::f32);
  std::vector<int64_t> values(24);
  for (size_t k = 0; k < values.size(); ++k)
    values[k] = k % 7 == 3 ? -100 : static_cast<int64_t>(k % 5);
  const Tensor target = from_vector(values, {2, 3, 4}, DType::i64);
  for (DType target_dtype : {DType::i64, DType::i32}) {
    CrossEntropyOptions options;
    options.label_smoothing = 0.15;
    expect_same_forward_and_backward(
        "spatial cross_entropy with targets in " + std::string(dtype_name(target_dtype)),
        [options](const Inputs& in) { return cross_entropy(in[0], in[1], options); },
        {logits, target.to(target_dtype)}, {true, false});
    expect_same_forward_and_backward(
        "spatial nll_loss (none) with targets in " + std::string(dtype_name(target_dtype)),
        [](const Inputs& in) { return nll_loss(in[0], in[1], -100, Reduction::none); },
        {logits, target.to(target_dtype)}, {true, false});
  }
}

TEST(CudaRows, ElementwiseLossesMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(27);
  for (DType dtype : kFloatDTypes) {
    const Tensor input = uniform({7, 33}, -3.0, 3.0, DType::f64, &generator).to(dtype);
    const Tensor target = uniform({7, 33}, 0.0, 1.0, DType::f64, &generator).to(dtype);
    for (Reduction reduction : {Reduction::mean, Reduction::sum, Reduction::none}) {
      expect_same_forward_and_backward(
          "mse_loss in " + std::string(dtype_name(dtype)),
          [reduction](const Inputs& in) { return mse_loss(in[0], in[1], reduction); },
          {input, target}, {true, true});
      expect_same_forward_and_backward(
          "binary_cross_entropy_with_logits in " + std::string(dtype_name(dtype)),
          [reduction](const Inputs& in) {
            return binary_cross_entropy_with_logits(in[0], in[1], reduction);
          },
          {input, target}, {true, true});
    }
  }
}

// ---- special values -----------------------------------------------------------------------------

// Rows of length n: ordinary, one -inf, all -inf, one +inf, one NaN, all NaN.
Tensor special_rows(int64_t n) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> values;
  for (int row = 0; row < 6; ++row) {
    for (int64_t k = 0; k < n; ++k) {
      double v = std::sin(0.37 * static_cast<double>(k + 11 * row));
      if (row == 1 && k == n / 2) v = -inf;
      if (row == 2) v = -inf;
      if (row == 3 && k == n / 3) v = inf;
      if (row == 4 && k == n - 1) v = nan;
      if (row == 5) v = nan;
      values.push_back(v);
    }
  }
  return from_vector(values, {6, n}, DType::f64);
}

TEST(CudaRows, SoftmaxOfInfAndNanRowsMatchesTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{1024}, int64_t{4097}}) {
    for (DType dtype : kFloatDTypes) {
      const Tensor x = special_rows(n).to(dtype);
      for (bool log : {false, true}) {
        const Tensor cpu = log ? log_softmax(x, 1) : softmax(x, 1);
        const Tensor cuda =
            log ? log_softmax(x.to(Device::cuda(0)), 1) : softmax(x.to(Device::cuda(0)), 1);
        const std::string error = mismatch(cuda, cpu, cuda_tolerance(dtype));
        EXPECT_TRUE(error.empty()) << (log ? "log_softmax" : "softmax") << " of special rows of "
                                   << n << " in " << dtype << ": " << error;
        // Along dim 0 as well: the strided-lines kernel.
        const Tensor cpu_columns = log ? log_softmax(x, 0) : softmax(x, 0);
        const Tensor cuda_columns =
            log ? log_softmax(x.to(Device::cuda(0)), 0) : softmax(x.to(Device::cuda(0)), 0);
        EXPECT_TRUE(mismatch(cuda_columns, cpu_columns, cuda_tolerance(dtype)).empty())
            << "columns of special rows of " << n << " in " << dtype;
      }
    }
  }
}

TEST(CudaRows, LayerNormAndCrossEntropyOfInfAndNanRowsMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  for (int64_t n : {int64_t{3}, int64_t{1024}, int64_t{4097}}) {
    for (DType dtype : {DType::f32, DType::f16}) {
      const Tensor x = special_rows(n).to(dtype);
      const Tensor cpu_norm = layer_norm(x, {n}, Tensor(), Tensor(), 1e-5);
      const Tensor cuda_norm = layer_norm(x.to(Device::cuda(0)), {n}, Tensor(), Tensor(), 1e-5);
      EXPECT_TRUE(mismatch(cuda_norm, cpu_norm, cuda_tolerance(dtype)).empty())
          << "layer_norm of special rows of " << n << " in " << dtype;
      const Tensor target = class_targets(6, n, 0);
      CrossEntropyOptions options;
      options.reduction = Reduction::none;
      options.label_smoothing = 0.1;
      const Tensor cpu_loss = cross_entropy(x, target, options);
      const Tensor cuda_loss =
          cross_entropy(x.to(Device::cuda(0)), target.to(Device::cuda(0)), options);
      EXPECT_TRUE(mismatch(cuda_loss, cpu_loss, cuda_tolerance(dtype)).empty())
          << "cross_entropy of special rows of " << n << " in " << dtype << ": "
          << mismatch(cuda_loss, cpu_loss, cuda_tolerance(dtype));
    }
  }
}

TEST(CudaRows, AllIgnoredTargetsMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(28);
  const Tensor logits = uniform({4, 9}, -1.0, 1.0, DType::f64, &generator).to(DType::f32);
  const Tensor target = full({4}, int64_t{-100}, TensorOptions(DType::i64));
  for (Reduction reduction : {Reduction::mean, Reduction::sum, Reduction::none}) {
    CrossEntropyOptions options;
    options.reduction = reduction;
    // mean over no targets is 0 / 0 on both devices (NaN, as PyTorch); the gradient is 0.
    expect_same_forward_and_backward(
        "cross_entropy with every target ignored, reduction " +
            std::to_string(static_cast<int>(reduction)),
        [options](const Inputs& in) { return cross_entropy(in[0], in[1], options); },
        {logits, target}, {true, false});
    expect_same_forward_and_backward(
        "nll_loss with every target ignored",
        [reduction](const Inputs& in) { return nll_loss(in[0], in[1], -100, reduction); },
        {logits, target}, {true, false});
  }
}

// ---- dropout ------------------------------------------------------------------------------------

TEST(CudaRows, DropoutMatchesTheCpuBitForBit) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator values(29);
  for (DType dtype : kFloatDTypes) {
    for (const Shape& shape : {Shape{1}, Shape{3}, Shape{1023}, Shape{64, 129}}) {
      const Tensor x = uniform(shape, -2.0, 2.0, DType::f64, &values).to(dtype);
      for (double p : {0.1, 0.5, 1.0}) {
        // Generators that have drawn already: the offset is not 0.
        Generator cpu_generator(1234), cuda_generator(1234);
        rand({7}, DType::f32, &cpu_generator);
        rand({7}, DType::f32, &cuda_generator);
        Tensor cpu_x = x.clone().requires_grad_(true);
        Tensor cuda_x = x.to(Device::cuda(0)).clone().requires_grad_(true);
        const Tensor cpu = dropout(cpu_x, p, true, &cpu_generator);
        const Tensor cuda = dropout(cuda_x, p, true, &cuda_generator);
        EXPECT_EQ(bytes_of(cuda), bytes_of(cpu)) << "dropout p " << p << " of " << describe(x);
        EXPECT_EQ(cpu_generator.state().offset, cuda_generator.state().offset);
        cpu.backward(distinct_weights(cpu));
        cuda.backward(distinct_weights(cuda));
        EXPECT_EQ(bytes_of(cuda_x.grad()), bytes_of(cpu_x.grad()))
            << "dropout backward p " << p << " of " << describe(x);
      }
    }
  }
}

// ---- errors -------------------------------------------------------------------------------------

TEST(CudaRows, InputsOnDifferentDevicesAreRefusedClearly) {
  EMBER_SKIP_WITHOUT_GPU();
  const Tensor logits = zeros({3, 4}, TensorOptions(DType::f32, Device::cuda(0)));
  const Tensor host_target = zeros({3}, TensorOptions(DType::i64));
  std::string message = error_of([&] { cross_entropy(logits, host_target); });
  EXPECT_NE(message.find("cross_entropy: expected scores and target on the same device"),
            std::string::npos)
      << message;
  message = error_of([&] { nll_loss(logits, host_target); });
  EXPECT_NE(message.find("nll_loss: expected scores and target on the same device"),
            std::string::npos)
      << message;
  const Tensor host_weight = ones({4});
  message = error_of([&] { layer_norm(logits, {4}, host_weight, Tensor(), 1e-5); });
  EXPECT_NE(message.find("layer_norm: input"), std::string::npos) << message;
  EXPECT_NE(message.find("are on different devices; move the weight to cuda:0"), std::string::npos)
      << message;
}

TEST(CudaRows, OutOfRangeTargetsOnCudaAreReported) {
  EMBER_SKIP_WITHOUT_GPU();
  const Tensor logits = zeros({3, 4}, TensorOptions(DType::f32, Device::cuda(0)));
  const Tensor target = from_vector(std::vector<int64_t>{1, 4, 0}, {3}, DType::i64);
  const std::string message = error_of([&] { cross_entropy(logits, target.to(Device::cuda(0))); });
  EXPECT_NE(message.find("target value 4 (at position 1) is out of range for C = 4"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace ember::testing
