// How a data-parallel engine plugs in: an engine whose process_group() is a group of two mirror
// ranks (a fake in this process: the other rank always holds the same values). The runner, the
// engine's sync_tensor and the Accelerator must reduce through it, log and checkpoint on rank 0
// only, and seed each rank with seed + rank, without any change to their code.
#include <gtest/gtest.h>

#include <algorithm>

#include "engines/accelerator.h"
#include "engines/device_engines.h"
#include "engines/distributed_engines.h"
#include "tests/common/expect_error.h"
#include "tests/engines/fixtures.h"

namespace ember::engines {
namespace {

using testing::fresh_dir;

class DoneWork : public dist::Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

// Two ranks whose peer mirrors this one: sum doubles, avg keeps, allgather repeats.
class MirrorGroup : public dist::ProcessGroup {
 public:
  explicit MirrorGroup(int rank) : ProcessGroup(rank, 2, "mirror") {}
  const char* backend() const override { return "mirror"; }
  dist::WorkPtr allreduce(const Tensor& tensor, dist::ReduceOp op) override {
    ++collectives;
    if (op == dist::ReduceOp::sum) {
      Tensor t = tensor;
      t.mul_(2);
    }
    return std::make_shared<DoneWork>();
  }
  dist::WorkPtr broadcast(const Tensor&, int) override { return std::make_shared<DoneWork>(); }
  dist::WorkPtr allgather(const Tensor& output, const Tensor& input) override {
    ++collectives;
    const int64_t n = input.numel();
    Tensor out = output;
    out.narrow(0, 0, n).copy_(input);
    out.narrow(0, n, n).copy_(input);
    return std::make_shared<DoneWork>();
  }
  dist::WorkPtr reduce_scatter(const Tensor&, const Tensor&, dist::ReduceOp) override {
    EMBER_FAIL("mirror: reduce_scatter is not used by the engines");
  }
  dist::WorkPtr barrier() override {
    ++barriers;
    return std::make_shared<DoneWork>();
  }
  dist::WorkPtr send(const Tensor&, int, int) override { EMBER_FAIL("mirror: no send"); }
  dist::WorkPtr recv(const Tensor&, int, int) override { EMBER_FAIL("mirror: no recv"); }
  std::shared_ptr<ProcessGroup> split(int, int) override { return nullptr; }
  int collectives = 0;
  int barriers = 0;
};

// What a DDP engine derives from DeviceEngine: the group, is_ddp, and (for the data) its shard.
class MirrorEngine : public DeviceEngine {
 public:
  explicit MirrorEngine(int rank) : group(std::make_shared<MirrorGroup>(rank)) {}
  std::string name() const override { return "mirror"; }
  dist::ProcessGroupPtr process_group() const override { return group; }
  bool is_ddp() const override { return true; }
  std::shared_ptr<MirrorGroup> group;
};

TEST(ProcessGroupSeam, SyncTensorReducesThroughTheGroup) {
  MirrorEngine engine(1);
  EXPECT_EQ(engine.rank(), 1);
  EXPECT_EQ(engine.world_size(), 2);
  EXPECT_TRUE(engine.is_worker_process());
  const Tensor x = from_vector(std::vector<float>{1, 2, 3}, {3});
  EXPECT_TRUE(testing::identical(engine.sync_tensor(x, SyncMode::sum),
                                 from_vector(std::vector<float>{2, 4, 6}, {3})));
  EXPECT_TRUE(testing::identical(engine.sync_tensor(x, SyncMode::mean), x));
  const Tensor gathered = engine.sync_tensor(x.view({3, 1}), SyncMode::all_gather);
  EXPECT_EQ(gathered.sizes(), (Shape{6, 1}));
  EXPECT_TRUE(testing::identical(x, from_vector(std::vector<float>{1, 2, 3}, {3})));  // untouched
  EXPECT_ERROR_WITH(
      engine.sync_tensor(from_vector(std::vector<int64_t>{1}, {1}, DType::i64), SyncMode::mean),
      "mean needs a floating tensor");
  engine.barrier();
  EXPECT_EQ(engine.group->barriers, 1);
}

class SeedProbe : public ICallback {
 public:
  SeedProbe() : ICallback(CallbackOrder::internal) {}
  void on_stage_start(IRunner&) override { seed = default_generator().state().seed; }
  uint64_t seed = 0;
};

TEST(ProcessGroupSeam, RunnerReducesMetricsAndOnlyRankZeroWrites) {
  for (int rank : {0, 1}) {
    SCOPED_TRACE(rank);
    const std::string logdir = fresh_dir("seam" + std::to_string(rank));
    auto engine = std::make_shared<MirrorEngine>(rank);
    auto probe = std::make_shared<SeedProbe>();
    manual_seed(1);
    SupervisedRunner runner;
    runner.train({.model = testing::mlp(),
                  .criterion = [](const Tensor& l, const Tensor& t) { return cross_entropy(l, t); },
                  .loaders = {{"train", testing::loader(16, 8, true)},
                              {"valid", testing::loader(8, 8, false)}},
                  .logdir = logdir + "/run",
                  .num_epochs = 1,
                  .engine_instance = engine,
                  .callbacks = {{"probe", probe}},
                  .seed = 100,
                  .optimizer_fn =
                      [](nn::Module& m) {
                        return std::make_shared<optim::SGD>(m.named_parameters(),
                                                            optim::SGDOptions{.lr = 0.1});
                      }});
    EXPECT_EQ(probe->seed, 100u + static_cast<uint64_t>(rank));
    // One reduction per loader: the metrics' sums and sample counts together.
    EXPECT_EQ(engine->group->collectives, 2);
    // The mirror doubles sums and counts alike: averages are the local ones; the throughput
    // counts both ranks' samples.
    const Metrics train = runner.epoch_metrics[0].second;
    EXPECT_NEAR(train.at("throughput") * train.at("seconds"), 32.0, 1e-6);
    EXPECT_EQ(std::filesystem::exists(logdir + "/run/last.ckpt"), rank == 0);
    EXPECT_EQ(std::filesystem::exists(logdir + "/run/metrics.csv"), rank == 0);
    std::filesystem::remove_all(logdir);
  }
}

// Rank 0 of a sharded dataset of 9 samples: DistributedSampler gives each rank 5 indices (one
// repeated), so the gathered last batch holds one padding sample.
class ShardingMirrorEngine : public MirrorEngine {
 public:
  ShardingMirrorEngine() : MirrorEngine(0) {}
  std::shared_ptr<data::DataLoader> shard_loader(
      std::shared_ptr<data::DataLoader> loader) const override {
    class Shard : public data::Sampler {
     public:
      std::vector<int64_t> epoch_indices() override { return {0, 2, 4, 6, 8}; }
      int64_t size() const override { return 5; }
    };
    auto dataset = std::shared_ptr<const data::Dataset>(loader, &loader->dataset());
    return std::make_shared<data::DataLoader>(
        dataset, data::DataLoaderOptions{.batch_size = loader->batch_size()},
        std::make_shared<Shard>());
  }
};

TEST(ProcessGroupSeam, GatherForMetricsDropsTheLastBatchsPadding) {
  Accelerator accelerator({.engine_instance = std::make_shared<ShardingMirrorEngine>()});
  EXPECT_EQ(accelerator.num_processes(), 2);
  auto loader = accelerator.prepare(testing::loader(9, 4, false));
  EXPECT_EQ(loader->num_batches(), 2);  // 4 + 1 of this rank's 5
  std::vector<int64_t> rows, target_rows;
  for (const data::Batch& batch : *loader) {
    // Two calls per batch (predictions, then targets) are both cut to the batch's real samples.
    rows.push_back(accelerator.gather_for_metrics(batch.inputs).size(0));
    target_rows.push_back(accelerator.gather_for_metrics(batch.targets).size(0));
  }
  EXPECT_EQ(rows, (std::vector<int64_t>{8, 1}));  // 8 + 2 gathered, one of them padding
  EXPECT_EQ(target_rows, rows);
}

TEST(ProcessGroupSeam, GatherForMetricsPutsRowsInTheSamplersOrder) {
  // Rank-major (rank 0's rows, then rank 1's) becomes the sampler's turn order (row j of rank r
  // is sample j * 2 + r): the mirror group's rank 1 holds the same rows as rank 0.
  Accelerator accelerator({.engine_instance = std::make_shared<MirrorEngine>(0)});
  const Tensor local = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2});
  const Tensor gathered = accelerator.gather_for_metrics(local);
  EXPECT_TRUE(testing::identical(
      gathered, from_vector(std::vector<float>{1, 2, 1, 2, 3, 4, 3, 4, 5, 6, 5, 6}, {6, 2})));
}

// shard_over_ranks: the ranks' shards partition one shuffled permutation (the sampler's seed is
// shared), while each rank draws its own augmentations (the transforms' seed is seed + rank).
// Every image is the same ramp, so a batch's pixels differ between ranks only by augmentation.
TEST(ProcessGroupSeam, ShardsPartitionOnePermutationWithAugmentationsPerRank) {
  const int64_t n = 16;
  const Tensor ramp = arange(0, 36, 1, DType::f32).reshape({1, 1, 6, 6});
  const Tensor images = ramp.expand({n, 1, 6, 6}).contiguous();
  auto dataset = std::make_shared<data::TensorDataset>(images, arange(0, n, 1, DType::i64));
  auto loader = std::make_shared<data::DataLoader>(
      dataset, data::DataLoaderOptions{
                   .batch_size = n / 2,
                   .shuffle = true,
                   .seed = 5,
                   .prefetch_batches = 0,
                   .transforms = {data::random_crop(6, 2), data::random_horizontal_flip()}});
  std::vector<int64_t> labels;
  std::vector<Tensor> pixels;
  for (int rank : {0, 1}) {
    MirrorGroup group(rank);
    auto shard = shard_over_ranks(loader, group);
    shard->set_epoch(3);
    for (const data::Batch& batch : *shard) {
      for (int64_t label : to_vector<int64_t>(batch.targets))
        labels.push_back(label);
      pixels.push_back(batch.inputs);
    }
  }
  std::sort(labels.begin(), labels.end());
  EXPECT_EQ(labels, to_vector<int64_t>(arange(0, n, 1, DType::i64)))
      << "the two shards are not one permutation of the dataset";
  ASSERT_EQ(pixels.size(), 2u);
  EXPECT_FALSE(allclose(pixels[0], pixels[1], 0, 0))
      << "both ranks drew the same crops and flips for their batch";
}

}  // namespace
}  // namespace ember::engines
