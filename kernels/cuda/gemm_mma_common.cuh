// What ember's GEMM kernels share (gemm_mma.h lists them): the parameters a kernel receives, the
// host-side launch loop over the batch, and, for the tensor-core versions v2 and v3, the block
// tile, its shared-memory layout, the global -> shared tile loader and the epilogue.
//
// Conventions (kernels/cuda/gemm.h): every matrix is row-major with a leading dimension. An
// operand is handed to the loader as the matrix it is *stored* as: a is stored (m, k), or (k, m)
// when trans_a; b is stored (k, n), or (n, k) when trans_b. Shared memory keeps each tile in its
// stored orientation, so a global row is copied with 16-byte vectors whatever the transposition,
// and the transposition is undone for free by ldmatrix (.trans or not, gemm_mma_fragments.cuh).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/common/scalar_types.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemm.h"

namespace ember::kernels::cuda::mma {

// ---- parameters ---------------------------------------------------------------------------------

// One launch's view of a GemmShape, with 16-bit elements as raw bits (uint16_t): the kernels only
// move them around until the mma instruction or the f32 epilogue interprets them.
struct GemmParams {
  const uint16_t* a;
  const uint16_t* b;
  uint16_t* c;
  int64_t m, n, k;
  int64_t lda, ldb, ldc;
  int64_t stride_a, stride_b, stride_c;  // between batch entries (blockIdx.z)
  bool trans_a, trans_b;
  // Every 8-element run of a stored row starting at a multiple of 8 is 16-byte aligned (base
  // pointer, leading dim and batch stride all multiples of 16 bytes): 16-byte vector loads and
  // cp.async may be used; otherwise the loaders fall back to one element at a time.
  bool vector_a, vector_b;
  float alpha, beta;
};

inline bool vector_loads_ok(const void* pointer, int64_t ld, int64_t batch, int64_t stride) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0 && ld % 8 == 0 &&
         (batch <= 1 || stride % 8 == 0);
}

template <typename T>
GemmParams make_params(const GemmShape& s, float alpha, const T* a, const T* b, float beta, T* c) {
  static_assert(sizeof(T) == 2, "ember's GEMM kernels take 16-bit floats");
  GemmParams p{};
  p.a = reinterpret_cast<const uint16_t*>(a);
  p.b = reinterpret_cast<const uint16_t*>(b);
  p.c = reinterpret_cast<uint16_t*>(c);
  p.m = s.m, p.n = s.n, p.k = s.k;
  p.lda = s.lda, p.ldb = s.ldb, p.ldc = s.ldc;
  p.stride_a = s.stride_a, p.stride_b = s.stride_b, p.stride_c = s.stride_c;
  p.trans_a = s.trans_a, p.trans_b = s.trans_b;
  p.vector_a = vector_loads_ok(a, s.lda, s.batch, s.stride_a);
  p.vector_b = vector_loads_ok(b, s.ldb, s.batch, s.stride_b);
  p.alpha = alpha, p.beta = beta;
  return p;
}

// Launches `launch(params, grid)` over the batch in chunks of at most 65535 (gridDim.z's limit),
// with grid.x over row tiles of `tile_m` and grid.y over column tiles of `tile_n`.
template <typename Launch>
void launch_over_batch(const GemmShape& s, GemmParams p, int tile_m, int tile_n,
                       const char* kernel_name, Launch&& launch) {
  if (s.m == 0 || s.n == 0 || s.batch == 0) return;
  const int64_t row_tiles = (s.m + tile_m - 1) / tile_m;
  const int64_t col_tiles = (s.n + tile_n - 1) / tile_n;
  if (row_tiles > 0x7fffffff || col_tiles > 65535) {
    throw std::invalid_argument(std::string(kernel_name) + ": a (" + std::to_string(s.m) + ", " +
                                std::to_string(s.n) + ") output is too large for its grid");
  }
  constexpr int64_t kMaxBatchPerLaunch = 65535;
  for (int64_t first = 0; first < s.batch; first += kMaxBatchPerLaunch) {
    const int64_t count = std::min(kMaxBatchPerLaunch, s.batch - first);
    GemmParams chunk = p;
    chunk.a += first * s.stride_a;
    chunk.b += first * s.stride_b;
    chunk.c += first * s.stride_c;
    launch(chunk, dim3(static_cast<unsigned>(row_tiles), static_cast<unsigned>(col_tiles),
                       static_cast<unsigned>(count)));
    EMBER_CUDA_CHECK_LAUNCH(kernel_name);
  }
}

// f32 -> T with round to nearest even (ember's own conversion, bit-identical to the CPU's).
template <typename T>
__device__ __forceinline__ uint16_t to_bits(float value) {
  return T(value).bits;
}
template <typename T>
__device__ __forceinline__ float from_bits(uint16_t bits) {
  return static_cast<float>(T::from_bits(bits));
}

// ---- the tensor-core block tile (v2, v3)
// ----------------------------------------------------------
//
// A block of 8 warps computes a 128 x 128 tile of c, walking k 32 at a time. The warps form a
// 2 x 4 grid; each owns a 64 x 32 piece = 4 x 4 mma tiles of 16 x 8, i.e. 64 f32 accumulators per
// thread.
inline constexpr int kTileM = 128;
inline constexpr int kTileN = 128;
inline constexpr int kTileK = 32;
inline constexpr int kThreads = 256;
inline constexpr int kWarpTileM = 64;
inline constexpr int kWarpTileN = 32;

// Shared-memory rows are padded by 8 elements (16 bytes). Why: ldmatrix reads 8 rows of 16 bytes
// at once, one row per 4 of the 32 banks. Unpadded, a 32-element row is 64 bytes, so rows 0, 2,
// 4, 6 start in the same bank and the read is split into 2 conflicting wavefronts (8 for 128-
// element rows, which are 256 bytes: every row in bank 0). Padded, a row is 80 bytes (20 banks)
// or 272 bytes (68 = 4 mod 32 banks): 8 consecutive rows start in 8 different 4-bank groups and
// each ldmatrix phase is one conflict-free wavefront. (An XOR swizzle of the 16-byte chunk index
// by the row index achieves the same without wasting the 20% of shared memory the padding costs;
// padding is chosen here because the addresses stay readable.)
inline constexpr int kPad = 8;
// A tile is 128 x 32 or 32 x 128 elements depending on the transposition; the buffer fits both.
inline constexpr int kTileElements = kTileM * (kTileK + kPad) > kTileK*(kTileM + kPad)
                                         ? kTileM*(kTileK + kPad)
                                         : kTileK*(kTileM + kPad);
static_assert(kTileM == kTileN, "the a and b tiles share one shape and one buffer size");

// The stored-orientation geometry of one operand's tile (see the top of this file).
struct TileView {
  const uint16_t* base;  // the matrix (this batch entry)
  int64_t rows, cols, ld;
  int64_t row0, col0;  // the tile's first element in the stored matrix
  int tile_rows, tile_cols;
  bool vector_ok;
};

// a's tile at k0: stored (m, k) -> rows [block_m, +128) x cols [k0, +32); transposed, (k, m).
__device__ __forceinline__ TileView a_tile(const GemmParams& p, const uint16_t* a, int64_t block_m,
                                           int64_t k0) {
  if (p.trans_a) return {a, p.k, p.m, p.lda, k0, block_m, kTileK, kTileM, p.vector_a};
  return {a, p.m, p.k, p.lda, block_m, k0, kTileM, kTileK, p.vector_a};
}
// b's tile at k0: stored (k, n) -> rows [k0, +32) x cols [block_n, +128); transposed, (n, k).
__device__ __forceinline__ TileView b_tile(const GemmParams& p, const uint16_t* b, int64_t block_n,
                                           int64_t k0) {
  if (p.trans_b) return {b, p.n, p.k, p.ldb, block_n, k0, kTileN, kTileK, p.vector_b};
  return {b, p.k, p.n, p.ldb, k0, block_n, kTileK, kTileN, p.vector_b};
}

// cp.async of 16 bytes global -> shared that reads only `src_bytes` (0..16) and zero-fills the
// rest: the edge of the matrix costs no branch. Needs 16-byte aligned addresses on both sides.
__device__ __forceinline__ void cp_async_16(void* shared_dst, const void* global_src,
                                            int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src),
               "r"(src_bytes));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// Copies one tile from global to shared memory (row pitch tile_cols + kPad), zero-filling past the
// matrix's edges, so the mma loop never checks bounds. The tile is cut into 16-byte chunks of 8
// elements along its stored rows; each of the 256 threads takes every 256th chunk.
//   kAsync: chunks go by cp.async (v3; the caller commits and waits); else by plain loads (v2).
// A chunk that is not 16-byte aligned (vector_ok false) is always copied element by element.
template <bool kAsync>
__device__ __forceinline__ void load_tile(uint16_t* shared, const TileView& t) {
  const int chunks_per_row = t.tile_cols / 8;
  const int chunks = t.tile_rows * chunks_per_row;
  const int pitch = t.tile_cols + kPad;
  for (int chunk = static_cast<int>(threadIdx.x); chunk < chunks; chunk += kThreads) {
    const int r = chunk / chunks_per_row, c = (chunk % chunks_per_row) * 8;
    const int64_t row = t.row0 + r, col = t.col0 + c;
    uint16_t* dst = shared + r * pitch + c;
    int valid = 0;  // elements of this chunk inside the matrix
    if (row < t.rows && col < t.cols) valid = static_cast<int>(t.cols - col < 8 ? t.cols - col : 8);
    const uint16_t* src = valid > 0 ? t.base + row * t.ld + col : t.base;
    if (t.vector_ok) {
      if constexpr (kAsync) {
        cp_async_16(dst, src, valid * 2);
        continue;
      } else if (valid == 8) {
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
        continue;
      }
    }
    uint16_t values[8];
#pragma unroll
    for (int e = 0; e < 8; ++e)
      values[e] = e < valid ? src[e] : uint16_t{0};
    uint4 packed;
    packed.x = values[0] | (static_cast<uint32_t>(values[1]) << 16);
    packed.y = values[2] | (static_cast<uint32_t>(values[3]) << 16);
    packed.z = values[4] | (static_cast<uint32_t>(values[5]) << 16);
    packed.w = values[6] | (static_cast<uint32_t>(values[7]) << 16);
    *reinterpret_cast<uint4*>(dst) = packed;
  }
}

// c = alpha * acc + beta * c for the warp's 64 x 32 piece, skipping what lies past the edges.
// acc[mi][nj] is the 16 x 8 mma tile (mi, nj) in the accumulator layout of mma.m16n8k16: with
// g = lane / 4 and t = lane % 4, registers {0, 1} hold row g, columns 2t and 2t + 1, and
// registers {2, 3} row g + 8, the same columns.
template <typename T>
__device__ __forceinline__ void store_warp_tile(const GemmParams& p, uint16_t* c, int64_t row0,
                                                int64_t col0, const float (&acc)[4][4][4]) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
    for (int nj = 0; nj < 4; ++nj) {
#pragma unroll
      for (int reg = 0; reg < 4; ++reg) {
        const int64_t row = row0 + mi * 16 + g + (reg / 2) * 8;
        const int64_t col = col0 + nj * 8 + 2 * t + (reg % 2);
        if (row >= p.m || col >= p.n) continue;
        uint16_t* out = c + row * p.ldc + col;
        float value = p.alpha * acc[mi][nj][reg];
        if (p.beta != 0.0f) value += p.beta * from_bits<T>(*out);
        *out = to_bits<T>(value);
      }
    }
  }
}

}  // namespace ember::kernels::cuda::mma
