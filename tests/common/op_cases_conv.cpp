// Op cases: conv2d (stride, padding, dilation, groups, bias or not) and the pooling ops.
#include "tests/common/op_cases.h"

namespace ember::testing {
namespace {

using Inputs = std::vector<Tensor>;

Tensor weighted(const Tensor& y) {
  return y * distinct_weights(y);
}

// input, weight and (when bias_channels > 0) a bias.
OpCase conv_case(const std::string& name, Shape input, Shape weight, bool with_bias,
                 Conv2dOptions options) {
  OpCase c;
  c.name = name;
  c.op = OpId::conv2d;
  c.make_inputs = [=](DType dtype, Device device, Generator& g) -> Inputs {
    Inputs inputs = {random_input(input, dtype, device, g), random_input(weight, dtype, device, g)};
    if (with_bias) inputs.push_back(random_input({weight[0]}, dtype, device, g));
    return inputs;
  };
  c.fn = [options, with_bias](const Inputs& in) {
    return weighted(conv2d(in[0], in[1], with_bias ? in[2] : Tensor(), options));
  };
  c.differentiable = std::vector<bool>(with_bias ? 3 : 2, true);
  // cuDNN may sum in another order (implicit GEMM) or transform (Winograd, FFT): its rounding
  // differs from the CPU's direct sums by more than one f32 rounding, far less than a wrong tap.
  c.tolerance_scale = 4.0;
  c.cuda_dtypes = {DType::f32, DType::f16, DType::bf16, DType::f64};
  return c;
}

OpCase pool_case(const std::string& name, OpId op, Shape input,
                 std::function<Tensor(const Tensor&)> pool) {
  OpCase c;
  c.name = name;
  c.op = op;
  // Uniform random values: ties inside a max window (where the gradient is not defined) have
  // probability zero, and finite differences of 1e-6 cannot reorder values this far apart.
  c.make_inputs = [input](DType dtype, Device device, Generator& g) -> Inputs {
    return {random_input(input, dtype, device, g)};
  };
  c.fn = [pool](const Inputs& in) { return weighted(pool(in[0])); };
  c.differentiable = {true};
  return c;
}

}  // namespace

EMBER_OP_CASES(conv) {
  return {
      conv_case("conv2d/padding_bias", {2, 3, 6, 5}, {4, 3, 3, 3}, true, {.padding = 1}),
      conv_case("conv2d/stride2", {2, 2, 7, 6}, {3, 2, 3, 2}, true,
                {.stride = 2, .padding = Size2(1, 0)}),
      conv_case("conv2d/dilation2", {1, 2, 7, 7}, {2, 2, 3, 3}, true,
                {.padding = 2, .dilation = 2}),
      conv_case("conv2d/groups2", {3, 4, 5, 5}, {6, 2, 3, 3}, true, {.padding = 1, .groups = 2}),
      conv_case("conv2d/no_bias_odd", {2, 3, 5, 7}, {2, 3, 2, 3}, false,
                {.stride = Size2(2, 1), .padding = Size2(0, 1)}),
      conv_case("conv2d/pointwise", {2, 3, 4, 5}, {2, 3, 1, 1}, false, {}),
      // nn::resnet9's convolution: 3x3, padding 1, here with odd sizes and a bias.
      conv_case("conv2d/resnet9_3x3_odd", {2, 3, 7, 5}, {4, 3, 3, 3}, true, {.padding = 1}),
      conv_case("conv2d/depthwise", {2, 4, 6, 5}, {4, 1, 3, 3}, false, {.padding = 1, .groups = 4}),
      conv_case("conv2d/one_pixel", {1, 3, 1, 1}, {2, 3, 1, 1}, true, {}),
      conv_case("conv2d/stride2_dilation2", {1, 2, 9, 8}, {3, 2, 3, 3}, true,
                {.stride = 2, .padding = 2, .dilation = 2}),
      pool_case("max_pool2d/2x2", OpId::max_pool2d, {2, 2, 5, 6},
                [](const Tensor& x) { return max_pool2d(x, {.kernel_size = 2}); }),
      pool_case("max_pool2d/padding_stride", OpId::max_pool2d, {1, 3, 7, 6},
                [](const Tensor& x) {
                  return max_pool2d(x, {.kernel_size = 3, .stride = 2, .padding = 1});
                }),
      pool_case("avg_pool2d/include_pad", OpId::avg_pool2d, {2, 2, 7, 6},
                [](const Tensor& x) {
                  return avg_pool2d(x, {.kernel_size = 3, .stride = 2, .padding = 1});
                }),
      pool_case("avg_pool2d/exclude_pad", OpId::avg_pool2d, {2, 2, 7, 6},
                [](const Tensor& x) {
                  return avg_pool2d(x, {.kernel_size = Size2(3, 2),
                                        .stride = Size2(2, 1),
                                        .padding = 1,
                                        .count_include_pad = false});
                }),
      // ceil_mode keeps a last, partial window (7 -> 4 rows at stride 2, where floor gives 3).
      pool_case("max_pool2d/ceil_mode_dilation", OpId::max_pool2d, {2, 2, 7, 8},
                [](const Tensor& x) {
                  return max_pool2d(x, {.kernel_size = 2,
                                        .stride = 2,
                                        .padding = Size2(1, 0),
                                        .dilation = Size2(1, 2),
                                        .ceil_mode = true});
                }),
      pool_case("max_pool2d/dilation3", OpId::max_pool2d, {1, 3, 9, 8},
                [](const Tensor& x) {
                  return max_pool2d(x, {.kernel_size = 3, .stride = 1, .dilation = Size2(3, 2)});
                }),
      pool_case("avg_pool2d/ceil_mode_include_pad", OpId::avg_pool2d, {2, 2, 7, 6},
                [](const Tensor& x) {
                  return avg_pool2d(
                      x, {.kernel_size = 3, .stride = 2, .padding = 1, .ceil_mode = true});
                }),
      pool_case("avg_pool2d/ceil_mode_exclude_pad", OpId::avg_pool2d, {1, 2, 6, 5},
                [](const Tensor& x) {
                  return avg_pool2d(x, {.kernel_size = 2,
                                        .stride = Size2(2, 3),
                                        .ceil_mode = true,
                                        .count_include_pad = false});
                }),
      pool_case("avg_pool2d/divisor_override", OpId::avg_pool2d, {2, 2, 5, 6},
                [](const Tensor& x) {
                  return avg_pool2d(x, {.kernel_size = 3,
                                        .stride = 2,
                                        .padding = 1,
                                        .ceil_mode = true,
                                        .divisor_override = 5});
                }),
      pool_case("adaptive_avg_pool2d/5x7_to_3x2", OpId::adaptive_avg_pool2d, {2, 2, 5, 7},
                [](const Tensor& x) { return adaptive_avg_pool2d(x, Size2(3, 2)); }),
      pool_case("adaptive_avg_pool2d/3x4_to_5x5", OpId::adaptive_avg_pool2d, {1, 2, 3, 4},
                [](const Tensor& x) { return adaptive_avg_pool2d(x, 5); }),
  };
}

}  // namespace ember::testing
