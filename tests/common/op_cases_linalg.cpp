// Op cases: matmul (every operand rank), bmm, linear.
#include "tests/common/op_cases.h"

namespace ember::testing {
namespace {

using Inputs = std::vector<Tensor>;

// The output times fixed distinct weights: a mixed-up gradient cannot pass.
Tensor weighted(const Tensor& y) {
  return y * distinct_weights(y);
}

OpCase product_case(const std::string& name, OpId op, std::vector<Shape> shapes,
                    std::function<Tensor(const Inputs&)> fn) {
  OpCase c;
  c.name = name;
  c.op = op;
  c.make_inputs = [shapes](DType dtype, Device device, Generator& g) -> Inputs {
    Inputs inputs;
    for (const Shape& shape : shapes)
      inputs.push_back(random_input(shape, dtype, device, g));
    return inputs;
  };
  c.fn = [fn](const Inputs& in) { return weighted(fn(in)); };
  c.differentiable = std::vector<bool>(shapes.size(), true);
  return c;
}

Tensor matmul_fn(const Inputs& in) {
  return matmul(in[0], in[1]);
}
Tensor bmm_fn(const Inputs& in) {
  return bmm(in[0], in[1]);
}
Tensor linear_bias(const Inputs& in) {
  return linear(in[0], in[1], in[2]);
}
Tensor linear_no_bias(const Inputs& in) {
  return linear(in[0], in[1]);
}
// A transposed view as the right operand: BLAS reads it with the transpose flag.
Tensor matmul_transposed(const Inputs& in) {
  return matmul(in[0], in[1].t());
}

}  // namespace

EMBER_OP_CASES(linalg) {
  return {
      product_case("matmul/2d", OpId::matmul, {{3, 4}, {4, 5}}, matmul_fn),
      product_case("matmul/vector_matrix", OpId::matmul, {{4}, {4, 5}}, matmul_fn),
      product_case("matmul/matrix_vector", OpId::matmul, {{3, 4}, {4}}, matmul_fn),
      product_case("matmul/vector_vector", OpId::matmul, {{5}, {5}}, matmul_fn),
      product_case("matmul/batched_broadcast", OpId::matmul, {{2, 1, 3, 4}, {3, 4, 2}}, matmul_fn),
      product_case("matmul/batch_times_matrix", OpId::matmul, {{2, 3, 4}, {4, 5}}, matmul_fn),
      product_case("matmul/matrix_times_batch", OpId::matmul, {{3, 4}, {2, 4, 5}}, matmul_fn),
      product_case("matmul/vector_times_batch", OpId::matmul, {{4}, {2, 4, 3}}, matmul_fn),
      product_case("matmul/transposed_operand", OpId::matmul, {{3, 4}, {5, 4}}, matmul_transposed),
      // Odd sizes past the GPU kernels' 16- and 32-wide tiles.
      product_case("matmul/odd_sizes", OpId::matmul, {{7, 33}, {33, 17}}, matmul_fn),
      product_case("matmul/odd_sizes_transposed", OpId::matmul, {{17, 33}, {9, 33}},
                   matmul_transposed),
      product_case("bmm", OpId::bmm, {{3, 2, 4}, {3, 4, 5}}, bmm_fn),
      product_case("linear/bias", OpId::linear, {{3, 4}, {5, 4}, {5}}, linear_bias),
      product_case("linear/no_bias", OpId::linear, {{3, 4}, {5, 4}}, linear_no_bias),
      product_case("linear/3d_input", OpId::linear, {{2, 3, 4}, {5, 4}, {5}}, linear_bias),
      product_case("linear/1d_input", OpId::linear, {{4}, {3, 4}, {3}}, linear_bias),
  };
}

}  // namespace ember::testing
