// The DASO optimizer over real process groups (distributed/daso.h). Runs alone and under mpirun
// -np 2 and 4; the tests that need several nodes skip in a world of one. With 4 ranks the world
// poses as 2 nodes of 2 ranks (world->split, or EMBER_LOCAL_SIZE=2 for the default groups).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "distributed/daso.h"
#include "distributed/world.h"
#include "nn/layers.h"
#include "optim/sgd.h"
#include "runtime/ops.h"
#include "tests/common/expect_error.h"

namespace ember::dist {
namespace {

// Ranks per node for the split shape: 2 when the world has 4 or more ranks (an even count), else 1.
int split_local_size() {
  const int size = world()->size();
  return size >= 4 && size % 2 == 0 ? 2 : 1;
}

// Nodes of `local_size` consecutive ranks, whatever the launch looks like.
DasoGroups split_world(int local_size) {
  ProcessGroupPtr all = world();
  const int rank = all->rank();
  DasoGroups groups;
  groups.world = all;
  groups.node = all->split(rank / local_size, rank);
  groups.global = all->split(rank % local_size, rank);
  return groups;
}

// Every rank's tensors are bitwise equal to rank 0's.
void expect_identical_on_all_ranks(const std::vector<Tensor>& tensors, const std::string& when) {
  ProcessGroupPtr all = world();
  int64_t n = 0;
  for (const Tensor& t : tensors)
    n += t.numel();
  Tensor mine = empty({n});
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    mine.narrow(0, offset, t.numel()).view(t.sizes()).copy_(t.detach());
    offset += t.numel();
  }
  Tensor everyone = empty({n * all->size()});
  all->allgather(everyone, mine)->wait();
  const float* data = everyone.data<float>();
  for (int rank = 1; rank < all->size(); ++rank) {
    EXPECT_EQ(std::memcmp(data, data + rank * n, static_cast<size_t>(n) * sizeof(float)), 0)
        << "rank " << rank << " holds other parameters than rank 0 " << when;
  }
}

// Linear regression y = x w* + 0.5 on batches that differ by rank, epoch and batch.
struct ToyProblem {
  Tensor weight = zeros({7, 1}).requires_grad_();
  Tensor bias = zeros({1}).requires_grad_();
  Tensor true_weight = arange(7, DType::f32).div_(7.0).view({7, 1});

  double train_epoch(Daso& daso, int64_t epoch) {
    const int64_t batches = daso.last_batch() + 1;
    double total = 0.0;
    for (int64_t batch = 0; batch < batches; ++batch) {
      Generator generator(1000 * static_cast<uint64_t>(world()->rank()) +
                          100 * static_cast<uint64_t>(epoch) + static_cast<uint64_t>(batch));
      const Tensor x = randn({8, 7}, {}, &generator);
      const Tensor y = matmul(x, true_weight) + 0.5;
      daso.zero_grad();
      Tensor loss = mse_loss(matmul(x, weight) + bias, y);
      loss.backward();
      daso.step();
      total += loss.item<double>();
    }
    return total / static_cast<double>(batches);
  }
};

TEST(Daso, ScheduleTraceAndIdenticalParametersAfterEveryEpoch) {
  ToyProblem toy;
  optim::SGD sgd(std::vector<Tensor>{toy.weight, toy.bias}, {.lr = 0.05});
  Daso daso(sgd, /*total_epochs=*/20, {}, split_world(split_local_size()));
  daso.set_last_batch(5);
  for (int64_t epoch = 0; epoch < 20; ++epoch) {
    DasoSkips expected;
    if (epoch >= 4 && epoch <= 6) expected = {4, 1, 1};
    if (epoch >= 7 && epoch <= 9) expected = {2, 1, 1};
    if (epoch >= 10 && epoch <= 12) expected = {1, 1, 1};
    if (epoch >= 13 && epoch <= 15) expected = {8, 2, 2};
    EXPECT_EQ(daso.skips(), expected) << "epoch " << epoch;
    toy.train_epoch(daso, epoch);
    expect_identical_on_all_ranks({toy.weight, toy.bias}, "after epoch " + std::to_string(epoch));
    daso.epoch_loss_logic(1.0, /*loss_globally_averaged=*/true);  // a constant loss: the trace
  }
}

TEST(Daso, MergeWeighsTheLocalParametersByTwiceTheWait) {
  const int local_size = split_local_size();
  const int nodes = world()->size() / local_size;
  if (nodes < 2) GTEST_SKIP() << "needs at least 2 nodes (mpirun -np 2 or more)";
  const int node = world()->rank() / local_size;
  Tensor param = zeros({5}).requires_grad_();
  optim::SGD sgd(std::vector<Tensor>{param}, {.lr = 0.1});
  // No warm-up: epoch 0 cycles at (4, 1, 1). Chunks of 2 elements: 3 allreduces per send.
  Daso daso(sgd, 10, {.warmup_epochs = 0, .cooldown_epochs = 0, .sending_chunk_size = 2},
            split_world(local_size));
  daso.set_last_batch(3);
  auto set_all = [&](double value) {
    NoGradGuard no_grad;
    param.fill_(value);
  };
  auto step_without_gradient = [&] {
    daso.zero_grad();  // zero gradients: SGD leaves the parameters as they are
    daso.step();
  };
  double sum_sent = 0.0;
  for (int n = 0; n < nodes; ++n)
    sum_sent += 1.0 + n;

  set_all(1.0 + node);      // exact in bf16
  step_without_gradient();  // batch 0: group 0 sends
  set_all(10.0 + node);     // the node moves on
  step_without_gradient();  // batch 1: group 0 merges (B = 1)
  const double merged = (2.0 * (10.0 + node) + sum_sent) / (nodes + 2.0);
  for (float value : to_vector<float>(param.detach()))
    EXPECT_NEAR(value, merged, 1e-6 * merged);
  step_without_gradient();  // batch 2: nothing global
  for (float value : to_vector<float>(param.detach()))
    EXPECT_NEAR(value, merged, 1e-6 * merged);
  set_all(4.0 + 2.0 * node);
  step_without_gradient();  // batch 3, the last: a blocking average replaces the parameters
  const double average = 4.0 + (nodes - 1);
  for (float value : to_vector<float>(param.detach()))
    EXPECT_EQ(value, average);
  expect_identical_on_all_ranks({param}, "after the epoch");
}

// DASO only ever averages: ranks that started apart would stay apart. Its constructor gives every
// rank rank 0's parameters: the f32 ones, and the bf16 ones (the optimizer's f32 masters, and the
// bf16 parameters the model computes with).
TEST(Daso, ConstructionStartsEveryRankFromRankZerosParameters) {
  if (world()->size() < 2) GTEST_SKIP() << "needs at least 2 ranks";
  const double mine = 1.0 + world()->rank();
  Tensor param = full({3}, mine).requires_grad_();
  Tensor low_precision = full({2}, mine, DType::bf16).requires_grad_();
  optim::SGD sgd(std::vector<Tensor>{param, low_precision}, {.lr = 0.1});
  Daso daso(sgd, 5, {}, split_world(split_local_size()));
  EXPECT_EQ(to_vector<float>(param.detach()), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(to_vector<float>(sgd.master_param(0, 1)), (std::vector<float>{1, 1}));
  EXPECT_EQ(to_vector<float>(low_precision.detach()), (std::vector<float>{1, 1}))
      << "the bf16 parameters must follow their masters";
  expect_identical_on_all_ranks({param, low_precision.to(DType::f32)}, "after construction");
}

// With one node the node's gradient average keeps the ranks identical, and nothing is sent
// globally: the parameters are never rounded to downcast_type (bf16), not even by the blocking
// average on an epoch's last batch. 1 + 2^-10 needs more mantissa than bf16's 8 bits.
TEST(Daso, OneNodeNeverRoundsTheParametersToTheDowncastType) {
  const double value = 1.0 + std::ldexp(1.0, -10);
  Tensor param = full({4}, value).requires_grad_();
  optim::SGD sgd(std::vector<Tensor>{param}, {.lr = 0.1});
  Daso daso(sgd, 3, {.warmup_epochs = 1, .cooldown_epochs = 1},
            split_world(world()->size()));  // one node of every rank
  ASSERT_EQ(daso.num_nodes(), 1);
  daso.set_last_batch(1);
  for (int batch = 0; batch < 2; ++batch) {  // a warm-up epoch: both batches blocking
    daso.zero_grad();  // zero gradients: SGD leaves the parameters as they are
    daso.step();
  }
  for (float got : to_vector<float>(param.detach()))
    EXPECT_EQ(got, static_cast<float>(value));
}

TEST(Daso, ChunkedAndUnchunkedSendsGiveIdenticalParameters) {
  if (world()->size() < 2) GTEST_SKIP() << "needs at least 2 ranks";
  auto train = [](int64_t chunk) {
    ToyProblem toy;
    optim::SGD sgd(std::vector<Tensor>{toy.weight, toy.bias}, {.lr = 0.05, .momentum = 0.9});
    Daso daso(sgd, 6, {.warmup_epochs = 1, .cooldown_epochs = 1, .sending_chunk_size = chunk},
              split_world(split_local_size()));
    daso.set_last_batch(9);
    for (int64_t epoch = 0; epoch < 6; ++epoch)
      daso.epoch_loss_logic(toy.train_epoch(daso, epoch));
    return cat({toy.weight.detach().flatten(), toy.bias.detach()});
  };
  const Tensor whole = train(10'000'000);
  const Tensor chunked = train(3);  // chunks 3, 3, 2: the weight spans three of them
  ASSERT_EQ(whole.numel(), 8);
  EXPECT_EQ(std::memcmp(whole.data<float>(), chunked.data<float>(), 8 * sizeof(float)), 0)
      << whole << " vs " << chunked;
}

TEST(Daso, LossDecreasesOnTwoNodesOfTwoRanks) {
  if (world()->size() != 4) GTEST_SKIP() << "needs 4 ranks (mpirun -np 4)";
  // The default groups when the launch already poses as 2 nodes (EMBER_LOCAL_SIZE=2), else a split.
  const Topology topology = dist::topology();
  EXPECT_EQ(topology.ranks_on_machine, 4) << "nodes posed by EMBER_LOCAL_SIZE share one machine";
  DasoGroups groups = topology.local_size == 2 ? DasoGroups::default_groups() : split_world(2);
  ToyProblem toy;
  optim::SGD sgd(std::vector<Tensor>{toy.weight, toy.bias}, {.lr = 0.05});
  Daso daso(sgd, 12, {.warmup_epochs = 2, .cooldown_epochs = 2}, groups);
  ASSERT_EQ(daso.num_nodes(), 2);
  daso.set_last_batch(7);
  std::vector<double> losses;
  for (int64_t epoch = 0; epoch < 12; ++epoch) {
    losses.push_back(toy.train_epoch(daso, epoch));
    expect_identical_on_all_ranks({toy.weight, toy.bias}, "after epoch " + std::to_string(epoch));
    daso.epoch_loss_logic(losses.back());
  }
  // Converged to bf16 rounding noise at the end, so no epoch-by-epoch monotony: the start falls
  // and the end is far below it.
  EXPECT_LT(losses[3], 0.5 * losses[0]);
  EXPECT_LT(losses.back(), 0.01 * losses.front())
      << "first epoch " << losses.front() << ", last " << losses.back();
}

// Node 1's local rank 0 is 1.5 s late for batch 0, in which global group 0 sends (skips
// (8, 2, 2): the merge comes at batch 2). Node 0 must still average its gradients at batch 1 at
// once: its global send is in flight, waiting for the late rank, and must not hold up the node's
// allreduce (on MPI's one communication thread a blocking allreduce would).
TEST(Daso, ALateNodeDoesNotHoldUpTheOtherNodesStepsBeforeTheMerge) {
  if (world()->size() != 4) GTEST_SKIP() << "needs 4 ranks (mpirun -np 4)";
  Tensor param = zeros({5}).requires_grad_();
  optim::SGD sgd(std::vector<Tensor>{param}, {.lr = 0.1});
  Daso daso(sgd, 10, {.warmup_epochs = 0, .cooldown_epochs = 0}, split_world(2));
  daso.set_last_batch(3);
  daso.load_schedule_state({.skips = {8, 2, 2}});
  const int node = world()->rank() / 2;
  const bool late = world()->rank() == 2;
  auto step = [&] {
    daso.zero_grad();
    daso.step();
  };
  if (late) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  step();  // batch 0: global group 0 sends
  const auto start = std::chrono::steady_clock::now();
  step();  // batch 1: only the node's gradient average
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (node == 0) {
    EXPECT_LT(seconds, 0.5) << "node 0's batch 1 waited for node 1's late rank";
  }
  step();  // batch 2: group 0 merges
  step();  // batch 3, the last: blocking
  expect_identical_on_all_ranks({param}, "after the epoch");
}

// set_model attaches a DDP reducer over the node: the node's gradients are averaged by the end of
// backward (except on the batches local skipping leaves out), and step() does not average them
// again. With nodes of 2 ranks the reducer's g0 / 2 + g1 / 2 and step()'s (g0 + g1) / 2 round
// alike, so training is bitwise the same either way.
TEST(Daso, SetModelAveragesTheNodesGradientsDuringBackwardAsStepWould) {
  if (world()->size() != 4) GTEST_SKIP() << "needs 4 ranks (mpirun -np 4)";
  const DasoGroups groups = split_world(2);
  const Tensor true_weight = arange(7, DType::f32).div_(7.0).view({7, 1});
  int skipped = 0;
  auto train = [&](bool set_model) {
    nn::Linear model(7, 1);
    {
      NoGradGuard no_grad;
      model.weight.zero_();
      model.bias.zero_();
    }
    optim::SGD sgd(model.parameters(), {.lr = 0.05});
    Daso daso(sgd, 4, {.warmup_epochs = 0, .cooldown_epochs = 0}, groups);
    if (set_model) daso.set_model(model);
    daso.set_last_batch(5);
    daso.load_schedule_state({.skips = {8, 2, 2}});  // local skip 2: batch 3 stays local
    for (int64_t epoch = 0; epoch < 4; ++epoch) {
      double total = 0.0;
      for (int64_t batch = 0; batch < 6; ++batch) {
        Generator generator(1000 * static_cast<uint64_t>(world()->rank()) +
                            100 * static_cast<uint64_t>(epoch) + static_cast<uint64_t>(batch));
        const Tensor x = randn({8, 7}, {}, &generator);
        daso.zero_grad();
        Tensor loss = mse_loss(model(x), matmul(x, true_weight) + 0.5);
        loss.backward();
        if (set_model) {  // averaged already, unless local skipping leaves this batch out
          Tensor mine = model.weight.grad().flatten().clone();
          Tensor node = empty({2 * mine.numel()});
          groups.node->allgather(node, mine)->wait();
          const bool averaged = daso.schedule().averages_in_node();
          skipped += averaged ? 0 : 1;
          EXPECT_EQ(
              to_vector<float>(node.narrow(0, 0, 7)) == to_vector<float>(node.narrow(0, 7, 7)),
              averaged)
              << "epoch " << epoch << " batch " << batch;
        }
        daso.step();
        total += loss.item<double>();
      }
      daso.epoch_loss_logic(total / 6);
    }
    return cat({model.weight.detach().flatten(), model.bias.detach()});
  };
  const Tensor in_step = train(false);
  const Tensor in_backward = train(true);
  EXPECT_GT(skipped, 0) << "no batch was left local: local skipping went untested";
  EXPECT_EQ(std::memcmp(in_step.data<float>(), in_backward.data<float>(), 8 * sizeof(float)), 0)
      << in_step << " vs " << in_backward;
}

TEST(Daso, SetModelGivesTheNodeItsFirstRanksBuffersAfterEachAveragedStep) {
  if (world()->size() != 4) GTEST_SKIP() << "needs 4 ranks (mpirun -np 4)";
  const DasoGroups groups = split_world(2);
  nn::BatchNorm1d model(3);  // buffers running_mean, running_var (3), num_batches_tracked
  optim::SGD sgd(model.parameters(), {.lr = 0.05});
  Daso daso(sgd, 4, {.warmup_epochs = 0, .cooldown_epochs = 0}, groups);
  daso.set_model(model);
  daso.set_last_batch(5);
  daso.load_schedule_state({.skips = {8, 2, 2}});  // local skip 2: batch 3 stays local
  int skipped = 0;
  for (int64_t batch = 0; batch < 6; ++batch) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    // (8, 3) inputs that differ by rank, so each rank's batch statistics differ.
    Generator generator(1000 * static_cast<uint64_t>(world()->rank()) +
                        static_cast<uint64_t>(batch));
    const Tensor x = randn({8, 3}, {}, &generator).mul_(1.0 + world()->rank());
    const bool averaged = daso.schedule().averages_in_node();
    skipped += averaged ? 0 : 1;
    daso.zero_grad();
    Tensor loss = mse_loss(model(x), x);
    loss.backward();
    daso.step();
    // (2, 6): this node's running_mean and running_var, one row per rank.
    const Tensor mine = cat({model.running_mean, model.running_var});
    Tensor node = empty({2, 6});
    groups.node->allgather(node, mine)->wait();
    const bool equal = to_vector<float>(node.select(0, 0)) == to_vector<float>(node.select(0, 1));
    EXPECT_EQ(equal, averaged) << "the node's running statistics\n" << node;
  }
  EXPECT_GT(skipped, 0) << "no batch was left local: the skipped broadcast went untested";
}

TEST(Daso, SimulatedLinkParsesLatencyAndBandwidth) {
  const SimulatedLink link = SimulatedLink::parse("50,1.5");
  EXPECT_DOUBLE_EQ(link.latency_us, 50.0);
  EXPECT_DOUBLE_EQ(link.gigabytes_per_second, 1.5);
  EXPECT_DOUBLE_EQ(link.seconds_for(3'000'000'000), 50e-6 + 2.0);
  EXPECT_DOUBLE_EQ(SimulatedLink::parse("0,10").seconds_for(0), 0.0);
  for (const char* bad : {"50", "x,1", "50,", "50,0", "-1,2", "50,1.5x", ""}) {
    EXPECT_ERROR_WITH(SimulatedLink::parse(bad), "EMBER_SIMULATE_GLOBAL_LINK", "latency_us,GBps");
  }
}

TEST(Daso, MisuseGivesClearErrors) {
  Tensor param = zeros({3}).requires_grad_();
  optim::SGD sgd(std::vector<Tensor>{param}, {.lr = 0.1});
  EXPECT_ERROR_WITH(Daso(sgd, 5, {.downcast_type = DType::i32}), "downcast_type", "i32");
  EXPECT_ERROR_WITH(Daso(sgd, 5, {.sending_chunk_size = 0}), "sending_chunk_size");
  EXPECT_ERROR_WITH(Daso(sgd, 0), "total_epochs");
  Daso daso(sgd, 5);
  EXPECT_ERROR_WITH(daso.step(), "set_last_batch");
  nn::Linear stranger(3, 2);
  EXPECT_ERROR_WITH(daso.set_model(stranger), "\"weight\"", "not in the local optimizer");
  daso.set_last_batch(2);
  daso.step();
  EXPECT_ERROR_WITH(daso.epoch_loss_logic(1.0), "epoch_loss_logic", "after batch 0");
}

}  // namespace
}  // namespace ember::dist
