#include "distributed/mpi/cuda_aware.h"

#include <mpi.h>

#include <atomic>
#include <cstdlib>
#include <string>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // OpenMPI's extensions: MPIX_Query_cuda_support
#endif

#include "runtime/error.h"

namespace ember::dist::mpi {
namespace {

std::atomic<bool> g_cuda_aware{false};

CudaSupport ask_the_library() {
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
  // Built with CUDA (MPIX_CUDA_AWARE_SUPPORT) is not enough: the run time must have it too.
  return MPIX_Query_cuda_support() == 1 ? CudaSupport::yes : CudaSupport::no;
#else
  return CudaSupport::unknown;
#endif
}

}  // namespace

bool decide_cuda_aware(const char* setting, CudaSupport library) {
  const std::string value = setting ? setting : "";
  if (value.empty()) return library == CudaSupport::yes;
  if (value == "0") return false;
  EMBER_CHECK(value == "1", "EMBER_MPI_CUDA_AWARE must be 0 (stage CUDA tensors through host ",
              "memory) or 1 (hand them to MPI), or unset (ask the MPI library), got '", value, "'");
  EMBER_CHECK(library != CudaSupport::no,
              "EMBER_MPI_CUDA_AWARE=1, but this MPI library says it cannot take CUDA memory ",
              "(MPIX_Query_cuda_support() returned 0); unset the variable to stage CUDA tensors ",
              "through host memory, or use an MPI built with CUDA support");
  return true;
}

void decide_cuda_aware_at_init() {
  g_cuda_aware = decide_cuda_aware(std::getenv("EMBER_MPI_CUDA_AWARE"), ask_the_library());
}

bool cuda_aware() {
  return g_cuda_aware;
}

bool mpi_can_run_on_device(DType dtype, std::optional<ReduceOp> op) {
  if (!op) return true;
  return *op != ReduceOp::avg && dtype != DType::f16 && dtype != DType::bf16;
}

}  // namespace ember::dist::mpi
