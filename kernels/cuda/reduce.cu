#include <cstdint>
#include <type_traits>

#include "kernels/common/convert.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/scratch.h"

namespace ember::kernels::cuda {
namespace {

template <typename T>
using sum_acc_t = std::conditional_t<std::is_floating_point_v<acc_t<T>>, acc_t<T>, int64_t>;

constexpr int kRowThreads = 256;  // row sums: one block per row (or per chunk of a long row)
constexpr int kTileWidth = 32;    // column sums: a warp's worth of adjacent columns ...
constexpr int kTileRows = 8;      // ... times this many slices of the reduced dim
constexpr int64_t kMaxBlocks = 65535;
// A row longer than this, in a reduction with few rows, is split into chunks summed by separate
// blocks (pass 1) whose partial sums are then summed (pass 2): one block per row would leave most
// of the GPU idle when summing a whole tensor.
constexpr int64_t kChunk = 16384;
constexpr int64_t kMaxChunksPerRow = 1024;
// Column sums: split the reduced dim until about this many blocks run (8 per SM of an H100) ...
constexpr int64_t kTargetColumnBlocks = 1024;
// ... but give no block fewer rows than this (32 per thread).
constexpr int64_t kMinColumnChunk = 256;

template <typename Acc>
__device__ __forceinline__ Acc warp_sum(Acc value) {
#pragma unroll
  for (int width = 16; width > 0; width /= 2)
    value += __shfl_down_sync(0xffffffffu, value, width);
  return value;
}

// The sum of x[0 .. n) over the block's kRowThreads threads; valid in thread 0. Every thread of
// the block must call it (it synchronises).
template <typename Acc, typename In>
__device__ Acc block_sum(const In* x, int64_t n) {
  __shared__ Acc warp_totals[kRowThreads / 32];
  Acc total = 0;
  for (int64_t r = threadIdx.x; r < n; r += kRowThreads)
    total += convert<Acc>(x[r]);
  total = warp_sum(total);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_totals[warp] = total;
  __syncthreads();
  if (warp == 0) {
    total = lane < kRowThreads / 32 ? warp_totals[lane] : Acc(0);
    total = warp_sum(total);
  }
  __syncthreads();  // warp_totals may be reused by the caller's next call
  return total;
}

// inner == 1. in (outer, reduce) -> out (outer): a block per row, rows walked grid-stride.
template <typename Acc, typename In, typename Out>
__global__ void row_sum_kernel(const In* in, Out* out, int64_t outer, int64_t reduce) {
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const Acc total = block_sum<Acc>(in + row * reduce, reduce);
    if (threadIdx.x == 0) out[row] = convert<Out>(total);
  }
}

// Pass 1 for long rows. in (outer, reduce) -> partial (outer, chunks): block (chunk, row).
template <typename Acc, typename In>
__global__ void chunk_sum_kernel(const In* in, Acc* partial, int64_t reduce, int64_t chunks,
                                 int64_t chunk_length) {
  const int64_t row = blockIdx.y, chunk = blockIdx.x;
  const int64_t begin = chunk * chunk_length;
  const int64_t length = begin + chunk_length < reduce ? chunk_length : reduce - begin;
  const Acc total = block_sum<Acc>(in + row * reduce + begin, length);
  if (threadIdx.x == 0) partial[row * chunks + chunk] = total;
}

// inner > 1. in (outer, reduce, inner) -> out (outer, chunks, inner): a block of (32, 8) threads
// per tile of 32 adjacent columns of one outer index and one chunk of the reduced dim
// (blockIdx.y; rows [chunk chunk_length, (chunk + 1) chunk_length)). threadIdx.x walks the
// columns (coalesced loads), threadIdx.y splits the chunk's rows, and shared memory adds the 8
// slices. With one chunk, out is (outer, inner).
template <typename Acc, typename In, typename Out>
__global__ void column_sum_kernel(const In* in, Out* out, int64_t outer, int64_t reduce,
                                  int64_t inner, int64_t chunk_length) {
  __shared__ Acc partial[kTileRows][kTileWidth + 1];
  const int64_t chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t begin = chunk * chunk_length;
  const int64_t end = begin + chunk_length < reduce ? begin + chunk_length : reduce;
  const int64_t tiles_per_row = (inner + kTileWidth - 1) / kTileWidth;
  const int64_t tiles = outer * tiles_per_row;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t o = tile / tiles_per_row;
    const int64_t column = (tile % tiles_per_row) * kTileWidth + threadIdx.x;
    Acc total = 0;
    if (column < inner) {
      const In* x = in + o * reduce * inner + column;
      for (int64_t r = begin + threadIdx.y; r < end; r += kTileRows)
        total += convert<Acc>(x[r * inner]);
    }
    partial[threadIdx.y][threadIdx.x] = total;
    __syncthreads();
    if (threadIdx.y == 0 && column < inner) {
      for (int slice = 1; slice < kTileRows; ++slice)
        total += partial[slice][threadIdx.x];
      out[(o * chunks + chunk) * inner + column] = convert<Out>(total);
    }
    __syncthreads();  // partial is reused by the next tile
  }
}

unsigned grid_for(int64_t work_items) {
  return static_cast<unsigned>(work_items < kMaxBlocks ? work_items : kMaxBlocks);
}

}  // namespace

template <typename T>
void sum(const T* in, sum_output_t<T>* out, int64_t outer, int64_t reduce, int64_t inner,
         cudaStream_t stream) {
  using Acc = sum_acc_t<T>;
  using Out = sum_output_t<T>;
  if (outer == 0 || inner == 0) return;
  if (inner > 1) {
    const int64_t tiles = outer * ((inner + kTileWidth - 1) / kTileWidth);
    const dim3 block(kTileWidth, kTileRows);
    // Few tiles over a long reduced dim (a bias gradient: (rows, features) summed over the rows)
    // would leave most of the GPU idle: the rows are cut into chunks summed by separate blocks
    // into a scratch buffer (outer, chunks, inner), whose chunks a second pass sums.
    int64_t chunks = (kTargetColumnBlocks + tiles - 1) / tiles;
    const int64_t most_chunks = (reduce + kMinColumnChunk - 1) / kMinColumnChunk;
    if (chunks > most_chunks) chunks = most_chunks;
    if (chunks > kMaxBlocks) chunks = kMaxBlocks;
    if (chunks <= 1) {
      column_sum_kernel<Acc>
          <<<grid_for(tiles), block, 0, stream>>>(in, out, outer, reduce, inner, reduce);
      EMBER_CUDA_CHECK_LAUNCH("sum: column_sum_kernel<<<>>>");
      return;
    }
    const int64_t chunk_length = (reduce + chunks - 1) / chunks;
    chunks = (reduce + chunk_length - 1) / chunk_length;
    const Scratch<Acc> partial(outer * chunks * inner, stream);
    column_sum_kernel<Acc>
        <<<dim3(grid_for(tiles), static_cast<unsigned>(chunks)), block, 0, stream>>>(
            in, partial.data, outer, reduce, inner, chunk_length);
    EMBER_CUDA_CHECK_LAUNCH("sum: column_sum_kernel<<<>>> over chunks of rows");
    column_sum_kernel<Acc>
        <<<grid_for(tiles), block, 0, stream>>>(partial.data, out, outer, chunks, inner, chunks);
    EMBER_CUDA_CHECK_LAUNCH("sum: column_sum_kernel<<<>>> over partial sums");
    return;
  }
  if (outer >= 64 || reduce <= 2 * kChunk) {
    row_sum_kernel<Acc><<<grid_for(outer), kRowThreads, 0, stream>>>(in, out, outer, reduce);
    EMBER_CUDA_CHECK_LAUNCH("sum: row_sum_kernel<<<>>>");
    return;
  }
  // Few long rows: two passes through a stream-ordered scratch buffer of partial sums. The
  // result is deterministic (no atomics), like the one-pass path.
  int64_t chunks = (reduce + kChunk - 1) / kChunk;
  if (chunks > kMaxChunksPerRow) chunks = kMaxChunksPerRow;
  const int64_t chunk_length = (reduce + chunks - 1) / chunks;
  chunks = (reduce + chunk_length - 1) / chunk_length;
  const Scratch<Acc> partial(outer * chunks, stream);
  chunk_sum_kernel<Acc><<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(outer)),
                          kRowThreads, 0, stream>>>(in, partial.data, reduce, chunks, chunk_length);
  EMBER_CUDA_CHECK_LAUNCH("sum: chunk_sum_kernel<<<>>>");
  row_sum_kernel<Acc>
      <<<grid_for(outer), kRowThreads, 0, stream>>>(partial.data, out, outer, chunks);
  EMBER_CUDA_CHECK_LAUNCH("sum: row_sum_kernel<<<>>> over partial sums");
}

template void sum<float>(const float*, float*, int64_t, int64_t, int64_t, cudaStream_t);
template void sum<double>(const double*, double*, int64_t, int64_t, int64_t, cudaStream_t);
template void sum<Half>(const Half*, Half*, int64_t, int64_t, int64_t, cudaStream_t);
template void sum<BFloat16>(const BFloat16*, BFloat16*, int64_t, int64_t, int64_t, cudaStream_t);
template void sum<int32_t>(const int32_t*, int64_t*, int64_t, int64_t, int64_t, cudaStream_t);
template void sum<int64_t>(const int64_t*, int64_t*, int64_t, int64_t, int64_t, cudaStream_t);
template void sum<uint8_t>(const uint8_t*, int64_t*, int64_t, int64_t, int64_t, cudaStream_t);
template void sum<bool>(const bool*, int64_t*, int64_t, int64_t, int64_t, cudaStream_t);

}  // namespace ember::kernels::cuda
