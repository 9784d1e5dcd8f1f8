// ember GEMM v1: the classic shared-memory tiled kernel, on CUDA cores. The correctness baseline
// of the ladder (gemm_mma.h) and the version for GPUs without bf16 tensor cores (before sm_80).
//
//   c (m, n) = alpha * op(a) (m, k) @ op(b) (k, n) + beta * c      f16/bf16 in, f32 accumulate
//
// A 16 x 16 block of threads owns a 16 x 16 tile of c, one output per thread. For each 16-wide
// slice of k the block copies a's 16 x 16 and b's 16 x 16 tiles to shared memory (each element
// read from global memory once per block instead of 16 times), converted to f32, zeros past the
// edges; then every thread runs 16 multiply-adds from shared memory.
//
// Element (i, j) of an operand is read through a (row step, column step) pair, so a transposed
// operand is only a swap of the two steps. Why it is slow: every multiply-add costs two shared
// loads, there is no reuse in registers, and the tensor cores sit idle; v2 and v3 fix that.
#include "kernels/cuda/gemm_mma.h"
#include "kernels/cuda/gemm_mma_common.cuh"

namespace ember::kernels::cuda {
namespace {

using mma::GemmParams;

inline constexpr int kTile = 16;

// grid (row tiles, column tiles, batch), (kTile, kTile) threads.
template <typename T>
__global__ void __launch_bounds__(kTile* kTile) gemm_mma_v1_kernel(GemmParams p) {
  // +1 column: a warp reading a column of a_tile touches 16 different banks, not one.
  __shared__ float a_tile[kTile][kTile + 1];
  __shared__ float b_tile[kTile][kTile + 1];
  const uint16_t* a = p.a + blockIdx.z * p.stride_a;
  const uint16_t* b = p.b + blockIdx.z * p.stride_b;
  uint16_t* c = p.c + blockIdx.z * p.stride_c;
  // Steps between rows and columns of op(a) (m, k) and op(b) (k, n) as stored.
  const int64_t a_row_step = p.trans_a ? 1 : p.lda, a_col_step = p.trans_a ? p.lda : 1;
  const int64_t b_row_step = p.trans_b ? 1 : p.ldb, b_col_step = p.trans_b ? p.ldb : 1;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kTile + ty;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * kTile + tx;

  float acc = 0.0f;
  for (int64_t k0 = 0; k0 < p.k; k0 += kTile) {
    // Thread (ty, tx) fetches a(row, k0 + tx) and b(k0 + ty, col).
    const int64_t ka = k0 + tx, kb = k0 + ty;
    a_tile[ty][tx] =
        row < p.m && ka < p.k ? mma::from_bits<T>(a[row * a_row_step + ka * a_col_step]) : 0.0f;
    b_tile[ty][tx] =
        kb < p.k && col < p.n ? mma::from_bits<T>(b[kb * b_row_step + col * b_col_step]) : 0.0f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTile; ++kk)
      acc += a_tile[ty][kk] * b_tile[kk][tx];
    __syncthreads();
  }
  if (row < p.m && col < p.n) {
    uint16_t* out = c + row * p.ldc + col;
    float value = p.alpha * acc;
    if (p.beta != 0.0f) value += p.beta * mma::from_bits<T>(*out);
    *out = mma::to_bits<T>(value);
  }
}

}  // namespace

template <typename T>
void gemm_mma_v1(const GemmShape& shape, float alpha, const T* a, const T* b, float beta, T* c,
                 cudaStream_t stream) {
  mma::launch_over_batch(shape, mma::make_params(shape, alpha, a, b, beta, c), kTile, kTile,
                         "gemm_mma_v1_kernel<<<>>>", [&](const GemmParams& p, dim3 grid) {
                           gemm_mma_v1_kernel<T><<<grid, dim3(kTile, kTile), 0, stream>>>(p);
                         });
}

template void gemm_mma_v1<Half>(const GemmShape&, float, const Half*, const Half*, float, Half*,
                                cudaStream_t);
template void gemm_mma_v1<BFloat16>(const GemmShape&, float, const BFloat16*, const BFloat16*,
                                    float, BFloat16*, cudaStream_t);

}  // namespace ember::kernels::cuda
