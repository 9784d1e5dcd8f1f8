// Forward values of max, min, argmax, argmin, var, std, logsumexp and norm against naive loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "runtime/ops.h"

namespace ember {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

using Fold = std::function<double(const std::vector<double>&)>;

// The reference: every output element folds the values of its line, gathered in index order.
// Returns the values in the output's row-major order.
std::vector<double> naive_reduce(const Tensor& x, const Dims& dims, const Fold& fold) {
  const Shape& shape = x.sizes();
  const int64_t nd = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(nd), dims.empty());
  for (int64_t d : dims)
    reduced[static_cast<size_t>(d < 0 ? d + nd : d)] = true;
  int64_t out_count = 1;
  for (int64_t d = 0; d < nd; ++d)
    out_count *= reduced[d] ? 1 : shape[d];
  std::vector<std::vector<double>> lines(static_cast<size_t>(out_count));
  const std::vector<double> values = to_vector<double>(x);
  for (int64_t flat = 0; flat < x.numel(); ++flat) {
    int64_t rest = flat, out_index = 0, out_stride = 1;
    for (int64_t d = nd - 1; d >= 0; --d) {
      const int64_t i = rest % shape[d];
      rest /= shape[d];
      if (!reduced[d]) {
        out_index += i * out_stride;
        out_stride *= shape[d];
      }
    }
    lines[out_index].push_back(values[flat]);
  }
  std::vector<double> out;
  for (const auto& line : lines)
    out.push_back(fold(line));
  return out;
}

double fold_max(const std::vector<double>& v) {
  double m = -INFINITY;
  for (double x : v)
    m = (x > m || std::isnan(x)) ? x : m;
  return m;
}
double fold_min(const std::vector<double>& v) {
  double m = INFINITY;
  for (double x : v)
    m = (x < m || std::isnan(x)) ? x : m;
  return m;
}
Fold fold_var(int64_t correction) {
  return [correction](const std::vector<double>& v) {
    double mean = 0;
    for (double x : v)
      mean += x;
    mean /= static_cast<double>(v.size());
    double squares = 0;
    for (double x : v)
      squares += (x - mean) * (x - mean);
    return squares / static_cast<double>(static_cast<int64_t>(v.size()) - correction);
  };
}
double fold_logsumexp(const std::vector<double>& v) {
  const double m = fold_max(v);
  double total = 0;
  for (double x : v)
    total += std::exp(x - m);
  return m + std::log(total);
}
Fold fold_norm(double p) {
  return [p](const std::vector<double>& v) {
    if (std::isinf(p)) {
      double m = p > 0 ? 0 : INFINITY;
      for (double x : v)
        m = p > 0 ? std::max(m, std::abs(x)) : std::min(m, std::abs(x));
      return m;
    }
    double total = 0;
    for (double x : v)
      total += p == 0 ? (x != 0) : std::pow(std::abs(x), p);
    return p == 0 ? total : std::pow(total, 1.0 / p);
  };
}

Shape reduced_shape(const Shape& shape, Dims dims, bool keepdim) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  std::vector<bool> reduced(shape.size(), dims.empty());
  for (int64_t d : dims)
    reduced[static_cast<size_t>(d < 0 ? d + nd : d)] = true;
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) out.push_back(shape[d]);
    if (reduced[d] && keepdim) out.push_back(1);
  }
  return out;
}

void expect_values_near(const Tensor& actual, const std::vector<double>& expected, double rtol,
                        double atol, const std::string& what) {
  const std::vector<double> values = to_vector<double>(actual);
  ASSERT_EQ(values.size(), expected.size()) << what;
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(values[i])) << what << " at " << i;
      continue;
    }
    EXPECT_NEAR(values[i], expected[i], atol + rtol * std::abs(expected[i])) << what << " at " << i;
  }
}

const std::vector<Dims> kDimSets = {{}, {0}, {1}, {-1}, {0, 2}, {-1, 0}, {1, 2}, {0, 1, 2}};

TEST(Reductions, MaxAndMinMatchNaiveOverEveryDimSet) {
  Generator g(1);
  const Tensor x = randn({4, 5, 6}, DType::f32, &g);
  for (const Dims& dims : kDimSets) {
    for (bool keepdim : {false, true}) {
      const std::string what = "dims " + shape_str(dims) + (keepdim ? " keepdim" : "");
      const Tensor mx = max(x, dims, keepdim), mn = min(x, dims, keepdim);
      EXPECT_EQ(mx.sizes(), reduced_shape(x.sizes(), dims, keepdim)) << what;
      EXPECT_EQ(mn.sizes(), mx.sizes()) << what;
      expect_values_near(mx, naive_reduce(x, dims, fold_max), 0, 0, "max " + what);
      expect_values_near(mn, naive_reduce(x, dims, fold_min), 0, 0, "min " + what);
    }
  }
}

TEST(Reductions, StatisticsMatchNaiveOverEveryDimSet) {
  Generator g(2);
  const Tensor x = randn({4, 5, 6}, DType::f64, &g);
  const Tensor positive = uniform({4, 5, 6}, 0.5, 1.5, DType::f64, &g);
  for (const Dims& dims : kDimSets) {
    for (bool keepdim : {false, true}) {
      const std::string what = "dims " + shape_str(dims) + (keepdim ? " keepdim" : "");
      for (int64_t correction : {0, 1, 2}) {
        const Tensor v = var(x, dims, correction, keepdim);
        EXPECT_EQ(v.sizes(), reduced_shape(x.sizes(), dims, keepdim)) << what;
        const std::vector<double> expected = naive_reduce(x, dims, fold_var(correction));
        expect_values_near(v, expected, 1e-12, 1e-12, "var " + what);
        std::vector<double> expected_std;
        for (double e : expected)
          expected_std.push_back(std::sqrt(e));
        expect_values_near(std(x, dims, correction, keepdim), expected_std, 1e-12, 1e-12,
                           "std " + what);
      }
      expect_values_near(logsumexp(x, dims, keepdim), naive_reduce(x, dims, fold_logsumexp), 1e-12,
                         1e-12, "logsumexp " + what);
      for (double p : {2.0, 1.0, 3.0, 0.5, 0.0, kInf, -kInf}) {
        const Tensor n = norm(positive, p, dims, keepdim);
        EXPECT_EQ(n.sizes(), reduced_shape(x.sizes(), dims, keepdim)) << what;
        expect_values_near(n, naive_reduce(positive, dims, fold_norm(p)), 1e-12, 1e-12,
                           "norm p=" + std::to_string(p) + " " + what);
      }
    }
  }
}

TEST(Reductions, NonContiguousInputs) {
  Generator g(3);
  const Tensor base = randn({6, 5, 4}, DType::f32, &g);
  const Tensor x = base.transpose(0, 2).slice(1, 0, 5, 2);  // (4, 3, 6), strided
  ASSERT_FALSE(x.is_contiguous());
  for (const Dims& dims : kDimSets) {
    const std::string what = "dims " + shape_str(dims);
    expect_values_near(max(x, dims), naive_reduce(x, dims, fold_max), 0, 0, "max " + what);
    expect_values_near(var(x, dims), naive_reduce(x, dims, fold_var(1)), 1e-5, 1e-6, "var " + what);
    expect_values_near(logsumexp(x, dims), naive_reduce(x, dims, fold_logsumexp), 1e-5, 1e-6,
                       "logsumexp " + what);
    expect_values_near(norm(x, 2.0, dims), naive_reduce(x, dims, fold_norm(2.0)), 1e-5, 1e-6,
                       "norm " + what);
  }
  const Tensor idx = argmax(x, 1);
  const Tensor idx_dense = argmax(x.contiguous(), 1);
  EXPECT_EQ(to_vector<int64_t>(idx), to_vector<int64_t>(idx_dense));
}

TEST(Reductions, SizeOneDimsAndScalars) {
  Generator g(4);
  const Tensor x = randn({3, 1, 4}, DType::f32, &g);
  EXPECT_TRUE(allclose(max(x, {1}), x.squeeze(1), 0, 0));
  EXPECT_EQ(max(x, {1}, true).sizes(), (Shape{3, 1, 4}));
  EXPECT_TRUE(allclose(logsumexp(x, {1}), x.squeeze(1), 1e-6, 1e-6));
  const Tensor one = full({1, 1}, 2.5);
  EXPECT_EQ(max(one).item<double>(), 2.5);
  EXPECT_EQ(argmax(one).item<int64_t>(), 0);
  EXPECT_EQ(argmax(one, std::nullopt, true).sizes(), (Shape{1, 1}));
  const Tensor scalar = scalar_tensor(-3.0);
  EXPECT_EQ(max(scalar).item<double>(), -3.0);
  EXPECT_EQ(max(scalar, {0}).dim(), 0);
  EXPECT_EQ(norm(scalar).item<double>(), 3.0);
  EXPECT_TRUE(std::isnan(var(one).item<double>()));  // one value, correction 1: 0 / 0
  EXPECT_EQ(var(one, {}, 0).item<double>(), 0.0);
}

TEST(Reductions, EmptyOutputsAndEmptyStatistics) {
  EXPECT_EQ(max(zeros({0, 3}), {1}).sizes(), (Shape{0}));
  EXPECT_EQ(argmax(zeros({0, 3}), 1).sizes(), (Shape{0}));
  EXPECT_EQ(norm(zeros({0, 3})).item<double>(), 0.0);
  EXPECT_TRUE(std::isinf(logsumexp(zeros({0}), {}).item<double>()));
}

TEST(Reductions, LongRowsUseEveryThread) {
  // One row longer than the parallel split threshold (the row is cut across threads).
  Generator g(5);
  const Tensor x = randn({300001}, DType::f64, &g);
  expect_values_near(max(x).reshape({1}), naive_reduce(x, {}, fold_max), 0, 0, "max");
  expect_values_near(var(x).reshape({1}), naive_reduce(x, {}, fold_var(1)), 1e-10, 0, "var");
  expect_values_near(logsumexp(x, {}).reshape({1}), naive_reduce(x, {}, fold_logsumexp), 1e-10, 0,
                     "logsumexp");
  const Tensor rows = randn({3, 70000}, DType::f32, &g);
  expect_values_near(min(rows, {1}), naive_reduce(rows, {1}, fold_min), 0, 0, "min rows");
}

double fold_sum(const std::vector<double>& v) {
  double total = 0;
  for (double x : v)
    total += x;
  return total;
}

// Reduced dims that are a leading run and one more (NCHW's per-channel (0, 2, 3)) are summed on
// the CPU without a copy (sum_leading): every dtype, inner lengths 1 and more, the threads split
// over the outputs (many channels) or over the leading index (one channel), empty and size-one
// dims; mean divides by every reduced value. Integers and bool exactly; floats against f64 sums
// of their values, to their dtype's rounding.
TEST(Reductions, ALeadingReducedRunAndOneMoreSumAsTheNaiveLoop) {
  struct Case {
    Shape shape;
    Dims dims;
  };
  const std::vector<Case> cases = {
      {{5, 3, 4, 4}, {0, 2, 3}}, {{4, 3, 5, 7}, {0, 2}},       {{2, 3, 4, 5, 6}, {0, 1, 3}},
      {{6, 1, 7}, {0, 2}},       {{1, 2, 3}, {0, 2}},          {{3, 0, 2}, {0, 2}},
      {{0, 3, 2}, {0, 2}},       {{64, 1, 32, 32}, {0, 2, 3}}, {{8, 16, 300}, {0, 2}},
      {{8, 17, 30, 11}, {0, 2}}, {{2, 3, 2, 5}, {-4, -2, -1}},
  };
  Generator g(11);
  for (const Case& c : cases) {
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64,
                        DType::u8, DType::boolean}) {
      const Tensor x = dtype == DType::boolean ? lt(rand(c.shape, DType::f32, &g), 0.5)
                       : is_floating(dtype)    ? randn(c.shape, DType::f32, &g).to(dtype)
                                               : randint(0, 100, c.shape, DType::i64, &g).to(dtype);
      const std::string what = describe(x) + " over " + shape_str(c.dims);
      const std::vector<double> expected = naive_reduce(x, c.dims, fold_sum);
      const double rtol = dtype == DType::f64   ? 1e-14
                          : dtype == DType::f32 ? 1e-6
                          : dtype == DType::f16 ? 1e-3
                                                : 8e-3;
      const Tensor sums = sum(x, c.dims);
      // Sums of random signs cancel: the error scales with the values summed, not the result.
      const double count = static_cast<double>(x.numel()) / std::max<int64_t>(1, sums.numel());
      const double atol = is_floating(dtype) ? rtol * (4 + count) : 0.0;
      EXPECT_EQ(sums.dtype(), is_floating(dtype) ? dtype : DType::i64) << what;
      expect_values_near(sums, expected, is_floating(dtype) ? rtol : 0.0, atol, what);
      EXPECT_EQ(sum(x, c.dims, true).dim(), x.dim()) << what;
      if (!is_floating(dtype) || x.numel() == 0) continue;
      const Tensor means = mean(x, c.dims);
      std::vector<double> expected_means = expected;
      for (double& value : expected_means)
        value /= count;
      expect_values_near(means, expected_means, rtol, atol / count, "mean of " + what);
    }
  }
  // The gradient is the broadcast of the result's: ones everywhere for sum, 1 / count for mean.
  Tensor x = randn({3, 2, 4}, DType::f64, &g);
  x.requires_grad_();
  sum(mean(x, {0, 2})).backward();
  expect_values_near(x.grad(), std::vector<double>(24, 1.0 / 12), 0, 1e-15, "mean's gradient");
}

TEST(Reductions, ArgmaxTakesTheFirstOfTies) {
  const Tensor x = from_vector(std::vector<float>{1, 3, 3, 2, 5, 5, 5, 5, 0, -1, 7, 7}, {3, 4});
  EXPECT_EQ(to_vector<int64_t>(argmax(x, 1)), (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(to_vector<int64_t>(argmin(x, 1)), (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(to_vector<int64_t>(argmax(x, 0)), (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_EQ(to_vector<int64_t>(argmin(x, -2)), (std::vector<int64_t>{2, 2, 0, 0}));
  EXPECT_EQ(argmax(x).item<int64_t>(), 10);  // flattened: the first 7
  EXPECT_EQ(argmin(x).item<int64_t>(), 9);
  EXPECT_EQ(argmax(x).dim(), 0);
  EXPECT_EQ(argmax(x, std::nullopt, true).sizes(), (Shape{1, 1}));
  EXPECT_EQ(argmax(x, 1, true).sizes(), (Shape{3, 1}));
  EXPECT_EQ(argmax(x, 1).dtype(), DType::i64);
  // Non-contiguous: the transposed view's rows are x's columns.
  EXPECT_EQ(to_vector<int64_t>(argmax(x.t(), 1)), (std::vector<int64_t>{1, 1, 2, 2}));
}

TEST(Reductions, ArgmaxMatchesNaiveOnRandomInput) {
  Generator g(6);
  const Tensor x = randn({5, 7, 3}, DType::f32, &g);
  for (int64_t dim : {0, 1, 2, -1}) {
    const Tensor idx = argmax(x, dim), idx_min = argmin(x, dim);
    const std::vector<double> expected = naive_reduce(x, {dim}, [](const std::vector<double>& v) {
      return static_cast<double>(std::max_element(v.begin(), v.end()) - v.begin());
    });
    const std::vector<double> expected_min =
        naive_reduce(x, {dim}, [](const std::vector<double>& v) {
          return static_cast<double>(std::min_element(v.begin(), v.end()) - v.begin());
        });
    expect_values_near(idx, expected, 0, 0, "argmax dim " + std::to_string(dim));
    expect_values_near(idx_min, expected_min, 0, 0, "argmin dim " + std::to_string(dim));
  }
}

TEST(Reductions, NaNPropagatesThroughMaxAndMin) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = from_vector(std::vector<float>{1, nan, 3, 4, 5, 6, 7, 8, nan}, {3, 3});
  const std::vector<double> row_max = to_vector<double>(max(x, {1}));
  EXPECT_TRUE(std::isnan(row_max[0]));
  EXPECT_EQ(row_max[1], 6.0);
  EXPECT_TRUE(std::isnan(row_max[2]));
  const std::vector<double> col_min = to_vector<double>(min(x, {0}));
  EXPECT_EQ(col_min[0], 1.0);
  EXPECT_TRUE(std::isnan(col_min[1]));
  EXPECT_TRUE(std::isnan(col_min[2]));
  EXPECT_TRUE(std::isnan(max(x).item<double>()));
  // argmax / argmin treat NaN as the extreme: the first NaN wins.
  EXPECT_EQ(to_vector<int64_t>(argmax(x, 1)), (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(to_vector<int64_t>(argmin(x, 0)), (std::vector<int64_t>{0, 0, 2}));
  EXPECT_EQ(argmax(x).item<int64_t>(), 1);
}

TEST(Reductions, IntegerMaxMinArgmax) {
  const Tensor x = from_vector(std::vector<int64_t>{4, -2, 9, 9, 0, -7}, {2, 3}, DType::i64);
  for (DType dtype : {DType::i64, DType::i32, DType::u8}) {
    const Tensor xi = dtype == DType::u8 ? (x + 7).to(dtype) : x.to(dtype);
    const double shift = dtype == DType::u8 ? 7 : 0;
    const Tensor mx = max(xi, {1});
    EXPECT_EQ(mx.dtype(), dtype);
    EXPECT_EQ(to_vector<double>(mx), (std::vector<double>{9 + shift, 9 + shift}));
    EXPECT_EQ(to_vector<double>(min(xi, {0})),
              (std::vector<double>{4 + shift, -2 + shift, -7 + shift}));
    EXPECT_EQ(to_vector<int64_t>(argmax(xi, 1)), (std::vector<int64_t>{2, 0}));
    EXPECT_EQ(argmin(xi).item<int64_t>(), 5);
  }
}

TEST(Reductions, MaxGradientSplitsTiesEvenly) {
  Tensor x = from_vector(std::vector<double>{1, 3, 3, 2, 0, 5}, {2, 3}, DType::f64);
  x.requires_grad_();
  sum(max(x, {1})).backward();
  EXPECT_EQ(to_vector<double>(x.grad()), (std::vector<double>{0, 0.5, 0.5, 0, 0, 1}));
  Tensor y = from_vector(std::vector<double>{-2, 1, -2}, {3}, DType::f64);
  y.requires_grad_();
  min(y).backward();
  EXPECT_EQ(to_vector<double>(y.grad()), (std::vector<double>{0.5, 0, 0.5}));
}

// PyTorch's two conventions where the result is NaN: torch.max(x) (no dims) gives the gradient to
// the NaN elements, evenly; torch.amax(x, dims) compares with == alone, so the slice gets NaN.
TEST(Reductions, MaxGradientWhereTheResultIsNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = from_vector(std::vector<double>{1, nan, 3, nan}, {2, 2}, DType::f64);
  x.requires_grad_();
  max(x).backward();
  EXPECT_EQ(to_vector<double>(x.grad()), (std::vector<double>{0, 0.5, 0, 0.5}));

  Tensor y = from_vector(std::vector<double>{1, nan, 3, 4}, {2, 2}, DType::f64);
  y.requires_grad_();
  sum(min(y, {1})).backward();
  const std::vector<double> g = to_vector<double>(y.grad());
  EXPECT_TRUE(std::isnan(g[0]) && std::isnan(g[1])) << g[0] << " " << g[1];
  EXPECT_EQ(g[2], 1.0);
  EXPECT_EQ(g[3], 0.0);
}

TEST(Reductions, StdOfAConstantRowHasAZeroGradient) {
  // d std / dx = (x - mean) / ((n - 1) std): 0 / 0 on a constant row, which PyTorch's
  // std_backward takes as 0. The other row keeps its gradient.
  Tensor x = from_vector(std::vector<double>{2, 2, 2, 1, 2, 6}, {2, 3}, DType::f64);
  x.requires_grad_();
  sum(std(x, {1})).backward();
  const std::vector<double> g = to_vector<double>(x.grad());
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(g[i], 0.0) << i;
  const double mean = 3.0, deviation = std::sqrt((4.0 + 1.0 + 9.0) / 2.0);
  EXPECT_NEAR(g[3], (1.0 - mean) / (2.0 * deviation), 1e-15);
  EXPECT_NEAR(g[5], (6.0 - mean) / (2.0 * deviation), 1e-15);
}

TEST(Reductions, VarResultMayBeChangedInPlaceBeforeBackward) {
  // var's node does not save its result (std's does), as in PyTorch.
  Tensor x = from_vector(std::vector<double>{1, 2, 6}, {3}, DType::f64);
  x.requires_grad_();
  Tensor v = var(x);
  v.mul_(2.0);
  v.backward();
  // d (2 var) / dx = 4 (x - mean) / (n - 1), mean 3
  EXPECT_EQ(to_vector<double>(x.grad()), (std::vector<double>{-4, -2, 6}));
}

TEST(Reductions, LogsumexpIsStable) {
  const Tensor x =
      from_vector(std::vector<float>{1000, 1000, -1000, -INFINITY, -INFINITY, -INFINITY}, {2, 3});
  const std::vector<double> r = to_vector<double>(logsumexp(x, {1}));
  EXPECT_NEAR(r[0], 1000 + std::log(2.0), 1e-3);
  EXPECT_TRUE(std::isinf(r[1]) && r[1] < 0);
  EXPECT_TRUE(std::isinf(logsumexp(full({3}, INFINITY), {}).item<double>()));
}

TEST(Reductions, ReducedPrecisionMatchesF32) {
  Generator g(7);
  const Tensor x = randn({6, 33, 5}, DType::f32, &g);
  for (DType dtype : {DType::f16, DType::bf16}) {
    const double tol = dtype == DType::bf16 ? 2e-2 : 3e-3;
    const Tensor xl = x.to(dtype);
    const Tensor xr = xl.to(DType::f32);  // the rounded inputs, in f32
    for (const Dims& dims : std::vector<Dims>{{1}, {0, 2}, {}}) {
      const std::string what = std::string(dtype_name(dtype)) + " dims " + shape_str(dims);
      EXPECT_EQ(max(xl, dims).dtype(), dtype);
      EXPECT_TRUE(allclose(max(xl, dims).to(DType::f32), max(xr, dims), 0, 0)) << what;
      EXPECT_TRUE(allclose(min(xl, dims).to(DType::f32), min(xr, dims), 0, 0)) << what;
      EXPECT_EQ(to_vector<int64_t>(argmax(xl, 1)), to_vector<int64_t>(argmax(xr, 1))) << what;
      EXPECT_TRUE(allclose(var(xl, dims).to(DType::f32), var(xr, dims), tol, tol)) << what;
      EXPECT_TRUE(allclose(std(xl, dims).to(DType::f32), std(xr, dims), tol, tol)) << what;
      EXPECT_TRUE(allclose(logsumexp(xl, dims).to(DType::f32), logsumexp(xr, dims), tol, tol))
          << what;
      EXPECT_TRUE(allclose(norm(xl, 2.0, dims).to(DType::f32), norm(xr, 2.0, dims), tol, tol))
          << what;
      EXPECT_TRUE(allclose(norm(xl, 1.0, dims).to(DType::f32), norm(xr, 1.0, dims), tol, tol))
          << what;
    }
  }
}

void expect_error(const std::function<void()>& f, const std::string& substring) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing \"" << substring << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(substring), std::string::npos) << e.what();
  }
}

// torch.max(x, dim): values and the index of the first extreme (a NaN wins); the gradient goes
// to that one element, even on ties (amax would split it).
TEST(Reductions, MaxAndMinWithIndices) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x =
      from_vector(std::vector<double>{3, 7, 7, 1, 2, nan, 5, 5, 4, 0, 4, 0}, {3, 4}, DType::f64);
  const ValuesAndIndices row_max = max_with_indices(x, 1);
  EXPECT_EQ(to_vector<int64_t>(row_max.indices), (std::vector<int64_t>{1, 1, 0}));
  const std::vector<double> values = to_vector<double>(row_max.values);
  EXPECT_EQ(values[0], 7.0);
  EXPECT_TRUE(std::isnan(values[1]));
  EXPECT_EQ(values[2], 4.0);
  const ValuesAndIndices column_min = min_with_indices(x, 0, true);
  EXPECT_EQ(column_min.values.sizes(), (Shape{1, 4}));
  EXPECT_EQ(column_min.indices.sizes(), (Shape{1, 4}));
  EXPECT_EQ(column_min.indices.dtype(), DType::i64);
  EXPECT_EQ(to_vector<int64_t>(column_min.indices), (std::vector<int64_t>{1, 1, 2, 2}));

  Tensor leaf = from_vector(std::vector<double>{3, 7, 7, 1}, {1, 4}, DType::f64).requires_grad_();
  sum(max_with_indices(leaf, -1).values).backward();
  EXPECT_EQ(to_vector<double>(leaf.grad()), (std::vector<double>{0, 1, 0, 0}));

  const Tensor scalar = full({}, 2.5, DType::f32);
  const ValuesAndIndices own = max_with_indices(scalar, 0);
  EXPECT_EQ(own.values.item<float>(), 2.5f);
  EXPECT_EQ(own.indices.item<int64_t>(), 0);
  expect_error([&] { max_with_indices(scalar, 1); }, "max: dim 1 is out of range for a 0-d tensor");
  expect_error([&] { min_with_indices(x, 2); }, "argmin: dim 2 is out of range");
  expect_error([&] { max_with_indices(zeros({0, 3}), 0); }, "cannot reduce over a dim of size 0");
}

TEST(Reductions, ErrorsSayWhatWasWrong) {
  const Tensor x = zeros({2, 3});
  expect_error([&] { max(x, {2}); }, "max: dim 2 is out of range for a 2-D tensor");
  expect_error([&] { min(x, {-3}); }, "min: dim -3 is out of range");
  expect_error([&] { var(x, {0, 0}); }, "var: dim 0 appears more than once");
  expect_error([&] { argmax(x, 5); }, "argmax: dim 5 is out of range");
  expect_error([&] { max(zeros({0, 3}), {0}); }, "max: cannot reduce over a dim of size 0");
  expect_error([&] { argmin(zeros({0})); }, "argmin: cannot reduce over a dim of size 0");
  expect_error([&] { var(zeros({3}, DType::i64)); }, "var: expected a floating-point tensor");
  expect_error([&] { logsumexp(zeros({3}, DType::i32), {}); },
               "logsumexp: expected a floating-point tensor");
  expect_error([&] { norm(zeros({3}, DType::i64)); }, "norm: expected a floating-point tensor");
}

}  // namespace
}  // namespace ember
