// The NCCL process group in a world of one rank on cuda:0: the only NCCL run one GPU without MPI
// allows (EMBER_MPI=OFF: the world is one process). Under mpirun every rank makes its own
// communicator of one (a split of the world by rank) on cuda:0.
//
// In a world of one every collective is a copy: allreduce, broadcast and reduce_scatter leave
// the values as they were (avg divides by 1, exactly), allgather copies the input. Outputs are
// poisoned first and compared exactly. Skips without NCCL in the build or without a GPU.
//
// What a GPU run checks that nothing here can: that NCCL accepts every dtype and op at nranks 1,
// that the group's stream is ordered after the caller's (an input computed just before the
// collective is the one reduced), the timeout path (a host function blocks the caller's stream),
// the timeout of an initialisation whose peer never joins, and DDP over NCCL giving bit for bit
// the single-GPU step.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "distributed/ddp.h"
#include "distributed/nccl/nccl_process_group.h"
#include "distributed/world.h"
#include "engines/factory.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/common/expect_error.h"

#if EMBER_WITH_NCCL
#include <cuda_runtime_api.h>

#include "runtime/cuda/stream.h"
#endif

namespace ember::dist {
namespace {

#define EMBER_SKIP_WITHOUT_NCCL_GPU()                                                          \
  do {                                                                                         \
    if (!nccl_available())                                                                     \
      GTEST_SKIP() << "the NCCL backend is not in this build (needs -DEMBER_CUDA=ON and NCCL " \
                      "found: NCCL_ROOT, the CUDA toolkit or the nvidia-nccl wheel)";          \
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: NCCL needs a GPU";  \
  } while (false)

const Device kGpu = Device::cuda(0);

// A new NCCL group of one rank on cuda:0: collective over the world (every rank runs the test).
ProcessGroupPtr new_group_of_one() {
  ProcessGroupPtr world = init();
  ProcessGroupPtr one = world->size() == 1 ? world : world->split(world->rank(), 0);
  return make_nccl_group(one, 0);
}

// One group for the tests that leave it usable (NCCL's setup takes a while); dropped after each
// suite (TearDownTestSuite), before main() finalises MPI, which its bootstrap group uses.
ProcessGroupPtr g_group;
ProcessGroupPtr group_of_one() {
  if (!g_group) g_group = new_group_of_one();
  return g_group;
}
class Nccl : public testing::Test {
 protected:
  static void TearDownTestSuite() { g_group.reset(); }
};
using NcclDdp = Nccl;

const std::vector<DType> kDtypes = {DType::f32, DType::f16, DType::bf16,
                                    DType::f64, DType::i32, DType::i64};

// n values exact in every dtype (integers in [-11, 11], halves for floating dtypes), all distinct
// from kPoison.
std::vector<double> pattern(int64_t n, DType dtype) {
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    values[i] = static_cast<double>((i * 37) % 23 - 11) + (is_floating(dtype) ? 0.5 * (i % 2) : 0);
  return values;
}
constexpr double kPoison = -77;

// On cuda:0, computed on the current stream right before the collective (a clone of a copy),
// so that a collective not ordered after the caller's stream would read stale memory.
Tensor gpu_tensor(const std::vector<double>& values, DType dtype) {
  return from_vector(values, {static_cast<int64_t>(values.size())}, DType::f64)
      .to(dtype)
      .to(kGpu)
      .clone();
}
Tensor poisoned(int64_t n, DType dtype) {
  return full({n}, Scalar(kPoison), TensorOptions(dtype, kGpu));
}

void expect_values(const Tensor& tensor, const std::vector<double>& expected,
                   const std::string& what) {
  const std::vector<double> got = to_vector<double>(tensor);
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expected[i]) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected "
                    << expected[i];
      return;
    }
  }
}

const std::vector<ReduceOp> kOps = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};

TEST_F(Nccl, GroupOfOneDescribesItself) {
  EMBER_SKIP_WITHOUT_NCCL_GPU();
  auto group = group_of_one();
  EXPECT_STREQ(group->backend(), "nccl");
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(group->size(), 1);
  EXPECT_NE(group->name().find("/nccl"), std::string::npos) << group->name();
}

TEST_F(Nccl, AllreduceOfOneRankIsTheIdentityInEveryDtypeAndOp) {
  EMBER_SKIP_WITHOUT_NCCL_GPU();
  auto group = group_of_one();
  for (DType dtype : kDtypes) {
    for (int64_t n : {1, 3, 1023, 65537}) {
      for (ReduceOp op : kOps) {
        const std::string what =
            detail::concat("allreduce(", reduce_op_name(op), ") ", dtype_name(dtype), " n=", n);
        const auto values = pattern(n, dtype);
        Tensor tensor = gpu_tensor(values, dtype);
        if (op == ReduceOp::avg && !is_floating(dtype)) {
          EXPECT_ERROR_WITH(group->allreduce(tensor, op), "allreduce(avg)",
                            "needs a floating dtype");
          continue;
        }
        group->allreduce(tensor, op)->wait();
        expect_values(tensor, values, what);
      }
    }
  }
}

TEST_F(Nccl, BroadcastAllgatherReduceScatterOfOneRankCopy) {
  EMBER_SKIP_WITHOUT_NCCL_GPU();
  auto group = group_of_one();
  for (DType dtype : kDtypes) {
    for (int64_t n : {1, 5, 4097}) {
      const std::string suffix = detail::concat(" ", dtype_name(dtype), " n=", n);
      const auto values = pattern(n, dtype);

      Tensor tensor = gpu_tensor(values, dtype);
      group->broadcast(tensor, 0)->wait();
      expect_values(tensor, values, "broadcast" + suffix);

      Tensor gathered = poisoned(n, dtype);
      group->allgather(gathered, gpu_tensor(values, dtype))->wait();
      expect_values(gathered, values, "allgather" + suffix);

      for (ReduceOp op : kOps) {
        Tensor scattered = poisoned(n, dtype);
        if (op == ReduceOp::avg && !is_floating(dtype)) {
          EXPECT_ERROR_WITH(group->reduce_scatter(scattered, gpu_tensor(values, dtype), op),
                            "reduce_scatter(avg)", "needs a floating dtype");
          continue;
        }
        group->reduce_scatter(scattered, gpu_tensor(values, dtype), op)->wait();
        expect_values(scattered, values,
                      detail::concat("reduce_scatter(", reduce_op_name(op), ")", suffix));
      }
    }
  }
}

TEST_F(Nccl, CollectivesOfAnyShapeWorkOnTheFlatElements) {
  EMBER_SKIP_WITHOUT_NCCL_GPU();
  auto group = group_of_one();
  const auto values = pattern(24, DType::f32);
  Tensor input = gpu_tensor(values, DType::f32).view({2, 3, 4});
  Tensor output = full({4, 6}, Scalar(kPoison), TensorOptions(DType::f32, kGpu));
  group->allgather(output, input)->wait();
  expect_values(output, values, "allgather (2, 3, 4) -> (4, 6)");
  group->allreduce(input, ReduceOp::avg)->wait();
  expect_values(input, values, "allreduce(avg) of (2, 3, 4)");
}

TEST_F(Nccl, WorkCompletesAsynchronouslyAndWaitIsRepeatable) {
  EMBER_SKIP_WITHOUT_NCCL_GPU();
  auto group = group_of_one();
  const auto values = pattern(1 << 22, DType::f32);  // 16 MB: long enough to be seen in flight
  Tensor tensor = gpu_tensor(values, DType::f32);
  WorkPtr work = group->allreduce(tensor, ReduceOp::sum);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!work->is_completed() && std::chrono::steady_clock::now() < deadline) {
  }
  EXPECT_TRUE(work->is_completed()) << "not completed after 30 s";
  work->wait();
  EXPECT_TRUE(work->is_completed());
  work->wait();  // again: returns at once
  expect_values(tensor, values, "allreduce after is_completed");
#if EMBER_WITH_NCCL
  // Polling an event not yet reached must leave nothing in CUDA's last-error slot, where the
  // next kernel launch's check would find it ("device not ready").
  Tensor gathered = empty({1 << 22}, TensorOptions(DType::f32, kGpu));
  WorkPtr gather = group->allgather(gathered, tensor);
  // Polled for at most 30 s: a collective that never completes must fail the test, not hang it
  // (wait() below is bounded by EMBER_COLLECTIVE_TIMEOUT).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!gather->is_completed() && std::chrono::steady_clock::now() < give_up) {
  }
  gather->wait();
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  expect_values(add(gathered, 0.0), values, "allgather, then a kernel");
#endif

  // Several in flight at once, waited in reverse order; the last tensor is a temporary the
  // Work keeps alive.
  std::vector<Tensor> tensors;
  std::vector<WorkPtr> works;
  for (int k = 0; k < 4; ++k) {
    tensors.push_back(gpu_tensor(pattern(1000 + k, DType::f32), DType::f32));
    works.push_back(group->allreduce(tensors.back(), ReduceOp::max));
  }
  works.push_back(group->allreduce(gpu_tensor(values, DType::f32), ReduceOp::sum));
  for (size_t k = works.size(); k-- > 0;)
    works[k]->wait();
  for (int k = 0; k < 4; ++k)
    expect_values(tensors[k], pattern(1000 + k, DType::f32), detail::concat("in flight ", k));
}

TEST_F(Nccl, BarrierCompletes) {
  EMBER_SKIP_WITHOUT_NCCL_GPU();
  auto group = group_of_one();
  WorkPtr work = group->barrier();
  work->wait();
  EXPECT_TRUE(work->is_completed());
}

TEST_F(Nccl, SplitMakesAnotherGroupOfOne) {
  EMBER_SKIP_WITHOUT_NCCL_GPU();
  auto group = group_of_one();
  EXPECT_EQ(group->split(-1, 0), nullptr);
  ProcessGroupPtr sub = group->split(0, 0);
  ASSERT_NE(sub, nullptr);
  EXPECT_STREQ(sub->backend(), "nccl");
  EXPECT_EQ(sub->size(), 1);
  const auto values = pattern(100, DType::bf16);
  Tensor tensor = gpu_tensor(values, DType::bf16);
  sub->allreduce(tensor, ReduceOp::sum)->wait();
  expect_values(tensor, values, "allreduce on the split group");
}

TEST_F(Nccl, TensorsNotOnItsGpuAreErrorsThatSaySo) {
  EMBER_SKIP_WITHOUT_NCCL_GPU();
  auto group = group_of_one();
  Tensor cpu = zeros({4});
  EXPECT_ERROR_WITH(group->allreduce(cpu, ReduceOp::sum), "allreduce", "works on cuda:0 tensors",
                    "cpu", "use the MPI group for CPU tensors");
  EXPECT_ERROR_WITH(group->broadcast(cpu, 0), "broadcast", "works on cuda:0 tensors");
  EXPECT_ERROR_WITH(group->allgather(zeros({4}, TensorOptions(DType::f32, kGpu)), cpu), "allgather",
                    "works on cuda:0 tensors");
  EXPECT_ERROR_WITH(group->reduce_scatter(cpu, zeros({4}, TensorOptions(DType::f32, kGpu))),
                    "reduce_scatter", "works on cuda:0 tensors");
  EXPECT_ERROR_WITH(group->allreduce(Tensor(), ReduceOp::sum), "allreduce", "undefined");
  Tensor strided = zeros({4, 4}, TensorOptions(DType::f32, kGpu)).transpose(0, 1);
  EXPECT_ERROR_WITH(group->allreduce(strided, ReduceOp::sum), "allreduce", "contiguous");
  EXPECT_ERROR_WITH(group->broadcast(zeros({4}, TensorOptions(DType::f32, kGpu)), 1), "root 1",
                    "is not a rank");
  EXPECT_ERROR_WITH(group->allgather(zeros({3}, TensorOptions(DType::f32, kGpu)),
                                     zeros({4}, TensorOptions(DType::f32, kGpu))),
                    "allgather", "size() * input.numel()");
  EXPECT_ERROR_WITH(group->send(zeros({4}, TensorOptions(DType::f32, kGpu)), 1), "send",
                    "destination 1");
  EXPECT_ERROR_WITH(group->recv(zeros({4}, TensorOptions(DType::f32, kGpu)), 2), "recv",
                    "source 2");
  EXPECT_ERROR_WITH(group->send(zeros({4}, TensorOptions(DType::f32, kGpu)), 0, 7), "send",
                    "has no message tags", "got tag 7");
}

TEST_F(Nccl, MakeNcclGroupRefusesANullBootstrap) {
  if (!nccl_available()) {
    EXPECT_ERROR_WITH(make_nccl_group(init(), 0), "NCCL backend is not in this build");
    return;
  }
  EXPECT_ERROR_WITH(make_nccl_group(nullptr, 0), "bootstrap group is null");
}

#if EMBER_WITH_NCCL
// Holds the caller's stream until released, or for 10 s at most: a collective queued behind it
// cannot complete. (The bound: should anything in between wait for the whole device, say the
// communicator's abort, the test is 10 s slower instead of hanging the session.)
void CUDART_CB block_until_released(void* flag) {
  auto* released = static_cast<std::atomic<bool>*>(flag);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!released->load() && std::chrono::steady_clock::now() < give_up) {
  }
}

TEST_F(Nccl, ACollectiveThatCannotCompleteTimesOutAndAbortsTheCommunicator) {
  EMBER_SKIP_WITHOUT_NCCL_GPU();
  auto group = new_group_of_one();  // its own: the timeout aborts its communicator
  // NCCL connects lazily at the first collective (allocations, copies that would wait for the
  // blocked stream below): done here first.
  group->allreduce(gpu_tensor(pattern(64, DType::f32), DType::f32), ReduceOp::sum)->wait();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const char* previous = std::getenv("EMBER_COLLECTIVE_TIMEOUT");
  const std::string saved = previous != nullptr ? previous : "";
  setenv("EMBER_COLLECTIVE_TIMEOUT", "0.5", 1);

  std::atomic<bool> released{false};
  Tensor tensor = gpu_tensor(pattern(64, DType::f32), DType::f32);
  ASSERT_EQ(cudaLaunchHostFunc(cuda::current_stream(0), block_until_released, &released),
            cudaSuccess);
  WorkPtr work = group->allreduce(tensor, ReduceOp::sum);
  EXPECT_FALSE(work->is_completed());
  EXPECT_ERROR_WITH(work->wait(), "allreduce(sum) of f32", "did not complete within 0.5 s",
                    "EMBER_COLLECTIVE_TIMEOUT", "at rank 0 of 1");
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  // Aborted at the timeout: waiting again fails at once, without another timeout.
  EXPECT_ERROR_WITH(work->wait(), "the communicator was aborted");
  released = true;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_ERROR_WITH(group->allreduce(tensor, ReduceOp::sum), "the communicator was aborted");

  if (previous != nullptr) {
    setenv("EMBER_COLLECTIVE_TIMEOUT", saved.c_str(), 1);
  } else {
    unsetenv("EMBER_COLLECTIVE_TIMEOUT");
  }
}
#endif

// DDP over an NCCL group of one: the average over one rank is the identity, so a step is bit for
// bit the plain single-GPU step.
std::shared_ptr<nn::Sequential> make_mlp() {
  return nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      nn::make<nn::Linear>(8, 16), nn::make<nn::Tanh>(), nn::make<nn::Linear>(16, 12),
      nn::make<nn::Tanh>(), nn::make<nn::Linear>(12, 3)});
}

void expect_identical(const std::shared_ptr<nn::Sequential>& a,
                      const std::shared_ptr<nn::Sequential>& b, bool gradients,
                      const std::string& what) {
  const auto mine = a->named_parameters();
  const auto theirs = b->named_parameters();
  ASSERT_EQ(mine.size(), theirs.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    const Tensor x = gradients ? mine[i].second.grad() : mine[i].second;
    const Tensor y = gradients ? theirs[i].second.grad() : theirs[i].second;
    ASSERT_TRUE(x.defined() && y.defined()) << what << " " << mine[i].first;
    EXPECT_EQ(to_vector<double>(x), to_vector<double>(y))
        << what << " " << mine[i].first << (gradients ? " (gradient)" : "");
  }
}

void ddp_matches_one_gpu(DdpOptions options) {
  auto group = group_of_one();
  manual_seed(11);
  auto model = make_mlp();
  auto reference = make_mlp();
  reference->load_state_dict(model->state_dict());
  model->to(kGpu);
  reference->to(kGpu);
  auto ddp = nn::make<DistributedDataParallel>(model, group, options);

  optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD reference_optimizer(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 3; ++step) {  // the first step rebuilds the buckets
    Generator generator(500 + step);
    Tensor x = randn({6, 8}, {}, &generator).to(kGpu);
    Tensor y = randn({6, 3}, {}, &generator).to(kGpu);
    optimizer.zero_grad();
    mse_loss((*ddp)(x), y).backward();
    reference_optimizer.zero_grad();
    mse_loss((*reference)(x), y).backward();
    expect_identical(model, reference, true, detail::concat("step ", step));
    optimizer.step();
    reference_optimizer.step();
    expect_identical(model, reference, false, detail::concat("after step ", step));
  }
  EXPECT_TRUE(ddp->reducer().rebuilt());
  EXPECT_EQ(ddp->reducer().iterations(), 3);
}

TEST_F(NcclDdp, OneStepOverAGroupOfOneIsThePlainSingleGpuStep) {
  EMBER_SKIP_WITHOUT_NCCL_GPU();
  DdpOptions options;
  options.bucket_cap_mb = 200.0 / (1024 * 1024);  // several buckets
  options.first_bucket_cap_mb = 100.0 / (1024 * 1024);
  ddp_matches_one_gpu(options);
}

TEST_F(NcclDdp, FindUnusedParametersOverAGroupOfOne) {
  EMBER_SKIP_WITHOUT_NCCL_GPU();
  DdpOptions options;
  options.find_unused_parameters = true;  // its flags go over the group too
  ddp_matches_one_gpu(options);
}

TEST_F(NcclDdp, ACpuModelOverAnNcclGroupIsAnError) {
  EMBER_SKIP_WITHOUT_NCCL_GPU();
  EXPECT_ERROR_WITH(nn::make<DistributedDataParallel>(make_mlp(), group_of_one()),
                    "works on cuda:0 tensors", "use the MPI group for CPU tensors");
}

TEST_F(NcclDdp, TheDdpEngineRunsAsAWorldOfOneOverNcclWhenAsked) {
  EMBER_SKIP_WITHOUT_NCCL_GPU();
  if (launched_with_several_processes()) GTEST_SKIP() << "started by a launcher";
  setenv("EMBER_DDP_WORLD_OF_ONE", "1", 1);
  engines::EnginePtr engine;
  try {
    engine = engines::make_engine("ddp");
  } catch (...) {
    unsetenv("EMBER_DDP_WORLD_OF_ONE");
    throw;
  }
  unsetenv("EMBER_DDP_WORLD_OF_ONE");
  ASSERT_NE(engine->process_group(), nullptr);
  EXPECT_STREQ(engine->process_group()->backend(), "nccl");
  EXPECT_EQ(engine->process_group()->size(), 1);
  EXPECT_EQ(engine->device(), kGpu);
  // Without the variable it is the usual error (tests/engines/engines_test.cpp).
  EXPECT_ERROR_WITH(engines::make_engine("ddp"), "several processes", "EMBER_DDP_WORLD_OF_ONE=1");
}

#if EMBER_WITH_NCCL
// Rank 0 of a pretend group of two whose other rank never comes: the NCCL unique id "reaches"
// everybody (broadcast is a no-op), then ncclCommInitRank waits for rank 1 forever. The abandoned
// initialisation stays blocked on its thread until the process ends, so this test runs after
// every other NCCL test of the file: in a suite of its own, registered last (gtest runs suites in
// the order of their first test, so a test of the Nccl suite placed last would still run before
// the NcclDdp suite).
class RankZeroOfTwoAlone final : public ProcessGroup {
 public:
  RankZeroOfTwoAlone() : ProcessGroup(0, 2, "alone") {}
  const char* backend() const override { return "pretend"; }
  WorkPtr broadcast(const Tensor&, int) override { return std::make_shared<DoneWork>(); }
  WorkPtr allreduce(const Tensor&, ReduceOp) override { return unexpected(); }
  WorkPtr allgather(const Tensor&, const Tensor&) override { return unexpected(); }
  WorkPtr reduce_scatter(const Tensor&, const Tensor&, ReduceOp) override { return unexpected(); }
  WorkPtr barrier() override { return unexpected(); }
  WorkPtr send(const Tensor&, int, int) override { return unexpected(); }
  WorkPtr recv(const Tensor&, int, int) override { return unexpected(); }
  ProcessGroupPtr split(int, int) override {
    unexpected();
    return nullptr;
  }

 private:
  struct DoneWork final : Work {
    void wait() override {}
    bool is_completed() override { return true; }
  };
  static WorkPtr unexpected() { EMBER_FAIL("RankZeroOfTwoAlone: only broadcast is expected"); }
};

using NcclLast = Nccl;

TEST_F(NcclLast, ACommunicatorWhosePeerNeverJoinsTimesOutNamingTheGroupAndRank) {
  EMBER_SKIP_WITHOUT_NCCL_GPU();
  const char* previous = std::getenv("EMBER_COLLECTIVE_TIMEOUT");
  const std::string saved = previous != nullptr ? previous : "";
  setenv("EMBER_COLLECTIVE_TIMEOUT", "2", 1);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_ERROR_WITH(make_nccl_group(std::make_shared<RankZeroOfTwoAlone>(), 0),
                    "NCCL communicator initialisation of group 'alone/nccl' (size 2) on rank 0",
                    "did not complete within 2 s", "EMBER_COLLECTIVE_TIMEOUT");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  if (previous != nullptr) {
    setenv("EMBER_COLLECTIVE_TIMEOUT", saved.c_str(), 1);
  } else {
    unsetenv("EMBER_COLLECTIVE_TIMEOUT");
  }
}
#endif

}  // namespace
}  // namespace ember::dist
