// Whether the MPI backend hands CUDA tensors to MPI as they are (a CUDA-aware MPI, such as an
// OpenMPI built with CUDA and UCX) or stages them through pinned host memory (any other MPI;
// Debian's OpenMPI is not CUDA-aware).
//
// EMBER_MPI_CUDA_AWARE: unset asks the MPI (OpenMPI's MPIX_Query_cuda_support; an MPI without
// that query counts as not CUDA-aware); 0 stages always; 1 trusts the user for an MPI without the
// query and is refused by an OpenMPI that says no.
#pragma once

#include <optional>

#include "distributed/process_group.h"
#include "runtime/dtype.h"

namespace ember::dist::mpi {

enum class CudaSupport { unknown, yes, no };  // what the MPI library says of itself

// The decision from EMBER_MPI_CUDA_AWARE's value (null when unset) and the library's answer;
// an error naming the variable for any other value, or for 1 where the library says no.
bool decide_cuda_aware(const char* setting, CudaSupport library);

// Decided once, at dist::init (after MPI_Init); false before.
void decide_cuda_aware_at_init();
bool cuda_aware();

// Whether MPI itself can run the operation on device memory. ember's own f16/bf16 reductions
// and the division of avg run on the host, so those operations are staged even with a
// CUDA-aware MPI. `op` is empty for operations that do not reduce (broadcast, allgather, send,
// recv).
bool mpi_can_run_on_device(DType dtype, std::optional<ReduceOp> op);

}  // namespace ember::dist::mpi
