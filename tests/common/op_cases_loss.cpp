// Op cases: cross_entropy, nll_loss, mse_loss, binary_cross_entropy_with_logits, dropout.
#include "tests/common/op_cases.h"

namespace ember::testing {
namespace {

using Inputs = std::vector<Tensor>;

Tensor targets(const std::vector<int64_t>& values, const Shape& shape, Device device) {
  return from_vector(values, shape, DType::i64).to(device);
}

OpCase make_case(const std::string& name, OpId op,
                 std::function<Inputs(DType, Device, Generator&)> make_inputs,
                 std::function<Tensor(const Inputs&)> fn, std::vector<bool> differentiable) {
  OpCase c;
  c.name = name;
  c.op = op;
  c.make_inputs = std::move(make_inputs);
  c.fn = [fn](const Inputs& in) {
    Tensor y = fn(in);
    return y * distinct_weights(y);
  };
  c.differentiable = std::move(differentiable);
  return c;
}

// logits (5, 4) and class targets (5); -100 (the default ignore_index) where `with_ignored`.
OpCase cross_entropy_case(const std::string& name, CrossEntropyOptions options, bool with_ignored) {
  return make_case(
      name, OpId::cross_entropy,
      [with_ignored](DType dtype, Device device, Generator& g) -> Inputs {
        const int64_t ignored = with_ignored ? -100 : 1;
        return {random_input({5, 4}, dtype, device, g, -2.0, 2.0),
                targets({3, ignored, 0, 2, 3}, {5}, device)};
      },
      [options](const Inputs& in) { return cross_entropy(in[0], in[1], options); }, {true, false});
}

CrossEntropyOptions with(Reduction reduction, double smoothing = 0.0) {
  CrossEntropyOptions options;
  options.reduction = reduction;
  options.label_smoothing = smoothing;
  return options;
}

}  // namespace

EMBER_OP_CASES(loss) {
  return {
      cross_entropy_case("cross_entropy/mean", with(Reduction::mean), false),
      cross_entropy_case("cross_entropy/sum", with(Reduction::sum), false),
      cross_entropy_case("cross_entropy/none", with(Reduction::none), false),
      cross_entropy_case("cross_entropy/label_smoothing", with(Reduction::mean, 0.1), false),
      cross_entropy_case("cross_entropy/ignore_index_mean", with(Reduction::mean), true),
      cross_entropy_case("cross_entropy/ignore_index_smoothing_none", with(Reduction::none, 0.2),
                         true),
      make_case(
          "cross_entropy/spatial_nchw", OpId::cross_entropy,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({2, 3, 2, 3}, dtype, device, g, -2.0, 2.0),
                    targets({0, 2, 1, 1, -100, 2, 2, 0, 0, 1, 2, 1}, {2, 2, 3}, device)};
          },
          [](const Inputs& in) { return cross_entropy(in[0], in[1], with(Reduction::mean, 0.1)); },
          {true, false}),
      // Class probabilities as the target (composed of ember ops): logits, target and weight
      // all get gradients.
      make_case(
          "cross_entropy/probability_targets_weight_smoothing", OpId::cross_entropy,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({3, 4}, dtype, device, g, -2.0, 2.0),
                    random_input({3, 4}, dtype, device, g, 0.0, 1.0),
                    random_input({4}, dtype, device, g, 0.5, 2.0)};
          },
          [](const Inputs& in) {
            CrossEntropyOptions options = with(Reduction::mean, 0.1);
            options.weight = in[2];
            return cross_entropy(in[0], in[1], options);
          },
          {true, true, true}),
      make_case(
          "cross_entropy/probability_targets_spatial_none", OpId::cross_entropy,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({2, 3, 2, 3}, dtype, device, g, -2.0, 2.0),
                    random_input({2, 3, 2, 3}, dtype, device, g, 0.0, 1.0)};
          },
          [](const Inputs& in) { return cross_entropy(in[0], in[1], with(Reduction::none)); },
          {true, true}),
      // Class weights (composed of ember ops): the logits' and the weight's gradients.
      make_case(
          "cross_entropy/class_weights_smoothing_ignore", OpId::cross_entropy,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({2, 4, 3}, dtype, device, g, -2.0, 2.0),
                    targets({3, -100, 0, 2, 3, 1}, {2, 3}, device),
                    random_input({4}, dtype, device, g, 0.5, 2.0)};
          },
          [](const Inputs& in) {
            CrossEntropyOptions options = with(Reduction::mean, 0.2);
            options.weight = in[2];
            return cross_entropy(in[0], in[1], options);
          },
          {true, false, true}),
      make_case(
          "nll_loss/class_weights_sum", OpId::nll_loss,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({4, 3}, dtype, device, g), targets({2, 0, -100, 2}, {4}, device),
                    random_input({3}, dtype, device, g, 0.5, 2.0)};
          },
          [](const Inputs& in) { return nll_loss(in[0], in[1], -100, Reduction::sum, in[2]); },
          {true, false, true}),
      make_case(
          "nll_loss/mean_ignore", OpId::nll_loss,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({4, 3}, dtype, device, g), targets({2, 0, -100, 2}, {4}, device)};
          },
          [](const Inputs& in) { return nll_loss(in[0], in[1]); }, {true, false}),
      make_case(
          "nll_loss/spatial_none", OpId::nll_loss,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({2, 3, 4}, dtype, device, g),
                    targets({0, 1, 2, 1, 2, 2, 0, 1}, {2, 4}, device)};
          },
          [](const Inputs& in) { return nll_loss(in[0], in[1], -100, Reduction::none); },
          {true, false}),
      make_case(
          "mse_loss/mean", OpId::mse_loss,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({3, 4}, dtype, device, g), random_input({3, 4}, dtype, device, g)};
          },
          [](const Inputs& in) { return mse_loss(in[0], in[1]); }, {true, true}),
      make_case(
          "mse_loss/none", OpId::mse_loss,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({5}, dtype, device, g), random_input({5}, dtype, device, g)};
          },
          [](const Inputs& in) { return mse_loss(in[0], in[1], Reduction::none); }, {true, true}),
      make_case(
          "binary_cross_entropy_with_logits/mean", OpId::binary_cross_entropy_with_logits,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({3, 4}, dtype, device, g, -3.0, 3.0),
                    random_input({3, 4}, dtype, device, g, 0.0, 1.0)};
          },
          [](const Inputs& in) { return binary_cross_entropy_with_logits(in[0], in[1]); },
          {true, true}),
      make_case(
          "binary_cross_entropy_with_logits/sum", OpId::binary_cross_entropy_with_logits,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({6}, dtype, device, g, -3.0, 3.0),
                    random_input({6}, dtype, device, g, 0.0, 1.0)};
          },
          [](const Inputs& in) {
            return binary_cross_entropy_with_logits(in[0], in[1], Reduction::sum);
          },
          {true, true}),
      // weight (3, 1) scales rows, pos_weight (4) the positive term of each column; neither is
      // differentiated (as in PyTorch). Logits span the kink of max(-x, 0).
      make_case(
          "binary_cross_entropy_with_logits/weight_pos_weight",
          OpId::binary_cross_entropy_with_logits,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({3, 4}, dtype, device, g, -3.0, 3.0),
                    random_input({3, 4}, dtype, device, g, 0.0, 1.0),
                    random_input({3, 1}, dtype, device, g, 0.5, 2.0),
                    random_input({4}, dtype, device, g, 0.25, 4.0)};
          },
          [](const Inputs& in) {
            return binary_cross_entropy_with_logits(in[0], in[1], Reduction::mean, in[2], in[3]);
          },
          {true, true, false, false}),
      make_case(
          "binary_cross_entropy_with_logits/pos_weight_none",
          OpId::binary_cross_entropy_with_logits,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({2, 3, 5}, dtype, device, g, -4.0, 4.0),
                    random_input({2, 3, 5}, dtype, device, g, 0.0, 1.0),
                    random_input({5}, dtype, device, g, 0.25, 4.0)};
          },
          [](const Inputs& in) {
            return binary_cross_entropy_with_logits(in[0], in[1], Reduction::none, Tensor(), in[2]);
          },
          {true, true, false}),
      make_case(
          "dropout/fixed_seed", OpId::dropout,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({4, 5}, dtype, device, g)};
          },
          [](const Inputs& in) {
            // A generator made here gives the same mask at every finite-difference evaluation.
            Generator mask_generator(7);
            return dropout(in[0], 0.3, true, &mask_generator);
          },
          {true}),
  };
}

}  // namespace ember::testing
