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

// A number that f16 or bf16 cannot hold (0.1, 1/3, 257) meets the tensor in f32 in x * s and
// x / s, as in PyTorch's mul and div kernels (their opmath type): x * (1/3) is round(f32(x) *
// f32(1/3)), once, not x times bf16's 0.333984375; x / s is round(f32(x) / f32(s)). x + s and
// x - s take the number in the tensor's dtype, as PyTorch's add does (bf16 + 0.3 adds
// 0.30078125). Numbers the dtype holds keep the 0-d tensor path; so do NaN, -0 and infinities.
// In-place forms give the same bits; signs of zero are kept; the gradient is the number, rounded
// once.
TEST(SixteenBitScalar, ANumberTheDtypeCannotHoldMeetsTheTensorInF32InMulAndDiv) {
  manual_seed(7);
  Tensor wide = randn({3, 700});
  float* values = wide.data<float>();
  values[0] = -0.0f;
  values[1] = 0.0f;
  values[2] = std::nanf("");
  values[3] = std::numeric_limits<float>::infinity();
  values[4] = 65504.0f;  // f16's largest: x * 1.1 overflows to inf there, as in f32 then rounded
  const double numbers[] = {0.1, 1.0 / 3.0, -0.7, 257.0, 1e-5, 3.0, 0.5, -0.0, 2049.0, 1e30};
  using Op = std::function<Tensor(const Tensor&, double)>;
  struct Case {
    std::string name;
    Op op, in_place;
    bool keeps_f32;                          // else the number is rounded to x's dtype
    std::function<float(float, float)> f32;  // the reference on the widened values
  };
  const std::vector<Case> cases = {
      {"mul", [](const Tensor& x, double s) { return x * s; },
       [](const Tensor& x, double s) { return x.clone().mul_(s); }, true,
       [](float x, float s) { return x * s; }},
      {"div", [](const Tensor& x, double s) { return x / s; },
       [](const Tensor& x, double s) { return x.clone().div_(s); }, true,
       [](float x, float s) { return x / s; }},
      {"add", [](const Tensor& x, double s) { return x + s; },
       [](const Tensor& x, double s) { return x.clone().add_(s); }, false,
       [](float x, float s) { return x + s; }},
      {"sub", [](const Tensor& x, double s) { return x - s; },
       [](const Tensor& x, double s) { return x.clone().sub_(s); }, false,
       [](float x, float s) { return x - s; }},
  };
  for (DType dtype : {DType::f16, DType::bf16}) {
    const Tensor x = wide.to(dtype);
    const std::vector<float> widened = to_vector<float>(x.to(DType::f32));
    for (const Case& c : cases) {
      for (double s : numbers) {
        const float held = full({}, s, dtype).item<float>();  // the number in the dtype
        const float number = c.keeps_f32 ? static_cast<float>(s) : held;
        std::vector<float> want(widened.size());
        for (size_t i = 0; i < widened.size(); ++i)
          want[i] = c.f32(widened[i], number);
        want = to_vector<float>(from_vector(want, x.sizes()).to(dtype).to(DType::f32));
        const std::string what = c.name + " " + dtype_name(dtype) + " by " + std::to_string(s);
        const Tensor out = c.op(x, s);
        EXPECT_EQ(out.dtype(), dtype) << what;
        expect_same_bits(to_vector<float>(out.to(DType::f32)), want, what);
        expect_same_bits(to_vector<float>(c.in_place(x, s).to(DType::f32)), want,
                         what + ", in place");
      }
    }
  }
  // bf16(1/3) = 0.333984375 rounded these up a step: x = 1.0390625 gave 0.34765625, f32 gives
  // 0.345703125 (PyTorch's value).
  const Tensor x = full({1}, 1.0390625, DType::bf16);
  EXPECT_EQ((x * (1.0 / 3.0)).item<double>(), 0.345703125);
  EXPECT_EQ((x / 3).item<double>(), 0.345703125);
  EXPECT_EQ((full({1}, 1.0, DType::bf16) + 0.3).item<double>(), 1.296875);  // 1 + 0.30078125
  // The mean divides by its count in f32 too.
  EXPECT_EQ(mean(full({3}, 1.0390625, DType::bf16)).item<double>(), 1.0390625);

  // The gradient of x * s is s, rounded once to the gradient's dtype; of x - s, 1; of x / s,
  // 1 / s.
  Tensor leaf = randn({5}).to(DType::bf16);
  leaf.requires_grad_();
  sum(leaf * 0.1 + 0.3).backward();
  expect_same_bits(to_vector<float>(leaf.grad().to(DType::f32)),
                   std::vector<float>(5, static_cast<float>(BFloat16(0.1f))), "d(x s)/dx");
  // In place on a tensor in a graph: the same gradient.
  Tensor base = randn({5}).to(DType::bf16);
  base.requires_grad_();
  Tensor y = base * 1.0;
  y.mul_(0.1);
  y.sub_(0.3);
  sum(y).backward();
  expect_same_bits(to_vector<float>(base.grad().to(DType::f32)),
                   std::vector<float>(5, static_cast<float>(BFloat16(0.1f))), "in place");
  Tensor divided = randn({5}).to(DType::bf16);
  divided.requires_grad_();
  sum(divided / 0.3).backward();
  expect_same_bits(to_vector<float>(divided.grad().to(DType::f32)),
                   std::vector<float>(5, static_cast<float>(BFloat16(1.0f / 0.3f))), "d(x / s)/dx");
}

// In place with a wider operand (bf16 += f32, f16 *= bf16, f32 -= f64): the op in the result's
// dtype, rounded once into self, as PyTorch computes in its common dtype and casts to the output.
// Rounding the operand to self's dtype first rounded twice: a hand-written bf16 update
// p.add_(u_f32, -lr) lost the low bits of u.
TEST(SixteenBitInPlace, AWiderOperandIsRoundedOnceWithTheResult) {
  manual_seed(9);
  const Tensor base = randn({4, 300});
  const Tensor update = randn({4, 300}) * 0.01;
  struct Pair {
    DType self, other, common;
  };
  for (const Pair& pair :
       {Pair{DType::bf16, DType::f32, DType::f32}, Pair{DType::f16, DType::f32, DType::f32},
        Pair{DType::f16, DType::bf16, DType::f32}, Pair{DType::f32, DType::f64, DType::f64}}) {
    const Tensor self = base.to(pair.self), other = update.to(pair.other);
    const Tensor wide_self = self.to(pair.common), wide_other = other.to(pair.common);
    const std::string what = std::string(dtype_name(pair.self)) + " with " + dtype_name(pair.other);
    const auto check = [&](const Tensor& got, const Tensor& want, const std::string& op) {
      EXPECT_EQ(got.dtype(), pair.self) << what << " " << op;
      expect_same_bits(to_vector<float>(got.to(DType::f32)),
                       to_vector<float>(want.to(pair.self).to(DType::f32)), what + " " + op);
    };
    check(self.clone().add_(other, -0.3), add(wide_self, wide_other, -0.3), "add_ alpha");
    check(self.clone().sub_(other), sub(wide_self, wide_other), "sub_");
    check(self.clone().mul_(other), mul(wide_self, wide_other), "mul_");
    check(self.clone().div_(other), div(wide_self, wide_other), "div_");
    // A row of other broadcast over self.
    check(self.clone().add_(other.slice(0, 0, 1)), add(wide_self, wide_other.slice(0, 0, 1)),
          "add_ row");
  }
  // A bf16 parameter's update by an f32 step: the step's low bits count.
  Tensor p = full({1}, 1.0, DType::bf16);
  p.add_(full({1}, 0.00390625 + 1e-6, DType::f32));  // just past half of bf16's step at 1
  EXPECT_EQ(p.item<double>(), 1.0078125);
}

}  // namespace
}  // namespace ember
