// The warp-level half of ember's tensor-core GEMM (v2 and v3): ldmatrix from shared memory into
// mma.sync.aligned.m16n8k16 fragments, f32 accumulation.
//
// ---- fragment layouts of mma.m16n8k16 (f16/bf16 in, f32 accumulate)
// ------------------------------ A warp multiplies a 16 x 16 tile of a by a 16 x 8 tile of b into a
// 16 x 8 tile of c. Each of the 32 lanes holds a fixed part of each operand in registers; with g =
// lane / 4 (0..7) and t = lane % 4 (0..3), and "a pair" meaning two 16-bit values packed into one
// 32-bit register (lower column / lower k first):
//
//   a (16 x 16, row): 4 registers   a0: row g,     k 2t, 2t+1      a1: row g + 8, k 2t, 2t+1
//                                   a2: row g,     k 2t+8, 2t+9    a3: row g + 8, k 2t+8, 2t+9
//   b (16 x 8, "col"): 2 registers  b0: k 2t, 2t+1,   column g     b1: k 2t+8, 2t+9, column g
//   c (16 x 8, f32):   4 registers  c0, c1: row g, columns 2t, 2t+1;  c2, c3: row g + 8, same
//
// ---- ldmatrix -----------------------------------------------------------------------------------
// ldmatrix.x4 loads four 8 x 8 matrices of 16-bit values from shared memory: lanes 8i..8i+7 give
// the addresses of the 8 rows (16 bytes each) of matrix i, and lane l receives, in its register i,
// the pair at row l / 4, columns 2(l % 4) and 2(l % 4) + 1 of matrix i: exactly a0's pattern.
// With .trans each matrix is transposed on the way: lane l receives stored rows 2(l % 4) and
// 2(l % 4) + 1 of column l / 4. So:
//
//   a stored (m, k) [row-major]: matrices (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15),
//     (m 8-15, k 8-15) give a0..a3 directly: lane l points at row l % 16, column 8 (l / 16).
//   a stored (k, m) [transposed]: the same four matrices read with .trans from stored rows
//     k = l % 8 + 8 (i / 2), column m = 8 (i % 2), where i = l / 8.
//   b stored (n, k) [transposed]: a plain read gives lane l the pair (column n = l / 4, k 2t, 2t+1)
//     = b0. Matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) give b0, b1
//     of the first 8 columns and b0, b1 of the next 8: stored row n = l % 8 + 8 (i / 2), column
//     k = 8 (i % 2).
//   b stored (k, n) [row-major]: the same, with .trans: stored row k = l % 8 + 8 (i % 2), column
//     n = 8 (i / 2).
// Shared memory keeps the stored orientation (gemm_mma_common.cuh), so one load instruction per
// 16 x 16 piece serves every transposition.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/common/scalar_types.h"
#include "kernels/cuda/gemm_mma_common.cuh"

namespace ember::kernels::cuda::mma {

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* shared_row,
                                            bool transpose) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared_row));
  if (transpose) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  }
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// acc (16 x 8, f32) += a (16 x 16) @ b (16 x 8), in the layouts above.
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&acc)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, Half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// One warp's share of a block tile held in shared memory (layouts of gemm_mma_common.cuh):
// acc (64 x 32 piece at warp_row, warp_col of the block tile) += a_tile @ b_tile over kTileK.
template <typename T>
__device__ __forceinline__ void warp_tile_mma(const uint16_t* a_shared, const uint16_t* b_shared,
                                              bool trans_a, bool trans_b, int warp_row,
                                              int warp_col, float (&acc)[4][4][4]) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int i = lane / 8, r = lane % 8;  // which 8 x 8 matrix this lane addresses, which row
  const int a_pitch = trans_a ? kTileM + kPad : kTileK + kPad;
  const int b_pitch = trans_b ? kTileK + kPad : kTileN + kPad;
#pragma unroll
  for (int k16 = 0; k16 < kTileK; k16 += 16) {
    uint32_t a[4][4], b[4][2];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
      const int m16 = warp_row + mi * 16;
      const uint16_t* row = trans_a
                                ? a_shared + (k16 + r + 8 * (i / 2)) * a_pitch + m16 + 8 * (i % 2)
                                : a_shared + (m16 + lane % 16) * a_pitch + k16 + 8 * (lane / 16);
      ldmatrix_x4(a[mi], row, trans_a);
    }
#pragma unroll
    for (int pair = 0; pair < 2; ++pair) {
      const int n16 = warp_col + pair * 16;
      const uint16_t* row = trans_b
                                ? b_shared + (n16 + r + 8 * (i / 2)) * b_pitch + k16 + 8 * (i % 2)
                                : b_shared + (k16 + r + 8 * (i % 2)) * b_pitch + n16 + 8 * (i / 2);
      uint32_t loaded[4];
      ldmatrix_x4(loaded, row, !trans_b);  // b stored (k, n) needs .trans; stored (n, k) does not
      b[2 * pair][0] = loaded[0];
      b[2 * pair][1] = loaded[1];
      b[2 * pair + 1][0] = loaded[2];
      b[2 * pair + 1][1] = loaded[3];
    }
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
      for (int nj = 0; nj < 4; ++nj)
        mma_m16n8k16<T>(acc[mi][nj], a[mi], b[nj]);
    }
  }
}

}  // namespace ember::kernels::cuda::mma
