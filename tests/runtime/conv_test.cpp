// conv2d and pooling against plain loops (forward, and conv2d's backward), 16-bit floats
// against f32, and the error messages.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/common/conv_params.h"
#include "kernels/common/convert.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/conv2d_direct.h"
#include "kernels/cpu/conv2d_small.h"
#include "kernels/cpu/pooling.h"
#include "runtime/ops.h"

namespace ember {
namespace {

// The OpenMP thread count set for a scope, and the caller's restored after it (also when a
// failed assertion or an exception leaves the scope early).
class ThreadCount {
 public:
  explicit ThreadCount(int threads) : previous_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~ThreadCount() { omp_set_num_threads(previous_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int previous_;
};

struct ConvCase {
  Shape input, weight;
  Conv2dOptions options;
  bool bias;
};

int64_t out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

// The direct definition, in f64. Calls visit(n, k, c, p, q, h, w) for every (output, input,
// weight) triple that contributes: forward and backward references are the same loop.
template <typename Visit>
void for_each_tap(const ConvCase& c, Visit visit) {
  const int64_t N = c.input[0], C = c.input[1], H = c.input[2], W = c.input[3];
  const int64_t K = c.weight[0], Cg = c.weight[1], R = c.weight[2], S = c.weight[3];
  const Conv2dOptions& o = c.options;
  const int64_t P = out_size(H, R, o.stride.h, o.padding.h, o.dilation.h);
  const int64_t Q = out_size(W, S, o.stride.w, o.padding.w, o.dilation.w);
  const int64_t Kg = K / o.groups;
  (void)C;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q)
          for (int64_t cg = 0; cg < Cg; ++cg)
            for (int64_t r = 0; r < R; ++r)
              for (int64_t s = 0; s < S; ++s) {
                const int64_t h = p * o.stride.h - o.padding.h + r * o.dilation.h;
                const int64_t w = q * o.stride.w - o.padding.w + s * o.dilation.w;
                if (h < 0 || h >= H || w < 0 || w >= W) continue;
                const int64_t channel = (k / Kg) * Cg + cg;
                visit(((n * K + k) * P + p) * Q + q, ((n * C + channel) * H + h) * W + w,
                      ((k * Cg + cg) * R + r) * S + s);
              }
}

std::vector<double> values_of(const Tensor& t) {
  return to_vector<double>(t);
}

void expect_close(const std::vector<double>& actual, const std::vector<double>& expected,
                  double tolerance, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i], tolerance * (1.0 + std::abs(expected[i])))
        << what << " at " << i;
}

std::string case_name(const ConvCase& c) {
  std::string name = shape_str(c.input);
  name += " * ";
  name += shape_str(c.weight);
  name +=
      " stride " + std::to_string(c.options.stride.h) + "," + std::to_string(c.options.stride.w);
  name += " groups " + std::to_string(c.options.groups);
  return name;
}

std::vector<ConvCase> conv_cases() {
  return {
      {{3, 4, 9, 8}, {6, 4, 3, 3}, {.padding = 1}, true},
      {{1, 3, 11, 7}, {5, 3, 3, 2}, {.stride = Size2(2, 3), .padding = Size2(1, 0)}, false},
      {{2, 2, 13, 12}, {3, 2, 3, 3}, {.padding = 2, .dilation = 2}, true},
      {{4, 6, 7, 7}, {4, 3, 3, 3}, {.stride = 2, .padding = 1, .groups = 2}, true},
      {{2, 6, 5, 6}, {6, 1, 3, 3}, {.padding = 1, .groups = 6}, false},  // depthwise
      {{3, 5, 6, 7}, {4, 5, 1, 1}, {}, true},                            // pointwise
      {{5, 1, 4, 4}, {2, 1, 4, 4}, {}, false},                           // kernel = input
      // Large enough to be unfolded in several bands of rows.
      {{2, 16, 40, 38}, {8, 16, 3, 3}, {.padding = 1}, true},
  };
}

// Forward and backward of one case against for_each_tap, in f32 with a bias when asked.
void check_against_definition(const ConvCase& c, Generator& g, const std::string& label) {
  Tensor x = uniform(c.input, -1.0, 1.0, DType::f32, &g);
  Tensor w = uniform(c.weight, -1.0, 1.0, DType::f32, &g);
  Tensor b = c.bias ? uniform({c.weight[0]}, -1.0, 1.0, DType::f32, &g) : Tensor();
  x.requires_grad_();
  w.requires_grad_();
  if (c.bias) b.requires_grad_();
  const Tensor y = conv2d(x, w, b, c.options);
  const std::vector<double> xs = values_of(x), ws = values_of(w);
  std::vector<double> expected(static_cast<size_t>(y.numel()), 0.0);
  for_each_tap(c, [&](int64_t o, int64_t i, int64_t k) {
    expected[static_cast<size_t>(o)] += xs[static_cast<size_t>(i)] * ws[static_cast<size_t>(k)];
  });
  if (c.bias) {
    const std::vector<double> bs = values_of(b);
    const int64_t plane = y.size(2) * y.size(3);
    for (size_t o = 0; o < expected.size(); ++o)
      expected[o] += bs[static_cast<size_t>((static_cast<int64_t>(o) / plane) % y.size(1))];
  }
  const std::string name = label + case_name(c);
  expect_close(values_of(y), expected, 1e-5, "forward " + name);

  // Backward of sum(y * dy) for a random dy: grad_x and grad_w by the same taps.
  const Tensor dy = uniform(y.sizes(), -1.0, 1.0, DType::f32, &g);
  sum(y * dy).backward();
  const std::vector<double> dys = values_of(dy);
  std::vector<double> dx(xs.size(), 0.0), dw(ws.size(), 0.0);
  for_each_tap(c, [&](int64_t o, int64_t i, int64_t k) {
    dx[static_cast<size_t>(i)] += dys[static_cast<size_t>(o)] * ws[static_cast<size_t>(k)];
    dw[static_cast<size_t>(k)] += dys[static_cast<size_t>(o)] * xs[static_cast<size_t>(i)];
  });
  expect_close(values_of(x.grad()), dx, 1e-4, "grad_input " + name);
  expect_close(values_of(w.grad()), dw, 1e-4, "grad_weight " + name);
  if (c.bias) {
    expect_close(values_of(b.grad()), values_of(sum(dy, {0, 2, 3})), 1e-4, "grad_bias " + name);
  }
}

TEST(Conv2d, ForwardAndBackwardMatchTheDefinition) {
  Generator g(21);
  for (const ConvCase& c : conv_cases())
    check_against_definition(c, g, "");
}

// set_conv_allow_tf32, set_conv_deterministic and set_conv_benchmark (torch.backends.cudnn's
// allow_tf32, deterministic and benchmark) are CUDA's: exact, deterministic and unmeasured by
// default, and the CPU computes the same bits with TF32 allowed or benchmarking asked for.
TEST(Conv2d, TheTf32SwitchIsOffByDefaultAndLeavesTheCpuExact) {
  EXPECT_FALSE(conv_allow_tf32());
  EXPECT_TRUE(conv_deterministic());
  EXPECT_FALSE(conv_benchmark());
  Generator g(23);
  const Tensor x = randn({2, 3, 9, 7}, DType::f32, &g), w = randn({4, 3, 3, 3}, DType::f32, &g);
  const Tensor exact = conv2d(x, w, Tensor(), {.padding = 1});
  set_conv_allow_tf32(true);
  EXPECT_TRUE(conv_allow_tf32());
  const Tensor with_switch = conv2d(x, w, Tensor(), {.padding = 1});
  set_conv_allow_tf32(false);
  EXPECT_EQ(to_vector<float>(with_switch), to_vector<float>(exact));
  set_conv_benchmark(true);
  EXPECT_TRUE(conv_benchmark());
  const Tensor benchmarked = conv2d(x, w, Tensor(), {.padding = 1});
  set_conv_benchmark(false);
  EXPECT_FALSE(conv_benchmark());
  EXPECT_EQ(to_vector<float>(benchmarked), to_vector<float>(exact));
}

kernels::Conv2dParams params_of(const ConvCase& c) {
  kernels::Conv2dParams p;
  p.batch = c.input[0];
  p.in_channels = c.input[1];
  p.in_height = c.input[2];
  p.in_width = c.input[3];
  p.out_channels = c.weight[0];
  p.kernel_height = c.weight[2];
  p.kernel_width = c.weight[3];
  p.pad_h = c.options.padding.h;
  p.pad_w = c.options.padding.w;
  return p;
}

// Stride 1, one group: the direct kernels (kernels/cpu/conv2d_direct.h). Widths that are not
// multiples of the 16-float vectors, channel counts that are not multiples of the 8-channel
// blocks, padding 0 to 2, 3x3, 5x5, 1xN and Nx1 kernels, one image (the items of an image shared
// between threads) and several.
std::vector<ConvCase> direct_cases() {
  return {
      {{2, 5, 17, 19}, {11, 5, 3, 3}, {.padding = 1}, true},
      {{1, 3, 20, 33}, {9, 3, 5, 5}, {.padding = 2}, false},
      {{3, 4, 12, 21}, {8, 4, 3, 3}, {.padding = 0}, true},
      {{2, 6, 10, 18}, {7, 6, 1, 5}, {.padding = Size2(0, 2)}, false},
      {{3, 2, 9, 30}, {3, 2, 3, 1}, {.padding = Size2(1, 0)}, true},
      {{2, 4, 12, 14}, {5, 4, 3, 3}, {.padding = 2}, false},
      {{1, 16, 24, 40}, {24, 16, 3, 3}, {.padding = 1}, true},
      {{4, 9, 16, 16}, {17, 9, 3, 3}, {.padding = 1}, false},
      // Fewer than 8 input channels: grad_weight takes the GEMM path.
      {{2, 1, 12, 20}, {5, 1, 3, 3}, {.padding = 1}, true},
      {{3, 3, 10, 16}, {9, 3, 3, 3}, {.padding = 1}, false},
      // Padding beyond kernel size - 1: the forward is direct, grad_input takes the GEMM path.
      {{2, 3, 10, 12}, {4, 3, 2, 2}, {.padding = 2}, true},
  };
}

// check_against_definition on every case with each instruction set this CPU can run.
void check_on_every_instruction_set(const std::vector<ConvCase>& cases, uint64_t seed,
                                    const char* kernels) {
  using kernels::cpu::DirectConvIsa;
  const std::pair<DirectConvIsa, const char*> isas[] = {{DirectConvIsa::avx512, "avx512 "},
                                                        {DirectConvIsa::avx2, "avx2 "},
                                                        {DirectConvIsa::baseline, "baseline "}};
  for (const auto& [isa, label] : isas) {
    if (!kernels::cpu::set_conv2d_direct_isa(isa)) {
      std::printf("[   INFO   ] this CPU cannot run the %s%s kernels: skipped\n", label, kernels);
      continue;
    }
    Generator g(seed);
    for (const ConvCase& c : cases)
      check_against_definition(c, g, label);
  }
  kernels::cpu::set_conv2d_direct_isa(DirectConvIsa::best);
}

// conv2d(x, w, padding 1) and both its gradients with one thread and with all of them: equal
// within rtol and atol (0 and 0: the same bits).
void expect_one_and_all_threads_agree(const Tensor& x, const Tensor& w, double rtol, double atol,
                                      const std::string& what) {
  Tensor x_one = x.detach(), x_many = x.detach(), w_one = w.detach(), w_many = w.detach();
  for (Tensor* t : {&x_one, &x_many, &w_one, &w_many})
    t->requires_grad_();
  Tensor one;
  {
    ThreadCount single(1);
    one = conv2d(x_one, w_one, Tensor(), {.padding = 1});
    sum(one * one).backward();
  }
  const Tensor many = conv2d(x_many, w_many, Tensor(), {.padding = 1});
  sum(many * many).backward();
  EXPECT_TRUE(allclose(one, many, rtol, atol)) << what;
  EXPECT_TRUE(allclose(x_one.grad(), x_many.grad(), rtol, atol)) << what;
  // grad_weight sums over the batch, in an order that may follow the thread count: its rounding
  // is relative to the largest sum, not to each element.
  const double weight_scale = max(abs(w_one.grad())).item<double>();
  EXPECT_TRUE(allclose(w_one.grad(), w_many.grad(), 0.0, atol + rtol * weight_scale)) << what;
}

TEST(Conv2d, DirectKernelsMatchTheDefinitionOnEveryInstructionSet) {
  for (const ConvCase& c : direct_cases())
    ASSERT_TRUE(kernels::cpu::conv2d_direct_applies(params_of(c))) << case_name(c);
  check_on_every_instruction_set(direct_cases(), 24, "direct");
}

TEST(Conv2d, DirectKernelsWithOneThreadAndTwoThreadsAgree) {
  Generator g(25);
  for (int64_t batch : {1, 3}) {
    const Tensor x = uniform({batch, 5, 13, 17}, -1.0, 1.0, DType::f32, &g);
    const Tensor w = uniform({10, 5, 3, 3}, -1.0, 1.0, DType::f32, &g);
    expect_one_and_all_threads_agree(x, w, 1e-5, 1e-6, "batch " + std::to_string(batch));
  }
}

// Small planes with many channels: the kernels with output channels in the vectors
// (kernels/cpu/conv2d_small.h). Channel counts that are not whole blocks (8, 16 or 64 by
// instruction set), planes of 7 to 64 pixels, padding 0 to 3, 3x3, 2x3 and 1x3 kernels, one image
// and several (a tile of 6 pixels spans images).
std::vector<ConvCase> small_cases() {
  return {
      {{3, 5, 4, 3}, {33, 5, 3, 3}, {.padding = 1}, true},  // grad_input: 5 channels, GEMM path
      {{2, 40, 4, 4}, {32, 40, 3, 3}, {.padding = 1}, false},
      {{1, 37, 8, 8}, {70, 37, 3, 3}, {.padding = 1}, true},
      {{5, 33, 3, 5}, {48, 33, 2, 3}, {.padding = Size2(1, 0)}, false},
      {{2, 32, 6, 6}, {40, 32, 3, 3}, {.padding = 0}, true},
      {{3, 34, 2, 2}, {36, 34, 3, 3}, {.padding = 2}, true},
      {{2, 34, 2, 2}, {33, 34, 2, 2}, {.padding = 3}, false},  // grad_input: padding > 1, GEMM path
      {{2, 35, 1, 7}, {33, 35, 1, 3}, {.padding = Size2(0, 1)}, false},
  };
}

// check_on_every_instruction_set on cases whose forward all take the small-plane kernels, whose
// grad_input does in `small_grad_input` of them and grad_weight in `small_grad_weight`.
void check_small_plane_cases(const std::vector<ConvCase>& cases, int small_grad_input,
                             int small_grad_weight, uint64_t seed) {
  int grad_input_taken = 0, grad_weight_taken = 0;
  for (const ConvCase& c : cases) {
    ASSERT_TRUE(kernels::cpu::conv2d_small_applies(params_of(c))) << case_name(c);
    grad_input_taken += kernels::cpu::conv2d_small_applies_to_grad_input(params_of(c));
    grad_weight_taken += kernels::cpu::conv2d_small_applies_to_grad_weight(params_of(c));
  }
  EXPECT_EQ(grad_input_taken, small_grad_input);
  EXPECT_EQ(grad_weight_taken, small_grad_weight);
  check_on_every_instruction_set(cases, seed, "small-plane");
}

// grad_weight: 40, 37, 33, 32, 34, 34 and 35 input channels (S C of 120, 111, 99, 96, 102, 68 and
// 105 pairs: whole tiles of 6, and tails that read the next pixel's channels or the slack).
TEST(Conv2d, SmallPlaneKernelsMatchTheDefinitionOnEveryInstructionSet) {
  check_small_plane_cases(small_cases(), 6, 7, 31);
}

// The small-plane kernels at their edges: planes of one pixel (in and out), kernels larger than
// the plane, 5x5 and Nx1 kernels, padding 0 and padding beyond what the kernel needs, non-square
// planes, 1, 3 and 7 input channels, 65 and 100 output channels, batches of 1 to 7.
std::vector<ConvCase> small_edge_cases() {
  return {
      {{3, 32, 3, 3}, {33, 32, 3, 3}, {.padding = 0}, true},             // 1 output pixel
      {{4, 33, 1, 1}, {40, 33, 3, 3}, {.padding = 1}, false},            // 1 input and output pixel
      {{2, 32, 4, 4}, {65, 32, 5, 5}, {.padding = 2}, true},             // 5x5 on 4x4
      {{2, 48, 3, 2}, {34, 48, 5, 4}, {.padding = Size2(2, 3)}, false},  // kernel > plane
      {{5, 1, 8, 8}, {64, 1, 3, 3}, {.padding = 1}, true},     // grad_input: 1 channel, GEMM
      {{7, 3, 8, 7}, {100, 3, 3, 3}, {.padding = 1}, false},   // grad_input: 3 channels, GEMM
      {{1, 7, 5, 6}, {97, 7, 2, 2}, {.padding = 0}, true},     // grad_input: 7 channels, GEMM
      {{3, 64, 6, 10}, {65, 64, 3, 3}, {.padding = 0}, true},  // 4x8 outputs
      {{2, 32, 2, 3}, {32, 32, 2, 2}, {.padding = Size2(3, 1)}, false},  // grad_input: GEMM
      {{3, 40, 5, 1}, {40, 40, 3, 1}, {.padding = Size2(1, 0)}, true},   // 5x1 planes
  };
}

TEST(Conv2d, SmallPlaneKernelsAtTheirEdgesMatchTheDefinition) {
  check_small_plane_cases(small_edge_cases(), 6, 7, 34);
}

// Batches whose channels-last copies do not fit one chunk of the workspace (about 4M floats): the
// forward with 512 output channels of 64 pixels (127 images a chunk) and grad_input with 512 input
// channels of 64 pixels (likewise), 130 images: a chunk and a short one. Each pixel is accumulated
// alone, in the same order whatever the batch: each image must get the bits it gets alone.
// grad_weight, which sums over the batch, is checked against the definition.
TEST(Conv2d, SmallPlaneKernelsOverSeveralChunksMatchOneImageAtATime) {
  std::mt19937 random(36);
  std::uniform_real_distribution<float> uniform_values(-1.0f, 1.0f);
  auto random_values = [&](int64_t count) {
    std::vector<float> values(static_cast<size_t>(count));
    for (float& v : values)
      v = uniform_values(random);
    return values;
  };
  kernels::Conv2dParams forward =
      params_of({{130, 1, 7, 7}, {512, 1, 2, 2}, {.padding = 1}, false});
  ASSERT_TRUE(kernels::cpu::conv2d_small_applies(forward));
  {
    const int64_t in_image = 1 * 7 * 7, out_image = 512 * 8 * 8;
    const std::vector<float> x = random_values(130 * in_image), w = random_values(512 * 4),
                             b = random_values(512);
    std::vector<float> y(static_cast<size_t>(130 * out_image)), alone(y.size());
    kernels::cpu::conv2d_small_forward(forward, x.data(), w.data(), b.data(), y.data());
    forward.batch = 1;
    for (int64_t n = 0; n < 130; ++n)
      kernels::cpu::conv2d_small_forward(forward, x.data() + n * in_image, w.data(), b.data(),
                                         alone.data() + n * out_image);
    EXPECT_TRUE(y == alone) << "forward";
  }
  kernels::Conv2dParams backward =
      params_of({{130, 512, 8, 8}, {1, 512, 2, 2}, {.padding = 1}, false});
  ASSERT_TRUE(kernels::cpu::conv2d_small_applies_to_grad_input(backward));
  {
    const int64_t in_image = 512 * 8 * 8, out_image = 1 * 9 * 9;
    const std::vector<float> dy = random_values(130 * out_image), w = random_values(512 * 4);
    std::vector<float> dx(static_cast<size_t>(130 * in_image)), alone(dx.size());
    kernels::cpu::conv2d_small_grad_input(backward, dy.data(), w.data(), dx.data());
    backward.batch = 1;
    for (int64_t n = 0; n < 130; ++n)
      kernels::cpu::conv2d_small_grad_input(backward, dy.data() + n * out_image, w.data(),
                                            alone.data() + n * in_image);
    EXPECT_TRUE(dx == alone) << "grad_input";
  }
  // grad_weight: 512 input channels of 10x10 zero-bordered planes (75 images a chunk with AVX-512,
  // 80 with AVX2): a chunk and a short one, each summed in spans of pixels.
  const ConvCase weight_case{{130, 512, 8, 8}, {3, 512, 3, 3}, {.padding = 1}, false};
  const kernels::Conv2dParams weight_params = params_of(weight_case);
  ASSERT_TRUE(kernels::cpu::conv2d_small_applies_to_grad_weight(weight_params));
  {
    const std::vector<float> x = random_values(130 * 512 * 64), dy = random_values(130 * 3 * 64);
    std::vector<float> dw(static_cast<size_t>(3 * 512 * 9), std::nanf(""));
    kernels::cpu::conv2d_small_grad_weight(weight_params, x.data(), dy.data(), dw.data());
    std::vector<double> expected(dw.size(), 0.0);
    for_each_tap(weight_case, [&](int64_t o, int64_t i, int64_t k) {
      expected[static_cast<size_t>(k)] +=
          double{dy[static_cast<size_t>(o)]} * x[static_cast<size_t>(i)];
    });
    // Sums of about 7000 products of magnitude <= 1: their size is about sqrt(7000).
    expect_close(std::vector<double>(dw.begin(), dw.end()), expected, 1e-4, "grad_weight");
  }
}

// What the small-plane kernels do not compute, each one step past what they do: they must decline
// (the results are the other paths', checked against the definition). The first list declines
// grad_input and grad_weight too (strides, dilation, groups, 1x1; or fewer than 32 input
// channels).
TEST(Conv2d, SmallPlaneKernelsDeclineWhatTheyDoNotCompute) {
  const std::vector<ConvCase> forward_declined = {
      {{2, 32, 8, 8}, {32, 32, 3, 3}, {.stride = Size2(1, 2), .padding = 1}, true},
      {{2, 32, 8, 8}, {32, 32, 3, 3}, {.padding = Size2(2, 1), .dilation = Size2(2, 1)}, false},
      {{2, 32, 4, 4}, {64, 16, 3, 3}, {.padding = 1, .groups = 2}, true},
      {{2, 32, 4, 4}, {32, 32, 1, 1}, {}, false},              // 1x1: a GEMM
      {{2, 16, 4, 4}, {31, 16, 3, 3}, {.padding = 1}, false},  // 31 output channels
      {{2, 8, 5, 13}, {32, 8, 3, 3}, {.padding = 1}, true},    // 65 output pixels
  };
  for (const ConvCase& c : forward_declined) {
    kernels::Conv2dParams p = params_of(c);
    p.stride_h = c.options.stride.h;
    p.stride_w = c.options.stride.w;
    p.dilation_h = c.options.dilation.h;
    p.dilation_w = c.options.dilation.w;
    p.groups = c.options.groups;
    EXPECT_FALSE(kernels::cpu::conv2d_small_applies(p)) << case_name(c);
    EXPECT_FALSE(kernels::cpu::conv2d_small_applies_to_grad_input(p)) << case_name(c);
    EXPECT_FALSE(kernels::cpu::conv2d_small_applies_to_grad_weight(p)) << case_name(c);
  }
  // The forward is theirs, grad_input is not.
  const std::vector<ConvCase> grad_input_declined = {
      {{2, 31, 4, 4}, {32, 31, 3, 3}, {.padding = 1}, false},             // 31 input channels
      {{2, 32, 5, 13}, {32, 32, 3, 9}, {.padding = Size2(0, 1)}, false},  // 65 input pixels
      {{2, 32, 2, 2}, {32, 32, 2, 2}, {.padding = Size2(2, 1)}, false},   // pad_h > R - 1
      {{2, 32, 2, 2}, {32, 32, 2, 2}, {.padding = Size2(1, 2)}, false},   // pad_w > S - 1
  };
  for (const ConvCase& c : grad_input_declined) {
    EXPECT_TRUE(kernels::cpu::conv2d_small_applies(params_of(c))) << case_name(c);
    EXPECT_FALSE(kernels::cpu::conv2d_small_applies_to_grad_input(params_of(c))) << case_name(c);
  }
  // grad_weight's own limits.
  const std::vector<ConvCase> grad_weight_declined = {
      {{2, 32, 5, 13}, {32, 32, 3, 3}, {.padding = 1}, false},  // 65 output pixels
      {{2, 31, 4, 4}, {32, 31, 3, 3}, {.padding = 1}, true},    // 31 input channels
  };
  for (const ConvCase& c : grad_weight_declined)
    EXPECT_FALSE(kernels::cpu::conv2d_small_applies_to_grad_weight(params_of(c))) << case_name(c);
  Generator g(37);
  for (const std::vector<ConvCase>* cases :
       {&forward_declined, &grad_input_declined, &grad_weight_declined})
    for (const ConvCase& c : *cases)
      check_against_definition(c, g, "declined ");
}

// An empty batch passes conv2d_small_applies; the kernels must return without reading or writing
// anything (before, the workspace sizing called std::clamp(v, 1, 0), whose precondition
// hi >= lo a build with _GLIBCXX_ASSERTIONS checks: it aborted).
TEST(Conv2d, SmallPlaneKernelsTakeAnEmptyBatch) {
  const kernels::Conv2dParams p = params_of({{0, 32, 4, 4}, {32, 32, 3, 3}, {.padding = 1}, false});
  ASSERT_TRUE(kernels::cpu::conv2d_small_applies(p));
  ASSERT_TRUE(kernels::cpu::conv2d_small_applies_to_grad_input(p));
  const std::vector<float> w(32 * 32 * 9, 1.0f);
  kernels::cpu::conv2d_small_forward<float>(p, nullptr, w.data(), nullptr, nullptr);
  kernels::cpu::conv2d_small_grad_input<float>(p, nullptr, w.data(), nullptr);
  // The gradient wrt the weight of no images is zero.
  ASSERT_TRUE(kernels::cpu::conv2d_small_applies_to_grad_weight(p));
  std::vector<float> dw(w.size(), std::nanf(""));
  kernels::cpu::conv2d_small_grad_weight<float>(p, nullptr, nullptr, dw.data());
  EXPECT_TRUE(std::all_of(dw.begin(), dw.end(), [](float v) { return v == 0.0f; }));
}

// Every output is computed by one thread in one order: the same bits whatever the thread count.
TEST(Conv2d, SmallPlaneKernelsWithOneThreadAndTwoThreadsAgree) {
  Generator g(32);
  for (int64_t batch : {1, 5}) {
    const Tensor x = uniform({batch, 36, 4, 4}, -1.0, 1.0, DType::f32, &g);
    const Tensor w = uniform({40, 36, 3, 3}, -1.0, 1.0, DType::f32, &g);
    expect_one_and_all_threads_agree(x, w, 0.0, 0.0, "batch " + std::to_string(batch));
  }
}

TEST(Conv2d, OneThreadAndTwoThreadsAgree) {
  Generator g(22);
  const Tensor x = uniform({3, 4, 10, 9}, -1.0, 1.0, DType::f32, &g);
  const Tensor w = uniform({5, 4, 3, 3}, -1.0, 1.0, DType::f32, &g);
  Tensor one;
  {
    ThreadCount single(1);
    one = conv2d(x, w, Tensor(), {.padding = 1});
  }
  const Tensor many = conv2d(x, w, Tensor(), {.padding = 1});
  EXPECT_TRUE(allclose(one, many, 1e-5, 1e-6));
}

// f16 and bf16 against f32 on the same (rounded) values, padding 1: the output and both
// gradients, whose only differences are the roundings inside.
void expect_16_bit_matches_float(const Shape& input_shape, const Shape& weight_shape,
                                 uint64_t seed) {
  Generator g(seed);
  const Tensor x = uniform(input_shape, -1.0, 1.0, DType::f32, &g);
  const Tensor w = uniform(weight_shape, -1.0, 1.0, DType::f32, &g);
  const Tensor b = uniform({weight_shape[0]}, -1.0, 1.0, DType::f32, &g);
  const Conv2dOptions options{.padding = 1};
  for (DType dtype : {DType::f16, DType::bf16}) {
    Tensor xl = x.to(dtype), wl = w.to(dtype);
    Tensor xf = xl.to(DType::f32), wf = wl.to(DType::f32);
    for (Tensor* t : {&xl, &wl, &xf, &wf})
      t->requires_grad_();
    const Tensor bl = b.to(dtype);
    const Tensor low = conv2d(xl, wl, bl, options);
    EXPECT_EQ(low.dtype(), dtype);
    const Tensor reference = conv2d(xf, wf, bl.to(DType::f32), options);
    const double tolerance = dtype == DType::bf16 ? 1e-2 : 2e-3;
    EXPECT_TRUE(allclose(low.to(DType::f32), reference, tolerance, tolerance * 4)) << dtype;
    sum(low).backward();
    sum(reference).backward();
    EXPECT_EQ(xl.grad().dtype(), dtype);
    EXPECT_EQ(wl.grad().dtype(), dtype);
    EXPECT_TRUE(allclose(xl.grad().to(DType::f32), xf.grad(), tolerance, tolerance * 4)) << dtype;
    // grad_weight sums N x P x Q products per element: relative to its larger magnitude.
    EXPECT_TRUE(allclose(wl.grad().to(DType::f32), wf.grad(), tolerance, tolerance * 40)) << dtype;
  }
}

// Through the direct kernels (stride 1, one group), computed in f32 inside.
TEST(Conv2d, HalfAndBFloat16DirectMatchFloat) {
  expect_16_bit_matches_float({2, 5, 11, 19}, {9, 5, 3, 3}, 26);
}

// Through the small-plane kernels (conv2d_small.h), computed in f32 inside.
TEST(Conv2d, HalfAndBFloat16SmallPlanesMatchFloat) {
  expect_16_bit_matches_float({3, 33, 4, 4}, {35, 33, 3, 3}, 33);
}

TEST(Conv2d, HalfAndBFloat16MatchFloat) {
  Generator g(23);
  const Tensor x = uniform({2, 4, 9, 7}, -1.0, 1.0, DType::f32, &g);
  const Tensor w = uniform({6, 2, 3, 3}, -1.0, 1.0, DType::f32, &g);
  const Tensor b = uniform({6}, -1.0, 1.0, DType::f32, &g);
  const Conv2dOptions options{.stride = 2, .padding = 1, .groups = 2};
  for (DType dtype : {DType::f16, DType::bf16}) {
    const Tensor xl = x.to(dtype), wl = w.to(dtype), bl = b.to(dtype);
    const Tensor low = conv2d(xl, wl, bl, options);
    EXPECT_EQ(low.dtype(), dtype);
    // Same (rounded) inputs in f32: only the output rounding differs.
    const Tensor reference =
        conv2d(xl.to(DType::f32), wl.to(DType::f32), bl.to(DType::f32), options);
    const double tolerance = dtype == DType::bf16 ? 1e-2 : 2e-3;
    EXPECT_TRUE(allclose(low.to(DType::f32), reference, tolerance, tolerance * 4)) << dtype;
  }
}

// Small images (2x2 to 8x8 outputs) go through one GEMM per group of images
// (conv2d_images_per_gemm > 1): batches that are not a multiple of the group, 1x1 and 3x3
// kernels, padding 0 and 1, strides and groups.
std::vector<ConvCase> grouped_cases() {
  return {
      {{7, 5, 4, 4}, {6, 5, 3, 3}, {.padding = 1}, true},
      {{5, 3, 2, 2}, {4, 3, 3, 3}, {.padding = 1}, false},
      {{9, 4, 8, 8}, {3, 4, 3, 3}, {.padding = 0}, true},
      {{6, 6, 5, 7}, {5, 6, 1, 1}, {}, true},
      {{3, 8, 8, 8}, {8, 8, 1, 1}, {}, false},
      {{11, 4, 6, 6}, {6, 2, 3, 3}, {.padding = 1, .groups = 2}, true},
      {{5, 3, 8, 7}, {4, 3, 3, 3}, {.stride = 2, .padding = 1}, false},
      {{4, 2, 3, 3}, {3, 2, 3, 3}, {.padding = 0}, true},  // 1x1 outputs
  };
}

TEST(Conv2d, SmallImagesInGroupsMatchTheDefinition) {
  Generator g(27);
  // How many images a GEMM takes depends on the thread count (a group per thread at least).
  const ThreadCount two(2);
  for (const ConvCase& c : grouped_cases()) {
    kernels::Conv2dParams p = params_of(c);
    p.stride_h = c.options.stride.h;
    p.stride_w = c.options.stride.w;
    p.groups = c.options.groups;
    EXPECT_GT(kernels::cpu::conv2d_images_per_gemm(p), 1) << case_name(c);
    check_against_definition(c, g, "grouped ");
  }
}

TEST(Conv2d, SmallImagesInGroupsWithOneThreadAndTwoThreadsAgree) {
  Generator g(28);
  for (int64_t batch : {2, 7}) {
    const Tensor x = uniform({batch, 6, 4, 4}, -1.0, 1.0, DType::f32, &g);
    const Tensor w = uniform({5, 6, 3, 3}, -1.0, 1.0, DType::f32, &g);
    Tensor x_one = x.detach(), x_many = x.detach(), w_one = w.detach(), w_many = w.detach();
    for (Tensor* t : {&x_one, &x_many, &w_one, &w_many})
      t->requires_grad_();
    Tensor one;
    {
      ThreadCount single(1);
      one = conv2d(x_one, w_one, Tensor(), {.padding = 1});
      sum(one * one).backward();
    }
    const Tensor many = conv2d(x_many, w_many, Tensor(), {.padding = 1});
    sum(many * many).backward();
    EXPECT_TRUE(allclose(one, many, 1e-5, 1e-6)) << batch;
    EXPECT_TRUE(allclose(x_one.grad(), x_many.grad(), 1e-5, 1e-6)) << batch;
    EXPECT_TRUE(allclose(w_one.grad(), w_many.grad(), 1e-5, 1e-5)) << batch;
  }
}

TEST(Conv2d, HalfAndBFloat16InGroupsMatchFloat) {
  expect_16_bit_matches_float({5, 6, 4, 4}, {7, 6, 3, 3}, 29);
}

void expect_error(const std::function<void()>& call, const std::string& text) {
  try {
    call();
    ADD_FAILURE() << "expected an error containing: " << text;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(Conv2d, ErrorsSayWhatIsWrong) {
  expect_error(
      [] {
        conv2d(ones({1, 3, 5, 5}), ones({2, 4, 3, 3}));
      },
      "conv2d: input (1,3,5,5) has 3 channels but weight (2,4,3,3) with groups=1 "
      "expects 4");
  expect_error(
      [] {
        conv2d(ones({1, 4, 5, 5}), ones({3, 2, 3, 3}), Tensor(), {.groups = 2});
      },
      "must both be divisible by groups (2)");
  expect_error(
      [] {
        conv2d(ones({1, 1, 3, 3}), ones({1, 1, 5, 5}), Tensor(), {.padding = 0});
      },
      "larger than the padded input (3,3)");
  expect_error(
      [] {
        conv2d(ones({1, 1, 3, 3}), ones({1, 1, 3, 3}), ones({2}));
      },
      "expected a bias of shape (1)");
  expect_error([] { conv2d(ones({3, 3, 3}), ones({1, 3, 3, 3})); }, "expected a 4-D input");
  // Past int32 the padded size and the kernel's span overflowed (and corrupted the heap).
  const int64_t huge = std::numeric_limits<int64_t>::max() - 1;
  for (const Conv2dOptions& options :
       {Conv2dOptions{.padding = {huge, 0}}, Conv2dOptions{.dilation = {1, huge}},
        Conv2dOptions{.stride = {int64_t{1} << 31, 1}}}) {
    expect_error(
        [&] {
          conv2d(ones({1, 1, 5, 5}), ones({1, 1, 3, 3}), Tensor(), options);
        },
        "stride, dilation and padding must be at most 2^31 - 1");
  }
}

// ---- pooling ------------------------------------------------------------------------------

// Max and average pooling against their definition: tests/runtime/pooling_options_test.cpp.

// The 2x2 stride-2 pools take a vectorised path for f32, f16 and bf16; f64 keeps the generic
// window loop. Both must pick the same element: the first maximum in row-major order on ties, and
// the first NaN when a window holds one. Values from {-1, 0, 1, 2} make ties common. Planes of
// fewer than 8 windows per row take several rows per call (160x15: 73 rows, then 7; 15 and 7 wide:
// the odd last column left out).
template <typename T>
void expect_the_2x2_path_matches_the_generic_one(int64_t height, int64_t width) {
  SCOPED_TRACE(testing::Message() << height << "x" << width << ", " << sizeof(T) << "-byte "
                                  << (std::is_same_v<T, BFloat16> ? "bf16" : "type"));
  kernels::cpu::Pool2dGeometry geometry;
  geometry.planes = 3;
  geometry.in_height = height;
  geometry.in_width = width;
  geometry.out_height = height / 2;
  geometry.out_width = width / 2;
  geometry.kernel_h = geometry.kernel_w = geometry.stride_h = geometry.stride_w = 2;
  const int64_t in_count = geometry.planes * height * width;
  const int64_t out_count = geometry.planes * geometry.out_height * geometry.out_width;
  std::mt19937 rng(static_cast<uint32_t>(height * 100 + width));
  std::vector<double> x64(static_cast<size_t>(in_count));
  for (double& v : x64)
    v = rng() % 23 == 0 ? std::numeric_limits<double>::quiet_NaN() : double(rng() % 4) - 1.0;
  std::vector<T> x(x64.size());
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = convert<T>(x64[i]);
  std::vector<double> y64(static_cast<size_t>(out_count));
  std::vector<int64_t> index64(y64.size()), index(y64.size(), -7);
  std::vector<T> y(y64.size(), convert<T>(123.0));  // poisoned
  kernels::cpu::max_pool2d_forward(geometry, x64.data(), y64.data(), index64.data());
  kernels::cpu::max_pool2d_forward(geometry, x.data(), y.data(), index.data());
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_EQ(index[i], index64[i]) << "output " << i;
    const double value = convert<double>(y[i]);
    if (std::isnan(y64[i])) {
      ASSERT_TRUE(std::isnan(value)) << "output " << i;
    } else {
      ASSERT_EQ(value, y64[i]) << "output " << i;
    }
  }
}

TEST(Pooling, MaxPool2x2FastPathPicksWhatTheGenericLoopPicks) {
  const std::vector<std::pair<int64_t, int64_t>> planes = {{8, 8},   {9, 7},    {5, 33},  {2, 2},
                                                           {32, 32}, {3, 1025}, {160, 15}};
  for (auto [height, width] : planes) {
    expect_the_2x2_path_matches_the_generic_one<float>(height, width);
    expect_the_2x2_path_matches_the_generic_one<Half>(height, width);
    expect_the_2x2_path_matches_the_generic_one<BFloat16>(height, width);
  }
}

TEST(Pooling, MaxPoolGradientGoesToTheArgmax) {
  Tensor x = from_vector({1, 5, 3, 2, 9, 4, 8, 7, 6}, {1, 1, 3, 3}).requires_grad_();
  const Tensor y = max_pool2d(x, {.kernel_size = 2, .stride = 1});
  expect_close(values_of(y), {9, 9, 9, 9}, 0.0, "max");
  sum(y).backward();
  expect_close(values_of(x.grad()), {0, 0, 0, 0, 4, 0, 0, 0, 0}, 0.0, "grad");
}

TEST(Pooling, AdaptiveAverageUsesPyTorchBins) {
  Generator g(32);
  const Tensor x = uniform({2, 3, 5, 7}, -1.0, 1.0, DType::f32, &g);
  const Tensor y = adaptive_avg_pool2d(x, Size2(3, 2));
  ASSERT_EQ(y.sizes(), (Shape{2, 3, 3, 2}));
  const std::vector<double> xs = values_of(x);
  std::vector<double> expected;
  for (int64_t plane = 0; plane < 6; ++plane)
    for (int64_t p = 0; p < 3; ++p)
      for (int64_t q = 0; q < 2; ++q) {
        const int64_t h0 = p * 5 / 3, h1 = ((p + 1) * 5 + 2) / 3;  // floor, ceil
        const int64_t w0 = q * 7 / 2, w1 = ((q + 1) * 7 + 1) / 2;
        double total = 0.0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w)
            total += xs[static_cast<size_t>((plane * 5 + h) * 7 + w)];
        expected.push_back(total / static_cast<double>((h1 - h0) * (w1 - w0)));
      }
  expect_close(values_of(y), expected, 1e-6, "adaptive 5x7 -> 3x2");
  // Output size = input size is the identity; output 1x1 is the mean.
  EXPECT_TRUE(allclose(adaptive_avg_pool2d(x, Size2(5, 7)), x));
  EXPECT_TRUE(allclose(adaptive_avg_pool2d(x, 1).flatten(), mean(x, {2, 3}).flatten(), 1e-5));
}

TEST(Pooling, HalfAndBFloat16MatchFloat) {
  Generator g(33);
  const Tensor x = uniform({2, 3, 9, 8}, -1.0, 1.0, DType::f32, &g);
  for (DType dtype : {DType::f16, DType::bf16}) {
    const Tensor xl = x.to(dtype), xf = xl.to(DType::f32);
    const double tolerance = dtype == DType::bf16 ? 1e-2 : 2e-3;
    const Pool2dOptions options{.kernel_size = 3, .stride = 2, .padding = 1};
    EXPECT_TRUE(allclose(max_pool2d(xl, options).to(DType::f32), max_pool2d(xf, options)));
    EXPECT_TRUE(allclose(avg_pool2d(xl, options).to(DType::f32), avg_pool2d(xf, options), tolerance,
                         tolerance))
        << dtype;
    EXPECT_TRUE(allclose(adaptive_avg_pool2d(xl, Size2(4, 3)).to(DType::f32),
                         adaptive_avg_pool2d(xf, Size2(4, 3)), tolerance, tolerance))
        << dtype;
  }
}

// Overlapping windows (3x3, stride 1) send one input element the gradients of several outputs.
// A 16-bit gradient is summed in f32 and rounded once: exactly the f32 gradient, rounded.
TEST(Pooling, HalfAndBFloat16MaxPoolGradientsAreTheFloatSumsRounded) {
  Generator g(34);
  const Tensor x = uniform({2, 3, 7, 9}, -1.0, 1.0, DType::f32, &g);
  const Pool2dOptions options{.kernel_size = 3, .stride = 1, .padding = 1};
  for (DType dtype : {DType::f16, DType::bf16}) {
    Tensor narrow = x.to(dtype).requires_grad_();
    Tensor wide = narrow.detach().to(DType::f32).requires_grad_();
    const Tensor y = max_pool2d(narrow, options);
    const Tensor dy = uniform(y.sizes(), -1.0, 1.0, DType::f32, &g).to(dtype);
    y.backward(dy);
    max_pool2d(wide, options).backward(dy.to(DType::f32));
    const Tensor expected = wide.grad().to(dtype);
    EXPECT_EQ(values_of(narrow.grad()), values_of(expected)) << dtype;
  }
}

TEST(Pooling, ErrorsSayWhatIsWrong) {
  expect_error(
      [] {
        max_pool2d(ones({1, 1, 2, 2}), {.kernel_size = 3});
      },
      "larger than the padded input");
  expect_error(
      [] {
        avg_pool2d(ones({1, 1, 6, 6}), {.kernel_size = 2, .padding = 2});
      },
      "at most half the kernel size");
  // Padding alone would give an empty plane one window, whose argmax lies outside the plane.
  expect_error(
      [] {
        max_pool2d(ones({1, 1, 0, 3}), {.kernel_size = 2, .padding = 1});
      },
      "max_pool2d: expected a non-empty plane");
  expect_error(
      [] {
        avg_pool2d(ones({1, 1, 3, 0}), {.kernel_size = 2, .padding = 1});
      },
      "avg_pool2d: expected a non-empty plane");
  expect_error([] { adaptive_avg_pool2d(ones({4, 4}), 2); }, "expected a 4-D input");
}

}  // namespace
}  // namespace ember
