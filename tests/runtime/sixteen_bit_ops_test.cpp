// Element-wise ops on f16 and bf16 compute in f32 and round once: dense runs (alone, or against a
// broadcast scalar) go through f32 chunks of 512 with vector conversions, other layouts element by
// element. Every layout and op must give the f32 op on the widened inputs, rounded, bit for bit;
// rows of 1100 span three chunks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "runtime/ops.h"

namespace ember {
namespace {

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(0, std::memcmp(&got[i], &want[i], sizeof(float)))
        << what << " at " << i << ": " << got[i] << " against " << want[i];
}

TEST(SixteenBitBinary, EveryLayoutGivesTheF32ResultRounded) {
  manual_seed(5);
  Tensor wide = randn({37, 1100});
  wide.data<float>()[3] = std::nanf("");
  wide.data<float>()[700] = std::numeric_limits<float>::infinity();
  const Tensor other = randn({37, 1100});
  using Op = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<std::string, Op>> ops = {
      {"add", [](const Tensor& x, const Tensor& y) { return add(x, y); }},
      {"sub alpha", [](const Tensor& x, const Tensor& y) { return sub(x, y, 0.37); }},
      {"mul", [](const Tensor& x, const Tensor& y) { return mul(x, y); }},
      {"div", [](const Tensor& x, const Tensor& y) { return div(x, y); }},
      {"maximum", [](const Tensor& x, const Tensor& y) { return maximum(x, y); }},
      {"minimum", [](const Tensor& x, const Tensor& y) { return minimum(x, y); }}};
  // (a, b) pairs: dense; b a row, a column (runs against a scalar) or 0-d; a a column; transposed.
  const std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>> layouts = {
      {"dense", {wide, other}},
      {"row", {wide, other.slice(0, 0, 1)}},
      {"column", {wide, other.slice(1, 0, 1)}},
      {"0-d", {wide, full({}, 1.7)}},
      {"a column", {wide.slice(1, 0, 1), other}},
      {"transposed", {wide, other}}};
  for (DType dtype : {DType::f16, DType::bf16})
    for (const auto& [op_name, op] : ops)
      for (const auto& [layout_name, operands] : layouts) {
        // The transpose is taken of the 16-bit tensors: a cast gives a dense result.
        const bool transposed = layout_name == "transposed";
        const Tensor a = transposed ? operands.first.to(dtype).t() : operands.first.to(dtype);
        const Tensor b =
            transposed ? operands.second.to(dtype).t().contiguous() : operands.second.to(dtype);
        const std::vector<float> got = to_vector<float>(op(a, b).to(DType::f32));
        const std::vector<float> want =
            to_vector<float>(op(a.to(DType::f32), b.to(DType::f32)).to(dtype).to(DType::f32));
        expect_same_bits(got, want, op_name + " " + dtype_name(dtype) + " " + layout_name);
      }
}

TEST(SixteenBitUnary, EveryLayoutGivesTheF32ResultRounded) {
  manual_seed(6);
  Tensor wide = randn({37, 1100});
  wide.mul_(3.0);
  float* values = wide.data<float>();
  values[3] = std::nanf("");
  values[700] = -std::numeric_limits<float>::infinity();
  values[701] = 0.0f;
  values[702] = -0.0f;
  using Op = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<std::string, Op>> ops = {
      {"neg", [](const Tensor& x) { return neg(x); }},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }},
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"erf", [](const Tensor& x) { return erf(x); }},
      {"pow 3", [](const Tensor& x) { return pow(x, 3); }},
      {"square", [](const Tensor& x) { return square(x); }},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }},
      {"sign", [](const Tensor& x) { return sign(x); }}};
  // The views are taken of the 16-bit tensor: a cast gives a dense result.
  using View = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<std::string, View>> layouts = {
      {"dense", [](const Tensor& t) { return t; }},
      {"transposed", [](const Tensor& t) { return t.t(); }},
      {"every other column", [](const Tensor& t) { return t.slice(1, 0, 1100, 2); }}};
  for (DType dtype : {DType::f16, DType::bf16})
    for (const auto& [op_name, op] : ops)
      for (const auto& [layout_name, view] : layouts) {
        const Tensor x = view(wide.to(dtype));
        ASSERT_EQ(x.is_contiguous(), layout_name == "dense");
        const std::vector<float> got = to_vector<float>(op(x).to(DType::f32));
        const std::vector<float> want =
            to_vector<float>(op(x.to(DType::f32)).to(dtype).to(DType::f32));
        expect_same_bits(got, want, op_name + " " + dtype_name(dtype) + " " + layout_name);
      }
}

}  // namespace
}  // namespace ember
