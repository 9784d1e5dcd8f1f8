// Op cases: reductions beyond sum and mean (max, min, var, logsumexp, norm).
#include <limits>

#include "tests/common/op_cases.h"

namespace ember::testing {
namespace {

using Inputs = std::vector<Tensor>;

// One input of `shape` (uniform in [low, high), or away from zero), through `f`, times distinct
// weights so that every output element has its own gradient.
OpCase reduction_case(const std::string& name, OpId op, Shape shape,
                      std::function<Tensor(const Tensor&)> f, bool away_from_zero = false,
                      double low = -1.0, double high = 1.0) {
  OpCase c;
  c.name = name;
  c.op = op;
  c.make_inputs = [=](DType dtype, Device device, Generator& g) -> Inputs {
    if (away_from_zero) return {random_away_from_zero(shape, dtype, device, g)};
    return {random_input(shape, dtype, device, g, low, high)};
  };
  c.fn = [f](const Inputs& in) {
    const Tensor y = f(in[0]);
    return y * distinct_weights(y);
  };
  c.differentiable = {true};
  return c;
}

}  // namespace

EMBER_OP_CASES(reductions) {
  return {
      // max / min: continuous random inputs have no ties.
      reduction_case("max/all", OpId::max, {4, 5}, [](const Tensor& x) { return max(x); }),
      reduction_case("max/last_dim", OpId::max, {3, 7},
                     [](const Tensor& x) { return max(x, {-1}); }),
      reduction_case("max/middle_keepdim", OpId::max, {3, 4, 5},
                     [](const Tensor& x) { return max(x, {1}, true); }),
      reduction_case("max/two_dims", OpId::max, {3, 4, 5},
                     [](const Tensor& x) {
                       return max(x, {0, 2});
                     }),
      reduction_case("min/first_dim", OpId::min, {6, 5},
                     [](const Tensor& x) { return min(x, {0}); }),
      reduction_case("min/outer_dims_keepdim", OpId::min, {2, 3, 4},
                     [](const Tensor& x) {
                       return min(x, {0, -1}, true);
                     }),
      reduction_case("var/all", OpId::var, {5, 6}, [](const Tensor& x) { return var(x); }),
      reduction_case("var/last_dim", OpId::var, {4, 9},
                     [](const Tensor& x) { return var(x, {1}); }),
      reduction_case("var/first_dim_biased_keepdim", OpId::var, {7, 3, 2},
                     [](const Tensor& x) { return var(x, {0}, 0, true); }),
      reduction_case("var/two_dims_correction2", OpId::var, {3, 4, 5},
                     [](const Tensor& x) {
                       return var(x, {0, 2}, 2);
                     }),
      reduction_case("std/last_dim", OpId::std, {4, 6},
                     [](const Tensor& x) { return std(x, {-1}); }),
      reduction_case("std/all_biased_keepdim", OpId::std, {3, 5},
                     [](const Tensor& x) { return std(x, {}, 0, true); }),
      reduction_case(
          "logsumexp/last_dim", OpId::logsumexp, {4, 7},
          [](const Tensor& x) { return logsumexp(x, {-1}); }, false, -3.0, 3.0),
      reduction_case(
          "logsumexp/first_dim_keepdim", OpId::logsumexp, {5, 3, 2},
          [](const Tensor& x) { return logsumexp(x, {0}, true); }, false, -3.0, 3.0),
      reduction_case("logsumexp/all", OpId::logsumexp, {3, 4},
                     [](const Tensor& x) { return logsumexp(x, {}); }),
      reduction_case(
          "norm/p2_all", OpId::norm, {4, 5}, [](const Tensor& x) { return norm(x); }, true),
      reduction_case(
          "norm/p2_last_dim", OpId::norm, {3, 6}, [](const Tensor& x) { return norm(x, 2.0, {1}); },
          true),
      reduction_case(
          "norm/p1_first_dim", OpId::norm, {5, 4},
          [](const Tensor& x) { return norm(x, 1.0, {0}); }, true),
      reduction_case("norm/pinf_keepdim", OpId::norm, {3, 5},
                     [](const Tensor& x) {
                       return norm(x, std::numeric_limits<double>::infinity(), {1}, true);
                     }),
      reduction_case(
          "norm/p3_two_dims", OpId::norm, {2, 3, 4},
          [](const Tensor& x) {
            return norm(x, 3.0, {0, 2});
          },
          true),
  };
}

}  // namespace ember::testing
