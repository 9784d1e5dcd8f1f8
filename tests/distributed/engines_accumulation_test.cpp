// Gradient accumulation on the DDP engine, under mpirun (skips in a world of one): the runner's
// OptimizerCallback and the Accelerator's accumulate() both give the update of one big batch, and
// both keep the reducer quiet (no_sync) on the inner batches of an accumulation: one reduction
// per optimizer step, not one per batch. (Reducing every batch gives the same average, so only
// the count shows whether no_sync works.)
#include <gtest/gtest.h>

#include "distributed/world.h"
#include "engines/accelerator.h"
#include "engines/callbacks.h"
#include "engines/distributed_engines.h"
#include "engines/runner.h"
#include "optim/sgd.h"
#include "tests/engines/fixtures.h"

namespace ember::engines {
namespace {

constexpr int64_t kSamplesPerRank = 16;

struct Trained {
  std::vector<Tensor> weights;
  int64_t reductions = 0;  // the reducer's completed iterations
};

using DdpEngine = DistributedDataParallelEngine<DeviceEngine>;

Trained collect(const nn::Module& model, const DdpEngine& engine) {
  Trained trained;
  for (const Tensor& p : model.parameters())
    trained.weights.push_back(p.detach().clone());
  const dist::Reducer* reducer = engine.reducer_of(model);
  EXPECT_NE(reducer, nullptr) << "the engine attached no reducer to the model";
  if (reducer != nullptr) trained.reductions = reducer->iterations();
  return trained;
}

// Reads the reducer's count at the end of the epoch, before the runner's deinit_components
// releases the reducer.
class CountReductions : public ICallback {
 public:
  CountReductions() : ICallback(CallbackOrder::external) {}
  void on_epoch_end(IRunner& runner) override {
    trained = collect(*runner.model, dynamic_cast<const DdpEngine&>(*runner.engine));
  }
  Trained trained;
};

// One epoch of the runner over this rank's 16 samples in batches of `batch_size`, stepping every
// `accumulation` batches.
Trained runner_epoch(int64_t batch_size, int64_t accumulation) {
  auto world = dist::world();
  auto engine = std::make_shared<DdpEngine>(world);
  manual_seed(3);
  auto model = testing::mlp(/*dropout=*/false);
  auto counter = std::make_shared<CountReductions>();
  SupervisedRunner runner;
  runner.train(
      {.model = model,
       .criterion = [](const Tensor& logits,
                       const Tensor& targets) { return cross_entropy(logits, targets); },
       .loaders = {{"train", testing::loader(kSamplesPerRank * world->size(), batch_size, false)}},
       .engine_instance = engine,
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
  const Trained big = runner_epoch(kSamplesPerRank, 1);
  const Trained accumulated = runner_epoch(4, 4);
  expect_the_big_batchs_update(big, accumulated);
  EXPECT_EQ(big.reductions, 1);
  EXPECT_EQ(accumulated.reductions, 1) << "the 3 inner batches of the accumulation were reduced";
  EXPECT_EQ(runner_epoch(4, 2).reductions, 2);
}

TEST(DistributedEngines, AcceleratorAccumulationOnDdpIsOneBigBatchWithOneReductionPerStep) {
  if (dist::world()->size() < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";
  const Trained big = accelerator_epoch(kSamplesPerRank, 1);
  const Trained accumulated = accelerator_epoch(4, 4);
  expect_the_big_batchs_update(big, accumulated);
  EXPECT_EQ(big.reductions, 1);
  EXPECT_EQ(accumulated.reductions, 1) << "the 3 inner batches of the accumulation were reduced";
}

// The same through the DASO engine. DASO counts optimizer steps, not batches, to find an epoch's
// last batch (its blocking average); the node's reducer stays quiet on the inner batches.
struct DasoTrained {
  std::vector<Tensor> weights;
  int64_t node_reductions = -1;  // the node reducer's iterations; -1 when it has none
};

class CountDasoReductions : public ICallback {
 public:
  CountDasoReductions() : ICallback(CallbackOrder::external) {}
  void on_epoch_end(IRunner& runner) override {
    for (const Tensor& p : runner.model->parameters())
      trained.weights.push_back(p.detach().clone());
    dist::Daso* daso = dynamic_cast<DasoEngine&>(*runner.engine).daso();
    if (daso != nullptr && daso->node_reducer() != nullptr)
      trained.node_reductions = daso->node_reducer()->iterations();
  }
  DasoTrained trained;
};

DasoTrained daso_runner_epoch(int64_t batch_size, int64_t accumulation) {
  auto world = dist::world();
  auto engine = std::make_shared<DasoEngine>(Device::cpu(), /*total_epochs=*/1);
  manual_seed(3);
  auto counter = std::make_shared<CountDasoReductions>();
  SupervisedRunner runner;
  runner.train(
      {.model = testing::mlp(/*dropout=*/false),
       .criterion = [](const Tensor& logits,
                       const Tensor& targets) { return cross_entropy(logits, targets); },
       .loaders = {{"train", testing::loader(kSamplesPerRank * world->size(), batch_size, false)}},
       .engine_instance = engine,
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

TEST(DistributedEngines, RunnerAccumulationOnDasoIsOneBigBatchWithOneNodeReductionPerStep) {
  if (dist::world()->size() < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";
  const DasoTrained big = daso_runner_epoch(kSamplesPerRank, 1);
  const DasoTrained accumulated = daso_runner_epoch(4, 4);
  ASSERT_EQ(big.weights.size(), accumulated.weights.size());
  for (size_t i = 0; i < big.weights.size(); ++i) {
    EXPECT_TRUE(allclose(big.weights[i], accumulated.weights[i], 1e-5, 1e-6))
        << "parameter " << i << ": the accumulated update differs from the big batch's";
  }
  if (dist::node_group()->size() > 1) {
    EXPECT_EQ(big.node_reductions, 1);
    EXPECT_EQ(accumulated.node_reductions, 1)
        << "the 3 inner batches of the accumulation were reduced in the node";
  }
}

}  // namespace
}  // namespace ember::engines
