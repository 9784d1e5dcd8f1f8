// The world without MPI (EMBER_MPI=OFF): one process, whose collectives are copies.
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "distributed/world.h"
#include "runtime/error.h"

namespace ember::dist {
namespace {

class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

class LocalProcessGroup final : public ProcessGroup {
 public:
  explicit LocalProcessGroup(std::string name) : ProcessGroup(0, 1, std::move(name)) {}
  const char* backend() const override { return "local"; }

  // The checks are the MPI group's (same messages), so that code tested here fails the same way
  // under mpirun.
  WorkPtr allreduce(const Tensor& tensor, ReduceOp op) override {
    check(tensor, "allreduce");
    EMBER_CHECK(op != ReduceOp::avg || is_floating(tensor.dtype()),
                "allreduce(avg): needs a floating dtype, got ", describe(tensor),
                "; use sum and divide");
    return done();
  }
  WorkPtr broadcast(const Tensor& tensor, int root) override {
    check(tensor, "broadcast");
    EMBER_CHECK(root == 0, "broadcast: root ", root, " is not a rank of group '", name(),
                "' (size 1)");
    return done();
  }
  WorkPtr allgather(const Tensor& output, const Tensor& input) override {
    check(output, "allgather");
    check(input, "allgather");
    EMBER_CHECK(output.dtype() == input.dtype(), "allgather: output ", describe(output),
                " and input ", describe(input), " must have the same dtype");
    EMBER_CHECK(output.numel() == input.numel(), "allgather: output ", describe(output),
                " must hold size() * input.numel() = 1 * ", input.numel(), " elements (input ",
                describe(input), ")");
    output.view({-1}).copy_(input.reshape({-1}));
    return done();
  }
  WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    check(output, "reduce_scatter");
    check(input, "reduce_scatter");
    EMBER_CHECK(output.dtype() == input.dtype(), "reduce_scatter: output ", describe(output),
                " and input ", describe(input), " must have the same dtype");
    EMBER_CHECK(input.numel() == output.numel(), "reduce_scatter: input ", describe(input),
                " must hold size() * output.numel() = 1 * ", output.numel(), " elements (output ",
                describe(output), ")");
    EMBER_CHECK(op != ReduceOp::avg || is_floating(input.dtype()),
                "reduce_scatter(avg): needs a floating dtype, got ", describe(input));
    output.view({-1}).copy_(input.reshape({-1}));
    return done();
  }
  WorkPtr barrier() override { return done(); }
  WorkPtr send(const Tensor&, int destination, int) override {
    EMBER_FAIL("send: destination ", destination, " does not exist in a world of one (ember was ",
               "built without MPI: configure with -DEMBER_MPI=ON)");
  }
  WorkPtr recv(const Tensor&, int source, int) override {
    EMBER_FAIL("recv: source ", source, " does not exist in a world of one (ember was built ",
               "without MPI: configure with -DEMBER_MPI=ON)");
  }
  std::shared_ptr<ProcessGroup> split(int color, int) override {
    if (color < 0) return nullptr;
    return std::make_shared<LocalProcessGroup>(name() + "/split");
  }

 private:
  static WorkPtr done() { return std::make_shared<CompletedWork>(); }
  static void check(const Tensor& tensor, const char* call) {
    EMBER_CHECK(tensor.defined(), call, ": the tensor is undefined");
    EMBER_CHECK(tensor.is_contiguous(), call, ": the tensor must be contiguous, got ",
                describe(tensor), " with strides ", shape_str(tensor.strides()),
                "; pass .contiguous() and copy the result back");
  }
};

std::mutex g_mutex;
ProcessGroupPtr g_world;

}  // namespace

ProcessGroupPtr init() {
  std::lock_guard lock(g_mutex);
  if (!g_world) g_world = std::make_shared<LocalProcessGroup>("world");
  return g_world;
}
bool is_initialized() {
  std::lock_guard lock(g_mutex);
  return g_world != nullptr;
}
ProcessGroupPtr world() {
  std::lock_guard lock(g_mutex);
  EMBER_CHECK(g_world != nullptr, "dist::world(): call dist::init() first");
  return g_world;
}
Topology topology() {
  return Topology{};
}
ProcessGroupPtr node_group() {
  return world();
}
ProcessGroupPtr cross_node_group() {
  return world();
}
void finalize() {}

void abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(exit_code);
}

}  // namespace ember::dist
