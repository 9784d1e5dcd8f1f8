// The vectorised run conversions (kernels/cpu/convert_runs.h) against the scalar conversions of
// scalar_types.h, bit for bit: every 16-bit pattern, and random f32 bit patterns that include
// NaNs, infinities, subnormals and halfway cases, at lengths that leave vector tails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/convert_runs.h"

namespace ember::kernels::cpu {
namespace {

template <typename T>
void expect_every_pattern_widens_exactly() {
  std::vector<T> narrow(65536 + 3);
  for (uint32_t bits = 0; bits < narrow.size(); ++bits)
    narrow[bits] = T::from_bits(static_cast<uint16_t>(bits));
  std::vector<float> wide(narrow.size(), -1.0f);
  widen_to_f32(narrow.data(), wide.data(), static_cast<int64_t>(narrow.size()));
  for (size_t i = 0; i < narrow.size(); ++i) {
    const float expected = narrow[i];
    ASSERT_EQ(0, std::memcmp(&wide[i], &expected, sizeof(float))) << "pattern 0x" << std::hex << i;
  }
}

TEST(ConvertRuns, EveryBFloat16PatternWidensExactly) {
  expect_every_pattern_widens_exactly<BFloat16>();
}

TEST(ConvertRuns, EveryHalfPatternWidensExactly) {
  expect_every_pattern_widens_exactly<Half>();
}

// Random bit patterns hit every class; rounding cases are forced by zeroing the low bits.
std::vector<float> random_float_patterns(size_t count) {
  std::mt19937 rng(20261123);
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (i % 3 == 0) bits = (bits & 0xffff0000u) | 0x8000u;      // exactly halfway for bf16
    if (i % 5 == 0) bits = (bits & 0xffffe000u) | 0x1000u;      // halfway for binary16
    if (i % 7 == 0) bits = (bits & 0x807fffffu) | 0x7f800000u;  // Inf or NaN
    std::memcpy(&values[i], &bits, sizeof(float));
  }
  return values;
}

template <typename T>
void expect_narrowing_matches_the_scalar_conversion() {
  const std::vector<float> wide = random_float_patterns(100003);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{31}, int64_t{33}, int64_t{100003}}) {
    std::vector<T> narrow(static_cast<size_t>(n) + 1, T::from_bits(0xdead));  // poisoned
    narrow_from_f32(wide.data(), narrow.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(narrow[i].bits, T(wide[i]).bits) << "n " << n << ", element " << i;
    EXPECT_EQ(narrow[n].bits, 0xdead) << "wrote past the run of " << n;
  }
}

TEST(ConvertRuns, BFloat16NarrowingMatchesTheScalarConversion) {
  expect_narrowing_matches_the_scalar_conversion<BFloat16>();
}

TEST(ConvertRuns, HalfNarrowingMatchesTheScalarConversion) {
  expect_narrowing_matches_the_scalar_conversion<Half>();
}

// Every binary16 loop this CPU has (AVX-512, F16C, scalar), not just the one picked: every
// 16-bit pattern widened; narrowed, the random patterns and, around every finite binary16 value,
// the halfway points to its neighbour and the floats one step either side of them (the rounding
// boundaries, subnormals and overflow to Inf included).
std::vector<float> half_rounding_boundaries() {
  std::vector<float> values;
  for (uint32_t bits = 0; bits < 0x7c00u; ++bits) {
    const float low = Half::from_bits(static_cast<uint16_t>(bits));
    const float high = bits + 1 < 0x7c00u
                           ? static_cast<float>(Half::from_bits(static_cast<uint16_t>(bits + 1)))
                           : 65536.0f;
    const float halfway = low + (high - low) / 2;  // exact in f32
    for (float f : {halfway, std::nextafter(halfway, 0.0f), std::nextafter(halfway, 1e9f)}) {
      values.push_back(f);
      values.push_back(-f);
    }
  }
  return values;
}

TEST(ConvertRuns, EveryHalfLoopMatchesTheScalarConversions) {
  std::vector<float> wide = random_float_patterns(100003);
  const std::vector<float> boundaries = half_rounding_boundaries();
  wide.insert(wide.end(), boundaries.begin(), boundaries.end());
  std::vector<uint16_t> every_pattern(65536 + 5);
  for (size_t i = 0; i < every_pattern.size(); ++i)
    every_pattern[i] = static_cast<uint16_t>(i);

  ASSERT_FALSE(half_conversion_loops().empty());
  for (const HalfConversionLoops& loops : half_conversion_loops()) {
    SCOPED_TRACE(loops.name);
    std::vector<float> widened(every_pattern.size() + 1, -1.0f);  // poisoned, one past the end
    const auto n_patterns = static_cast<int64_t>(every_pattern.size());
    loops.widen(every_pattern.data(), widened.data(), n_patterns);
    for (size_t i = 0; i < every_pattern.size(); ++i) {
      const float expected = Half::from_bits(every_pattern[i]);
      ASSERT_EQ(0, std::memcmp(&widened[i], &expected, sizeof(float)))
          << "pattern 0x" << std::hex << every_pattern[i];
    }
    EXPECT_EQ(widened.back(), -1.0f) << "wrote past the run";

    for (int64_t n : {int64_t{5}, int64_t{23}, static_cast<int64_t>(wide.size())}) {
      std::vector<uint16_t> narrowed(static_cast<size_t>(n) + 1, 0xdead);
      loops.narrow(wide.data(), narrowed.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(narrowed[i], Half(wide[i]).bits) << "n " << n << ", value " << wide[i];
      EXPECT_EQ(narrowed[n], 0xdead) << "wrote past the run of " << n;
    }
  }
}

}  // namespace
}  // namespace ember::kernels::cpu
