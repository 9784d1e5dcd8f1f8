// The world without MPI (EMBER_MPI=OFF): one process, whose collectives are copies.
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

  WorkPtr allreduce(const Tensor& tensor, ReduceOp op) override {
    EMBER_CHECK(tensor.defined(), "allreduce: the tensor is undefined");
    EMBER_CHECK(op != ReduceOp::avg || is_floating(tensor.dtype()),
                "allreduce(avg): needs a floating dtype, got ", describe(tensor));
    return done();
  }
  WorkPtr broadcast(const Tensor& tensor, int root) override {
    EMBER_CHECK(tensor.defined(), "broadcast: the tensor is undefined");
    EMBER_CHECK(root == 0, "broadcast: root ", root, " is not a rank of a world of one");
    return done();
  }
  WorkPtr allgather(const Tensor& output, const Tensor& input) override {
    EMBER_CHECK(output.numel() == input.numel() && output.dtype() == input.dtype(),
                "allgather: output ", describe(output), " must match input ", describe(input));
    output.view({-1}).copy_(input.reshape({-1}));
    return done();
  }
  WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp) override {
    EMBER_CHECK(output.numel() == input.numel() && output.dtype() == input.dtype(),
                "reduce_scatter: output ", describe(output), " must match input ", describe(input));
    output.view({-1}).copy_(input.reshape({-1}));
    return done();
  }
  WorkPtr barrier() override { return done(); }
  WorkPtr send(const Tensor&, int destination, int) override {
    EMBER_FAIL("send: rank ", destination, " does not exist in a world of one (ember was built ",
               "without MPI: configure with -DEMBER_MPI=ON)");
  }
  WorkPtr recv(const Tensor&, int source, int) override {
    EMBER_FAIL("recv: rank ", source, " does not exist in a world of one (ember was built ",
               "without MPI: configure with -DEMBER_MPI=ON)");
  }
  std::shared_ptr<ProcessGroup> split(int color, int) override {
    if (color < 0) return nullptr;
    return std::make_shared<LocalProcessGroup>(name() + "/split");
  }

 private:
  static WorkPtr done() { return std::make_shared<CompletedWork>(); }
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

}  // namespace ember::dist
