// ember GEMM v3: v2's tensor-core tile plus cp.async and a 3-stage shared-memory pipeline.
//
//   c (m, n) = alpha * op(a) (m, k) @ op(b) (k, n) + beta * c      f16/bf16 in, f32 accumulate
//
// v2 loads a k-slice, waits, computes, waits: the tensor cores idle during every load. Here
// shared memory holds kStages k-slices in a ring. cp.async (sm_80) copies global -> shared
// without passing through registers and without blocking the thread: a warp issues the copies
// for slice kt + 2, then computes slice kt while they fly. Copies are grouped (commit_group) one
// group per slice, and `cp.async.wait_group N` waits until at most N groups are still in flight:
//
//   prologue:   issue slices 0 .. kStages-2, one group each
//   step kt:    wait until slice kt has landed (at most kStages-2 groups pending), __syncthreads
//               (everyone's copies are visible, and everyone has finished computing slice kt-1),
//               issue slice kt + kStages-1 into the ring entry slice kt-1 used, compute slice kt.
//
// A group is committed at every step even when nothing is left to issue, so that "kStages-2
// pending" always means "slice kt is complete". Edges cost nothing: cp.async's src-size operand
// zero-fills the part of a 16-byte chunk past the matrix (gemm_mma_common.cuh). Operands that
// are not 16-byte aligned are copied element by element with plain stores instead: those land
// before the __syncthreads that precedes their use, so the ring stays correct.
//
// 3 stages x (a + b) x 128 x 40 x 2 bytes = 60 KiB of shared memory: more than the 48 KiB a
// kernel gets by default, so the launch opts in (cudaFuncAttributeMaxDynamicSharedMemorySize).
//
// Needs sm_80. A GPU run must check (tests/cuda/gemm_test.cpp) every size (k of 1 to several
// slices: the prologue and the ring's wrap-around), transposition and dtype against the CPU.
#include "kernels/cuda/gemm_mma.h"
#include "kernels/cuda/gemm_mma_common.cuh"
#include "kernels/cuda/gemm_mma_fragments.cuh"

namespace ember::kernels::cuda {
namespace {

using namespace mma;

inline constexpr int kStages = 3;
inline constexpr int kStageElements = 2 * kTileElements;  // a's tile, then b's
inline constexpr size_t kSharedBytes = size_t{kStages} * kStageElements * sizeof(uint16_t);

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

// grid (row tiles, column tiles, batch), kThreads threads, kSharedBytes of dynamic shared memory.
template <typename T>
__global__ void __launch_bounds__(kThreads) gemm_mma_v3_kernel(GemmParams p) {
  extern __shared__ __align__(128) uint16_t ring[];  // kStages x [a tile | b tile]
  const uint16_t* a = p.a + blockIdx.z * p.stride_a;
  const uint16_t* b = p.b + blockIdx.z * p.stride_b;
  uint16_t* c = p.c + blockIdx.z * p.stride_c;
  const int64_t block_m = static_cast<int64_t>(blockIdx.x) * kTileM;
  const int64_t block_n = static_cast<int64_t>(blockIdx.y) * kTileN;
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int warp_row = (warp / 4) * kWarpTileM, warp_col = (warp % 4) * kWarpTileN;
  const int64_t slices = (p.k + kTileK - 1) / kTileK;

  auto issue = [&](int64_t slice) {
    if (slice < slices) {
      uint16_t* stage = ring + (slice % kStages) * kStageElements;
      load_tile<true>(stage, a_tile(p, a, block_m, slice * kTileK));
      load_tile<true>(stage + kTileElements, b_tile(p, b, block_n, slice * kTileK));
    }
    cp_async_commit();  // an empty group when nothing is left: keeps the counting uniform
  };

  float acc[4][4][4] = {};
  for (int s = 0; s < kStages - 1; ++s)
    issue(s);
  for (int64_t kt = 0; kt < slices; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    issue(kt + kStages - 1);
    const uint16_t* stage = ring + (kt % kStages) * kStageElements;
    warp_tile_mma<T>(stage, stage + kTileElements, p.trans_a, p.trans_b, warp_row, warp_col, acc);
  }
  cp_async_wait<0>();  // nothing may be in flight into shared memory when the block exits
  store_warp_tile<T>(p, c, block_m + warp_row, block_n + warp_col, acc);
}

}  // namespace

template <typename T>
void gemm_mma_v3(const GemmShape& shape, float alpha, const T* a, const T* b, float beta, T* c,
                 cudaStream_t stream) {
  // Per device and cheap: set on every call rather than tracking which devices have seen it.
  EMBER_CUDA_KERNEL_CHECK(cudaFuncSetAttribute(gemm_mma_v3_kernel<T>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(kSharedBytes)));
  launch_over_batch(shape, make_params(shape, alpha, a, b, beta, c), kTileM, kTileN,
                    "gemm_mma_v3_kernel<<<>>>", [&](const GemmParams& p, dim3 grid) {
                      gemm_mma_v3_kernel<T><<<grid, kThreads, kSharedBytes, stream>>>(p);
                    });
}

template void gemm_mma_v3<Half>(const GemmShape&, float, const Half*, const Half*, float, Half*,
                                cudaStream_t);
template void gemm_mma_v3<BFloat16>(const GemmShape&, float, const BFloat16*, const BFloat16*,
                                    float, BFloat16*, cudaStream_t);

}  // namespace ember::kernels::cuda
