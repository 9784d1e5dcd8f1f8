#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/scalar_types.h"
#include "kernels/cuda/indexing.h"
#include "kernels/cuda/launch.h"

namespace ember::kernels::cuda {
namespace {

using cpu::IndexedOperand;
using cpu::IndexIteration;

__device__ __forceinline__ int64_t grid_start() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_step() {
  return static_cast<int64_t>(blockDim.x) * gridDim.x;
}

// Offset of outer position o in an operand: a null table means a single outer position (the
// runtime then sends no table at all).
__device__ __forceinline__ int64_t outer_offset(const IndexedOperand& at, int64_t o) {
  return at.outer_offsets != nullptr ? at.outer_offsets[o] : 0;
}

// Offset of inner position i in an operand: a multiply for a dense run or a broadcast, else its
// table.
__device__ __forceinline__ int64_t inner_offset(const IndexedOperand& at, int64_t i) {
  return at.inner_step >= 0 ? i * at.inner_step : at.inner_offsets[i];
}

// Where element (o, j, i) of each operand lives, for the flat position `linear` of the iteration.
struct Position {
  int64_t o, j, i;
};
__device__ __forceinline__ Position position_of(const IndexIteration& it, int64_t linear) {
  const int64_t i = linear % it.inner;
  const int64_t row = linear / it.inner;
  return {row / it.along, row % it.along, i};
}

template <typename T, typename I>
__global__ void gather_kernel(IndexIteration it, T* out, IndexedOperand out_at, const T* x,
                              IndexedOperand x_at, const I* index, IndexedOperand index_at) {
  const int64_t total = it.outer * it.along * it.inner;
  for (int64_t linear = grid_start(); linear < total; linear += grid_step()) {
    const Position p = position_of(it, linear);
    const int64_t at =
        static_cast<int64_t>(index[outer_offset(index_at, p.o) + p.j * index_at.along_stride +
                                   inner_offset(index_at, p.i)]);
    out[outer_offset(out_at, p.o) + p.j * out_at.along_stride + inner_offset(out_at, p.i)] =
        x[outer_offset(x_at, p.o) + at * x_at.along_stride + inner_offset(x_at, p.i)];
  }
}

// The atomic add of one value into `slot`, in the type's own width.
template <typename T>
__device__ __forceinline__ void atomic_add(T* slot, T value) {
  if constexpr (std::is_same_v<T, Half>) {
    atomicAdd(reinterpret_cast<__half*>(slot), __ushort_as_half(value.bits));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    atomicAdd(reinterpret_cast<__nv_bfloat16*>(slot), __ushort_as_bfloat16(value.bits));
  } else if constexpr (std::is_same_v<T, int64_t>) {
    // Two's complement: an unsigned add wraps to the same bits as a signed one.
    atomicAdd(reinterpret_cast<unsigned long long*>(slot), static_cast<unsigned long long>(value));
  } else {
    atomicAdd(slot, value);  // float, double, int32_t
  }
}

template <typename T, typename I>
__global__ void scatter_add_atomic_kernel(IndexIteration it, T* out, IndexedOperand out_at,
                                          const T* src, IndexedOperand src_at, const I* index,
                                          IndexedOperand index_at) {
  const int64_t total = it.outer * it.along * it.inner;
  for (int64_t linear = grid_start(); linear < total; linear += grid_step()) {
    const Position p = position_of(it, linear);
    const int64_t at =
        static_cast<int64_t>(index[outer_offset(index_at, p.o) + p.j * index_at.along_stride +
                                   inner_offset(index_at, p.i)]);
    atomic_add(
        out + outer_offset(out_at, p.o) + at * out_at.along_stride + inner_offset(out_at, p.i),
        src[outer_offset(src_at, p.o) + p.j * src_at.along_stride + inner_offset(src_at, p.i)]);
  }
}

// The CPU's scheme: distinct (o, i) columns never write the same output element, so a thread per
// column walks j in order with plain adds (deterministic, no atomics).
template <typename T, typename I>
__global__ void scatter_add_columns_kernel(IndexIteration it, T* out, IndexedOperand out_at,
                                           const T* src, IndexedOperand src_at, const I* index,
                                           IndexedOperand index_at) {
  const int64_t columns = it.outer * it.inner;
  for (int64_t column = grid_start(); column < columns; column += grid_step()) {
    const int64_t o = column / it.inner, i = column % it.inner;
    T* out_column = out + outer_offset(out_at, o) + inner_offset(out_at, i);
    const T* src_column = src + outer_offset(src_at, o) + inner_offset(src_at, i);
    const I* index_column = index + outer_offset(index_at, o) + inner_offset(index_at, i);
    for (int64_t j = 0; j < it.along; ++j) {
      const int64_t at = static_cast<int64_t>(index_column[j * index_at.along_stride]);
      T& slot = out_column[at * out_at.along_stride];
      slot = static_cast<T>(slot + src_column[j * src_at.along_stride]);
    }
  }
}

template <typename I>
__global__ void first_out_of_range_kernel(const I* index, int64_t count, int64_t limit,
                                          int64_t* first_bad) {
  for (int64_t k = grid_start(); k < count; k += grid_step()) {
    const int64_t value = static_cast<int64_t>(index[k]);
    if (value < 0 || value >= limit)
      atomicMin(reinterpret_cast<long long*>(first_bad), static_cast<long long>(k));
  }
}

}  // namespace

template <typename T, typename I>
void gather(const IndexIteration& iteration, T* out, const IndexedOperand& out_at, const T* x,
            const IndexedOperand& x_at, const I* index, const IndexedOperand& index_at,
            cudaStream_t stream) {
  const int64_t total = iteration.outer * iteration.along * iteration.inner;
  if (total == 0) return;
  gather_kernel<T, I><<<blocks_for(total), kThreadsPerBlock, 0, stream>>>(iteration, out, out_at, x,
                                                                          x_at, index, index_at);
  EMBER_CUDA_CHECK_LAUNCH("gather<<<>>>");
}

template <typename T, typename I>
void scatter_add(const IndexIteration& iteration, T* out, const IndexedOperand& out_at,
                 const T* src, const IndexedOperand& src_at, const I* index,
                 const IndexedOperand& index_at, cudaStream_t stream) {
  const int64_t total = iteration.outer * iteration.along * iteration.inner;
  if (total == 0) return;
  if constexpr (std::is_same_v<T, uint8_t>) {
    const int64_t columns = iteration.outer * iteration.inner;
    scatter_add_columns_kernel<T, I><<<blocks_for(columns), kThreadsPerBlock, 0, stream>>>(
        iteration, out, out_at, src, src_at, index, index_at);
  } else {
    scatter_add_atomic_kernel<T, I><<<blocks_for(total), kThreadsPerBlock, 0, stream>>>(
        iteration, out, out_at, src, src_at, index, index_at);
  }
  EMBER_CUDA_CHECK_LAUNCH("scatter_add<<<>>>");
}

template <typename I>
void first_out_of_range(const I* index, int64_t count, int64_t limit, int64_t* first_bad,
                        cudaStream_t stream) {
  if (count == 0) return;
  first_out_of_range_kernel<I>
      <<<blocks_for(count), kThreadsPerBlock, 0, stream>>>(index, count, limit, first_bad);
  EMBER_CUDA_CHECK_LAUNCH("first_out_of_range<<<>>>");
}

#define EMBER_INSTANTIATE_CUDA_GATHER(T, I)                                              \
  template void gather<T, I>(const IndexIteration&, T*, const IndexedOperand&, const T*, \
                             const IndexedOperand&, const I*, const IndexedOperand&,     \
                             cudaStream_t);
#define EMBER_INSTANTIATE_CUDA_SCATTER(T, I)                                                  \
  template void scatter_add<T, I>(const IndexIteration&, T*, const IndexedOperand&, const T*, \
                                  const IndexedOperand&, const I*, const IndexedOperand&,     \
                                  cudaStream_t);
#define EMBER_INSTANTIATE_CUDA_INDEXING(M, T) \
  M(T, int32_t)                               \
  M(T, int64_t)
EMBER_INSTANTIATE_CUDA_INDEXING(EMBER_INSTANTIATE_CUDA_GATHER, uint8_t)
EMBER_INSTANTIATE_CUDA_INDEXING(EMBER_INSTANTIATE_CUDA_GATHER, uint16_t)
EMBER_INSTANTIATE_CUDA_INDEXING(EMBER_INSTANTIATE_CUDA_GATHER, uint32_t)
EMBER_INSTANTIATE_CUDA_INDEXING(EMBER_INSTANTIATE_CUDA_GATHER, uint64_t)
EMBER_INSTANTIATE_CUDA_INDEXING(EMBER_INSTANTIATE_CUDA_SCATTER, float)
EMBER_INSTANTIATE_CUDA_INDEXING(EMBER_INSTANTIATE_CUDA_SCATTER, double)
EMBER_INSTANTIATE_CUDA_INDEXING(EMBER_INSTANTIATE_CUDA_SCATTER, Half)
EMBER_INSTANTIATE_CUDA_INDEXING(EMBER_INSTANTIATE_CUDA_SCATTER, BFloat16)
EMBER_INSTANTIATE_CUDA_INDEXING(EMBER_INSTANTIATE_CUDA_SCATTER, int32_t)
EMBER_INSTANTIATE_CUDA_INDEXING(EMBER_INSTANTIATE_CUDA_SCATTER, int64_t)
EMBER_INSTANTIATE_CUDA_INDEXING(EMBER_INSTANTIATE_CUDA_SCATTER, uint8_t)
#undef EMBER_INSTANTIATE_CUDA_INDEXING
#undef EMBER_INSTANTIATE_CUDA_SCATTER
#undef EMBER_INSTANTIATE_CUDA_GATHER

template void first_out_of_range<int32_t>(const int32_t*, int64_t, int64_t, int64_t*, cudaStream_t);
template void first_out_of_range<int64_t>(const int64_t*, int64_t, int64_t, int64_t*, cudaStream_t);

}  // namespace ember::kernels::cuda
