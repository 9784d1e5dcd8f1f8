// Row-wise building blocks for the CUDA kernels that reduce along dense rows (softmax,
// layer_norm, cross_entropy): a row is handled by a group of threads, either one warp (rows of up
// to kWarpRowLimit values: many rows per block, no block-wide synchronisation) or one whole block
// (longer rows: 4K, 32K, ...). Every thread of the group walks the row with the group's stride,
// then an all-reduce gives every thread the row's total.
//
//   rows (rows, n) dense; group g handles rows g, g + groups, g + 2 groups, ...
//
// Loads are 16 bytes wide (4 f32, 8 f16/bf16, 2 f64) when the caller says the rows allow it
// (vector_aligned): every row starts 16-byte aligned and n is a multiple of the vector width.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "kernels/common/convert.h"
#include "kernels/common/scalar_types.h"

namespace ember::kernels::cuda::rows {

inline constexpr int kWarpSize = 32;
// Rows up to this length get one warp each; longer rows one block each.
inline constexpr int64_t kWarpRowLimit = 1024;
inline constexpr int kWarpModeThreads = 256;  // 8 rows per block
inline constexpr int kBlockModeThreads = 512;
inline constexpr int kMaxThreads = 512;  // __launch_bounds__ of the row kernels
inline constexpr int64_t kMaxBlocks = 65535;

template <typename T>
inline constexpr int kVectorWidth = static_cast<int>(16 / sizeof(T));

template <typename T>
struct alignas(16) Vector {
  T v[kVectorWidth<T>];
};

// True when rows of n values of T starting at each of `pointers` can all be read (and written)
// 16 bytes at a time. Null pointers are ignored.
template <typename T>
inline bool vector_aligned(int64_t n, std::initializer_list<const void*> pointers) {
  if (n % kVectorWidth<T> != 0) return false;
  for (const void* p : pointers) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// How a row's values combine. max_keep_nan: a NaN anywhere makes the max NaN (softmax's
// contract); max_skip_nan: NaN never wins (std::max's behaviour, which cross_entropy mirrors).
enum class Combine { sum, max_keep_nan, max_skip_nan };

template <Combine kOp, typename Acc>
__device__ __forceinline__ Acc combine(Acc a, Acc b) {
  if constexpr (kOp == Combine::sum) {
    return a + b;
  } else if constexpr (kOp == Combine::max_keep_nan) {
    return (b > a || b != b) ? b : a;
  } else {
    return b > a ? b : a;
  }
}

// Butterfly (xor) reduction: every lane ends with the same value, since a + b == b + a exactly.
template <Combine kOp, typename Acc>
__device__ __forceinline__ Acc warp_all_reduce(Acc value) {
#pragma unroll
  for (int mask = kWarpSize / 2; mask > 0; mask /= 2)
    value = combine<kOp>(value, __shfl_xor_sync(0xffffffffu, value, mask));
  return value;
}

// Every thread of the block must call it (it synchronises); blockDim.x is a multiple of 32.
template <Combine kOp, typename Acc>
__device__ __forceinline__ Acc block_all_reduce(Acc value, Acc identity) {
  __shared__ Acc warp_results[kWarpSize];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  value = warp_all_reduce<kOp>(value);
  if (lane == 0) warp_results[warp] = value;
  __syncthreads();
  // Every warp reduces the same per-warp results in the same order: the same total everywhere.
  value = lane < warps ? warp_results[lane] : identity;
  value = warp_all_reduce<kOp>(value);
  __syncthreads();  // warp_results is reused by the next call
  return value;
}

// The group of threads sharing a row: a warp (kBlock false) or the whole block (kBlock true).
template <bool kBlock>
struct Group {
  __device__ __forceinline__ static int rank() {
    return kBlock ? static_cast<int>(threadIdx.x) : static_cast<int>(threadIdx.x) % kWarpSize;
  }
  __device__ __forceinline__ static int size() {
    return kBlock ? static_cast<int>(blockDim.x) : kWarpSize;
  }
  __device__ __forceinline__ static int64_t first_row() {
    return kBlock ? static_cast<int64_t>(blockIdx.x)
                  : static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarpSize) +
                        threadIdx.x / kWarpSize;
  }
  __device__ __forceinline__ static int64_t row_step() {
    return kBlock ? static_cast<int64_t>(gridDim.x)
                  : static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarpSize);
  }
  template <Combine kOp, typename Acc>
  __device__ __forceinline__ static Acc all_reduce(Acc value, Acc identity) {
    if constexpr (kBlock) {
      return block_all_reduce<kOp>(value, identity);
    } else {
      return warp_all_reduce<kOp>(value);
    }
  }
};

// fn(k, x[k]) for this thread's share of row x (n values).
template <bool kBlock, typename T, typename Fn>
__device__ __forceinline__ void for_each(const T* x, int64_t n, bool vectorised, Fn&& fn) {
  const int rank = Group<kBlock>::rank(), size = Group<kBlock>::size();
  if (vectorised) {
    constexpr int kWidth = kVectorWidth<T>;
    const Vector<T>* vectors = reinterpret_cast<const Vector<T>*>(x);
    for (int64_t j = rank; j < n / kWidth; j += size) {
      const Vector<T> chunk = vectors[j];
#pragma unroll
      for (int e = 0; e < kWidth; ++e)
        fn(j * kWidth + e, chunk.v[e]);
    }
  } else {
    for (int64_t k = rank; k < n; k += size)
      fn(k, x[k]);
  }
}

// out[k] = fn(k, a[k], b[k]) for this thread's share of the row (n values); b null: b[k] reads as
// a[k]. out may alias a or b.
template <bool kBlock, typename T, typename Fn>
__device__ __forceinline__ void map(T* out, const T* a, const T* b, int64_t n, bool vectorised,
                                    Fn&& fn) {
  const int rank = Group<kBlock>::rank(), size = Group<kBlock>::size();
  if (b == nullptr) b = a;
  if (vectorised) {
    constexpr int kWidth = kVectorWidth<T>;
    const Vector<T>* a_vectors = reinterpret_cast<const Vector<T>*>(a);
    const Vector<T>* b_vectors = reinterpret_cast<const Vector<T>*>(b);
    Vector<T>* out_vectors = reinterpret_cast<Vector<T>*>(out);
    for (int64_t j = rank; j < n / kWidth; j += size) {
      const Vector<T> a_chunk = a_vectors[j], b_chunk = b_vectors[j];
      Vector<T> result;
#pragma unroll
      for (int e = 0; e < kWidth; ++e)
        result.v[e] = fn(j * kWidth + e, a_chunk.v[e], b_chunk.v[e]);
      out_vectors[j] = result;
    }
  } else {
    for (int64_t k = rank; k < n; k += size)
      out[k] = fn(k, a[k], b[k]);
  }
}

// Launch shape for `rows` rows of n values: warp mode or block mode, and how many blocks.
struct LaunchShape {
  bool block_per_row;
  unsigned blocks;
  unsigned threads;
};

inline LaunchShape launch_shape(int64_t rows, int64_t n) {
  LaunchShape shape;
  shape.block_per_row = n > kWarpRowLimit;
  shape.threads = shape.block_per_row ? kBlockModeThreads : kWarpModeThreads;
  const int64_t rows_per_block = shape.block_per_row ? 1 : kWarpModeThreads / kWarpSize;
  int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;  // the kernels walk the rest grid-stride
  if (blocks < 1) blocks = 1;
  shape.blocks = static_cast<unsigned>(blocks);
  return shape;
}

template <typename Acc>
__device__ __forceinline__ Acc negative_infinity() {
  return static_cast<Acc>(-INFINITY);
}

}  // namespace ember::kernels::cuda::rows
