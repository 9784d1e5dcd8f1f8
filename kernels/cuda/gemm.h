// Matrix products on CUDA: cuBLAS(Lt) or ember's own tensor-core kernels, the same contract as
// kernels/cpu/gemm.h plus a uniform batch stride:
//
//   for b in [0, batch):  c_b (m, n) = alpha * op(a_b) (m, k) @ op(b_b) (k, n) + beta * c_b
//
// All matrices are row-major with a leading dimension (elements between rows). `trans_a` means a
// is stored (k, m) and read transposed (a transposed view with unit stride along its rows), and
// likewise `trans_b` for b stored (n, k). Matrix b of a batch starts `stride_*` elements after
// matrix b - 1 (0 repeats a broadcast operand). beta == 0 overwrites c (NaNs in c do not leak).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ember::kernels::cuda {

struct GemmShape {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// Who computes the product. cuBLAS(Lt) handles every dtype; ember's kernels (gemm_mma_v*.cu)
// only f16 and bf16: for f32 and f64 the ember choices fall back to cuBLAS.
enum class GemmAlgo {
  cublas,    // cuBLASLt (f32, f16, bf16), plain cuBLAS for f64
  ember,     // the best of ember's versions for the device's architecture
  ember_v1,  // shared-memory tiled, CUDA cores (any GPU): the correctness baseline
  ember_v2,  // mma.sync m16n8k16 + ldmatrix (sm_80+)
  ember_v3,  // v2 + cp.async multi-stage pipeline, padded shared memory (sm_80+)
  ember_v4,  // wgmma + TMA (sm_90 only, builds targeting 90); v3 for the layouts it lacks
};

struct GemmOptions {
  GemmAlgo algo = GemmAlgo::cublas;
  bool allow_tf32 = false;  // f32 products may use TF32 tensor cores (10-bit mantissa inputs)
};

// T: float, double, Half or BFloat16. Runs on the calling thread's current device, on `stream`.
template <typename T>
void gemm(const GemmShape& shape, const GemmOptions& options, float alpha, const T* a, const T* b,
          float beta, T* c, cudaStream_t stream);

// The ember version GemmAlgo::ember resolves to on the current device: ember_v3 from sm_80 on,
// ember_v1 below. Not yet ember_v4 on sm_90: v4 was written without a GPU at hand, and becomes
// the default there once tests/cuda/gemm_test.cpp passes with it on one.
GemmAlgo best_ember_gemm_for_current_device();

// Whether `algo` can run on the current device: ember_v2/v3 need sm_80, ember_v4 a compute
// capability 9.0 GPU and a build that targets 90 (EMBER_GEMM=ember-v4 elsewhere is an error).
bool gemm_algo_available(GemmAlgo algo);

}  // namespace ember::kernels::cuda
