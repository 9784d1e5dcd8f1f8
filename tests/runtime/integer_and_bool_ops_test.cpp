// PyTorch's dtype rules where integers and bools meet arithmetic: bool add/mul/maximum/minimum
// stay bool ("or" / "and"), subtraction with a bool is refused, integer powers wrap like the
// type's multiplications and refuse negative scalar exponents, max/min of bools are any/all, and
// clamp's bounds (and numbers given to where and pow) promote like numbers. Each was found
// different by bench/conformance/ (dtypes), or added after it; the expected values are LibTorch
// 1.13's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "runtime/ops.h"
#include "tests/common/expect_error.h"

namespace ember {
namespace {

Tensor bools(const std::vector<int64_t>& values) {
  return from_vector(values, {static_cast<int64_t>(values.size())}, DType::i64).to(DType::boolean);
}

std::vector<int64_t> as_i64(const Tensor& t) {
  return to_vector<int64_t>(t.to(DType::i64));
}

TEST(BoolOps, ArithmeticOnBoolsStaysBool) {
  const Tensor a = bools({0, 0, 1, 1}), b = bools({0, 1, 0, 1});
  for (const Tensor& result : {add(a, b), mul(a, b), maximum(a, b), minimum(a, b)})
    EXPECT_EQ(result.dtype(), DType::boolean);
  EXPECT_EQ(as_i64(add(a, b)), (std::vector<int64_t>{0, 1, 1, 1}));
  EXPECT_EQ(as_i64(mul(a, b)), (std::vector<int64_t>{0, 0, 0, 1}));
  EXPECT_EQ(as_i64(maximum(a, b)), (std::vector<int64_t>{0, 1, 1, 1}));
  EXPECT_EQ(as_i64(minimum(a, b)), (std::vector<int64_t>{0, 0, 0, 1}));
  EXPECT_EQ(as_i64(add(a, true)), (std::vector<int64_t>{1, 1, 1, 1}));
  // max / min of bools: any / all, as bool.
  EXPECT_EQ(max(a).dtype(), DType::boolean);
  EXPECT_TRUE(max(a).item<bool>());
  EXPECT_FALSE(min(a).item<bool>());
  EXPECT_TRUE(min(bools({1, 1})).item<bool>());
}

TEST(BoolOps, SubtractionWithABoolIsRefused) {
  const Tensor mask = bools({0, 1});
  EXPECT_ERROR_WITH(sub(mask, mask), "sub: subtraction with a bool tensor is not supported");
  EXPECT_ERROR_WITH(sub(ones({2}), mask), "sub", "bool");
  EXPECT_ERROR_WITH(sub(ones({2}), true), "sub", "bool");
  EXPECT_ERROR_WITH(true - ones({2}), "sub", "bool");
  EXPECT_ERROR_WITH(pow(mask, mask), "pow: not supported for two bool tensors");
  EXPECT_ERROR_WITH(pow(mask, true), "pow: not supported for a bool tensor to a bool power");
}

TEST(IntegerOps, PowWrapsLikeTheTypesMultiplications) {
  // 3^21 = 10460353203 and 7^12 = 13841287201 do not fit i32: their low 32 bits are 1870418611
  // and 956385313.
  const Tensor base = from_vector(std::vector<int64_t>{3, 7, -3, 2, 0}, {5}, DType::i64);
  const Tensor exponent = from_vector(std::vector<int64_t>{21, 12, 21, 31, 0}, {5}, DType::i64);
  const Tensor i32 = pow(base.to(DType::i32), exponent.to(DType::i32));
  EXPECT_EQ(i32.dtype(), DType::i32);
  EXPECT_EQ(to_vector<int32_t>(i32),
            (std::vector<int32_t>{1870418611, 956385313, -1870418611, -2147483648, 1}));
  EXPECT_EQ(to_vector<int64_t>(pow(base, exponent)),
            (std::vector<int64_t>{10460353203, 13841287201, -10460353203, 2147483648, 1}));
  // Negative tensor exponents: the integer part of the exact result.
  const Tensor bases = from_vector(std::vector<int64_t>{1, -1, -1, 2, 0}, {5}, DType::i64);
  const Tensor negative = from_vector(std::vector<int64_t>{-3, -3, -2, -1, -2}, {5}, DType::i64);
  EXPECT_EQ(to_vector<int64_t>(pow(bases, negative)), (std::vector<int64_t>{1, -1, 1, 0, 0}));
  // A scalar exponent: u8 wraps mod 256; bool becomes i64; a negative one is refused.
  const Tensor u8 = from_vector(std::vector<int64_t>{3, 16}, {2}, DType::i64).to(DType::u8);
  EXPECT_EQ(as_i64(pow(u8, 5)), (std::vector<int64_t>{243, 0}));
  const Tensor from_bool = pow(bools({0, 1}), 2);
  EXPECT_EQ(from_bool.dtype(), DType::i64);
  EXPECT_EQ(to_vector<int64_t>(from_bool), (std::vector<int64_t>{0, 1}));
  EXPECT_ERROR_WITH(pow(base, -1), "pow: integers to negative integer powers are not allowed");
  EXPECT_EQ(pow(base, -1.0).dtype(), DType::f32);  // a floating exponent: a floating result
}

TEST(IntegerOps, ANumberMinusAnUnsignedTensorPromotesBeforeSubtracting) {
  // 2.5 - u8 is f32 2.5 - x (not -x + 2.5 with -x wrapped in u8 first: 257.5); 2 - u8 wraps in u8.
  const Tensor u8 = from_vector(std::vector<int64_t>{1, 2, 3}, {3}, DType::i64).to(DType::u8);
  EXPECT_EQ(to_vector<float>(2.5 - u8), (std::vector<float>{1.5f, 0.5f, -0.5f}));
  const Tensor wrapped = 2 - u8;
  EXPECT_EQ(wrapped.dtype(), DType::u8);
  EXPECT_EQ(as_i64(wrapped), (std::vector<int64_t>{1, 0, 255}));
}

TEST(IntegerOps, ClampBoundsPromoteLikeNumbers) {
  const Tensor x = from_vector(std::vector<int64_t>{0, 1, 2, 3, 200}, {5}, DType::i64);
  for (DType dtype : {DType::u8, DType::i32, DType::i64}) {
    const Tensor floating = clamp(x.to(dtype), -1.5, 2.5);
    EXPECT_EQ(floating.dtype(), DType::f32) << dtype_name(dtype);
    EXPECT_EQ(to_vector<float>(floating), (std::vector<float>{0, 1, 2, 2.5f, 2.5f}));
    const Tensor integral = clamp(x.to(dtype), 1, 3);
    EXPECT_EQ(integral.dtype(), dtype);
    EXPECT_EQ(as_i64(integral), (std::vector<int64_t>{1, 1, 2, 3, 3}));
  }
  EXPECT_EQ(clamp(ones({2}, DType::f16), 0, 1).dtype(), DType::f16);
}

// where and pow with a number on one side: the number promotes like a number (a float with an
// integer tensor gives f32; an int with an f16 tensor stays f16), as torch.where and torch.pow.
TEST(NumberOperands, WhereAndPowPromoteLikeNumbers) {
  const Tensor mask = bools({1, 0, 1});
  const Tensor i = from_vector(std::vector<int64_t>{4, 5, 6}, {3}, DType::i64);
  const Tensor half = i.to(DType::f16);
  EXPECT_EQ(where(mask, i, 0.5).dtype(), DType::f32);
  EXPECT_EQ(to_vector<float>(where(mask, i, 0.5)), (std::vector<float>{4, 0.5, 6}));
  EXPECT_EQ(where(mask, 2, i).dtype(), DType::i64);
  EXPECT_EQ(to_vector<int64_t>(where(mask, 2, i)), (std::vector<int64_t>{2, 5, 2}));
  EXPECT_EQ(where(mask, half, 7).dtype(), DType::f16);
  EXPECT_EQ(where(mask, 1, 0).dtype(), DType::i64);
  EXPECT_EQ(to_vector<int64_t>(where(mask, 1, 0)), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(to_vector<float>(where(mask, 2.5, 0)), (std::vector<float>{2.5f, 0.0f, 2.5f}));
  EXPECT_EQ(where(mask, true, false).dtype(), DType::boolean);
  EXPECT_EQ(pow(2, i).dtype(), DType::i64);
  EXPECT_EQ(to_vector<int64_t>(pow(2, i)), (std::vector<int64_t>{16, 32, 64}));
  EXPECT_EQ(pow(2.0, i).dtype(), DType::f32);
  EXPECT_EQ(to_vector<float>(pow(0.5, i)), (std::vector<float>{0.0625f, 0.03125f, 0.015625f}));
  EXPECT_EQ(pow(3, half).dtype(), DType::f16);
  // d/dt 2^t = 2^t log 2.
  Tensor t = from_vector(std::vector<double>{-1.0, 0.0, 1.5}, {3}, DType::f64).requires_grad_();
  sum(pow(2.0, t)).backward();
  const std::vector<double> grad = to_vector<double>(t.grad());
  for (size_t k = 0; k < 3; ++k) {
    const double exponent = std::vector<double>{-1.0, 0.0, 1.5}[k];
    EXPECT_NEAR(grad[k], std::pow(2.0, exponent) * std::log(2.0), 1e-15);
  }
  // A tensor exponent may be negative (LibTorch too): the integer part of the exact power.
  EXPECT_EQ(to_vector<int64_t>(pow(2, from_vector(std::vector<int64_t>{1, -1}, {2}, DType::i64))),
            (std::vector<int64_t>{2, 0}));
}

// Signed integer add, sub, mul, neg, abs and square wrap as two's complement, as PyTorch's do,
// without relying on signed overflow (undefined in C++: the UBSan build of the suite stops on it).
TEST(IntegerOps, SignedOverflowWrapsWithoutUndefinedBehaviour) {
  constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
  const Tensor a32 =
      from_vector(std::vector<int64_t>{kMax32, kMin32, 65536}, {3}, DType::i64).to(DType::i32);
  const Tensor one32 = ones({3}, DType::i32);
  EXPECT_EQ(to_vector<int32_t>(add(a32, one32)), (std::vector<int32_t>{kMin32, kMin32 + 1, 65537}));
  EXPECT_EQ(to_vector<int32_t>(sub(a32, one32)), (std::vector<int32_t>{kMax32 - 1, kMax32, 65535}));
  EXPECT_EQ(to_vector<int32_t>(mul(a32, a32)), (std::vector<int32_t>{1, 0, 0}));
  EXPECT_EQ(to_vector<int32_t>(neg(a32)), (std::vector<int32_t>{-kMax32, kMin32, -65536}));
  EXPECT_EQ(to_vector<int32_t>(abs(a32)), (std::vector<int32_t>{kMax32, kMin32, 65536}));
  EXPECT_EQ(to_vector<int32_t>(square(a32)), (std::vector<int32_t>{1, 0, 0}));
  EXPECT_EQ(to_vector<int32_t>(add(a32, a32, 3)),  // a + 3 a = 4 a, wrapped
            (std::vector<int32_t>{-4, 0, 262144}));
  const Tensor a64 = from_vector(std::vector<int64_t>{kMax64, kMin64}, {2}, DType::i64);
  EXPECT_EQ(to_vector<int64_t>(add(a64, 1)), (std::vector<int64_t>{kMin64, kMin64 + 1}));
  EXPECT_EQ(to_vector<int64_t>(sub(a64, 1)), (std::vector<int64_t>{kMax64 - 1, kMax64}));
  EXPECT_EQ(to_vector<int64_t>(mul(a64, 2)), (std::vector<int64_t>{-2, 0}));
  EXPECT_EQ(to_vector<int64_t>(neg(a64)), (std::vector<int64_t>{-kMax64, kMin64}));
  // u8 wraps by definition: 200 + 100 = 44, 3 - 5 = 254, 16 * 17 = 16.
  const Tensor u = from_vector(std::vector<int64_t>{200, 3, 16}, {3}, DType::i64).to(DType::u8);
  const Tensor v = from_vector(std::vector<int64_t>{100, 5, 17}, {3}, DType::i64).to(DType::u8);
  EXPECT_EQ(as_i64(add(u, v)), (std::vector<int64_t>{44, 8, 33}));
  EXPECT_EQ(as_i64(sub(u, v)), (std::vector<int64_t>{100, 254, 255}));
  EXPECT_EQ(as_i64(mul(u, v)), (std::vector<int64_t>{32, 15, 16}));
}

}  // namespace
}  // namespace ember
