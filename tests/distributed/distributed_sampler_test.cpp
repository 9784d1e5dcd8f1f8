// DistributedSampler: PyTorch's per-rank shares, padding, drop_last and per-epoch shuffling
// (distributed/distributed_sampler.h). No communication: every rank's sampler is built here.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "distributed/distributed_sampler.h"
#include "tests/common/expect_error.h"

namespace ember::dist {
namespace {

// Every rank's indices for one epoch.
std::vector<std::vector<int64_t>> all_ranks(int64_t n, int replicas,
                                            const DistributedSamplerOptions& options,
                                            int64_t epoch = 0) {
  std::vector<std::vector<int64_t>> shares;
  for (int rank = 0; rank < replicas; ++rank) {
    DistributedSampler sampler(n, replicas, rank, options);
    sampler.set_epoch(epoch);
    shares.push_back(sampler.epoch_indices());
    EXPECT_EQ(static_cast<int64_t>(shares.back().size()), sampler.size());
  }
  return shares;
}

TEST(DistributedSampler, EvenlyDivisibleSharesAreDisjointAndCoverTheDataset) {
  for (bool shuffle : {false, true}) {
    const auto shares = all_ranks(12, 4, {.shuffle = shuffle, .seed = 7});
    std::multiset<int64_t> seen;
    for (const auto& share : shares) {
      EXPECT_EQ(share.size(), 3u);
      seen.insert(share.begin(), share.end());
    }
    EXPECT_EQ(seen.size(), 12u);
    for (int64_t i = 0; i < 12; ++i)
      EXPECT_EQ(seen.count(i), 1u) << "index " << i;
  }
}

TEST(DistributedSampler, RankTakesEveryNumReplicasThIndex) {
  // 0..9 padded with 0, 1 to 12 indices; rank r takes r, r + 4, r + 8.
  const auto shares = all_ranks(10, 4, {.shuffle = false});
  EXPECT_EQ(shares[0], (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(shares[1], (std::vector<int64_t>{1, 5, 9}));
  EXPECT_EQ(shares[2], (std::vector<int64_t>{2, 6, 0}));
  EXPECT_EQ(shares[3], (std::vector<int64_t>{3, 7, 1}));
}

TEST(DistributedSampler, ShuffledPaddingRepeatsTheFirstIndicesOfThePermutation) {
  const DistributedSamplerOptions options{.shuffle = true, .seed = 3};
  const auto shares = all_ranks(10, 3, options, /*epoch=*/2);  // 4 each, 12 in all: 2 repeats
  // Interleave the shares back into the padded permutation.
  std::vector<int64_t> padded;
  for (size_t i = 0; i < 4; ++i) {
    for (const auto& share : shares)
      padded.push_back(share[i]);
  }
  std::set<int64_t> first_ten(padded.begin(), padded.begin() + 10);
  EXPECT_EQ(first_ten.size(), 10u) << "the permutation itself has no repeats";
  EXPECT_EQ(padded[10], padded[0]);
  EXPECT_EQ(padded[11], padded[1]);
}

TEST(DistributedSampler, PaddingLongerThanTheDatasetCycles) {
  const auto shares = all_ranks(2, 5, {.shuffle = false});
  const std::vector<int64_t> expected{0, 1, 0, 1, 0};
  for (int rank = 0; rank < 5; ++rank) {
    EXPECT_EQ(shares[static_cast<size_t>(rank)],
              std::vector<int64_t>{expected[static_cast<size_t>(rank)]});
  }
  DistributedSampler empty(0, 3, 1, {});
  EXPECT_EQ(empty.size(), 0);
  EXPECT_TRUE(empty.epoch_indices().empty());
}

TEST(DistributedSampler, DropLastDropsTheTailInsteadOfPadding) {
  const auto plain = all_ranks(10, 4, {.shuffle = false, .drop_last = true});
  EXPECT_EQ(plain[0], (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(plain[3], (std::vector<int64_t>{3, 7}));
  const auto shuffled = all_ranks(10, 4, {.shuffle = true, .seed = 1, .drop_last = true});
  std::set<int64_t> seen;
  for (const auto& share : shuffled) {
    EXPECT_EQ(share.size(), 2u);
    seen.insert(share.begin(), share.end());
  }
  EXPECT_EQ(seen.size(), 8u) << "no index is seen twice";
  DistributedSampler too_few(3, 4, 0, {.drop_last = true});
  EXPECT_EQ(too_few.size(), 0);
  EXPECT_TRUE(too_few.epoch_indices().empty());
  EXPECT_EQ(DistributedSampler(10, 4, 0, {.drop_last = false}).total_size(), 12);
  EXPECT_EQ(DistributedSampler(10, 4, 0, {.drop_last = true}).total_size(), 8);
}

TEST(DistributedSampler, SameSeedAndEpochGiveTheSameOrderOtherEpochsAnother) {
  DistributedSampler a(100, 2, 1, {.seed = 11});
  DistributedSampler b(100, 2, 1, {.seed = 11});
  a.set_epoch(5);
  b.set_epoch(5);
  const std::vector<int64_t> epoch5 = a.epoch_indices();
  EXPECT_EQ(epoch5, b.epoch_indices());
  EXPECT_EQ(epoch5, a.epoch_indices()) << "asking twice repeats";
  a.set_epoch(6);
  const std::vector<int64_t> epoch6 = a.epoch_indices();
  EXPECT_NE(epoch5, epoch6);
  std::vector<int64_t> sorted5 = epoch5;
  std::vector<int64_t> sorted6 = epoch6;
  std::sort(sorted5.begin(), sorted5.end());
  std::sort(sorted6.begin(), sorted6.end());
  EXPECT_NE(sorted5, sorted6) << "a new epoch deals other samples to this rank, not only reorders";
  DistributedSampler other_seed(100, 2, 1, {.seed = 12});
  other_seed.set_epoch(5);
  EXPECT_NE(other_seed.epoch_indices(), epoch5);
  // Shuffled shares are not simply the sequential ones.
  EXPECT_NE(epoch5, all_ranks(100, 2, {.shuffle = false})[1]);
}

TEST(DistributedSampler, WithoutShuffleTheEpochChangesNothing) {
  DistributedSampler sampler(9, 2, 0, {.shuffle = false});
  const std::vector<int64_t> first = sampler.epoch_indices();
  sampler.set_epoch(3);
  EXPECT_EQ(sampler.epoch_indices(), first);
  EXPECT_EQ(first, (std::vector<int64_t>{0, 2, 4, 6, 8}));
}

TEST(DistributedSampler, BadArgumentsGiveClearErrors) {
  EXPECT_ERROR_WITH(DistributedSampler(10, 2, 2), "rank 2", "0 <= rank < num_replicas (2)");
  EXPECT_ERROR_WITH(DistributedSampler(10, 2, -1), "rank -1");
  EXPECT_ERROR_WITH(DistributedSampler(10, 0, 0), "num_replicas must be >= 1, got 0");
  EXPECT_ERROR_WITH(DistributedSampler(-5, 2, 0), "dataset_size must be >= 0, got -5");
}

}  // namespace
}  // namespace ember::dist
