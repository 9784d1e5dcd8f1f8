// Max and average pooling, with PyTorch's options (ceil_mode, max_pool2d's dilation, avg_pool2d's
// count_include_pad and divisor_override), against a reference written from PyTorch's
// definitions, and against values PyTorch prints.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "runtime/ops.h"
#include "tests/common/expect_error.h"

namespace ember {
namespace {

struct PoolSpec {
  int64_t kh, kw, sh, sw, ph, pw;
  int64_t dh = 1, dw = 1;
  bool ceil_mode = false;
  bool count_include_pad = true;
  int64_t divisor_override = 0;  // 0: none
};

Pool2dOptions options_of(const PoolSpec& s) {
  Pool2dOptions o{.kernel_size = Size2(s.kh, s.kw),
                  .stride = Size2(s.sh, s.sw),
                  .padding = Size2(s.ph, s.pw),
                  .dilation = Size2(s.dh, s.dw),
                  .ceil_mode = s.ceil_mode,
                  .count_include_pad = s.count_include_pad};
  if (s.divisor_override > 0) o.divisor_override = s.divisor_override;
  return o;
}

// torch.nn.MaxPool2d's documented output size: floor (or ceil) of
// (in + 2 pad - dilation (kernel - 1) - 1) / stride, plus 1; with ceil_mode, a last window that
// would start in the end padding is dropped.
int64_t output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation,
                    bool ceil_mode) {
  const double exact =
      static_cast<double>(in + 2 * pad - dilation * (kernel - 1) - 1) / static_cast<double>(stride);
  int64_t out = static_cast<int64_t>(ceil_mode ? std::ceil(exact) : std::floor(exact)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// Every output by its definition: the window's elements are p stride - pad + i dilation for
// i < kernel; max over the real ones; the average divides by divisor_override, or by the window
// elements inside the padded input (count_include_pad), or by the real ones.
std::vector<double> reference_pool(const Tensor& x, const PoolSpec& s, bool is_max) {
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const int64_t P = output_size(H, s.kh, s.sh, s.ph, s.dh, s.ceil_mode);
  const int64_t Q = output_size(W, s.kw, s.sw, s.pw, s.dw, s.ceil_mode);
  const std::vector<double> xs = to_vector<double>(x.to(DType::f64));
  std::vector<double> out;
  for (int64_t plane = 0; plane < planes; ++plane)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t q = 0; q < Q; ++q) {
        double best = -std::numeric_limits<double>::infinity(), total = 0.0;
        int64_t real = 0, in_padded = 0;
        for (int64_t i = 0; i < s.kh; ++i)
          for (int64_t j = 0; j < s.kw; ++j) {
            const int64_t h = p * s.sh - s.ph + i * s.dh, w = q * s.sw - s.pw + j * s.dw;
            if (h < H + s.ph && w < W + s.pw) ++in_padded;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            const double v = xs[static_cast<size_t>((plane * H + h) * W + w)];
            best = std::max(best, v);
            total += v;
            ++real;
          }
        const int64_t divisor =
            s.divisor_override > 0 ? s.divisor_override : (s.count_include_pad ? in_padded : real);
        out.push_back(is_max ? best : total / static_cast<double>(divisor));
      }
  return out;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& expected,
                     double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], expected[i], tolerance) << what << " at " << i;
}

TEST(PoolingOptions, MaxAndAverageMatchTheDefinition) {
  Generator g(41);
  const std::vector<std::pair<Shape, PoolSpec>> cases = {
      {{2, 3, 8, 8}, {2, 2, 2, 2, 0, 0}},  // the 2x2 fast path for f32
      {{1, 2, 9, 7}, {3, 3, 2, 2, 1, 1}},
      {{3, 1, 7, 10}, {3, 2, 1, 2, 1, 0}},
      {{2, 2, 7, 8}, {2, 2, 2, 2, 1, 0, 1, 2, true}},
      {{1, 3, 9, 8}, {3, 3, 1, 1, 0, 0, 3, 2}},
      {{1, 2, 5, 5}, {2, 2, 2, 2, 0, 0, 1, 1, true}},
      {{2, 1, 7, 6}, {3, 3, 2, 2, 1, 1, 1, 1, true}},
      {{1, 1, 6, 5}, {2, 2, 2, 3, 0, 0, 1, 1, true, false}},
      {{1, 2, 10, 11}, {3, 2, 3, 2, 1, 1, 2, 3, true}},
      {{1, 1, 4, 4}, {3, 3, 3, 3, 1, 1, 1, 1, true}},
  };
  for (const auto& [shape, spec] : cases) {
    for (const DType dtype : {DType::f64, DType::f32}) {
      const Tensor x = uniform(shape, -1.0, 1.0, dtype, &g);
      const double tolerance = dtype == DType::f64 ? 1e-12 : 1e-6;
      const std::string what = std::string(dtype_name(dtype)) + " input " + shape_str(shape) +
                               " kernel " + std::to_string(spec.kh) + "x" + std::to_string(spec.kw);
      const Tensor y = max_pool2d(x, options_of(spec));
      EXPECT_EQ(y.size(2),
                output_size(shape[2], spec.kh, spec.sh, spec.ph, spec.dh, spec.ceil_mode))
          << what;
      expect_near_all(to_vector<double>(y.to(DType::f64)), reference_pool(x, spec, true), tolerance,
                      "max " + what);
      if (spec.dh != 1 || spec.dw != 1) continue;  // avg_pool2d has no dilation
      for (const bool include_pad : {true, false}) {
        for (const int64_t divisor : {int64_t{0}, int64_t{5}}) {
          PoolSpec avg = spec;
          avg.count_include_pad = include_pad;
          avg.divisor_override = divisor;
          expect_near_all(to_vector<double>(avg_pool2d(x, options_of(avg)).to(DType::f64)),
                          reference_pool(x, avg, false), tolerance, "avg " + what);
        }
      }
    }
  }
}

// torch.nn.functional on torch.arange(25.).view(1, 1, 5, 5), printed by PyTorch 2.x:
//   max_pool2d(x, 2, ceil_mode=True)  -> [[6, 8, 9], [16, 18, 19], [21, 23, 24]]
//   avg_pool2d(x, 2, ceil_mode=True)  -> [[3, 5, 6.5], [13, 15, 16.5], [20.5, 22.5, 24]]
//   avg_pool2d(x, 2, ceil_mode=True, divisor_override=3) -> the window sums / 3
//   max_pool2d(x, 2, stride=1, dilation=2) -> [[12, 13, 14], [17, 18, 19], [22, 23, 24]]
TEST(PoolingOptions, ValuesPyTorchPrints) {
  const Tensor x = arange(0, 25, 1, DType::f32).reshape({1, 1, 5, 5});
  const Pool2dOptions ceil{.kernel_size = 2, .ceil_mode = true};
  EXPECT_EQ(to_vector<float>(max_pool2d(x, ceil)),
            (std::vector<float>{6, 8, 9, 16, 18, 19, 21, 23, 24}));
  EXPECT_EQ(to_vector<float>(avg_pool2d(x, ceil)),
            (std::vector<float>{3, 5, 6.5, 13, 15, 16.5, 20.5, 22.5, 24}));
  Pool2dOptions by_three = ceil;
  by_three.divisor_override = 3;
  const std::vector<float> sums = {12, 20, 13, 52, 60, 33, 41, 45, 24};
  const std::vector<float> got = to_vector<float>(avg_pool2d(x, by_three));
  ASSERT_EQ(got.size(), sums.size());
  for (size_t i = 0; i < sums.size(); ++i)
    EXPECT_FLOAT_EQ(got[i], sums[i] / 3.0f) << i;
  EXPECT_EQ(to_vector<float>(max_pool2d(x, {.kernel_size = 2, .stride = 1, .dilation = 2})),
            (std::vector<float>{12, 13, 14, 17, 18, 19, 22, 23, 24}));
}

// The gradient of a dilated, ceil-mode max pool goes to the saved maxima; of an average with a
// divisor override, dy / divisor to every real element of the window.
TEST(PoolingOptions, GradientsFollowTheWindows) {
  // 6x6 input holding its own flat positions; windows of extent 3 at stride 2: rows {0, 2},
  // {2, 4} and, with ceil_mode, {4} (its row 6 lies outside). The maxima sit at the largest row
  // and column of each window: rows 2, 4, 4 and columns 2, 4, 4.
  Tensor x = arange(0, 36, 1, DType::f64).reshape({1, 1, 6, 6}).requires_grad_();
  const Tensor y = max_pool2d(x, {.kernel_size = 2, .stride = 2, .dilation = 2, .ceil_mode = true});
  ASSERT_EQ(y.sizes(), (Shape{1, 1, 3, 3}));
  sum(y).backward();
  std::vector<double> expected(36, 0.0);
  expected[2 * 6 + 2] = 1.0;
  expected[2 * 6 + 4] = 2.0;
  expected[4 * 6 + 2] = 2.0;
  expected[4 * 6 + 4] = 4.0;
  EXPECT_EQ(to_vector<double>(x.grad()), expected);

  Tensor z = ones({1, 1, 3, 3}, DType::f64).requires_grad_();
  sum(avg_pool2d(z, {.kernel_size = 2, .ceil_mode = true, .divisor_override = 4})).backward();
  EXPECT_EQ(to_vector<double>(z.grad()), std::vector<double>(9, 0.25));
}

// kernel 2, dilation 3, padding 1 over 2 rows: the only window holds rows -1 and 2, both outside
// the input. Its output is -inf (PyTorch's value) and it sends no gradient anywhere.
TEST(PoolingOptions, ADilatedWindowOfPaddingOnlyIsMinusInfinityWithoutGradient) {
  Tensor x = ones({1, 2, 2, 2}, DType::f64).requires_grad_();
  const Tensor y = max_pool2d(x, {.kernel_size = 2, .padding = 1, .dilation = 3});
  ASSERT_EQ(y.sizes(), (Shape{1, 2, 1, 1}));
  for (double v : to_vector<double>(y))
    EXPECT_EQ(v, -std::numeric_limits<double>::infinity());
  sum(y * 0.0).backward();
  EXPECT_EQ(to_vector<double>(x.grad()), std::vector<double>(8, 0.0));
  for (DType dtype : {DType::f32, DType::bf16}) {  // the f32 and 16-bit backward paths
    Tensor z = ones({1, 1, 2, 2}, dtype).requires_grad_();
    max_pool2d(z, {.kernel_size = 2, .padding = 1, .dilation = 3})
        .backward(ones({1, 1, 1, 1}, dtype));
    EXPECT_EQ(to_vector<double>(z.grad().to(DType::f64)), std::vector<double>(4, 0.0)) << dtype;
  }
}

TEST(PoolingOptions, BadOptionsAreClearErrors) {
  const Tensor x = ones({1, 1, 5, 5});
  EXPECT_ERROR_WITH(avg_pool2d(x, {.kernel_size = 2, .dilation = 2}), "avg_pool2d",
                    "dilation is for max_pool2d only");
  EXPECT_ERROR_WITH(max_pool2d(x, {.kernel_size = 2, .divisor_override = 2}), "max_pool2d",
                    "divisor_override is for avg_pool2d only");
  EXPECT_ERROR_WITH(avg_pool2d(x, {.kernel_size = 2, .divisor_override = 0}), "avg_pool2d",
                    "divisor_override must be positive, got 0");
  EXPECT_ERROR_WITH(max_pool2d(x, {.kernel_size = 2, .dilation = 0}), "max_pool2d",
                    "dilation must be positive");
  EXPECT_ERROR_WITH(max_pool2d(x, {.kernel_size = 3, .dilation = 3}), "max_pool2d",
                    "kernel size (3,3) (dilated to (7,7)) is larger than the padded input (5,5)");
  // Past int32 the dilated span overflowed int64 (undefined behaviour).
  EXPECT_ERROR_WITH(
      max_pool2d(x, {.kernel_size = 3, .dilation = std::numeric_limits<int64_t>::max() / 2}),
      "max_pool2d", "must be at most 2^31 - 1");
}

}  // namespace
}  // namespace ember
