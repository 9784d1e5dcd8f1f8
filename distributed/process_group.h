// ProcessGroup: the collectives data-parallel training is made of, over a set of ranks.
//
//   auto world = dist::init();                  // under mpirun: MPI_COMM_WORLD
//   dist::WorkPtr work = world->allreduce(grad, dist::ReduceOp::avg);
//   ...                                         // overlap: compute while the collective runs
//   work->wait();                               // grad now holds the average over all ranks
//
// Every collective is asynchronous and returns a Work; tensors are updated in place and must be
// contiguous and stay alive (and untouched) until wait() returns. All ranks of a group must issue
// the same collectives in the same order, as with MPI and NCCL. A collective that does not complete
// within EMBER_COLLECTIVE_TIMEOUT seconds (default 600) is reported with the collective, the group
// and the rank: its wait() throws where the backend can abandon it (MPI point-to-point, NCCL),
// and otherwise (a blocking MPI collective) the process ends with that message and the launcher
// ends the job. A dead peer never means a silent hang.
#pragma once

#include <memory>
#include <string>

#include "runtime/tensor.h"

namespace ember::dist {

enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", ...

// A collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective is done; throws its error (a timeout, a failed MPI/NCCL call).
  virtual void wait() = 0;
  // Whether wait() would return at once.
  virtual bool is_completed() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // "world", "world/split(1)", ...: shown in errors and timeouts.
  const std::string& name() const { return name_; }
  virtual const char* backend() const = 0;  // "mpi", "nccl"

  // tensor (any shape), in place on every rank: the reduction over all ranks. avg needs a
  // floating dtype.
  virtual WorkPtr allreduce(const Tensor& tensor, ReduceOp op = ReduceOp::sum) = 0;
  // tensor, in place: rank `root`'s values on every rank.
  virtual WorkPtr broadcast(const Tensor& tensor, int root = 0) = 0;
  // input (n elements) -> output (size() * n elements): rank r's input lands at [r*n, (r+1)*n).
  virtual WorkPtr allgather(const Tensor& output, const Tensor& input) = 0;
  // input (size() * n elements) -> output (n elements): rank r gets the reduction of chunk r.
  virtual WorkPtr reduce_scatter(const Tensor& output, const Tensor& input,
                                 ReduceOp op = ReduceOp::sum) = 0;
  virtual WorkPtr barrier() = 0;
  // Point to point; a send is matched by the recv with the same tag on the peer.
  virtual WorkPtr send(const Tensor& tensor, int destination, int tag = 0) = 0;
  virtual WorkPtr recv(const Tensor& tensor, int source, int tag = 0) = 0;
  // Collective over this group: ranks passing the same color form a new group, ranked by
  // (key, rank). A negative color joins no group and gets nullptr.
  virtual std::shared_ptr<ProcessGroup> split(int color, int key) = 0;

  // Lets this group's allreduces stay in flight without holding up other groups' operations.
  // On MPI every operation is made by one communication thread, and collectives are blocking
  // calls there (the fastest on shared memory), so a long allreduce, or one waiting for a late
  // peer, delays every group's next operation. With this on, the group's allreduces are
  // MPI_Iallreduce, progressed by that thread and by every later MPI call; other groups'
  // operations start meanwhile. DASO sets it on its cross-node group so that a slow global
  // average never holds up the node's gradient average. Every rank of the group must set the
  // same, before its first allreduce. NCCL's collectives never block each other: no-op there.
  virtual void set_nonblocking_allreduce(bool on) { (void)on; }

 protected:
  ProcessGroup(int rank, int size, std::string name)
      : rank_(rank), size_(size), name_(std::move(name)) {}

 private:
  int rank_;
  int size_;
  std::string name_;
};
using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

// Seconds a collective may take before it fails: EMBER_COLLECTIVE_TIMEOUT, default 600.
double collective_timeout_seconds();

}  // namespace ember::dist
