#include "tests/common/op_cases.h"

#include <cctype>

namespace ember::testing {

std::vector<OpCase>& op_case_registry() {
  static std::vector<OpCase> registry;
  return registry;
}

Tensor random_input(const Shape& shape, DType dtype, Device device, Generator& generator,
                    double low, double high) {
  return uniform(shape, low, high, DType::f64, &generator).to(dtype).to(device);
}

Tensor random_away_from_zero(const Shape& shape, DType dtype, Device device, Generator& generator) {
  NoGradGuard no_grad;
  const Tensor magnitude = uniform(shape, 0.5, 1.5, DType::f64, &generator);
  const Tensor sign_bits = bernoulli(shape, 0.5, DType::f64, &generator);
  return (magnitude * (sign_bits * 2.0 - 1.0)).to(dtype).to(device);
}

Tensor strided_copy(const Tensor& t) {
  NoGradGuard no_grad;
  if (t.dim() == 0) return t.clone();
  Shape wide = t.sizes();
  wide.back() *= 2;
  Tensor buffer = zeros(wide, TensorOptions(t.dtype(), t.device()));
  Tensor view = buffer.slice(t.dim() - 1, 0, wide.back(), 2);
  view.copy_(t);
  return view;
}

Tensor distinct_weights(const Tensor& like) {
  std::vector<double> values(static_cast<size_t>(like.numel()));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = 1.0 + 0.1 * static_cast<double>(i % 17);
  return from_vector(values, like.sizes(), DType::f64).to(like.dtype()).to(like.device());
}

const OpCase& find_op_case(const std::string& name) {
  for (const OpCase& c : op_case_registry()) {
    if (c.name == name) return c;
  }
  EMBER_FAIL("no op case named '", name, "'");
}

std::vector<std::string> op_case_names() {
  std::vector<std::string> names;
  for (const OpCase& c : op_case_registry())
    names.push_back(c.name);
  return names;
}

std::string test_name_of(const std::string& case_name) {
  std::string name = case_name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

}  // namespace ember::testing
