#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/common/scalar_types.h"
#include "runtime/dtype.h"

namespace ember {
namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Every pattern but the signalling NaNs comes back as it was; those come back quiet, with the
// rest of their payload, as x86's F16C conversions return them.
TEST(ScalarTypes, EveryHalfBitPatternRoundTripsExactly) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const Half h = Half::from_bits(static_cast<uint16_t>(bits));
    const float f = h;
    const bool signalling_nan =
        (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0 && (bits & 0x200u) == 0;
    const uint32_t expected = signalling_nan ? (bits | 0x200u) : bits;
    ASSERT_EQ(Half(f).bits, expected) << "pattern 0x" << std::hex << bits;
  }
}

TEST(ScalarTypes, HalfNaNsAreQuietedWithTheirPayload) {
  EXPECT_EQ(bits_of(static_cast<float>(Half::from_bits(0x7c01))), 0x7fc02000u);  // signalling
  EXPECT_EQ(bits_of(static_cast<float>(Half::from_bits(0xfe01))), 0xffc02000u);  // quiet
  EXPECT_EQ(Half(float_of(0x7f800001u)).bits, 0x7e00);  // payload below binary16's bits
  EXPECT_EQ(Half(float_of(0x7f802000u)).bits, 0x7e01);
  EXPECT_EQ(Half(float_of(0xffffffffu)).bits, 0xffff);
}

// The device's NaN path (half_bits_to_float after the hardware's cvt) builds a NaN's bits with
// one arithmetic shift: they must be the portable code's for every binary16 NaN.
TEST(ScalarTypes, TheShiftedNaNBitsAreThePortableOnes) {
  int nans = 0;
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    if ((bits & 0x7fffu) <= 0x7c00u) continue;
    ++nans;
    const uint16_t half = static_cast<uint16_t>(bits);
    ASSERT_EQ(detail::half_nan_to_float_bits(half),
              bits_of(detail::portable_half_bits_to_float(half)))
        << "binary16 0x" << std::hex << bits;
  }
  EXPECT_EQ(nans, 2046);
}

TEST(ScalarTypes, EveryBFloat16BitPatternRoundTripsExactly) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const BFloat16 b = BFloat16::from_bits(static_cast<uint16_t>(bits));
    const float f = b;
    ASSERT_EQ(bits_of(f), bits << 16);
    ASSERT_EQ(BFloat16(f).bits, bits) << "pattern 0x" << std::hex << bits;
  }
}

TEST(ScalarTypes, HalfDecodesKnownValues) {
  EXPECT_EQ(static_cast<float>(Half::from_bits(0x3c00)), 1.0f);
  EXPECT_EQ(static_cast<float>(Half::from_bits(0xc000)), -2.0f);
  EXPECT_EQ(static_cast<float>(Half::from_bits(0x7bff)), 65504.0f);
  EXPECT_EQ(static_cast<float>(Half::from_bits(0x0001)),
            std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(static_cast<float>(Half::from_bits(0x0400)), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_TRUE(std::isinf(static_cast<float>(Half::from_bits(0x7c00))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Half::from_bits(0x7e00))));
  EXPECT_TRUE(std::signbit(static_cast<float>(Half::from_bits(0x8000))));
}

// Reference rounding: the nearest half (ties to even), computed by exhaustive search over the
// neighbouring representable values in double.
uint16_t reference_half(float f) {
  if (std::isnan(f)) return 0x7e00;
  const double x = f;
  uint16_t best = 0;
  double best_error = INFINITY;
  for (uint32_t b = 0; b < 0x7c00; ++b) {
    const double v = static_cast<float>(Half::from_bits(static_cast<uint16_t>(b)));
    const double e = std::fabs(std::fabs(x) - v);
    if (e < best_error || (e == best_error && (b & 1) == 0)) {
      best_error = e;
      best = static_cast<uint16_t>(b);
    }
  }
  // Overflow: at or beyond 65520 rounds to infinity.
  if (std::fabs(x) >= 65520.0) best = 0x7c00;
  return static_cast<uint16_t>(best | (std::signbit(f) ? 0x8000 : 0));
}

TEST(ScalarTypes, FloatToHalfRoundsToNearestEven) {
  const float cases[] = {1.0f + std::ldexp(1.0f, -11),      // exactly halfway: to even (1.0)
                         1.0f + 3 * std::ldexp(1.0f, -11),  // halfway: to even (up)
                         65519.0f,
                         65520.0f,
                         1e-8f,
                         3e-8f,
                         std::ldexp(1.0f, -25),
                         std::ldexp(1.5f, -25),
                         -0.1f,
                         0.333333f,
                         1e5f,
                         -7.0e-6f};
  for (float f : cases)
    EXPECT_EQ(Half(f).bits, reference_half(f)) << "value " << f;
  uint32_t state = 12345;
  for (int i = 0; i < 2000; ++i) {
    state = state * 1664525u + 1013904223u;
    // Random floats in the half range, subnormals included.
    const float f = float_of((state & 0x807fffffu) | ((102u + (state >> 24) % 42u) << 23));
    ASSERT_EQ(Half(f).bits, reference_half(f)) << "value " << f;
  }
}

TEST(ScalarTypes, FloatToBFloat16RoundsToNearestEven) {
  EXPECT_EQ(BFloat16(float_of(0x3f808000u)).bits, 0x3f80);  // halfway, even stays
  EXPECT_EQ(BFloat16(float_of(0x3f818000u)).bits, 0x3f82);  // halfway, odd rounds up
  EXPECT_EQ(BFloat16(float_of(0x3f808001u)).bits, 0x3f81);  // above halfway
  EXPECT_EQ(BFloat16(float_of(0x7f7fffffu)).bits, 0x7f80);  // max float rounds to infinity
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(float_of(0x7f800001u)))));  // NaN stays NaN
  EXPECT_EQ(BFloat16(float_of(0x00000001u)).bits, 0x0000);  // tiny subnormal rounds to zero
}

// The CUDA packet conversions test two 16-bit values for NaN at once. Each lane takes every
// pattern, beside partners at the edges of both formats' NaN ranges (and a few others), in both
// lanes: a carry from one lane into the other, or an edge off by one, shows up here.
TEST(ScalarTypes, PairNaNTestsFindANaNInEitherLaneAndNothingElse) {
  const uint16_t partners[] = {0x0000, 0x8000, 0x03ff, 0x7bff, 0x7c00, 0x7c01, 0x7dff,
                               0x7e00, 0x7fff, 0xfc00, 0xfc01, 0xffff, 0x7f7f, 0x7f80,
                               0x7f81, 0xff80, 0xff81, 0x3c00, 0x1234, 0xbeef};
  auto half_nan = [](uint32_t v) {
    return std::isnan(static_cast<float>(Half::from_bits(static_cast<uint16_t>(v))));
  };
  auto bfloat16_nan = [](uint32_t v) {
    return std::isnan(static_cast<float>(BFloat16::from_bits(static_cast<uint16_t>(v))));
  };
  int64_t wrong_half = 0, wrong_bfloat16 = 0;
  for (uint32_t value = 0; value < 65536; ++value) {
    for (const uint32_t partner : partners) {
      for (const uint32_t pair : {value | (partner << 16), partner | (value << 16)}) {
        const bool lanes_half = half_nan(pair & 0xffffu) || half_nan(pair >> 16);
        const bool lanes_bfloat16 = bfloat16_nan(pair & 0xffffu) || bfloat16_nan(pair >> 16);
        wrong_half += (detail::half_pair_nan_lanes(pair) != 0) != lanes_half;
        wrong_bfloat16 += (detail::bfloat16_pair_nan_lanes(pair) != 0) != lanes_bfloat16;
      }
    }
  }
  EXPECT_EQ(wrong_half, 0);
  EXPECT_EQ(wrong_bfloat16, 0);
}

TEST(DType, PromotionFollowsPyTorch) {
  EXPECT_EQ(promote_types(DType::f16, DType::bf16), DType::f32);
  EXPECT_EQ(promote_types(DType::i64, DType::f16), DType::f16);
  EXPECT_EQ(promote_types(DType::u8, DType::i32), DType::i32);
  EXPECT_EQ(promote_types(DType::boolean, DType::u8), DType::u8);
  EXPECT_EQ(promote_types(DType::f32, DType::f64), DType::f64);
  EXPECT_EQ(promote_types(DType::i32, DType::i64), DType::i64);
  for (DType a : kAllDTypes) {
    for (DType b : kAllDTypes)
      EXPECT_EQ(promote_types(a, b), promote_types(b, a));
  }
}

TEST(DType, NamesRoundTrip) {
  for (DType d : kAllDTypes)
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  EXPECT_THROW(parse_dtype("f8"), std::exception);
}

}  // namespace
}  // namespace ember
