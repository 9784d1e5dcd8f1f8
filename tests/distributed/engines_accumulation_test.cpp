// Gradient accumulation on the DDP engine, under mpirun (skips in a world of one): the runner's
// OptimizerCallback and the Accelerator's accumulate() both give the update of one big batch, and
// both keep the reducer quiet (no_sync) on the inner batches of an accumulation: one reduction
// per optimizer step, not one per batch. (Reducing every batch gives the same average, so only
// the count shows whether no_sync works.) The runner's, again on the DASO engine.
#include <gtest/gtest.h>

#include "distributed/world.h"
#include "engines/accelerator.h"
#include "engines/callbacks.h"
#include "engines/distributed_engines.h"
#include "engines/runner.h"
#include "optim/schedulers.h"
#include "optim/sgd.h"
#include "tests/engines/fixtures.h"

namespace ember::engines {
namespace {

constexpr int64_t kSamplesPerRank = 16;

struct Trained {
  std::vector<Tensor> weights;
  int64_t reductions = -1;  // the reducer's completed iterations (DASO: its node reducer's)
};

using DdpEngine = DistributedDataParallelEngine<DeviceEngine>;

Trained collect(const nn::Module& model, IEngine& engine) {
  Trained trained;
  for (const Tensor& p : model.parameters())
    trained.weights.push_back(p.detach().clone());
  const dist::Reducer* reducer = nullptr;
  if (auto* ddp = dynamic_cast<DdpEngine*>(&engine)) reducer = ddp->reducer_of(model);
  if (auto* daso = dynamic_cast<DasoEngine*>(&engine); daso && daso->daso())
    reducer = daso->daso()->node_reducer();
  if (reducer != nullptr) trained.reductions = reducer->iterations();
  return trained;
}

// Reads the reducer's count at the end of the epoch, before the runner's deinit_components
// releases the reducer.
class CountReductions : public ICallback {
 public:
  CountReductions() : ICallback(CallbackOrder::external) {}
  void on_epoch_end(IRunner& runner) override { trained = collect(*runner.model, *runner.engine); }
  Trained trained;
};

// One epoch of the runner over this rank's `samples_per_rank` samples in batches of `batch_size`,
// stepping every `accumulation` batches.
Trained runner_epoch(EnginePtr engine, int64_t batch_size, int64_t accumulation,
                     int64_t samples_per_rank = kSamplesPerRank) {
  auto world = dist::world();
  manual_seed(3);
  auto model = testing::mlp(/*dropout=*/false);
  auto counter = std::make_shared<CountReductions>();
  SupervisedRunner runner;
  runner.train(
      {.model = model,
       .criterion = [](const Tensor& logits,
                       const Tensor& targets) { return cross_entropy(logits, targets); },
       .loaders = {{"train", testing::loader(samples_per_rank * world->size(), batch_size, false)}},
       .engine_instance = std::move(engine),
       .callbacks = {{"optimizer", std::make_shared<OptimizerCallback>(
                                       OptimizerOptions{.accumulation_steps = accumulation})},
                     {"count", counter}},
       .optimizer_fn =
           [](nn::Module& m) {
             return std::make_shared<optim::SGD>(m.named_parameters(),
                                                 optim::SGDOptions{.lr = 0.5});
           }});
  return counter->trained;
}

Trained ddp_runner_epoch(int64_t batch_size, int64_t accumulation,
                         int64_t samples_per_rank = kSamplesPerRank) {
  return runner_epoch(std::make_shared<DdpEngine>(dist::world()), batch_size, accumulation,
                      samples_per_rank);
}

// DASO counts optimizer steps, not batches, to find an epoch's last batch (its blocking average).
Trained daso_runner_epoch(int64_t batch_size, int64_t accumulation,
                          int64_t samples_per_rank = kSamplesPerRank) {
  return runner_epoch(std::make_shared<DasoEngine>(Device::cpu(), /*total_epochs=*/1), batch_size,
                      accumulation, samples_per_rank);
}

// The same epoch through the Accelerator's loop.
Trained accelerator_epoch(int64_t batch_size, int64_t accumulation) {
  auto world = dist::world();
  auto engine = std::make_shared<DdpEngine>(world);
  Accelerator accelerator({.gradient_accumulation_steps = accumulation, .engine_instance = engine});
  manual_seed(3);
  auto net = testing::mlp(/*dropout=*/false);
  auto sgd = std::make_shared<optim::SGD>(net->named_parameters(), optim::SGDOptions{.lr = 0.5});
  auto [model, optimizer, loader, none] = accelerator.prepare(
      net, sgd, testing::loader(kSamplesPerRank * world->size(), batch_size, false));
  for (const data::Batch& batch : *loader) {
    Scope accumulate = accelerator.accumulate(*model);
    accelerator.backward(cross_entropy((*model)(batch.inputs), batch.targets));
    optimizer->step();
    optimizer->zero_grad();
  }
  return collect(*net, *engine);
}

void expect_the_big_batchs_update(const Trained& big, const Trained& accumulated) {
  ASSERT_EQ(big.weights.size(), accumulated.weights.size());
  for (size_t i = 0; i < big.weights.size(); ++i) {
    EXPECT_TRUE(allclose(big.weights[i], accumulated.weights[i], 1e-5, 1e-6))
        << "parameter " << i << ": the accumulated update differs from the big batch's";
  }
}

TEST(DistributedEngines, RunnerAccumulationOnDdpIsOneBigBatchWithOneReductionPerStep) {
  if (dist::world()->size() < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";
  const Trained big = ddp_runner_epoch(kSamplesPerRank, 1);
  const Trained accumulated = ddp_runner_epoch(4, 4);
  expect_the_big_batchs_update(big, accumulated);
  EXPECT_EQ(big.reductions, 1);
  EXPECT_EQ(accumulated.reductions, 1) << "the 3 inner batches of the accumulation were reduced";
  EXPECT_EQ(ddp_runner_epoch(4, 2).reductions, 2);
}

// 32 samples per rank in batches of 4, stepping every 3: steps after batches 3, 6 and 8, the last
// one short. It is the update of batches of 12, 12 and 8: the short step is the mean of its two
// batches, its last batch is reduced (not left local under no_sync), and DASO is told of 3 steps,
// so its epoch ends on the short one.
TEST(DistributedEngines, RunnerAccumulationWithAShortLastStepIsTheBigBatchesUpdate) {
  if (dist::world()->size() < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";
  constexpr int64_t kSamples = 32;
  const Trained big = ddp_runner_epoch(12, 1, kSamples);  // batches of 12, 12 and 8
  const Trained accumulated = ddp_runner_epoch(4, 3, kSamples);
  expect_the_big_batchs_update(big, accumulated);
  EXPECT_EQ(accumulated.reductions, 3);
  expect_the_big_batchs_update(daso_runner_epoch(12, 1, kSamples),
                               daso_runner_epoch(4, 3, kSamples));
}

TEST(DistributedEngines, AcceleratorAccumulationOnDdpIsOneBigBatchWithOneReductionPerStep) {
  if (dist::world()->size() < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";
  const Trained big = accelerator_epoch(kSamplesPerRank, 1);
  const Trained accumulated = accelerator_epoch(4, 4);
  expect_the_big_batchs_update(big, accumulated);
  EXPECT_EQ(big.reductions, 1);
  EXPECT_EQ(accumulated.reductions, 1) << "the 3 inner batches of the accumulation were reduced";
}

// Accelerate's AcceleratedScheduler with split_batches off: each process's loader holds 1/N of
// the data, so every optimizer step steps the schedule N times, and OneCycleLR stops at its
// total_steps instead of failing.
TEST(DistributedEngines, AcceleratorStepsTheScheduleOncePerProcessAsAccelerateDoes) {
  if (dist::world()->size() < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";
  const int64_t world = dist::world()->size();
  for (const bool one_cycle : {false, true}) {
    SCOPED_TRACE(one_cycle ? "OneCycleLR, 5 steps in all" : "StepLR");
    Accelerator accelerator({.engine_instance = std::make_shared<DdpEngine>(dist::world())});
    manual_seed(3);
    auto net = testing::mlp(/*dropout=*/false);
    auto sgd = std::make_shared<optim::SGD>(net->named_parameters(), optim::SGDOptions{.lr = 0.5});
    std::shared_ptr<optim::LRScheduler> schedule;
    if (one_cycle) {
      schedule = std::make_shared<optim::OneCycleLR>(*sgd, 1.0, /*total_steps=*/5);
    } else {
      schedule = std::make_shared<optim::StepLR>(*sgd, 1, 0.9);
    }
    // 16 samples per rank in batches of 4: 4 optimizer steps.
    auto [model, optimizer, loader, scheduler] =
        accelerator.prepare(net, sgd, testing::loader(kSamplesPerRank * world, 4, false), schedule);
    for (const data::Batch& batch : *loader) {
      accelerator.backward(cross_entropy((*model)(batch.inputs), batch.targets));
      optimizer->step();
      scheduler->step();
      optimizer->zero_grad();
    }
    EXPECT_EQ(schedule->last_epoch(), one_cycle ? 5 : 4 * world);
  }
}

TEST(DistributedEngines, RunnerAccumulationOnDasoIsOneBigBatchWithOneNodeReductionPerStep) {
  if (dist::world()->size() < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";
  const Trained big = daso_runner_epoch(kSamplesPerRank, 1);
  const Trained accumulated = daso_runner_epoch(4, 4);
  expect_the_big_batchs_update(big, accumulated);
  if (dist::node_group()->size() > 1) {
    EXPECT_EQ(big.reductions, 1);
    EXPECT_EQ(accumulated.reductions, 1)
        << "the 3 inner batches of the accumulation were reduced in the node";
  }
}

}  // namespace
}  // namespace ember::engines
