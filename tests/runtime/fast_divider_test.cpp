// FastDivider (kernels/common/fast_divider.h), the CUDA elementwise loop's division by a dim's
// size, on the host: the same quotient as `/` for every divisor and dividend it is used with
// ([1, 2^31 - 1]), checked over every small divisor, every power of two and its neighbours, and
// random large ones, each with the dividends where a rounding error would show first (the
// multiples of the divisor and their neighbours, the top of the range) and random ones.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/common/fast_divider.h"

namespace ember::kernels {
namespace {

constexpr uint32_t kTop = static_cast<uint32_t>(kFastDivisionLimit);

// The dividends to try for d: around 0, d and its multiples near the top, the top, and `random`
// uniform ones.
std::vector<uint32_t> dividends_for(uint32_t d, std::mt19937_64& rng, int random) {
  std::vector<uint32_t> n = {0, 1, 2, kTop, kTop - 1};
  const uint64_t last_multiple = (uint64_t{kTop} / d) * d;
  for (uint64_t k : {uint64_t{1}, uint64_t{2}, last_multiple / d, last_multiple / d - 1}) {
    const uint64_t multiple = k * d;
    for (int64_t delta = -1; delta <= 1; ++delta) {
      const int64_t value = static_cast<int64_t>(multiple) + delta;
      if (value >= 0 && value <= kFastDivisionLimit) n.push_back(static_cast<uint32_t>(value));
    }
  }
  std::uniform_int_distribution<uint32_t> any(0, kTop);
  for (int i = 0; i < random; ++i)
    n.push_back(any(rng));
  return n;
}

// Empty when every quotient is right, else the first wrong one.
std::string check_divisor(uint32_t d, std::mt19937_64& rng, int random) {
  const FastDivider divider(d);
  for (uint32_t n : dividends_for(d, rng, random)) {
    if (divider.quotient(n) != n / d) {
      return std::to_string(n) + " / " + std::to_string(d) + ": " +
             std::to_string(divider.quotient(n)) + ", expected " + std::to_string(n / d);
    }
  }
  return "";
}

TEST(FastDivider, EverySmallDivisor) {
  std::mt19937_64 rng(1);
  for (uint32_t d = 1; d <= 70000; ++d) {
    const std::string wrong = check_divisor(d, rng, 64);
    ASSERT_TRUE(wrong.empty()) << wrong;
  }
}

TEST(FastDivider, PowersOfTwoAndTheirNeighbours) {
  std::mt19937_64 rng(2);
  for (int s = 0; s <= 31; ++s) {
    const int64_t power = int64_t{1} << s;
    for (int64_t d = power - 2; d <= power + 2; ++d) {
      if (d < 1 || d > kFastDivisionLimit) continue;
      const std::string wrong = check_divisor(static_cast<uint32_t>(d), rng, 4096);
      ASSERT_TRUE(wrong.empty()) << wrong;
    }
  }
}

TEST(FastDivider, RandomLargeDivisors) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<uint32_t> divisor(1, kTop);
  for (int i = 0; i < 100000; ++i) {
    const std::string wrong = check_divisor(divisor(rng), rng, 16);
    ASSERT_TRUE(wrong.empty()) << wrong;
  }
}

// Every dividend, for a few divisors of the sizes a broadcast walks (channels, planes).
TEST(FastDivider, EveryDividendBelowTwoToTheTwentyFour) {
  for (uint32_t d : {3u, 7u, 64u, 100u, 784u, 1023u}) {
    const FastDivider divider(d);
    for (uint32_t n = 0; n < (1u << 24); ++n)
      ASSERT_EQ(divider.quotient(n), n / d) << n << " / " << d;
  }
}

}  // namespace
}  // namespace ember::kernels
