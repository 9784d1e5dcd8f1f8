// The MPI backend of ProcessGroup (Debian's OpenMPI). CPU tensors go to MPI as they are; CUDA
// tensors too with a CUDA-aware MPI (cuda_aware.h), else they are staged through pinned host
// memory with asynchronous copies. f16 and bf16 travel as 16-bit words reduced by ember's own MPI
// operations.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>

#include "distributed/process_group.h"

namespace ember::dist::mpi {

class MpiProcessGroup final : public ProcessGroup {
 public:
  // Takes ownership of `communicator` (freed with the group, unless it is MPI_COMM_WORLD).
  MpiProcessGroup(MPI_Comm communicator, std::string name);
  ~MpiProcessGroup() override;

  const char* backend() const override { return "mpi"; }
  MPI_Comm communicator() const { return communicator_; }

  WorkPtr allreduce(const Tensor& tensor, ReduceOp op = ReduceOp::sum) override;
  WorkPtr broadcast(const Tensor& tensor, int root = 0) override;
  WorkPtr allgather(const Tensor& output, const Tensor& input) override;
  WorkPtr reduce_scatter(const Tensor& output, const Tensor& input,
                         ReduceOp op = ReduceOp::sum) override;
  WorkPtr barrier() override;
  WorkPtr send(const Tensor& tensor, int destination, int tag = 0) override;
  WorkPtr recv(const Tensor& tensor, int source, int tag = 0) override;
  std::shared_ptr<ProcessGroup> split(int color, int key) override;
  void set_nonblocking_allreduce(bool on) override { nonblocking_allreduce_ = on; }

 private:
  // Names a call in errors ("allreduce(sum) of f32 [1024] on group 'world' at rank 1 of 2"),
  // formatted only when one is raised: formatting it for every call cost about 1 us.
  std::function<std::string()> describe_call(std::string call, const Tensor& tensor) const;
  MPI_Comm communicator_;
  bool nonblocking_allreduce_ = false;  // MPI_Iallreduce instead of MPI_Allreduce
};

// Called once MPI is initialised: creates ember's MPI operations for f16 and bf16.
void create_half_operations();
void free_half_operations();

}  // namespace ember::dist::mpi
