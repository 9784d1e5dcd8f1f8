// Op cases at the sizes where the CUDA kernels change strategy or could slip: odd and one-element
// dims, a per-channel count larger than a block (batch_norm), rows of 1023 and 4097 (reductions),
// and the layers of nn::resnet9 (batch norm, 2x2 and 4x4 max pooling) at small odd sizes. Each
// also runs in f64 on CUDA. resnet9's convolutions, depthwise and dilated ones are with the other
// convolution cases in op_cases_conv.cpp.
#include <limits>

#include "tests/common/op_cases.h"

namespace ember::testing {
namespace {

using Inputs = std::vector<Tensor>;

const std::vector<DType> kFloatingWithF64 = {DType::f32, DType::f16, DType::bf16, DType::f64};

Tensor weighted(const Tensor& y) {
  return y * distinct_weights(y);
}

// One input through `f` (pooling or a reduction), times distinct weights.
OpCase unary_case(const std::string& name, OpId op, Shape shape,
                  std::function<Tensor(const Tensor&)> f, double low = -1.0, double high = 1.0) {
  OpCase c;
  c.name = name;
  c.op = op;
  c.make_inputs = [=](DType dtype, Device device, Generator& g) -> Inputs {
    return {random_input(shape, dtype, device, g, low, high)};
  };
  c.fn = [f](const Inputs& in) { return weighted(f(in[0])); };
  c.differentiable = {true};
  c.cuda_dtypes = kFloatingWithF64;
  return c;
}

// argmax / argmin: an index, compared exactly (ties in f16 / bf16 go to the first index on both
// devices); no gradient.
OpCase index_case(const std::string& name, Shape shape, std::function<Tensor(const Tensor&)> f) {
  OpCase c;
  c.name = name;
  c.op = OpId::max;
  c.make_inputs = [=](DType dtype, Device device, Generator& g) -> Inputs {
    return {random_input(shape, dtype, device, g)};
  };
  c.fn = [f](const Inputs& in) { return f(in[0]); };
  c.differentiable = {false};
  c.differentiable_op = false;
  c.cuda_dtypes = kFloatingWithF64;
  return c;
}

// inputs: x, running_mean, running_var, weight, bias. relu: batch_norm_relu.
OpCase batch_norm_case(const std::string& name, Shape x_shape, bool training, bool relu = false) {
  OpCase c;
  c.name = name;
  c.op = relu ? OpId::batch_norm_relu : OpId::batch_norm;
  const int64_t channels = x_shape[1];
  c.make_inputs = [=](DType dtype, Device device, Generator& g) -> Inputs {
    return {random_input(x_shape, dtype, device, g, -2.0, 2.0),
            random_input({channels}, dtype, device, g, -0.5, 0.5),
            random_input({channels}, dtype, device, g, 0.5, 2.0),
            random_input({channels}, dtype, device, g, 0.5, 1.5),
            random_input({channels}, dtype, device, g)};
  };
  c.fn = [=](const Inputs& in) {
    return weighted(relu ? batch_norm_relu(in[0], in[1], in[2], in[3], in[4], training, 0.1, 1e-5)
                         : batch_norm(in[0], in[1], in[2], in[3], in[4], training, 0.1, 1e-5));
  };
  c.differentiable = {true, false, false, true, true};
  c.cuda_dtypes = kFloatingWithF64;
  return c;
}

}  // namespace

EMBER_OP_CASES(cuda_shapes) {
  const double inf = std::numeric_limits<double>::infinity();
  return {
      // resnet9's pooling: 2x2 after a block, 4x4 down to one pixel at the head.
      unary_case("max_pool2d/resnet9_2x2_odd", OpId::max_pool2d, {2, 3, 7, 9},
                 [](const Tensor& x) { return max_pool2d(x, {.kernel_size = 2}); }),
      unary_case("max_pool2d/resnet9_head_4x4", OpId::max_pool2d, {3, 2, 4, 4},
                 [](const Tensor& x) { return max_pool2d(x, {.kernel_size = 4}); }),
      unary_case("max_pool2d/overlapping_stride1", OpId::max_pool2d, {1, 2, 6, 7},
                 [](const Tensor& x) {
                   return max_pool2d(x, {.kernel_size = 3, .stride = 1, .padding = 1});
                 }),
      unary_case("avg_pool2d/overlapping_stride1", OpId::avg_pool2d, {2, 1, 5, 8},
                 [](const Tensor& x) {
                   return avg_pool2d(x, {.kernel_size = 3, .stride = 1, .padding = 1});
                 }),
      unary_case("adaptive_avg_pool2d/global", OpId::adaptive_avg_pool2d, {3, 4, 5, 3},
                 [](const Tensor& x) { return adaptive_avg_pool2d(x, 1); }),
      // batch norm: a channel's count (3 * 17 * 13 = 663) larger than the CUDA block of 512.
      batch_norm_case("batch_norm/train_count_over_a_block", {3, 2, 17, 13}, true),
      batch_norm_case("batch_norm/train_batch1", {1, 3, 4, 5}, true),
      batch_norm_case("batch_norm/eval_odd", {3, 5, 3, 1}, false),
      // fused with ReLU: planes of 224 values (the CUDA kernels' 16-byte vectors in every dtype),
      // and of 221 (one value at a time), each channel's count over a block.
      batch_norm_case("batch_norm_relu/train_vectorised", {3, 2, 16, 14}, true, true),
      batch_norm_case("batch_norm_relu/train_count_over_a_block", {3, 2, 17, 13}, true, true),
      batch_norm_case("batch_norm_relu/eval_vectorised", {2, 3, 8, 4}, false, true),
      // reductions: rows of 1023 and 4097, single elements, strided lines.
      unary_case("max/rows_1023", OpId::max, {3, 1023},
                 [](const Tensor& x) { return max(x, {1}); }),
      unary_case("min/column_4097", OpId::min, {4097, 2},
                 [](const Tensor& x) { return min(x, {0}); }),
      unary_case("max/single_element", OpId::max, {1}, [](const Tensor& x) { return max(x); }),
      index_case("argmax/rows_1023", {3, 1023}, [](const Tensor& x) { return argmax(x, 1); }),
      index_case("argmin/strided_lines", {17, 4, 5},
                 [](const Tensor& x) { return argmin(x, 1, true); }),
      index_case("argmax/flattened", {4, 33}, [](const Tensor& x) { return argmax(x); }),
      unary_case("var/rows_4097", OpId::var, {2, 4097},
                 [](const Tensor& x) { return var(x, {1}); }),
      unary_case("var/strided_lines_1023", OpId::var, {1023, 3},
                 [](const Tensor& x) { return var(x, {0}, 0); }),
      unary_case("var/std_odd", OpId::var, {3, 5, 7},
                 [](const Tensor& x) {
                   return std(x, {0, 2});
                 }),
      unary_case(
          "logsumexp/rows_1023", OpId::logsumexp, {2, 1023},
          [](const Tensor& x) { return logsumexp(x, {1}); }, -3.0, 3.0),
      unary_case(
          "logsumexp/strided_lines", OpId::logsumexp, {33, 5, 3},
          [](const Tensor& x) { return logsumexp(x, {1}); }, -3.0, 3.0),
      unary_case(
          "norm/p2_4097", OpId::norm, {4097}, [](const Tensor& x) { return norm(x); }, 0.5, 1.5),
      unary_case(
          "norm/p1_strided", OpId::norm, {7, 9, 3},
          [](const Tensor& x) { return norm(x, 1.0, {1}); }, 0.5, 1.5),
      unary_case("norm/pinf_rows", OpId::norm, {5, 33},
                 [inf](const Tensor& x) { return norm(x, inf, {1}); }),
      unary_case(
          "norm/p3_rows", OpId::norm, {2, 1023}, [](const Tensor& x) { return norm(x, 3.0, {1}); },
          0.5, 1.5),
  };
}

}  // namespace ember::testing
