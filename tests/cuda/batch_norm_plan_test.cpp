// The parts of the CUDA batch norm that are plain C++, checked without a GPU:
// - kernels/common/welford.h, the mergeable mean and variance its statistics are built from;
// - kernels/cuda/batch_norm_plan.h, how the kernels share out a tensor: every value is visited
//   exactly once, by a thread working on its own channel, for shapes from batch_norm1d to
//   resnet9's activations, dense and vectorised;
// - the statistics as the kernels compute them (per thread, per block, per split, in that order),
//   replayed on the host against the CPU batch norm.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/common/welford.h"
#include "kernels/cpu/normalization.h"
#include "kernels/cuda/batch_norm_plan.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "runtime/tensor.h"

namespace ember::testing {
namespace {

using kernels::cuda::BatchNormPlan;
using kernels::cuda::kBatchNormThreads;
using kernels::cuda::plan_batch_norm;

std::vector<float> values_around(double mean, int64_t n, uint64_t seed) {
  Generator generator(seed);
  const Tensor t = randn({n}, DType::f32, &generator) + mean;  // a spread of 1
  const float* data = static_cast<const float*>(t.data_ptr());
  return std::vector<float>(data, data + n);
}

struct Exact {
  double mean, variance;  // biased
};
Exact exact_statistics(const std::vector<float>& v) {
  double total = 0;
  for (float x : v)
    total += x;
  const double mean = total / static_cast<double>(v.size());
  double squares = 0;
  for (float x : v)
    squares += (x - mean) * (x - mean);
  return {mean, squares / static_cast<double>(v.size())};
}

TEST(Welford, MergesInAnyOrderMatchTheTwoPassStatistics) {
  // A large mean and a spread of 1: sum(x^2) - sum(x)^2 / n would lose the variance in f32.
  const std::vector<float> v = values_around(1000.0, 4096, 1);
  const Exact exact = exact_statistics(v);

  // Runs of 8 (one bf16 vector), folded one after another as a thread does.
  WelfordStats<float> sequential;
  for (size_t i = 0; i < v.size(); i += 8) {
    float run[8];
    std::copy(v.begin() + static_cast<std::ptrdiff_t>(i),
              v.begin() + static_cast<std::ptrdiff_t>(i + 8), run);
    sequential = merge(sequential, of_values(run));
  }
  // Single values merged as a balanced tree, as warps and blocks do.
  std::vector<WelfordStats<float>> level;
  for (float x : v) {
    const float one[1] = {x};
    level.push_back(of_values(one));
  }
  while (level.size() > 1) {
    std::vector<WelfordStats<float>> next;
    for (size_t i = 0; i + 1 < level.size(); i += 2)
      next.push_back(merge(level[i], level[i + 1]));
    if (level.size() % 2 == 1) next.push_back(level.back());
    level = next;
  }
  for (const auto& [what, s] :
       {std::pair{"sequential runs", sequential}, std::pair{"tree of single values", level[0]}}) {
    EXPECT_EQ(s.count, 4096.0f) << what;
    EXPECT_NEAR(s.mean, exact.mean, 1e-5 * exact.mean) << what;
    EXPECT_NEAR(s.m2 / s.count, exact.variance, 1e-4 * exact.variance) << what;
  }
}

TEST(Welford, MergingWithNothingChangesNothing) {
  const float run[4] = {1.0f, 2.0f, 4.0f, 8.0f};
  const WelfordStats<float> s = of_values(run);
  const WelfordStats<float> empty;
  for (const WelfordStats<float>& merged : {merge(s, empty), merge(empty, s)}) {
    EXPECT_EQ(merged.count, s.count);
    EXPECT_EQ(merged.mean, s.mean);
    EXPECT_EQ(merged.m2, s.m2);
  }
  const WelfordStats<float> none = merge(empty, empty);
  EXPECT_EQ(none.count, 0.0f);
  EXPECT_EQ(none.mean, 0.0f);
  EXPECT_EQ(none.m2, 0.0f);
}

struct Geometry {
  int64_t batch, channels, spatial;
};

// batch_norm1d (spatial 1), planes narrower and wider than a block, odd sizes, a batch of one,
// an empty batch, more channels than a grid dimension holds, and resnet9's first layer's planes.
const std::vector<Geometry> kGeometries = {
    {33, 5, 1},  {8, 16, 63},    {8, 4, 1024}, {1, 3, 35},      {600, 4, 1},
    {16, 4, 49}, {0, 3, 16},     {7, 3, 0},    {3, 65537, 1},   {64, 3, 256},
    {37, 3, 99}, {64, 64, 4096}, {512, 2, 64}, {5, 7, 8 * 300},
};

std::string describe(const Geometry& g, int width, int sms) {
  std::ostringstream out;
  out << "(" << g.batch << ", " << g.channels << ", " << g.spatial << "), vectors of " << width
      << ", " << sms << " SMs";
  return out.str();
}

// The vector widths a plan can be made with for g: 1 always, w where w divides the planes.
std::vector<int> widths_for(const Geometry& g) {
  std::vector<int> widths = {1};
  for (int w : {2, 4, 8})
    if (g.spatial % w == 0) widths.push_back(w);
  return widths;
}

TEST(BatchNormPlan, BlocksAreFullAndTheGridIsWithinCudasLimits) {
  for (const Geometry& g : kGeometries) {
    for (int width : widths_for(g)) {
      for (int sms : {1, 132}) {
        const BatchNormPlan p = plan_batch_norm(g.batch, g.channels, g.spatial, width, sms);
        const std::string what = describe(g, width, sms);
        EXPECT_EQ(p.threads_x * p.threads_y, kBatchNormThreads) << what;
        EXPECT_EQ(p.threads_x & (p.threads_x - 1), 0) << what << ": threads_x " << p.threads_x;
        EXPECT_GE(p.splits, 1) << what;
        EXPECT_LE(p.splits, kernels::cuda::kBatchNormMaxGrid) << what;
        EXPECT_GE(p.channel_blocks, 1) << what;
        EXPECT_LE(p.channel_blocks, kernels::cuda::kBatchNormMaxGrid) << what;
        EXPECT_GE(p.plane_blocks, 1) << what;
        EXPECT_LE(p.plane_blocks, kernels::cuda::kBatchNormMaxGrid) << what;
      }
    }
  }
}

TEST(BatchNormPlan, Resnet9sFirstLayerFillsAnH100) {
  // (512, 64, 64 x 64) in bf16: 64 channels alone would use 64 of 132 multiprocessors.
  const BatchNormPlan p = plan_batch_norm(512, 64, 64 * 64, 8, 132);
  EXPECT_EQ(p.threads_x, 256);
  EXPECT_EQ(p.channel_blocks * p.splits, 132 * kernels::cuda::kBatchNormBlocksPerSm - 32);
}

// The reductions' grid is one wave: as many blocks as the multiprocessors hold at once
// (blocks_per_sm, the kernel's occupancy) or fewer, but not fewer by a whole split, unless the
// planes run out. (Rounded up, resnet9's first layer took 1088 blocks where 528 fit: 2.06 waves.)
TEST(BatchNormPlan, TheReductionGridIsOneFullWave) {
  for (const Geometry& g : kGeometries) {
    for (int width : widths_for(g)) {
      for (int sms : {1, 132}) {
        for (int blocks_per_sm : {1, 4, 6, 8}) {
          const BatchNormPlan p =
              plan_batch_norm(g.batch, g.channels, g.spatial, width, sms, blocks_per_sm);
          const std::string what =
              describe(g, width, sms) + ", " + std::to_string(blocks_per_sm) + " blocks a SM";
          const int64_t resident = int64_t{sms} * blocks_per_sm;
          const int64_t blocks = p.channel_blocks * p.splits;
          const int64_t plane_groups = (g.batch + p.threads_y - 1) / p.threads_y;
          if (p.splits > 1) {
            EXPECT_LE(blocks, resident) << what;
          }
          if (p.splits < plane_groups && p.splits < kernels::cuda::kBatchNormMaxSplits) {
            EXPECT_GT(blocks + p.channel_blocks, resident) << what << ": room for another split";
          }
        }
      }
    }
  }
  const BatchNormPlan first = plan_batch_norm(512, 64, 64 * 64, 8, 132, 4);
  EXPECT_EQ(first.splits, 8);  // 512 blocks of the 528 that fit
}

// Every value of x visited once: by the reductions, for its own channel; by the elementwise
// passes, with its own channel.
TEST(BatchNormPlan, EveryValueIsVisitedExactlyOnceForItsChannel) {
  for (const Geometry& g : kGeometries) {
    const int64_t numel = g.batch * g.channels * g.spatial;
    for (int width : widths_for(g)) {
      for (int sms : {1, 132}) {
        const BatchNormPlan p = plan_batch_norm(g.batch, g.channels, g.spatial, width, sms);
        const std::string what = describe(g, width, sms);
        auto channel_of = [&](int64_t offset) { return (offset / g.spatial) % g.channels; };
        std::vector<uint8_t> reduced(static_cast<size_t>(numel), 0);
        std::vector<uint8_t> mapped(static_cast<size_t>(numel), 0);
        int64_t wrong_channel = 0;
        for (int64_t b = 0; b < p.channel_blocks; ++b) {
          for (int64_t c = b; c < g.channels; c += p.channel_blocks) {
            for (int64_t split = 0; split < p.splits; ++split) {
              for (int ty = 0; ty < p.threads_y; ++ty) {
                for (int tx = 0; tx < p.threads_x; ++tx) {
                  for_each_channel_vector(p, c, split, tx, ty, [&](int64_t at) {
                    for (int i = 0; i < width; ++i) {
                      ++reduced[static_cast<size_t>(at + i)];
                      if (channel_of(at + i) != c) ++wrong_channel;
                    }
                  });
                }
              }
            }
          }
        }
        for (int64_t block = 0; block < p.plane_blocks; ++block) {
          for (int ty = 0; ty < p.threads_y; ++ty) {
            for (int tx = 0; tx < p.threads_x; ++tx) {
              for_each_plane_vector(p, block, p.plane_blocks, tx, ty, [&](int64_t c, int64_t at) {
                for (int i = 0; i < width; ++i) {
                  ++mapped[static_cast<size_t>(at + i)];
                  if (channel_of(at + i) != c) ++wrong_channel;
                }
              });
            }
          }
        }
        EXPECT_EQ(wrong_channel, 0) << what;
        int64_t not_once = 0;
        for (int64_t i = 0; i < numel; ++i)
          not_once +=
              (reduced[static_cast<size_t>(i)] != 1) + (mapped[static_cast<size_t>(i)] != 1);
        EXPECT_EQ(not_once, 0) << what;
      }
    }
  }
}

// The reductions' kernels walk their vectors a group at a time (several loads in flight): every
// thread must get the plain walk's offsets, in its order, in full groups but for the last.
template <int kGroup>
void expect_grouped_walk_is_the_plain_walk(const Geometry& g, int width, int sms) {
  const BatchNormPlan p = plan_batch_norm(g.batch, g.channels, g.spatial, width, sms);
  const std::string what = describe(g, width, sms) + ", groups of " + std::to_string(kGroup);
  int64_t threads_differing = 0, short_groups_not_last = 0, empty_groups = 0;
  // The first channel of every channel block and the last channel: every split, every thread.
  std::vector<int64_t> channels;
  for (int64_t b = 0; b < std::min<int64_t>(p.channel_blocks, 3); ++b)
    if (b < g.channels) channels.push_back(b);
  if (g.channels > 0) channels.push_back(g.channels - 1);
  for (int64_t c : channels) {
    for (int64_t split = 0; split < p.splits; ++split) {
      for (int ty = 0; ty < p.threads_y; ++ty) {
        for (int tx = 0; tx < p.threads_x; ++tx) {
          std::vector<int64_t> plain, grouped;
          for_each_channel_vector(p, c, split, tx, ty, [&](int64_t at) { plain.push_back(at); });
          bool short_seen = false;
          for_each_channel_vector_group<kGroup>(p, c, split, tx, ty,
                                                [&](const int64_t(&at)[kGroup], int count) {
                                                  if (count < 1) ++empty_groups;
                                                  if (short_seen) ++short_groups_not_last;
                                                  short_seen = count < kGroup;
                                                  for (int i = 0; i < count && i < kGroup; ++i)
                                                    grouped.push_back(at[i]);
                                                });
          threads_differing += plain != grouped;
        }
      }
    }
  }
  EXPECT_EQ(threads_differing, 0) << what;
  EXPECT_EQ(short_groups_not_last, 0) << what;
  EXPECT_EQ(empty_groups, 0) << what;
}

TEST(BatchNormPlan, GroupedWalksVisitThePlainWalksVectorsInItsOrder) {
  std::vector<Geometry> geometries = kGeometries;
  geometries.push_back({512, 64, 32 * 32});  // resnet9's first activations at batch 512
  geometries.push_back({512, 512, 4 * 4});   // and its last
  for (const Geometry& g : geometries) {
    for (int width : widths_for(g)) {
      for (int sms : {1, 132}) {
        expect_grouped_walk_is_the_plain_walk<1>(g, width, sms);
        expect_grouped_walk_is_the_plain_walk<2>(g, width, sms);
        expect_grouped_walk_is_the_plain_walk<3>(g, width, sms);
        expect_grouped_walk_is_the_plain_walk<4>(g, width, sms);
      }
    }
  }
}

// The statistics kernels' arithmetic on the host: per thread, Welford over its vectors; per
// block, the threads merged; per channel, the splits merged. (The GPU merges a block's threads
// as a shuffle tree rather than in order: another order of the same merges.)
TEST(BatchNormPlan, ReplayedStatisticsMatchTheCpuBatchNorm) {
  const int64_t batch = 24, channels = 3, spatial = 96;
  const std::vector<float> x = values_around(300.0, batch * channels * spatial, 7);
  std::vector<float> cpu_mean(channels), cpu_variance(channels);
  kernels::cpu::batch_norm_statistics<float>(x.data(), cpu_mean.data(), cpu_variance.data(), batch,
                                             channels, spatial);
  for (int width : {1, 4}) {
    const BatchNormPlan p = plan_batch_norm(batch, channels, spatial, width, 132);
    ASSERT_GT(p.splits, 1) << "the replay should cover several splits";
    for (int64_t c = 0; c < channels; ++c) {
      WelfordStats<float> channel;
      for (int64_t split = 0; split < p.splits; ++split) {
        WelfordStats<float> block;
        for (int ty = 0; ty < p.threads_y; ++ty) {
          for (int tx = 0; tx < p.threads_x; ++tx) {
            WelfordStats<float> thread;
            for_each_channel_vector(p, c, split, tx, ty, [&](int64_t at) {
              float run[4];
              for (int i = 0; i < width; ++i)
                run[i] = x[static_cast<size_t>(at + i)];
              if (width == 1) {
                const float one[1] = {run[0]};
                thread = merge(thread, of_values(one));
              } else {
                thread = merge(thread, of_values(run));
              }
            });
            block = merge(block, thread);
          }
        }
        channel = merge(channel, block);
      }
      const float variance = channel.m2 / static_cast<float>(batch * spatial);
      EXPECT_NEAR(channel.mean, cpu_mean[c], 1e-5 * 300.0)
          << "channel " << c << ", width " << width;
      EXPECT_NEAR(variance, cpu_variance[c], 1e-4 * cpu_variance[c])
          << "channel " << c << ", width " << width;
    }
  }
}

}  // namespace
}  // namespace ember::testing
