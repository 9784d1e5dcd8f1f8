// Picks who computes a CUDA GEMM (gemm.h): cuBLAS(Lt), or one of ember's f16/bf16 kernels.
#include "kernels/cuda/gemm.h"

#include <array>
#include <atomic>
#include <type_traits>

#include "kernels/common/scalar_types.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/cuda/gemm_mma.h"

namespace ember::kernels::cuda {

GemmAlgo best_ember_gemm_for_current_device() {
  // The compute capability per device, looked up once (0: not yet known).
  static std::array<std::atomic<int>, 64> major_of{};
  int device = 0;
  EMBER_CUDA_KERNEL_CHECK(cudaGetDevice(&device));
  int major = device < 64 ? major_of[static_cast<size_t>(device)].load() : 0;
  if (major == 0) {
    EMBER_CUDA_KERNEL_CHECK(
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (device < 64) major_of[static_cast<size_t>(device)].store(major);
  }
  // v2 and v3 need bf16 mma.sync and cp.async (sm_80).
  return major >= 8 ? GemmAlgo::ember_v3 : GemmAlgo::ember_v1;
}

template <typename T>
void gemm(const GemmShape& shape, const GemmOptions& options, float alpha, const T* a, const T* b,
          float beta, T* c, cudaStream_t stream) {
  constexpr bool kSixteenBit = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
  GemmAlgo algo = options.algo;
  if (!kSixteenBit) algo = GemmAlgo::cublas;  // ember's kernels are f16/bf16 only
  if (algo == GemmAlgo::ember) algo = best_ember_gemm_for_current_device();
  if constexpr (kSixteenBit) {
    switch (algo) {
      case GemmAlgo::ember_v1:
        return gemm_mma_v1<T>(shape, alpha, a, b, beta, c, stream);
      case GemmAlgo::ember_v2:
        return gemm_mma_v2<T>(shape, alpha, a, b, beta, c, stream);
      case GemmAlgo::ember_v3:
        return gemm_mma_v3<T>(shape, alpha, a, b, beta, c, stream);
      default:
        break;
    }
  }
  gemm_cublas<T>(shape, options.allow_tf32, alpha, a, b, beta, c, stream);
}

template void gemm<float>(const GemmShape&, const GemmOptions&, float, const float*, const float*,
                          float, float*, cudaStream_t);
template void gemm<double>(const GemmShape&, const GemmOptions&, float, const double*,
                           const double*, float, double*, cudaStream_t);
template void gemm<Half>(const GemmShape&, const GemmOptions&, float, const Half*, const Half*,
                         float, Half*, cudaStream_t);
template void gemm<BFloat16>(const GemmShape&, const GemmOptions&, float, const BFloat16*,
                             const BFloat16*, float, BFloat16*, cudaStream_t);

}  // namespace ember::kernels::cuda
