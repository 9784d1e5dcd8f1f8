// Picks who computes a CUDA GEMM (gemm.h): cuBLAS(Lt), or one of ember's f16/bf16 kernels.
#include "kernels/cuda/gemm.h"

#include <array>
#include <atomic>
#include <string>
#include <type_traits>

#include "kernels/common/scalar_types.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/cuda/gemm_mma.h"

#ifndef EMBER_GEMM_SM90A
#define EMBER_GEMM_SM90A 0
#endif

namespace ember::kernels::cuda {

namespace {

// The current device's compute capability as 10 * major + minor, looked up once per device.
int compute_capability() {
  static std::array<std::atomic<int>, 64> known{};  // 0: not yet looked up
  int device = 0;
  EMBER_CUDA_KERNEL_CHECK(cudaGetDevice(&device));
  const bool cached = device >= 0 && device < 64;
  int capability = cached ? known[static_cast<size_t>(device)].load() : 0;
  if (capability == 0) {
    int major = 0, minor = 0;
    EMBER_CUDA_KERNEL_CHECK(
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    EMBER_CUDA_KERNEL_CHECK(
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    capability = 10 * major + minor;
    if (cached) known[static_cast<size_t>(device)].store(capability);
  }
  return capability;
}

void require_sm80(const char* version) {
  if (compute_capability() < 80) {
    throw CudaError(std::string("EMBER_GEMM=") + version +
                    " needs bf16 tensor cores and cp.async (compute capability 8.0+); this GPU "
                    "is " +
                    std::to_string(compute_capability()) + "; use ember or ember-v1");
  }
}

template <typename T>
void run_v4(const GemmShape& shape, float alpha, const T* a, const T* b, float beta, T* c,
            cudaStream_t stream) {
#if EMBER_GEMM_SM90A
  // sm_90a code runs on compute capability 9.0 exactly.
  if (compute_capability() == 90) return gemm_mma_v4<T>(shape, alpha, a, b, beta, c, stream);
  throw CudaError(
      "EMBER_GEMM=ember-v4 needs a compute capability 9.0 GPU (H100, H200); this one is " +
      std::to_string(compute_capability()) + "; use ember or ember-v3");
#else
  static_cast<void>(shape), static_cast<void>(alpha), static_cast<void>(a), static_cast<void>(b);
  static_cast<void>(beta), static_cast<void>(c), static_cast<void>(stream);
  throw CudaError(
      "EMBER_GEMM=ember-v4: this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES has no 90); "
      "use ember or ember-v3");
#endif
}

}  // namespace

GemmAlgo best_ember_gemm_for_current_device() {
  // v2 and v3 need bf16 mma.sync and cp.async (sm_80).
  return compute_capability() >= 80 ? GemmAlgo::ember_v3 : GemmAlgo::ember_v1;
}

bool gemm_algo_available(GemmAlgo algo) {
  switch (algo) {
    case GemmAlgo::ember_v2:
    case GemmAlgo::ember_v3:
      return compute_capability() >= 80;
    case GemmAlgo::ember_v4:
      return EMBER_GEMM_SM90A && compute_capability() == 90;
    default:
      return true;
  }
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
        require_sm80("ember-v2");
        return gemm_mma_v2<T>(shape, alpha, a, b, beta, c, stream);
      case GemmAlgo::ember_v3:
        require_sm80("ember-v3");
        return gemm_mma_v3<T>(shape, alpha, a, b, beta, c, stream);
      case GemmAlgo::ember_v4:
        return run_v4<T>(shape, alpha, a, b, beta, c, stream);
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
