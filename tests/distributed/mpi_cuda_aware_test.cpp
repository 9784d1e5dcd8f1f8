// The MPI backend's choice between handing CUDA tensors to MPI and staging them through host
// memory (distributed/mpi/cuda_aware.h). The hand-over itself needs a CUDA-aware MPI and a GPU,
// which neither the CI machine nor the GPU machine has: only the decisions are tested here.
#include <gtest/gtest.h>

#if EMBER_WITH_MPI
#include "distributed/mpi/cuda_aware.h"
#include "tests/common/expect_error.h"

namespace ember::dist::mpi {
namespace {

TEST(MpiCudaAware, UnsetAsksTheLibrary) {
  EXPECT_TRUE(decide_cuda_aware(nullptr, CudaSupport::yes));
  EXPECT_FALSE(decide_cuda_aware(nullptr, CudaSupport::no));
  EXPECT_FALSE(decide_cuda_aware(nullptr, CudaSupport::unknown));  // an MPI that cannot say
  EXPECT_FALSE(decide_cuda_aware("", CudaSupport::unknown));
}

TEST(MpiCudaAware, TheVariableDecidesWhereTheLibraryAllows) {
  for (const CudaSupport library : {CudaSupport::yes, CudaSupport::no, CudaSupport::unknown})
    EXPECT_FALSE(decide_cuda_aware("0", library));
  EXPECT_TRUE(decide_cuda_aware("1", CudaSupport::yes));
  EXPECT_TRUE(decide_cuda_aware("1", CudaSupport::unknown));  // the user's word for it
  EXPECT_ERROR_WITH(decide_cuda_aware("1", CudaSupport::no),
                    "MPIX_Query_cuda_support() returned 0");
  EXPECT_ERROR_WITH(decide_cuda_aware("yes", CudaSupport::yes),
                    "EMBER_MPI_CUDA_AWARE must be 0 (stage CUDA tensors through host memory) or 1");
}

// ember's own f16/bf16 reductions and avg's division run on the host: those stay staged.
TEST(MpiCudaAware, OnlyWhatMpiComputesItselfRunsOnDevice) {
  for (const DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8}) {
    for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min})
      EXPECT_TRUE(mpi_can_run_on_device(dtype, op)) << dtype_name(dtype);
  }
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16})
    EXPECT_FALSE(mpi_can_run_on_device(dtype, ReduceOp::avg)) << dtype_name(dtype);
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min})
      EXPECT_FALSE(mpi_can_run_on_device(dtype, op)) << dtype_name(dtype);
    EXPECT_TRUE(mpi_can_run_on_device(dtype, std::nullopt)) << dtype_name(dtype);  // moves only
  }
}

}  // namespace
}  // namespace ember::dist::mpi
#endif
