// The op-test harness (ggml's idea): each op declares how to build random inputs and how to call
// it, once; the same list drives
//   - the f64 finite-difference gradient check of every differentiable op (tests/runtime),
//   - the non-contiguous-input check (inputs re-laid out with strides must not change results),
//   - the CUDA-vs-CPU comparison in f32, f16 and bf16 (tests/cuda).
// Register cases from any file of tests/common with EMBER_OP_CASES (files there are linked whole).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/autograd/op_list.h"
#include "runtime/ops.h"

namespace ember::testing {

struct OpCase {
  std::string name;  // unique: "add/broadcast_rows"
  OpId op;           // the autograd node it exercises
  // Fresh inputs of `dtype` (floating inputs; index inputs keep their own dtype) on `device`,
  // from `generator`. Called with the same generator state for every device being compared.
  std::function<std::vector<Tensor>(DType dtype, Device device, Generator& generator)> make_inputs;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  std::vector<bool> differentiable;  // per input: checked by gradcheck
  bool differentiable_op = true;     // false: no gradient check (e.g. comparisons)
  bool compare_on_cuda = true;
  bool needs_cuda = false;  // the op itself needs a GPU (to_device): skipped where none is visible
  std::vector<DType> cuda_dtypes = {DType::f32, DType::f16, DType::bf16};
  double gradcheck_eps = 1e-6;
  double gradcheck_atol = 1e-5;
  double gradcheck_rtol = 1e-3;
  double tolerance_scale = 1.0;  // multiplies the dtype's CUDA-vs-CPU tolerance
};

std::vector<OpCase>& op_case_registry();

struct OpCaseRegistrar {
  explicit OpCaseRegistrar(std::vector<OpCase> (*make)()) {
    for (OpCase& c : make())
      op_case_registry().push_back(std::move(c));
  }
};

// Uniform values in [low, high), drawn in f64 then rounded to `dtype`, on `device`.
Tensor random_input(const Shape& shape, DType dtype, Device device, Generator& generator,
                    double low = -1.0, double high = 1.0);
// Values away from 0 (|x| in [0.5, 1.5]) for ops with a kink or pole at 0.
Tensor random_away_from_zero(const Shape& shape, DType dtype, Device device, Generator& generator);
// Fixed, distinct weights shaped like `like` (1.0, 1.1, 1.2, ...): multiplying an op's output by
// them gives every output element its own gradient, so a mixed-up gradient cannot pass.
Tensor distinct_weights(const Tensor& like);
// The registered case called `name` (a test failure if there is none).
const OpCase& find_op_case(const std::string& name);
std::vector<std::string> op_case_names();
// "add/broadcast_rows" -> "add_broadcast_rows", for test names.
std::string test_name_of(const std::string& case_name);
// Same values, laid out with non-unit strides (every other element of a wider buffer).
Tensor strided_copy(const Tensor& t);

}  // namespace ember::testing

#define EMBER_OP_CASES_CONCAT_(a, b) a##b
#define EMBER_OP_CASES_CONCAT(a, b) EMBER_OP_CASES_CONCAT_(a, b)
// EMBER_OP_CASES(elementwise) { return {OpCase{...}, ...}; }
#define EMBER_OP_CASES(group)                                                               \
  static std::vector<::ember::testing::OpCase> EMBER_OP_CASES_CONCAT(make_cases_, group)(); \
  static ::ember::testing::OpCaseRegistrar EMBER_OP_CASES_CONCAT(                           \
      registrar_, group)(&EMBER_OP_CASES_CONCAT(make_cases_, group));                       \
  static std::vector<::ember::testing::OpCase> EMBER_OP_CASES_CONCAT(make_cases_, group)()
