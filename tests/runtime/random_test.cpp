// Philox random numbers: the state is (seed, offset), so the same state gives the same numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/ops.h"

namespace ember {
namespace {

TEST(Philox, SameSeedAndOffsetGiveTheSameNumbers) {
  Generator a(42), b(42);
  EXPECT_TRUE(allclose(rand({1000}, {}, &a), rand({1000}, {}, &b), 0, 0));
  EXPECT_TRUE(allclose(randn({7, 3}, DType::f64, &a), randn({7, 3}, DType::f64, &b), 0, 0));
  EXPECT_EQ(a.state(), b.state());
}

TEST(Philox, RestoringAStateReplaysTheStream) {
  Generator g(7);
  rand({13}, {}, &g);
  const GeneratorState saved = g.state();
  const Tensor first = randn({100}, {}, &g);
  g.set_state(saved);
  EXPECT_TRUE(allclose(randn({100}, {}, &g), first, 0, 0));
}

TEST(Philox, DrawsAdvanceTheOffsetAndDiffer) {
  Generator g(1);
  const Tensor first = rand({64}, {}, &g);
  const uint64_t offset = g.state().offset;
  EXPECT_GT(offset, 0u);
  const Tensor second = rand({64}, {}, &g);
  EXPECT_FALSE(allclose(first, second, 0, 0));
  Generator other_seed(2);
  EXPECT_FALSE(allclose(first, rand({64}, {}, &other_seed), 0, 0));
}

TEST(Philox, KnownValuesAreStableAcrossRuns) {
  // Pinned values: a change in the generator breaks every saved checkpoint's RNG state.
  Generator g(0);
  const std::vector<double> v = to_vector<double>(rand({3}, DType::f64, &g));
  Generator again(0);
  EXPECT_EQ(v, to_vector<double>(rand({3}, DType::f64, &again)));
  for (double x : v) {
    EXPECT_GE(x, 0.0);
    EXPECT_LT(x, 1.0);
  }
}

TEST(Philox, ManualSeedResetsTheDefaultGenerator) {
  manual_seed(123);
  const Tensor a = randn({10});
  manual_seed(123);
  EXPECT_TRUE(allclose(randn({10}), a, 0, 0));
}

TEST(Distributions, UniformStaysInItsRangeWithTheRightMean) {
  Generator g(5);
  const std::vector<double> u = to_vector<double>(uniform({200000}, -2.0, 3.0, DType::f64, &g));
  const auto [lowest, highest] = std::minmax_element(u.begin(), u.end());
  EXPECT_GE(*lowest, -2.0);
  EXPECT_LT(*highest, 3.0);
  double total = 0;
  for (double x : u)
    total += x;
  EXPECT_NEAR(total / static_cast<double>(u.size()), 0.5, 0.02);
}

TEST(Distributions, NormalHasItsMeanAndStd) {
  Generator g(6);
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor x = normal({200000}, 1.5, 2.0, dtype, &g).to(DType::f64);
    const double m = mean(x).item<double>();
    const double variance = mean(square(x - m)).item<double>();
    EXPECT_NEAR(m, 1.5, 0.03) << dtype;
    EXPECT_NEAR(std::sqrt(variance), 2.0, 0.03) << dtype;
  }
}

TEST(Distributions, RandintCoversItsRangeUniformly) {
  Generator g(8);
  const std::vector<int64_t> v = to_vector<int64_t>(randint(-3, 4, {70000}, DType::i64, &g));
  std::vector<int64_t> counts(7, 0);
  for (int64_t x : v) {
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 4);
    ++counts[static_cast<size_t>(x + 3)];
  }
  for (int64_t c : counts)
    EXPECT_NEAR(static_cast<double>(c), 10000.0, 500.0);
}

// Bounds past 2^53 stay exact (they went through a double and were rounded), and a range wider
// than an int64 counts (its width overflowed: a division by zero) is drawn from.
TEST(Distributions, RandintKeepsLargeBoundsExactAndTakesTheWidestRange) {
  Generator g(9);
  const int64_t big = (int64_t{1} << 62) + 1;  // 2^62 + 1 is not a double
  const std::vector<int64_t> near =
      to_vector<int64_t>(randint(big, big + 2, {256}, DType::i64, &g));
  EXPECT_EQ(
      std::count(near.begin(), near.end(), big) + std::count(near.begin(), near.end(), big + 1),
      256);
  EXPECT_GT(std::count(near.begin(), near.end(), big), 64);
  const int64_t lowest = std::numeric_limits<int64_t>::min();
  const int64_t highest = std::numeric_limits<int64_t>::max();
  const std::vector<int64_t> wide =
      to_vector<int64_t>(randint(lowest, highest, {4096}, DType::i64, &g));
  const auto negative = std::count_if(wide.begin(), wide.end(), [](int64_t x) { return x < 0; });
  EXPECT_NEAR(static_cast<double>(negative), 2048.0, 200.0);
  EXPECT_EQ(std::count(wide.begin(), wide.end(), highest), 0);
}

TEST(Distributions, RandpermTooLargeToHoldIsAnEmberError) {
  // (A std::vector of n threw std::length_error, or std::bad_alloc.)
  EXPECT_THROW(randperm(std::numeric_limits<int64_t>::max()), Error);
  EXPECT_EQ(randperm(0).numel(), 0);
}

TEST(Distributions, BernoulliHitsWithProbabilityP) {
  Generator g(9);
  const Tensor b = bernoulli({100000}, 0.3, DType::f32, &g);
  EXPECT_NEAR(mean(b).item<double>(), 0.3, 0.01);
  const std::vector<float> values = to_vector<float>(b);
  EXPECT_TRUE(std::all_of(values.begin(), values.end(), [](float x) { return x == 0 || x == 1; }));
}

TEST(Distributions, RandpermIsAPermutation) {
  Generator g(10);
  std::vector<int64_t> p = to_vector<int64_t>(randperm(1000, &g));
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i)
    ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_NE(p, sorted);
}

TEST(Distributions, SixteenBitDrawsAreRoundedF32Draws) {
  Generator a(11), b(11);
  const Tensor full_precision = rand({257}, DType::f32, &a);
  const Tensor half = rand({257}, DType::bf16, &b);
  EXPECT_TRUE(allclose(half.to(DType::f32), full_precision, 1e-2, 1e-2));
}

}  // namespace
}  // namespace ember
