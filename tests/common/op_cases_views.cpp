// Op cases: views (reshape, permute, expand, slice, select) and the basic reductions.
#include "tests/common/op_cases.h"

namespace ember::testing {
namespace {

using Inputs = std::vector<Tensor>;

OpCase one_input(const std::string& name, OpId op, Shape shape,
                 std::function<Tensor(const Tensor&)> f) {
  OpCase c;
  c.name = name;
  c.op = op;
  c.make_inputs = [shape](DType dtype, Device device, Generator& g) -> Inputs {
    return {random_input(shape, dtype, device, g)};
  };
  // Multiplying by a fixed tensor makes every output element's gradient distinct.
  c.fn = [f](const Inputs& in) {
    Tensor y = f(in[0]);
    return y * distinct_weights(y);
  };
  c.differentiable = {true};
  return c;
}

// x goes to the other device, is scaled there, and comes back: the gradient crosses twice.
OpCase to_device_round_trip() {
  OpCase c = one_input("to_device/round_trip", OpId::to_device, {3, 5}, [](const Tensor& x) {
    const Device other = x.is_cpu() ? Device::cuda(0) : Device::cpu();
    return (x.to(other) * 2.0).to(x.device());
  });
  c.needs_cuda = true;
  return c;
}

}  // namespace

EMBER_OP_CASES(views_and_reductions) {
  return {
      one_input("reshape", OpId::reshape, {3, 4},
                [](const Tensor& x) {
                  return x.reshape({2, 6});
                }),
      one_input("reshape/non_contiguous", OpId::reshape, {3, 4},
                [](const Tensor& x) { return x.t().reshape({12}); }),
      one_input("squeeze_unsqueeze", OpId::reshape, {3, 1, 4},
                [](const Tensor& x) { return x.squeeze(1).unsqueeze(0); }),
      one_input("permute", OpId::permute, {2, 3, 4},
                [](const Tensor& x) {
                  return x.permute({2, 0, 1});
                }),
      one_input("expand", OpId::expand, {3, 1},
                [](const Tensor& x) {
                  return x.expand({2, 3, 5});
                }),
      one_input("slice/step", OpId::slice, {7, 4},
                [](const Tensor& x) { return x.slice(0, 1, 7, 2); }),
      one_input("slice/negative", OpId::slice, {5, 6},
                [](const Tensor& x) { return x.slice(1, -4, -1); }),
      one_input("select", OpId::select, {4, 5}, [](const Tensor& x) { return x.select(1, -2); }),
      one_input("sum/all", OpId::sum, {3, 4}, [](const Tensor& x) { return sum(x); }),
      one_input("sum/dims_keepdim", OpId::sum, {2, 3, 4},
                [](const Tensor& x) {
                  return sum(x, {0, 2}, true);
                }),
      one_input("sum/last", OpId::sum, {3, 5}, [](const Tensor& x) { return sum(x, {-1}); }),
      // Per channel over (N, H, W): the CPU's sum_leading, the GPU's channel_sums.
      one_input("sum/channels", OpId::sum, {3, 4, 5, 6},
                [](const Tensor& x) {
                  return sum(x, {0, 2, 3});
                }),
      one_input("mean/channels", OpId::mean, {3, 4, 5, 6},
                [](const Tensor& x) {
                  return mean(x, {0, 2, 3});
                }),
      one_input("mean/dim", OpId::mean, {3, 4, 2}, [](const Tensor& x) { return mean(x, {1}); }),
      to_device_round_trip(),
  };
}

}  // namespace ember::testing
