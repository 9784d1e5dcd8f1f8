// Forward values of softmax, log_softmax, layer_norm and batch_norm against naive loops, the
// running-statistics update, reduced precision, and error messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "runtime/autograd/node.h"
#include "runtime/ops.h"

namespace ember {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// x viewed as (outer, size, inner) around `dim`: calls f(line offsets) for every line.
void for_each_line(const Shape& shape, int64_t dim,
                   const std::function<void(const std::vector<int64_t>&)>& f) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d)
    inner *= shape[d];
  const int64_t size = shape[dim];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<int64_t> offsets;
      for (int64_t r = 0; r < size; ++r)
        offsets.push_back((o * size + r) * inner + i);
      f(offsets);
    }
  }
}

std::vector<double> naive_softmax(const Tensor& x, int64_t dim, bool log) {
  const std::vector<double> v = to_vector<double>(x);
  std::vector<double> out(v.size());
  for_each_line(x.sizes(), dim, [&](const std::vector<int64_t>& line) {
    double m = -kInf;
    for (int64_t k : line)
      m = std::max(m, v[k]);
    double total = 0;
    for (int64_t k : line)
      total += std::exp(v[k] - m);
    for (int64_t k : line)
      out[k] = log ? v[k] - m - std::log(total) : std::exp(v[k] - m) / total;
  });
  return out;
}

void expect_values_near(const Tensor& actual, const std::vector<double>& expected, double rtol,
                        double atol, const std::string& what) {
  const std::vector<double> values = to_vector<double>(actual);
  ASSERT_EQ(values.size(), expected.size()) << what;
  for (size_t i = 0; i < values.size(); ++i)
    EXPECT_NEAR(values[i], expected[i], atol + rtol * std::abs(expected[i])) << what << " at " << i;
}

void expect_error(const std::function<void()>& f, const std::string& substring) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing \"" << substring << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(substring), std::string::npos) << e.what();
  }
}

TEST(Softmax, MatchesNaiveAlongEveryDim) {
  Generator g(11);
  for (DType dtype : {DType::f64, DType::f32}) {
    const double tol = dtype == DType::f64 ? 1e-13 : 2e-6;
    const Tensor x = uniform({3, 4, 70}, -8.0, 8.0, dtype, &g);
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      const int64_t wrapped = dim < 0 ? dim + 3 : dim;
      const std::string what = std::string(dtype_name(dtype)) + " dim " + std::to_string(dim);
      const Tensor y = softmax(x, dim), ly = log_softmax(x, dim);
      EXPECT_EQ(y.sizes(), x.sizes());
      EXPECT_EQ(y.dtype(), dtype);
      expect_values_near(y, naive_softmax(x, wrapped, false), tol, 1e-7, "softmax " + what);
      expect_values_near(ly, naive_softmax(x, wrapped, true), tol, 1e-6, "log_softmax " + what);
    }
  }
}

TEST(Softmax, WideRowsAndSingleElementLines) {
  Generator g(12);
  const Tensor x = randn({37, 1031}, DType::f32, &g) * 4.0;
  // f32 sums of 1031 terms: a few 1e-6 relative even when summed in order (debug builds).
  expect_values_near(softmax(x, 1), naive_softmax(x, 1, false), 2e-5, 1e-9, "wide softmax");
  expect_values_near(log_softmax(x, 1), naive_softmax(x, 1, true), 2e-5, 2e-5, "wide log");
  const Tensor column = randn({5, 1}, DType::f32, &g);
  EXPECT_TRUE(allclose(softmax(column, 1), ones({5, 1}), 0, 0));
  EXPECT_TRUE(allclose(log_softmax(column, 1), zeros({5, 1}), 0, 0));
  const Tensor scalar = scalar_tensor(3.0);
  EXPECT_EQ(softmax(scalar, 0).item<double>(), 1.0);
}

TEST(Softmax, StableForLargeValuesAndMaskedEntries) {
  const Tensor x = from_vector(std::vector<double>{1000, 1001, 999, 5, -kInf, -kInf, 2, -kInf},
                               {2, 4}, DType::f32);
  const std::vector<double> y = to_vector<double>(softmax(x, 1));
  const double e = std::exp(1.0);
  EXPECT_NEAR(y[1], e / (1 + e + 1 / e), 1e-6);
  EXPECT_EQ(y[5], 0.0);  // masked entries are exactly zero
  EXPECT_EQ(y[7], 0.0);
  EXPECT_NEAR(y[4] + y[6], 1.0, 1e-6);
  const std::vector<double> ly = to_vector<double>(log_softmax(x, 1));
  EXPECT_NEAR(ly[1], 1 - std::log(1 + e + 1 / e), 1e-4);  // f32 ulp at 1000 is 6e-5
  EXPECT_TRUE(std::isinf(ly[5]) && ly[5] < 0);
  // The same along dim 0 of the (4, 2) transpose: x's (1, 1) and (1, 3) are its (1, 1), (3, 1).
  const std::vector<double> yt = to_vector<double>(softmax(x.t(), 0));
  EXPECT_EQ(yt[3], 0.0);
  EXPECT_EQ(yt[7], 0.0);
  EXPECT_NEAR(yt[2], e / (1 + e + 1 / e), 1e-6);
}

TEST(Softmax, NonContiguousInput) {
  Generator g(13);
  const Tensor base = randn({8, 6, 5}, DType::f32, &g);
  const Tensor x = base.permute({2, 0, 1}).slice(1, 0, 8, 2);  // (5, 4, 6), strided
  ASSERT_FALSE(x.is_contiguous());
  for (int64_t dim : {0, 1, 2}) {
    EXPECT_TRUE(allclose(softmax(x, dim), softmax(x.contiguous(), dim), 0, 0));
    EXPECT_TRUE(allclose(log_softmax(x, dim), log_softmax(x.contiguous(), dim), 0, 0));
  }
}

TEST(Softmax, ReducedPrecisionMatchesF32) {
  Generator g(14);
  const Tensor x = randn({9, 130}, DType::f32, &g) * 3.0;
  for (DType dtype : {DType::f16, DType::bf16}) {
    const double tol = dtype == DType::bf16 ? 1e-2 : 2e-3;
    const Tensor xl = x.to(dtype);
    const Tensor xr = xl.to(DType::f32);
    for (int64_t dim : {0, 1}) {
      const Tensor y = softmax(xl, dim);
      EXPECT_EQ(y.dtype(), dtype);
      EXPECT_TRUE(allclose(y.to(DType::f32), softmax(xr, dim), tol, 1e-4)) << dtype;
      EXPECT_TRUE(allclose(log_softmax(xl, dim).to(DType::f32), log_softmax(xr, dim), tol, 2e-2))
          << dtype;
    }
  }
}

TEST(Softmax, BackwardMatchesTheClosedForm) {
  Generator g(15);
  Tensor x = randn({4, 9}, DType::f32, &g);
  const Tensor weights = randn({4, 9}, DType::f32, &g);
  x.requires_grad_();
  sum(softmax(x, 1) * weights).backward();
  const Tensor y = softmax(x.detach(), 1);
  const Tensor expected = y * (weights - sum(weights * y, {1}, true));
  EXPECT_TRUE(allclose(x.grad(), expected, 1e-5, 1e-6));
  Tensor x2 = x.detach().clone();
  x2.requires_grad_();
  sum(log_softmax(x2, 0) * weights).backward();
  const Tensor expected_log = weights - softmax(x2.detach(), 0) * sum(weights, {0}, true);
  EXPECT_TRUE(allclose(x2.grad(), expected_log, 1e-5, 1e-6));
}

// The backward of softmax and log_softmax in f32, f16 and bf16 against the closed form in f64 from
// the same (rounded) inputs: dense rows (dim 1: one, a few, a vector's worth plus change, 4097) and
// strided lines (dim 0). Within rtol x the largest gradient, per element: rows of 4097 have
// gradients ~1e-4.
TEST(Softmax, BackwardInEveryFloatTypeMatchesF64) {
  Generator g(17);
  for (const Shape& shape : {Shape{5, 1}, Shape{3, 7}, Shape{6, 130}, Shape{2, 4097}}) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      const double rtol = dtype == DType::f32 ? 1e-5 : dtype == DType::f16 ? 4e-3 : 2e-2;
      const Tensor x = (randn(shape, DType::f32, &g) * 2.0).to(dtype);
      const Tensor weights = randn(shape, DType::f32, &g).to(dtype);
      for (int64_t dim : {1, 0}) {
        for (bool log : {false, true}) {
          Tensor leaf = x.clone().requires_grad_();
          const Tensor y = log ? log_softmax(leaf, dim) : softmax(leaf, dim);
          sum(y * weights).backward();
          const std::vector<double> actual = to_vector<double>(leaf.grad());
          // The closed form in f64, from the forward alone.
          const Tensor x64 = x.to(DType::f64), w64 = weights.to(DType::f64);
          const Tensor p64 = softmax(x64, dim);
          const Tensor grad64 =
              log ? w64 - p64 * sum(w64, {dim}, true) : p64 * (w64 - sum(w64 * p64, {dim}, true));
          const std::vector<double> expected = to_vector<double>(grad64);
          double largest = 0;
          for (double v : expected)
            largest = std::max(largest, std::abs(v));
          for (size_t i = 0; i < actual.size(); ++i) {
            ASSERT_NEAR(actual[i], expected[i], rtol * (largest + std::abs(expected[i])))
                << (log ? "log_softmax" : "softmax") << " of " << describe(x) << ", dim " << dim
                << ", element " << i;
          }
        }
      }
    }
  }
}

TEST(Normalization, EmptyInputsGiveEmptyResults) {
  EXPECT_EQ(softmax(zeros({0, 3}), 1).sizes(), (Shape{0, 3}));
  EXPECT_EQ(log_softmax(zeros({2, 0}), 1).sizes(), (Shape{2, 0}));
  EXPECT_EQ(softmax(zeros({2, 0, 3}), 2).sizes(), (Shape{2, 0, 3}));
  EXPECT_EQ(layer_norm(zeros({0, 4}), {4}, ones({4}), zeros({4})).sizes(), (Shape{0, 4}));
  EXPECT_EQ(batch_norm(zeros({0, 3}), zeros({3}), ones({3}), Tensor(), Tensor(), false).sizes(),
            (Shape{0, 3}));
}

TEST(Softmax, RunsInF32UnderAutocast) {
  Generator g(16);
  const Tensor x = randn({3, 8}, DType::f32, &g);
  AutocastGuard autocast(DType::bf16);
  const Tensor y = softmax(x.to(DType::bf16), 1);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_TRUE(allclose(y, softmax(x.to(DType::bf16).to(DType::f32), 1), 1e-6, 1e-7));
}

TEST(Softmax, Errors) {
  expect_error([] { softmax(zeros({2, 3}), 2); }, "softmax: dim 2 is out of range");
  expect_error([] { log_softmax(zeros({2, 3}), -3); }, "log_softmax: dim -3 is out of range");
  expect_error(
      [] {
        softmax(zeros({2, 3}, DType::i64), 1);
      },
      "softmax: expected a floating-point tensor");
  expect_error(
      [] {
        log_softmax(zeros({2, 3}, DType::i32), 1);
      },
      "log_softmax: expected a floating-point tensor");
}

// ---- layer norm ------------------------------------------------------------------------------

std::vector<double> naive_layer_norm(const Tensor& x, int64_t cols, const Tensor& weight,
                                     const Tensor& bias, double eps) {
  const std::vector<double> v = to_vector<double>(x);
  const std::vector<double> w =
      weight.defined() ? to_vector<double>(weight) : std::vector<double>();
  const std::vector<double> b = bias.defined() ? to_vector<double>(bias) : std::vector<double>();
  std::vector<double> out(v.size());
  for (size_t row = 0; row < v.size() / cols; ++row) {
    double mean = 0, var = 0;
    for (int64_t k = 0; k < cols; ++k)
      mean += v[row * cols + k];
    mean /= cols;
    for (int64_t k = 0; k < cols; ++k)
      var += (v[row * cols + k] - mean) * (v[row * cols + k] - mean);
    var /= cols;
    for (int64_t k = 0; k < cols; ++k) {
      double y = (v[row * cols + k] - mean) / std::sqrt(var + eps);
      if (weight.defined()) y *= w[k];
      if (bias.defined()) y += b[k];
      out[row * cols + k] = y;
    }
  }
  return out;
}

TEST(LayerNorm, MatchesNaive) {
  Generator g(21);
  for (DType dtype : {DType::f64, DType::f32}) {
    const double tol = dtype == DType::f64 ? 1e-12 : 2e-5;
    const Tensor x = randn({4, 3, 5}, dtype, &g) * 2.0 + 1.0;
    for (const Shape& normalized : std::vector<Shape>{{5}, {3, 5}, {4, 3, 5}}) {
      const Tensor w = randn(normalized, dtype, &g), b = randn(normalized, dtype, &g);
      const int64_t cols = shape_numel(normalized);
      const std::string what = std::string(dtype_name(dtype)) + " " + shape_str(normalized);
      expect_values_near(layer_norm(x, normalized, w, b, 1e-5),
                         naive_layer_norm(x, cols, w, b, 1e-5), tol, tol, "affine " + what);
      expect_values_near(layer_norm(x, normalized), naive_layer_norm(x, cols, {}, {}, 1e-5), tol,
                         tol, "plain " + what);
      expect_values_near(layer_norm(x, normalized, w, Tensor(), 0.1),
                         naive_layer_norm(x, cols, w, {}, 0.1), tol, tol, "weight only " + what);
      expect_values_near(layer_norm(x, normalized, Tensor(), b),
                         naive_layer_norm(x, cols, {}, b, 1e-5), tol, tol, "bias only " + what);
    }
  }
}

TEST(LayerNorm, NonContiguousInputAndWideRows) {
  Generator g(22);
  const Tensor x = randn({16, 9}, DType::f32, &g).t();  // (9, 16), strided
  const Tensor w = randn({16}, DType::f32, &g);
  EXPECT_TRUE(allclose(layer_norm(x, {16}, w), layer_norm(x.contiguous(), {16}, w), 0, 0));
  const Tensor wide = randn({33, 1024}, DType::f32, &g) + 3.0;
  expect_values_near(layer_norm(wide, {1024}), naive_layer_norm(wide, 1024, {}, {}, 1e-5), 1e-5,
                     1e-5, "wide");
}

TEST(LayerNorm, ReducedPrecisionMatchesF32) {
  Generator g(23);
  const Tensor x = randn({7, 48}, DType::f32, &g);
  const Tensor w = randn({48}, DType::f32, &g), b = randn({48}, DType::f32, &g);
  for (DType dtype : {DType::f16, DType::bf16}) {
    const double tol = dtype == DType::bf16 ? 2e-2 : 4e-3;
    const Tensor xl = x.to(dtype), wl = w.to(dtype), bl = b.to(dtype);
    const Tensor y = layer_norm(xl, {48}, wl, bl);
    EXPECT_EQ(y.dtype(), dtype);
    const Tensor expected =
        layer_norm(xl.to(DType::f32), {48}, wl.to(DType::f32), bl.to(DType::f32));
    EXPECT_TRUE(allclose(y.to(DType::f32), expected, tol, tol)) << dtype;
  }
}

// Gradients of x, weight and bias in f32, f16 and bf16 against f64 (checked against finite
// differences by the gradient-check suite) from the same rounded inputs, with and without the
// affine parameters; within rtol x the largest gradient of each, per element. (Rows of 1 or 2
// values are left out: their x gradient is 0 in exact arithmetic, and rounding noise.)
TEST(LayerNorm, BackwardInEveryFloatTypeMatchesF64) {
  Generator g(24);
  for (const Shape& shape : {Shape{6, 10}, Shape{4, 3}, Shape{2, 4097}}) {
    const int64_t cols = shape[1];
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      const double rtol = dtype == DType::f32 ? 1e-5 : dtype == DType::f16 ? 4e-3 : 2e-2;
      const Tensor x = randn(shape, DType::f32, &g).to(dtype);
      const Tensor w = randn({cols}, DType::f32, &g).to(dtype);
      const Tensor b = randn({cols}, DType::f32, &g).to(dtype);
      const Tensor cot = randn(shape, DType::f32, &g).to(dtype);
      for (bool affine : {true, false}) {
        std::vector<Tensor> grads[2];
        for (int k = 0; k < 2; ++k) {
          const DType type = k == 0 ? DType::f64 : dtype;
          Tensor xt = x.to(type).clone(), wt = w.to(type).clone(), bt = b.to(type).clone();
          for (Tensor* t : {&xt, &wt, &bt})
            t->requires_grad_();
          const Tensor y = affine ? layer_norm(xt, {cols}, wt, bt) : layer_norm(xt, {cols});
          sum(y * cot.to(type)).backward();
          grads[k] = {xt.grad()};
          if (affine) grads[k].insert(grads[k].end(), {wt.grad(), bt.grad()});
        }
        for (size_t i = 0; i < grads[0].size(); ++i) {
          const std::vector<double> expected = to_vector<double>(grads[0][i]);
          const std::vector<double> actual = to_vector<double>(grads[1][i]);
          double largest = 0;
          for (double v : expected)
            largest = std::max(largest, std::abs(v));
          for (size_t e = 0; e < actual.size(); ++e) {
            ASSERT_NEAR(actual[e], expected[e], rtol * (largest + std::abs(expected[e])))
                << "gradient " << i << " of layer_norm of " << describe(x)
                << (affine ? "" : " without weight and bias") << ", element " << e;
          }
        }
      }
    }
  }
}

TEST(LayerNorm, Errors) {
  const Tensor x = zeros({4, 6});
  expect_error([&] { layer_norm(x, {6}, zeros({5})); },
               "layer_norm: weight has shape (5) but normalized_shape is (6)");
  expect_error(
      [&] {
        layer_norm(x, {6}, Tensor(), zeros({2, 3}));
      },
      "layer_norm: bias has shape (2,3) but normalized_shape is (6)");
  expect_error([&] { layer_norm(x, {4}); },
               "layer_norm: input f32 (4,6) on cpu does not end with normalized_shape (4)");
  expect_error([&] { layer_norm(x, {}); }, "layer_norm: normalized_shape is empty");
  expect_error(
      [&] {
        layer_norm(zeros({4, 6}, DType::i64), {6});
      },
      "layer_norm: expected a floating-point input");
}

// ---- batch norm ------------------------------------------------------------------------------

struct NaiveBatchNorm {
  std::vector<double> y, mean, biased_var, unbiased_var;
};

// x (N, C, S...) with statistics per channel; `mean` / `var` given: eval mode.
NaiveBatchNorm naive_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                const std::vector<double>* eval_mean,
                                const std::vector<double>* eval_var, double eps) {
  const std::vector<double> v = to_vector<double>(x.contiguous());
  const int64_t n = x.size(0), c = x.size(1), s = x.numel() / (n * c);
  NaiveBatchNorm r;
  r.y.resize(v.size());
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = 0, squares = 0;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t k = 0; k < s; ++k)
        mean += v[(b * c + ch) * s + k];
    }
    mean /= static_cast<double>(n * s);
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t k = 0; k < s; ++k)
        squares += std::pow(v[(b * c + ch) * s + k] - mean, 2);
    }
    r.mean.push_back(mean);
    r.biased_var.push_back(squares / static_cast<double>(n * s));
    r.unbiased_var.push_back(squares / static_cast<double>(n * s - 1));
    const double use_mean = eval_mean ? (*eval_mean)[ch] : mean;
    const double use_var = eval_var ? (*eval_var)[ch] : r.biased_var.back();
    const double w = weight.defined() ? to_vector<double>(weight)[ch] : 1.0;
    const double bb = bias.defined() ? to_vector<double>(bias)[ch] : 0.0;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t k = 0; k < s; ++k) {
        const int64_t i = (b * c + ch) * s + k;
        r.y[i] = (v[i] - use_mean) / std::sqrt(use_var + eps) * w + bb;
      }
    }
  }
  return r;
}

TEST(BatchNorm, TrainingMatchesNaiveAndUpdatesRunningStatistics) {
  Generator g(31);
  for (const Shape& shape : std::vector<Shape>{{7, 4}, {3, 4, 5, 6}, {2, 4, 9}}) {
    for (bool affine : {true, false}) {
      const std::string what = shape_str(shape) + (affine ? " affine" : " plain");
      const Tensor x = randn(shape, DType::f64, &g) * 1.5 + 0.5;
      const Tensor w = affine ? randn({4}, DType::f64, &g) : Tensor();
      const Tensor b = affine ? randn({4}, DType::f64, &g) : Tensor();
      Tensor running_mean = uniform({4}, -1.0, 1.0, DType::f64, &g);
      Tensor running_var = uniform({4}, 0.5, 2.0, DType::f64, &g);
      const std::vector<double> old_mean = to_vector<double>(running_mean);
      const std::vector<double> old_var = to_vector<double>(running_var);
      const uint32_t mean_version = running_mean.version(), var_version = running_var.version();
      const Tensor y = batch_norm(x, running_mean, running_var, w, b, true, 0.1, 1e-5);
      // Updated in place: anything autograd saved of them would be seen to be stale.
      EXPECT_GT(running_mean.version(), mean_version) << what;
      EXPECT_GT(running_var.version(), var_version) << what;
      const NaiveBatchNorm ref = naive_batch_norm(x, w, b, nullptr, nullptr, 1e-5);
      expect_values_near(y, ref.y, 1e-12, 1e-12, what);
      std::vector<double> new_mean, new_var;
      for (size_t c = 0; c < 4; ++c) {
        new_mean.push_back(0.9 * old_mean[c] + 0.1 * ref.mean[c]);
        new_var.push_back(0.9 * old_var[c] + 0.1 * ref.unbiased_var[c]);
      }
      expect_values_near(running_mean, new_mean, 1e-12, 1e-12, "running_mean " + what);
      expect_values_near(running_var, new_var, 1e-12, 1e-12, "running_var " + what);
    }
  }
}

TEST(BatchNorm, EvalUsesRunningStatistics) {
  Generator g(32);
  const Tensor x = randn({3, 5, 2, 2}, DType::f32, &g);
  const Tensor w = randn({5}, DType::f32, &g), b = randn({5}, DType::f32, &g);
  const Tensor running_mean = uniform({5}, -1.0, 1.0, DType::f32, &g);
  const Tensor running_var = uniform({5}, 0.5, 2.0, DType::f32, &g);
  const std::vector<double> mean = to_vector<double>(running_mean);
  const std::vector<double> var = to_vector<double>(running_var);
  const uint32_t mean_version = running_mean.version(), var_version = running_var.version();
  for (bool affine : {true, false}) {
    const Tensor y = batch_norm(x, running_mean, running_var, affine ? w : Tensor(),
                                affine ? b : Tensor(), false, 0.1, 1e-3);
    const NaiveBatchNorm ref =
        naive_batch_norm(x, affine ? w : Tensor(), affine ? b : Tensor(), &mean, &var, 1e-3);
    expect_values_near(y, ref.y, 1e-5, 1e-5, affine ? "affine" : "plain");
  }
  // Eval leaves the running statistics alone.
  EXPECT_EQ(to_vector<double>(running_mean), mean);
  EXPECT_EQ(to_vector<double>(running_var), var);
  EXPECT_EQ(running_mean.version(), mean_version);
  EXPECT_EQ(running_var.version(), var_version);
}

TEST(BatchNorm, TrainingWithoutRunningStatisticsAndStridedInput) {
  Generator g(33);
  const Tensor x = randn({6, 3, 4}, DType::f32, &g).transpose(0, 2).transpose(1, 2);  // (4,6,3)
  ASSERT_FALSE(x.is_contiguous());
  const Tensor y = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true);
  const NaiveBatchNorm ref = naive_batch_norm(x, {}, {}, nullptr, nullptr, 1e-5);
  expect_values_near(y, ref.y, 1e-5, 1e-5, "strided");
}

TEST(BatchNorm, ReducedPrecisionMatchesF32) {
  Generator g(34);
  const Tensor x = randn({8, 3, 5}, DType::f32, &g);
  const Tensor w = randn({3}, DType::f32, &g), b = randn({3}, DType::f32, &g);
  for (DType dtype : {DType::f16, DType::bf16}) {
    const double tol = dtype == DType::bf16 ? 2e-2 : 4e-3;
    const Tensor xl = x.to(dtype);
    Tensor rm16 = zeros({3}, dtype), rv16 = ones({3}, dtype);
    Tensor rm32 = zeros({3}), rv32 = ones({3});
    const Tensor y = batch_norm(xl, rm16, rv16, w.to(dtype), b.to(dtype), true);
    const Tensor expected = batch_norm(xl.to(DType::f32), rm32, rv32, w.to(dtype).to(DType::f32),
                                       b.to(dtype).to(DType::f32), true);
    EXPECT_EQ(y.dtype(), dtype);
    EXPECT_TRUE(allclose(y.to(DType::f32), expected, tol, tol)) << dtype;
    EXPECT_TRUE(allclose(rm16.to(DType::f32), rm32, tol, tol)) << dtype;
    EXPECT_TRUE(allclose(rv16.to(DType::f32), rv32, tol, tol)) << dtype;
  }
}

// f16/bf16 activations with f32 weight and bias (autocast's case: the module's parameters stay
// f32): the parameters are used in f32 and their gradients come back in f32, as the f32 batch norm
// of the same (widened) input gives them.
TEST(BatchNorm, SixteenBitInputsKeepF32ParametersAndTheirGradients) {
  Generator g(35);
  const Tensor x = randn({8, 3, 5}, DType::f32, &g) * 2.0 + 1.0;
  const Tensor cotangent = randn({8, 3, 5}, DType::f32, &g);
  const Tensor w0 = uniform({3}, 0.5, 1.5, DType::f32, &g), b0 = randn({3}, DType::f32, &g);
  for (DType dtype : {DType::f16, DType::bf16}) {
    const double tol = dtype == DType::bf16 ? 2e-2 : 4e-3;
    const Tensor xl = x.to(dtype);
    Tensor w = w0.clone(), b = b0.clone();
    w.requires_grad_();
    b.requires_grad_();
    const Tensor y = batch_norm(xl, Tensor(), Tensor(), w, b, true);
    EXPECT_EQ(y.dtype(), dtype);
    sum(y.to(DType::f32) * cotangent).backward();
    ASSERT_EQ(w.grad().dtype(), DType::f32) << dtype;
    ASSERT_EQ(b.grad().dtype(), DType::f32) << dtype;

    Tensor w_ref = w0.clone(), b_ref = b0.clone();
    w_ref.requires_grad_();
    b_ref.requires_grad_();
    const Tensor y_ref = batch_norm(xl.to(DType::f32), Tensor(), Tensor(), w_ref, b_ref, true);
    sum(y_ref * cotangent).backward();
    EXPECT_TRUE(allclose(y.to(DType::f32), y_ref, tol, tol)) << dtype;
    EXPECT_TRUE(allclose(w.grad(), w_ref.grad(), tol, tol)) << dtype;
    EXPECT_TRUE(allclose(b.grad(), b_ref.grad(), tol, tol)) << dtype;
  }
}

// A scaled upstream gradient of 2^15 per value (f16 holds it) over a channel of 2^17 values
// gives a bias gradient of 2^32: past f16's largest finite value (65504), exact in f32, where it
// is kept.
TEST(BatchNorm, ScaledF16GradientsOfF32ParametersDoNotOverflow) {
  Generator g(36);
  const Tensor x = randn({32, 2, 64, 64}, DType::f16, &g);
  Tensor w = ones({2}), b = zeros({2});
  w.requires_grad_();
  b.requires_grad_();
  const Tensor y = batch_norm(x, Tensor(), Tensor(), w, b, true);
  y.backward(full(y.sizes(), 32768.0, TensorOptions(DType::f16)));
  EXPECT_EQ(to_vector<double>(b.grad()), (std::vector<double>{4294967296.0, 4294967296.0}));
  for (double v : to_vector<double>(w.grad()))
    EXPECT_TRUE(std::isfinite(v)) << v;
}

// The backward of layer_norm and batch_norm computes only the gradients whose inputs require
// one (a frozen weight or bias, an input that is data): the node returns no tensor for the others,
// and the ones it returns are the bits of the run where all three are wanted. Called on the node
// itself, as the autograd engine drops a gradient no edge takes. On the CPU, and on the GPU when
// one is visible (the kernels' null-output paths).
TEST(Normalization, BackwardComputesOnlyTheWantedGradients) {
  Generator g(37);
  const Tensor x = randn({6, 4, 5}, DType::f32, &g);
  const Tensor w = randn({4}, DType::f32, &g), b = randn({4}, DType::f32, &g);
  const Tensor w_rows = randn({5}, DType::f32, &g), b_rows = randn({5}, DType::f32, &g);
  const Tensor cotangent = randn({6, 4, 5}, DType::f32, &g);
  struct Case {
    std::string name;
    Tensor weight, bias;
    std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> op;
  };
  const std::vector<Case> cases = {
      {"layer_norm", w_rows, b_rows,
       [](const Tensor& xt, const Tensor& wt, const Tensor& bt) {
         return layer_norm(xt, {5}, wt, bt);
       }},
      {"batch_norm (training)", w, b,
       [](const Tensor& xt, const Tensor& wt, const Tensor& bt) {
         return batch_norm(xt, Tensor(), Tensor(), wt, bt, true);
       }},
  };
  std::vector<Device> devices = {Device::cpu()};
  if (cuda_device_count() > 0) devices.push_back(Device::cuda(0));
  for (const Device& device : devices) {
    for (const auto& [name, weight, bias, op] : cases) {
      // wanted: bit 0 x, bit 1 weight, bit 2 bias.
      auto node_gradients = [&](int wanted) {
        Tensor inputs[3] = {x.to(device), weight.to(device), bias.to(device)};
        for (int i = 0; i < 3; ++i)
          inputs[i] = inputs[i].clone().requires_grad_(((wanted >> i) & 1) != 0);
        const Tensor y = op(inputs[0], inputs[1], inputs[2]);
        return y.grad_fn()->apply(cotangent.to(device));
      };
      const std::vector<Tensor> all = node_gradients(0b111);
      ASSERT_EQ(all.size(), 3u) << name;
      for (int wanted = 0b001; wanted < 0b111; ++wanted) {
        const std::vector<Tensor> some = node_gradients(wanted);
        ASSERT_EQ(some.size(), 3u) << name;
        for (int i = 0; i < 3; ++i) {
          const std::string what = name + " on " + device.str() + ", wanted " +
                                   std::to_string(wanted) + ", gradient " + std::to_string(i);
          if (!((wanted >> i) & 1)) {
            EXPECT_FALSE(some[i].defined()) << what << " was computed though not wanted";
            continue;
          }
          ASSERT_TRUE(some[i].defined()) << what;
          // The same kernels on the same values: the same bits on the CPU; the GPU's column
          // sums may be ordered otherwise.
          if (device.is_cpu()) {
            EXPECT_EQ(to_vector<float>(some[i]), to_vector<float>(all[i])) << what;
          } else {
            EXPECT_TRUE(allclose(some[i].to(Device::cpu()), all[i].to(Device::cpu()), 1e-6, 1e-6))
                << what;
          }
        }
      }
    }
  }
}

TEST(BatchNorm, Errors) {
  const Tensor x = zeros({4, 3, 2, 2});
  expect_error([&] { batch_norm(x, zeros({4}), ones({4}), Tensor(), Tensor(), true); },
               "batch_norm: running_mean has shape (4) but the input f32 (4,3,2,2) on cpu has 3 "
               "channels");
  expect_error([&] { batch_norm(x, zeros({3}), ones({3}), ones({2}), Tensor(), false); },
               "batch_norm: weight has shape (2) but the input");
  expect_error(
      [&] {
        batch_norm(x, zeros({3}), ones({3}), Tensor(), zeros({3, 1}), false);
      },
      "batch_norm: bias has shape (3,1)");
  expect_error([&] { batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false); },
               "batch_norm: eval mode (training = false) normalises with the running statistics");
  expect_error([&] { batch_norm(zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), true); },
               "batch_norm: expected an input of shape (N, C, ...)");
  expect_error(
      [&] {
        batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true);
      },
      "batch_norm: expected more than 1 value per channel when training");
  expect_error(
      [&] {
        batch_norm(zeros({2, 3}, DType::i64), Tensor(), Tensor(), Tensor(), Tensor(), true);
      },
      "batch_norm: expected a floating-point input");
}

}  // namespace
}  // namespace ember
