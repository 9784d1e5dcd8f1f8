// ember GEMM v2: tensor cores through mma.sync.aligned.m16n8k16, fed by ldmatrix.
//
//   c (m, n) = alpha * op(a) (m, k) @ op(b) (k, n) + beta * c      f16/bf16 in, f32 accumulate
//
// What changes from v1: the multiply-adds leave the CUDA cores. One mma.sync instruction has a
// warp multiply a 16 x 16 by a 16 x 8 tile (4096 multiply-adds), and ldmatrix hands each lane its
// fragment of a 16 x 16 shared-memory tile in one instruction (gemm_mma_fragments.cuh explains
// the layouts). A block of 8 warps owns a 128 x 128 tile of c; for each 32-wide slice of k it
//   1. copies a's 128 x 32 and b's 32 x 128 tiles to shared memory (16-byte loads, zeros past the
//      matrix's edges: gemm_mma_common.cuh), then waits for every thread (__syncthreads);
//   2. has each warp run 2 x 16 mma over its 64 x 32 piece of c;
//   3. waits again before the next slice overwrites the tiles.
// The loads and the math never overlap: while a warp waits for global memory the tensor cores
// idle. v3 fixes exactly that.
//
// Handles any m, n, k (zero-filled edges, predicated stores), a and b transposed or not, and needs
// sm_80 (bf16 mma). A GPU run must check (tests/cuda/gemm_test.cpp): every size and transposition
// against the CPU, both dtypes.
#include "kernels/cuda/gemm_mma.h"
#include "kernels/cuda/gemm_mma_common.cuh"
#include "kernels/cuda/gemm_mma_fragments.cuh"

namespace ember::kernels::cuda {
namespace {

using namespace mma;

// grid (row tiles, column tiles, batch), kThreads threads.
template <typename T>
__global__ void __launch_bounds__(kThreads) gemm_mma_v2_kernel(GemmParams p) {
  __shared__ __align__(128) uint16_t a_shared[kTileElements];
  __shared__ __align__(128) uint16_t b_shared[kTileElements];
  const uint16_t* a = p.a + blockIdx.z * p.stride_a;
  const uint16_t* b = p.b + blockIdx.z * p.stride_b;
  uint16_t* c = p.c + blockIdx.z * p.stride_c;
  const int64_t block_m = static_cast<int64_t>(blockIdx.x) * kTileM;
  const int64_t block_n = static_cast<int64_t>(blockIdx.y) * kTileN;
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int warp_row = (warp / 4) * kWarpTileM, warp_col = (warp % 4) * kWarpTileN;

  float acc[4][4][4] = {};
  for (int64_t k0 = 0; k0 < p.k; k0 += kTileK) {
    load_tile<false>(a_shared, a_tile(p, a, block_m, k0));
    load_tile<false>(b_shared, b_tile(p, b, block_n, k0));
    __syncthreads();
    warp_tile_mma<T>(a_shared, b_shared, p.trans_a, p.trans_b, warp_row, warp_col, acc);
    __syncthreads();
  }
  store_warp_tile<T>(p, c, block_m + warp_row, block_n + warp_col, acc);
}

}  // namespace

template <typename T>
void gemm_mma_v2(const GemmShape& shape, float alpha, const T* a, const T* b, float beta, T* c,
                 cudaStream_t stream) {
  launch_over_batch(shape, make_params(shape, alpha, a, b, beta, c), kTileM, kTileN,
                    "gemm_mma_v2_kernel<<<>>>", [&](const GemmParams& p, dim3 grid) {
                      gemm_mma_v2_kernel<T><<<grid, kThreads, 0, stream>>>(p);
                    });
}

template void gemm_mma_v2<Half>(const GemmShape&, float, const Half*, const Half*, float, Half*,
                                cudaStream_t);
template void gemm_mma_v2<BFloat16>(const GemmShape&, float, const BFloat16*, const BFloat16*,
                                    float, BFloat16*, cudaStream_t);

}  // namespace ember::kernels::cuda
