// Op cases: softmax, log_softmax, layer_norm, batch_norm, batch_norm_relu.
#include "tests/common/op_cases.h"

namespace ember::testing {
namespace {

using Inputs = std::vector<Tensor>;

OpCase softmax_case(const std::string& name, OpId op, Shape shape, int64_t dim) {
  OpCase c;
  c.name = name;
  c.op = op;
  c.make_inputs = [=](DType dtype, Device device, Generator& g) -> Inputs {
    return {random_input(shape, dtype, device, g, -3.0, 3.0)};
  };
  const bool log = op == OpId::log_softmax;
  c.fn = [dim, log](const Inputs& in) {
    const Tensor y = log ? log_softmax(in[0], dim) : softmax(in[0], dim);
    return y * distinct_weights(y);
  };
  c.differentiable = {true};
  return c;
}

// inputs: x, then weight and bias when `affine`.
OpCase layer_norm_case(const std::string& name, Shape x_shape, Shape normalized_shape,
                       bool with_weight, bool with_bias) {
  OpCase c;
  c.name = name;
  c.op = OpId::layer_norm;
  c.make_inputs = [=](DType dtype, Device device, Generator& g) -> Inputs {
    Inputs in = {random_input(x_shape, dtype, device, g, -2.0, 2.0)};
    if (with_weight) in.push_back(random_input(normalized_shape, dtype, device, g, 0.5, 1.5));
    if (with_bias) in.push_back(random_input(normalized_shape, dtype, device, g));
    return in;
  };
  c.fn = [=](const Inputs& in) {
    const Tensor weight = with_weight ? in[1] : Tensor();
    const Tensor bias = with_bias ? in[with_weight ? 2 : 1] : Tensor();
    const Tensor y = layer_norm(in[0], normalized_shape, weight, bias, 1e-5);
    return y * distinct_weights(y);
  };
  c.differentiable = std::vector<bool>(1 + with_weight + with_bias, true);
  return c;
}

// inputs: x, running_mean, running_var, then weight and bias when `affine`. relu: batch_norm_relu.
OpCase batch_norm_case(const std::string& name, Shape x_shape, bool affine, bool training,
                       bool relu = false) {
  OpCase c;
  c.name = name;
  c.op = relu ? OpId::batch_norm_relu : OpId::batch_norm;
  const int64_t channels = x_shape[1];
  c.make_inputs = [=](DType dtype, Device device, Generator& g) -> Inputs {
    Inputs in = {random_input(x_shape, dtype, device, g, -2.0, 2.0),
                 random_input({channels}, dtype, device, g, -0.5, 0.5),
                 random_input({channels}, dtype, device, g, 0.5, 2.0)};
    if (affine) {
      in.push_back(random_input({channels}, dtype, device, g, 0.5, 1.5));
      in.push_back(random_input({channels}, dtype, device, g));
    }
    return in;
  };
  c.fn = [=](const Inputs& in) {
    const Tensor weight = affine ? in[3] : Tensor();
    const Tensor bias = affine ? in[4] : Tensor();
    const Tensor y = relu ? batch_norm_relu(in[0], in[1], in[2], weight, bias, training, 0.1, 1e-5)
                          : batch_norm(in[0], in[1], in[2], weight, bias, training, 0.1, 1e-5);
    return y * distinct_weights(y);
  };
  // The running statistics are buffers (updated in place when training), never differentiated.
  c.differentiable = {true, false, false};
  if (affine) c.differentiable.insert(c.differentiable.end(), {true, true});
  return c;
}

}  // namespace

EMBER_OP_CASES(normalization) {
  return {
      softmax_case("softmax/last_dim", OpId::softmax, {4, 7}, -1),
      softmax_case("softmax/first_dim", OpId::softmax, {5, 3}, 0),
      softmax_case("softmax/middle_dim", OpId::softmax, {2, 6, 3}, 1),
      softmax_case("softmax/vector", OpId::softmax, {9}, 0),
      softmax_case("log_softmax/last_dim", OpId::log_softmax, {4, 7}, 1),
      softmax_case("log_softmax/middle_dim", OpId::log_softmax, {3, 5, 4}, -2),
      layer_norm_case("layer_norm/affine", {4, 7}, {7}, true, true),
      layer_norm_case("layer_norm/plain", {3, 2, 5}, {5}, false, false),
      layer_norm_case("layer_norm/two_trailing_dims", {3, 4, 5}, {4, 5}, true, true),
      layer_norm_case("layer_norm/weight_only", {5, 6}, {6}, true, false),
      layer_norm_case("layer_norm/bias_only", {5, 6}, {6}, false, true),
      batch_norm_case("batch_norm/train_2d_affine", {6, 4}, true, true),
      batch_norm_case("batch_norm/train_2d_plain", {5, 3}, false, true),
      batch_norm_case("batch_norm/train_4d_affine", {3, 4, 3, 2}, true, true),
      batch_norm_case("batch_norm/train_4d_plain", {2, 3, 2, 5}, false, true),
      batch_norm_case("batch_norm/eval_2d_affine", {6, 4}, true, false),
      batch_norm_case("batch_norm/eval_4d_plain", {3, 2, 3, 3}, false, false),
      batch_norm_case("batch_norm/eval_4d_affine", {2, 3, 2, 2}, true, false),
      batch_norm_case("batch_norm_relu/train_2d_affine", {6, 4}, true, true, true),
      batch_norm_case("batch_norm_relu/train_4d_affine", {3, 4, 3, 2}, true, true, true),
      batch_norm_case("batch_norm_relu/train_4d_plain", {2, 3, 2, 5}, false, true, true),
      batch_norm_case("batch_norm_relu/eval_4d_affine", {2, 3, 2, 2}, true, false, true),
  };
}

}  // namespace ember::testing
