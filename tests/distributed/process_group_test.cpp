// Every collective of the MPI process group, for every dtype, against the same computation done
// serially on each rank (every rank can compute what every other rank contributes).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "distributed/world.h"
#include "runtime/ops.h"

#if EMBER_WITH_MPI
#include "distributed/mpi/mpi_worker.h"
#endif

#if EMBER_WITH_CUDA
#include "runtime/cuda/stream.h"
#endif
#include "tests/common/expect_error.h"

namespace ember::dist {
namespace {

// The value rank `rank` contributes at element `i`: small integers, exact in every dtype
// (a sum over 4 ranks stays within u8 and within f16/bf16's exact integers).
double contribution(DType dtype, int rank, int64_t i) {
  if (dtype == DType::boolean) return (i + rank) % 3 == 0 ? 1 : 0;
  if (dtype == DType::u8) return static_cast<double>((i * 7 + rank * 3) % 11);
  return static_cast<double>((i * 7 + rank * 3) % 11) - 5;
}

Tensor filled(DType dtype, int rank, int64_t n) {
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    values[static_cast<size_t>(i)] = contribution(dtype, rank, i);
  return from_vector(values, {n}, DType::f64).to(dtype);
}

double reduce_serial(ReduceOp op, DType dtype, int size, int64_t i) {
  double result = contribution(dtype, 0, i);
  for (int r = 1; r < size; ++r) {
    const double v = contribution(dtype, r, i);
    if (op == ReduceOp::sum || op == ReduceOp::avg) result += v;
    if (op == ReduceOp::max) result = std::max(result, v);
    if (op == ReduceOp::min) result = std::min(result, v);
  }
  if (dtype == DType::boolean) result = result != 0 ? 1 : 0;
  if (op == ReduceOp::avg) result /= size;
  return result;
}

std::vector<double> as_doubles(const Tensor& t) {
  Tensor d = t.to(Device::cpu()).to(DType::f64).contiguous();
  const double* p = d.data<double>();
  return std::vector<double>(p, p + d.numel());
}

// Sums of small integers are exact; an avg rounds (by 3 ranks, say) in the dtype's precision.
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return 1e-2;
    case DType::f16:
      return 2e-3;
    case DType::f32:
      return 1e-6;
    default:
      return 1e-12;
  }
}

class Collectives : public testing::TestWithParam<DType> {};

// Every op over lengths `lengths`, against reduce_serial.
void expect_allreduce_matches_the_serial_reduction(ProcessGroup& group, DType dtype,
                                                   std::initializer_list<int64_t> lengths) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
    if (op == ReduceOp::avg && !is_floating(dtype)) continue;
    for (int64_t n : lengths) {
      Tensor x = filled(dtype, group.rank(), n);
      group.allreduce(x, op)->wait();
      const auto got = as_doubles(x);
      for (int64_t i = 0; i < n; ++i) {
        const double want = reduce_serial(op, dtype, group.size(), i);
        ASSERT_NEAR(got[static_cast<size_t>(i)], want, tolerance(dtype) * (1 + std::abs(want)))
            << reduce_op_name(op) << " " << dtype << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST_P(Collectives, AllreduceEveryOpMatchesTheSerialReduction) {
  expect_allreduce_matches_the_serial_reduction(*world(), GetParam(), {1, 7, 1003});
}

// The same through MPI_Iallreduce (set_nonblocking_allreduce), ember's own f16/bf16 operations
// included.
TEST_P(Collectives, NonBlockingAllreduceMatchesTheSerialReduction) {
  auto group = world()->split(0, world()->rank());
  group->set_nonblocking_allreduce(true);
  expect_allreduce_matches_the_serial_reduction(*group, GetParam(), {1, 7, 100003});
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  const DType dtype = GetParam();
  auto group = world();
  for (int root = 0; root < group->size(); ++root) {
    Tensor x = filled(dtype, group->rank(), 37);
    group->broadcast(x, root)->wait();
    EXPECT_EQ(as_doubles(x), as_doubles(filled(dtype, root, 37))) << "root " << root;
  }
}

TEST_P(Collectives, AllgatherPlacesRankRAtSliceR) {
  const DType dtype = GetParam();
  auto group = world();
  const int64_t n = 13;
  Tensor input = filled(dtype, group->rank(), n);
  Tensor output = full({group->size(), n}, 99, dtype);  // poisoned
  group->allgather(output, input)->wait();
  for (int r = 0; r < group->size(); ++r) {
    EXPECT_EQ(as_doubles(output.select(0, r)), as_doubles(filled(dtype, r, n))) << "slice " << r;
  }
}

TEST_P(Collectives, ReduceScatterGivesRankRTheReductionOfChunkR) {
  const DType dtype = GetParam();
  auto group = world();
  const int64_t n = 9;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
    if (op == ReduceOp::avg && !is_floating(dtype)) continue;
    Tensor input = filled(dtype, group->rank(), n * group->size());
    Tensor output = full({n}, 99, dtype);
    group->reduce_scatter(output, input, op)->wait();
    const auto got = as_doubles(output);
    for (int64_t i = 0; i < n; ++i) {
      const double want = reduce_serial(op, dtype, group->size(), group->rank() * n + i);
      EXPECT_NEAR(got[static_cast<size_t>(i)], want, tolerance(dtype) * (1 + std::abs(want)))
          << reduce_op_name(op) << " i=" << i;
    }
  }
}

// Every rank sends to the next and receives from the previous: lengths from one element to
// past MPI's eager limit, the received values exactly the sender's.
TEST_P(Collectives, SendAndReceiveAroundARingDeliverTheSendersValues) {
  const DType dtype = GetParam();
  auto group = world();
  if (group->size() < 2) GTEST_SKIP() << "needs 2 ranks (run under mpirun -np 2)";
  const int next = (group->rank() + 1) % group->size();
  const int previous = (group->rank() + group->size() - 1) % group->size();
  for (int64_t n : {1, 1003, 100003}) {
    Tensor incoming = full({n}, 99, dtype);  // poisoned
    auto received = group->recv(incoming, previous, 3);
    auto sent = group->send(filled(dtype, group->rank(), n), next, 3);
    sent->wait();
    received->wait();
    EXPECT_EQ(as_doubles(incoming), as_doubles(filled(dtype, previous, n))) << "n=" << n;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryDType, Collectives, testing::ValuesIn(kAllDTypes),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

// CUDA tensors through the MPI group: staged in pinned host memory with asynchronous copies on
// the current stream, the MPI call waiting for the copy's event, the result copied back when the
// caller waits. Inputs are produced by a kernel just before each call, on a side stream, so that
// a staging copy not ordered after it would read stale values; outputs start poisoned.
TEST(ProcessGroup, CudaTensorsAreStagedThroughPinnedMemoryAndMatchTheCpu) {
#if EMBER_WITH_CUDA
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: nothing to stage";
  auto group = world();
  const Device gpu = Device::cuda(0);
  const int rank = group->rank(), size = group->size();
  // Not ordered with the legacy default stream: only the staging's own events order the copies.
  cuda::Stream side(0, cuda::Stream::Kind::non_blocking);
  cuda::StreamGuard on_side(0, side.get());
  for (DType dtype : {DType::f32, DType::bf16}) {
    const int64_t n = 1001;
    // On the GPU: (filled - 1) + 1, two kernels whose result equals filled.
    auto produce = [&](int r, int64_t count) { return (filled(dtype, r, count).to(gpu) - 1) + 1; };

    Tensor x = produce(rank, n);
    auto summed = group->allreduce(x);
    Tensor y = produce(rank, 37);
    auto broadcast = group->broadcast(y, 0);
    Tensor gathered = full({size, 13}, 99, dtype).to(gpu);
    auto gather = group->allgather(gathered, produce(rank, 13));
    Tensor scattered = full({9}, 99, dtype).to(gpu);
    auto scatter = group->reduce_scatter(scattered, produce(rank, 9 * size));
    scatter->wait();  // waited in another order than submitted
    gather->wait();
    broadcast->wait();
    summed->wait();

    Tensor x_cpu = filled(dtype, rank, n);
    group->allreduce(x_cpu)->wait();
    EXPECT_EQ(as_doubles(x), as_doubles(x_cpu)) << dtype;
    EXPECT_EQ(as_doubles(y), as_doubles(filled(dtype, 0, 37))) << dtype;
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(as_doubles(gathered.select(0, r)), as_doubles(filled(dtype, r, 13)))
          << dtype << " slice " << r;
    }
    Tensor scattered_cpu = full({9}, 99, dtype);
    group->reduce_scatter(scattered_cpu, filled(dtype, rank, 9 * size))->wait();
    EXPECT_EQ(as_doubles(scattered), as_doubles(scattered_cpu)) << dtype;
  }
  if (size >= 2) {  // a ring of sends and receives
    const int next = (rank + 1) % size, previous = (rank + size - 1) % size;
    Tensor incoming = full({4099}, -1, DType::f32).to(gpu);
    auto received = group->recv(incoming, previous, 7);
    auto sent = group->send(full({4099}, rank, DType::f32).to(gpu) * 1, next, 7);
    sent->wait();
    received->wait();
    EXPECT_EQ(min(incoming).item<double>(), previous);
    EXPECT_EQ(max(incoming).item<double>(), previous);
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

TEST(ProcessGroup, WorldKnowsItsRankAndSize) {
  auto group = world();
  EXPECT_GE(group->rank(), 0);
  EXPECT_LT(group->rank(), group->size());
  EXPECT_STREQ(group->backend(), EMBER_WITH_MPI ? "mpi" : "local");
  EXPECT_EQ(group->name(), "world");
  const Topology where = topology();
  EXPECT_EQ(where.local_size * where.num_nodes, group->size());
  EXPECT_EQ(where.node * where.local_size + where.local_rank, group->rank())
      << "one machine: ranks fill the nodes in order";
  // The machine's ranks (whatever nodes EMBER_LOCAL_SIZE makes: Daso.LossDecreasesOnTwoNodes...
  // checks it there): on one machine, all of them.
  EXPECT_EQ(where.ranks_on_machine, group->size());
  EXPECT_EQ(where.rank_on_machine, group->rank());
}

// The processes whose parent is this one (read from /proc/<pid>/status).
int child_processes() {
  int children = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream status(entry.path() / "status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("PPid:", 0) != 0) continue;
      children += std::stoi(line.substr(5)) == getpid();
      break;
    }
  }
  return children;
}

// Started without a launcher, this process is MPI's world of one (a singleton), for which Open
// MPI 4 would start a daemon (orted) as its child; init() asks for none, so that a world of one
// depends on no second program. Under mpirun the launcher's daemon is not a child either.
TEST(ProcessGroup, AWorldOfOneStartsNoOtherProgram) {
  world();
  EXPECT_EQ(child_processes(), 0);
}

// A world of one keeps its MPI session directory under a base of its own (TMPDIR/ember-mpi-*),
// not in the job-family-0 directory that every isolated singleton on the machine shares, which one
// removes while another starts in it (distributed/mpi/world.cpp). A launcher's processes, and a
// user's own OMPI_MCA_orte_tmpdir_base, keep Open MPI's.
TEST(ProcessGroup, AWorldOfOneHasASessionDirectoryOfItsOwn) {
  world();
  if (!EMBER_WITH_MPI || std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr)
    GTEST_SKIP() << "not an MPI singleton";
  const char* base = std::getenv("OMPI_MCA_orte_tmpdir_base");
  ASSERT_NE(base, nullptr);
  EXPECT_NE(std::string(base).find("/ember-mpi-"), std::string::npos) << base;
  EXPECT_TRUE(std::filesystem::is_directory(base)) << base;
}

TEST(ProcessGroup, SeveralCollectivesInFlightCompleteInAnyWaitOrder) {
  auto group = world();
  std::vector<Tensor> tensors;
  std::vector<WorkPtr> works;
  for (int k = 0; k < 8; ++k) {
    tensors.push_back(full({1000 + k}, static_cast<double>(group->rank() + k), DType::f32));
    works.push_back(group->allreduce(tensors.back()));
  }
  for (int k = 7; k >= 0; --k)
    works[static_cast<size_t>(k)]->wait();
  const int s = group->size();
  for (int k = 0; k < 8; ++k) {
    const double want = s * (s - 1) / 2.0 + s * k;
    EXPECT_EQ(max(tensors[static_cast<size_t>(k)]).item<double>(), want);
    EXPECT_TRUE(works[static_cast<size_t>(k)]->is_completed());
  }
}

#if EMBER_WITH_MPI  // the pause is the MPI worker's: without MPI the group is local
// A caller that waits runs its own collective when the worker has not taken it yet, while the
// worker may take the ones queued after it (when the caller is descheduled for longer than the
// grace, as happens with more ranks than cores; forced here with a pause on odd ranks): the start
// order must still be the submission order on every rank. Broadcasts of different lengths make a
// reordering visible: MPI matches them by order, so mismatched lengths fail or deliver the
// wrong values.
TEST(ProcessGroup, CallerAndWorkerKeepTheSubmissionOrder) {
  auto group = world();
  // Only odd ranks pause: a reordering that every rank made alike would go unseen.
  if (group->rank() % 2 == 1) mpi::set_caller_pause_for_testing(std::chrono::microseconds(200));
  for (int round = 0; round < 20; ++round) {
    std::vector<Tensor> tensors;
    std::vector<WorkPtr> works;
    for (int k = 0; k < 6; ++k) {
      const double value = group->rank() == 0 ? 100.0 * round + k : -1.0;
      tensors.push_back(full({3 + 5 * k}, value, DType::f32));
      works.push_back(group->broadcast(tensors.back(), 0));
    }
    for (auto& work : works)
      work->wait();
    for (int k = 0; k < 6; ++k) {
      const Tensor& t = tensors[static_cast<size_t>(k)];
      EXPECT_EQ(min(t).item<double>(), 100.0 * round + k) << "round " << round << ", k " << k;
      EXPECT_EQ(max(t).item<double>(), 100.0 * round + k) << "round " << round << ", k " << k;
    }
  }
  mpi::set_caller_pause_for_testing(std::chrono::microseconds(0));
}
#endif

// DASO's situation: a global average waits for a late (or slowly linked) peer while the node
// averages its gradients. A blocking MPI_Allreduce would hold the one communication thread, and
// the node's allreduce, queued behind it, until the last rank arrived. The "global" group here
// is the whole world with the last rank 1.5 s late; the "node" is each rank alone, whose
// allreduce MPI still has to call.
TEST(ProcessGroup, NonBlockingAllreduceDoesNotHoldUpOtherGroups) {
  auto group = world();
  if (group->size() < 2) GTEST_SKIP() << "needs 2 ranks (run under mpirun -np 2)";
  auto global = group->split(0, group->rank());
  auto node = group->split(group->rank(), 0);
  global->set_nonblocking_allreduce(true);
  constexpr auto kLate = std::chrono::milliseconds(1500);
  const bool late = group->rank() == group->size() - 1;
  if (late) std::this_thread::sleep_for(kLate);
  Tensor average = full({1 << 16}, group->rank(), DType::f32);
  WorkPtr global_work = global->allreduce(average, ReduceOp::avg);
  Tensor gradient = full({1000}, 2.0, DType::f32);
  node->allreduce(gradient, ReduceOp::avg)->wait();
  EXPECT_EQ(max(gradient).item<double>(), 2.0);
  if (!late) {
    EXPECT_FALSE(global_work->is_completed())
        << "the node's allreduce waited for the global one, which waited for the late rank";
  }
  global_work->wait();
  const double want = (group->size() - 1) / 2.0;
  EXPECT_EQ(min(average).item<double>(), want);
  EXPECT_EQ(max(average).item<double>(), want);
}

TEST(ProcessGroup, SendAndReceiveAroundARingDoNotDeadlock) {
  auto group = world();
  if (group->size() < 2) GTEST_SKIP() << "needs 2 ranks (run under mpirun -np 2)";
  const int next = (group->rank() + 1) % group->size();
  const int previous = (group->rank() + group->size() - 1) % group->size();
  // Large enough for a rendezvous protocol: both sends are in flight before either receive.
  Tensor outgoing = full({1 << 20}, group->rank(), DType::f32);
  Tensor incoming = zeros({1 << 20}, DType::f32);
  auto sent = group->send(outgoing, next, 5);
  auto received = group->recv(incoming, previous, 5);
  sent->wait();
  received->wait();
  EXPECT_EQ(min(incoming).item<double>(), previous);
  EXPECT_EQ(max(incoming).item<double>(), previous);
}

TEST(ProcessGroup, SplitMakesIndependentSubgroups) {
  auto group = world();
  const int color = group->rank() % 2;
  auto sub = group->split(color, -group->rank());  // keys reverse the order
  ASSERT_NE(sub, nullptr);
  int members = 0;
  for (int r = 0; r < group->size(); ++r)
    members += r % 2 == color;
  EXPECT_EQ(sub->size(), members);
  // Ranked by key: the highest world rank of the color comes first.
  int higher = 0;
  for (int r = group->rank() + 1; r < group->size(); ++r)
    higher += r % 2 == color;
  EXPECT_EQ(sub->rank(), higher);
  Tensor x = full({3}, group->rank(), DType::f64);
  sub->allreduce(x)->wait();
  double want = 0;
  for (int r = color; r < group->size(); r += 2)
    want += r;
  EXPECT_EQ(max(x).item<double>(), want);

  auto none = group->split(group->rank() == 0 ? -1 : 0, 0);
  EXPECT_EQ(none == nullptr, group->rank() == 0);
}

TEST(ProcessGroup, NodeAndCrossNodeGroupsTileTheWorld) {
  auto group = world();
  const Topology where = topology();
  auto node = node_group();
  auto cross = cross_node_group();
  EXPECT_EQ(node->size(), where.local_size);
  EXPECT_EQ(node->rank(), where.local_rank);
  EXPECT_EQ(cross->size(), where.num_nodes);
  EXPECT_EQ(cross->rank(), where.node);
  EXPECT_EQ(node_group(), node) << "made once";
}

TEST(ProcessGroup, BadArgumentsSayWhatWasExpected) {
  auto group = world();
  Tensor matrix = zeros({4, 3});
  EXPECT_ERROR_WITH(group->allreduce(matrix.t()), "allreduce", "contiguous");
  EXPECT_ERROR_WITH(group->allreduce(zeros({3}, DType::i64), ReduceOp::avg), "avg",
                    "floating dtype");
  EXPECT_ERROR_WITH(group->broadcast(zeros({3}), group->size()), "root", "not a rank");
  EXPECT_ERROR_WITH(group->allgather(zeros({group->size() * 3 + 1}), zeros({3})), "allgather",
                    "size() * input.numel()");
  EXPECT_ERROR_WITH(group->allgather(zeros({group->size() * 3}, DType::f64), zeros({3})),
                    "same dtype");
  EXPECT_ERROR_WITH(group->reduce_scatter(zeros({3}), zeros({group->size() * 3 + 2})),
                    "reduce_scatter", "size() * output.numel()");
  EXPECT_ERROR_WITH(group->send(zeros({3}), -1), "send", "destination -1");
  EXPECT_ERROR_WITH(group->recv(zeros({3}), group->size()), "recv", "source");
  EXPECT_ERROR_WITH(group->allreduce(Tensor()), "undefined");
}

TEST(ProcessGroup, BarrierCompletes) {
  auto group = world();
  auto work = group->barrier();
  work->wait();
  EXPECT_TRUE(work->is_completed());
}

// Rank 1 reaches the barrier 300 ms late: no rank may leave it before then. The margin (100 ms)
// covers how far apart the ranks leave the starting allreduce on a loaded machine; a barrier
// that does not wait returns within a few milliseconds.
TEST(ProcessGroup, BarrierWaitsForTheLastRankToArrive) {
  auto group = world();
  if (group->size() < 2) GTEST_SKIP() << "needs 2 ranks (run under mpirun -np 2)";
  constexpr auto kLate = std::chrono::milliseconds(300);
  // The starting line: an allreduce, not the barrier under test.
  group->allreduce(zeros({1}))->wait();
  const auto start = std::chrono::steady_clock::now();
  if (group->rank() == 1) std::this_thread::sleep_for(kLate);
  group->barrier()->wait();
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  EXPECT_GE(waited.count(), (kLate - std::chrono::milliseconds(100)).count())
      << "rank " << group->rank() << " left the barrier after " << waited.count()
      << " ms, before rank 1 (" << kLate.count() << " ms late) arrived";
}

}  // namespace
}  // namespace ember::dist
