// CUDA reductions beyond sum (kernels/cpu/reduce_stats.cpp's, same results): every one but the
// arg-extremes is a fold of lines by ONE kernel pair, with the fold chosen by a runtime switch
// (Fold), then a small elementwise finish (Finish). Same shapes as sum:
//
//   in (outer, reduce, inner) -> folded (outer, inner) in Acc -> out (outer, inner)
//
// Lines of the reduced dim are contiguous when inner == 1 (a block per line, or per chunk of a
// few long lines, as sum) and strided otherwise (32 x 8 tiles: coalesced reads along inner).
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/common/convert.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/scratch.h"

namespace ember::kernels::cuda {
namespace {

// How a line is folded. `param` is a per-line value (the line's mean, or its shift), `power` the
// p of abs_power_sum.
enum class Fold {
  max,                // NaN-propagating max
  min,                // NaN-propagating min
  sum,                // sum x
  squared_deviation,  // sum (x - param)^2
  sum_exp,            // sum exp(x - param)
  abs_max,            // max |x| (NaN propagates)
  abs_min,            // min |x| (NaN propagates)
  abs_sum,            // sum |x|
  square_sum,         // sum x^2
  nonzero_count,      // sum (x != 0)
  abs_power_sum,      // sum |x|^power
};

// What is done to each folded value on the way out. `scalar` is the divisor or the exponent.
enum class Finish {
  identity,        // out = folded
  divide,          // out = folded / scalar
  sqrt,            // out = sqrt(folded)
  power,           // out = folded^scalar
  zero_infinite,   // out = isinf(folded) ? 0 : folded (logsumexp's shift)
  log_plus_shift,  // out = shift + log(folded)
};

constexpr int kRowThreads = 256;
constexpr int kTileWidth = 32;
constexpr int kTileRows = 8;
constexpr int64_t kMaxBlocks = 65535;
constexpr int64_t kChunk = 16384;
constexpr int64_t kMaxChunksPerRow = 1024;

template <typename Acc>
__device__ __forceinline__ Acc absolute(Acc x) {
  return device_math::is_negative(x) ? static_cast<Acc>(-x) : x;
}

// Combines two partial folds.
template <typename Acc>
__device__ __forceinline__ Acc merge(Fold op, Acc a, Acc b) {
  if (op == Fold::max || op == Fold::abs_max) return (b > a || device_math::is_nan(b)) ? b : a;
  if (op == Fold::min || op == Fold::abs_min) return (b < a || device_math::is_nan(b)) ? b : a;
  return a + b;
}

// Adds one element to a partial fold.
template <typename Acc>
__device__ __forceinline__ Acc step(Fold op, Acc acc, Acc x, Acc param, Acc power) {
  // Integers are only folded by max and min: the other folds are not compiled for them.
  if constexpr (!std::is_floating_point_v<Acc>) {
    return merge(op, acc, x);
  } else {
    switch (op) {
      case Fold::max:
      case Fold::min:
        return merge(op, acc, x);
      case Fold::abs_max:
      case Fold::abs_min:
        return merge(op, acc, absolute(x));
      case Fold::sum:
        return acc + x;
      case Fold::squared_deviation:
        return acc + (x - param) * (x - param);
      case Fold::sum_exp:
        return acc + device_math::exp(static_cast<Acc>(x - param));
      case Fold::abs_sum:
        return acc + absolute(x);
      case Fold::square_sum:
        return acc + x * x;
      case Fold::nonzero_count:
        return acc + (x != Acc(0) ? Acc(1) : Acc(0));
      case Fold::abs_power_sum:
        return acc + device_math::pow(absolute(x), power);
    }
  }
  return acc;
}

// What a fold starts from (computed on the host, where std::numeric_limits lives).
template <typename Acc>
Acc identity_of(Fold op) {
  if (op == Fold::max) {
    if constexpr (std::is_floating_point_v<Acc>) return -std::numeric_limits<Acc>::infinity();
    return std::numeric_limits<Acc>::lowest();
  }
  if (op == Fold::min || op == Fold::abs_min) {
    if constexpr (std::is_floating_point_v<Acc>) return std::numeric_limits<Acc>::infinity();
    return std::numeric_limits<Acc>::max();
  }
  return Acc(0);
}

template <typename Acc>
__device__ __forceinline__ Acc warp_merge(Fold op, Acc value) {
#pragma unroll
  for (int width = 16; width > 0; width /= 2)
    value = merge(op, value, static_cast<Acc>(__shfl_down_sync(0xffffffffu, value, width)));
  return value;
}

// The fold of x[0 .. n) over the block's kRowThreads threads; valid in thread 0. Every thread of
// the block must call it. `merging`: x holds partial folds, combined with merge, not step.
template <typename Acc, typename In>
__device__ Acc block_fold(Fold op, bool merging, const In* x, int64_t n, Acc identity, Acc param,
                          Acc power) {
  __shared__ Acc warp_totals[kRowThreads / 32];
  Acc total = identity;
  for (int64_t r = threadIdx.x; r < n; r += kRowThreads) {
    const Acc value = convert<Acc>(x[r]);
    total = merging ? merge(op, total, value) : step(op, total, value, param, power);
  }
  total = warp_merge(op, total);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_totals[warp] = total;
  __syncthreads();
  if (warp == 0) {
    total = lane < kRowThreads / 32 ? warp_totals[lane] : identity;
    total = warp_merge(op, total);
  }
  __syncthreads();
  return total;
}

// inner == 1: a block per row. in (outer, reduce) -> folded (outer).
template <typename Acc, typename In>
__global__ void row_fold_kernel(Fold op, bool merging, const In* in, Acc* folded, int64_t outer,
                                int64_t reduce, Acc identity, const Acc* params, Acc power) {
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const Acc param = params ? params[row] : Acc(0);
    const Acc total = block_fold(op, merging, in + row * reduce, reduce, identity, param, power);
    if (threadIdx.x == 0) folded[row] = total;
  }
}

// Pass 1 for few long rows: block (chunk, row) folds one chunk. -> partial (outer, chunks).
template <typename Acc, typename In>
__global__ void chunk_fold_kernel(Fold op, const In* in, Acc* partial, int64_t reduce,
                                  int64_t chunks, int64_t chunk_length, Acc identity,
                                  const Acc* params, Acc power) {
  const int64_t row = blockIdx.y, chunk = blockIdx.x;
  const int64_t begin = chunk * chunk_length;
  const int64_t length = begin + chunk_length < reduce ? chunk_length : reduce - begin;
  const Acc param = params ? params[row] : Acc(0);
  const Acc total =
      block_fold(op, false, in + row * reduce + begin, length, identity, param, power);
  if (threadIdx.x == 0) partial[row * chunks + chunk] = total;
}

// inner > 1: (32, 8) threads per tile of 32 adjacent columns of one outer index.
template <typename Acc, typename In>
__global__ void column_fold_kernel(Fold op, const In* in, Acc* folded, int64_t outer,
                                   int64_t reduce, int64_t inner, Acc identity, const Acc* params,
                                   Acc power) {
  __shared__ Acc partial[kTileRows][kTileWidth + 1];
  const int64_t tiles_per_row = (inner + kTileWidth - 1) / kTileWidth;
  const int64_t tiles = outer * tiles_per_row;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t o = tile / tiles_per_row;
    const int64_t column = (tile % tiles_per_row) * kTileWidth + threadIdx.x;
    Acc total = identity;
    if (column < inner) {
      const In* x = in + o * reduce * inner + column;
      const Acc param = params ? params[o * inner + column] : Acc(0);
      for (int64_t r = threadIdx.y; r < reduce; r += kTileRows)
        total = step(op, total, convert<Acc>(x[r * inner]), param, power);
    }
    partial[threadIdx.y][threadIdx.x] = total;
    __syncthreads();
    if (threadIdx.y == 0 && column < inner) {
      for (int slice = 1; slice < kTileRows; ++slice)
        total = merge(op, total, partial[slice][threadIdx.x]);
      folded[o * inner + column] = total;
    }
    __syncthreads();
  }
}

template <typename Out, typename Acc>
__global__ void finish_kernel(Finish how, const Acc* folded, const Acc* shift, Out* out, int64_t n,
                              Acc scalar) {
  const int64_t step_size = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += step_size) {
    const Acc v = folded[k];
    Acc result = v;
    if constexpr (std::is_floating_point_v<Acc>) {  // integers: max and min, stored as they are
      switch (how) {
        case Finish::identity:
          break;
        case Finish::divide:
          result = v / scalar;
          break;
        case Finish::sqrt:
          result = device_math::sqrt(v);
          break;
        case Finish::power:
          result = device_math::pow(v, scalar);
          break;
        case Finish::zero_infinite:
          result = isinf(v) ? Acc(0) : v;
          break;
        case Finish::log_plus_shift:
          result = shift[k] + device_math::log(v);
          break;
      }
    }
    out[k] = convert<Out>(result);
  }
}

unsigned grid_for(int64_t work_items) {
  return static_cast<unsigned>(work_items < kMaxBlocks ? (work_items < 1 ? 1 : work_items)
                                                       : kMaxBlocks);
}

// folded (outer, inner) = the fold of every line of in (outer, reduce, inner), reduce >= 1.
template <typename T, typename Acc = acc_t<T>>
void fold(Fold op, const T* in, Acc* folded, int64_t outer, int64_t reduce, int64_t inner,
          const Acc* params, Acc power, cudaStream_t stream) {
  const Acc identity = identity_of<Acc>(op);
  if (inner > 1) {
    const int64_t tiles = outer * ((inner + kTileWidth - 1) / kTileWidth);
    column_fold_kernel<Acc, T><<<grid_for(tiles), dim3(kTileWidth, kTileRows), 0, stream>>>(
        op, in, folded, outer, reduce, inner, identity, params, power);
    EMBER_CUDA_CHECK_LAUNCH("reduce: column_fold_kernel<<<>>>");
    return;
  }
  if (outer >= 64 || reduce <= 2 * kChunk) {
    row_fold_kernel<Acc, T><<<grid_for(outer), kRowThreads, 0, stream>>>(
        op, false, in, folded, outer, reduce, identity, params, power);
    EMBER_CUDA_CHECK_LAUNCH("reduce: row_fold_kernel<<<>>>");
    return;
  }
  // Few long rows: chunks folded by separate blocks, then their partial folds merged.
  int64_t chunks = (reduce + kChunk - 1) / kChunk;
  if (chunks > kMaxChunksPerRow) chunks = kMaxChunksPerRow;
  const int64_t chunk_length = (reduce + chunks - 1) / chunks;
  chunks = (reduce + chunk_length - 1) / chunk_length;
  Scratch<Acc> partial(outer * chunks, stream);
  chunk_fold_kernel<Acc, T>
      <<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(outer)), kRowThreads, 0,
         stream>>>(op, in, partial.data, reduce, chunks, chunk_length, identity, params, power);
  EMBER_CUDA_CHECK_LAUNCH("reduce: chunk_fold_kernel<<<>>>");
  row_fold_kernel<Acc, Acc><<<grid_for(outer), kRowThreads, 0, stream>>>(
      op, true, partial.data, folded, outer, chunks, identity, static_cast<const Acc*>(nullptr),
      power);
  EMBER_CUDA_CHECK_LAUNCH("reduce: row_fold_kernel<<<>>> over partial folds");
}

template <typename Out, typename Acc>
void finish(Finish how, const Acc* folded, const Acc* shift, Out* out, int64_t n, Acc scalar,
            cudaStream_t stream) {
  if (n == 0) return;
  finish_kernel<Out, Acc>
      <<<grid_for((n + kRowThreads - 1) / kRowThreads), kRowThreads, 0, stream>>>(
          how, folded, shift, out, n, scalar);
  EMBER_CUDA_CHECK_LAUNCH("reduce: finish_kernel<<<>>>");
}

// A fold then a finish into out, through a scratch buffer of Acc.
template <typename T>
void fold_and_finish(Fold op, Finish how, const T* in, T* out, int64_t outer, int64_t reduce,
                     int64_t inner, acc_t<T> power, acc_t<T> scalar, cudaStream_t stream) {
  using Acc = acc_t<T>;
  const int64_t n = outer * inner;
  if (n == 0) return;
  Scratch<Acc> folded(n, stream);
  fold<T>(op, in, folded.data, outer, reduce, inner, static_cast<const Acc*>(nullptr), power,
          stream);
  finish<T, Acc>(how, folded.data, static_cast<const Acc*>(nullptr), out, n, scalar, stream);
}

// ---- arg-extremes: (value, index) pairs, the first extreme (or first NaN) winning ----

// Whether (value, index) b beats a: a NaN beats numbers, then the extreme, then the lower index.
template <typename Acc>
__device__ __forceinline__ bool arg_beats(bool is_max, Acc b, int64_t b_index, Acc a,
                                          int64_t a_index) {
  if (b_index < 0) return false;
  if (a_index < 0) return true;
  const bool a_nan = device_math::is_nan(a), b_nan = device_math::is_nan(b);
  if (a_nan || b_nan) return b_nan && (!a_nan || b_index < a_index);
  if (b == a) return b_index < a_index;
  return is_max ? b > a : b < a;
}

// inner == 1: a block per row; each thread walks its slice in order, then a tree in shared
// memory picks the winner.
template <typename T>
__global__ void row_arg_kernel(bool is_max, const T* in, int64_t* out, int64_t outer,
                               int64_t reduce) {
  using Acc = acc_t<T>;
  __shared__ Acc best_values[kRowThreads];
  __shared__ int64_t best_indices[kRowThreads];
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const T* x = in + row * reduce;
    Acc best = Acc(0);
    int64_t best_index = -1;  // none yet
    for (int64_t r = threadIdx.x; r < reduce; r += kRowThreads) {
      const Acc value = convert<Acc>(x[r]);
      if (arg_beats(is_max, value, r, best, best_index)) {
        best = value;
        best_index = r;
      }
    }
    best_values[threadIdx.x] = best;
    best_indices[threadIdx.x] = best_index;
    __syncthreads();
    for (int half = kRowThreads / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) {
        const int other = threadIdx.x + half;
        if (arg_beats(is_max, best_values[other], best_indices[other], best_values[threadIdx.x],
                      best_indices[threadIdx.x])) {
          best_values[threadIdx.x] = best_values[other];
          best_indices[threadIdx.x] = best_indices[other];
        }
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) out[row] = best_indices[0];
    __syncthreads();  // the arrays are reused by the next row
  }
}

// inner > 1: a thread per line, walking it in order (coalesced across adjacent lines).
template <typename T>
__global__ void column_arg_kernel(bool is_max, const T* in, int64_t* out, int64_t outer,
                                  int64_t reduce, int64_t inner) {
  using Acc = acc_t<T>;
  const int64_t lines = outer * inner;
  const int64_t step_size = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t line = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; line < lines;
       line += step_size) {
    const int64_t o = line / inner, i = line % inner;
    const T* x = in + o * reduce * inner + i;
    Acc best = convert<Acc>(x[0]);
    int64_t best_index = 0;
    for (int64_t r = 1; r < reduce; ++r) {
      const Acc value = convert<Acc>(x[r * inner]);
      if (arg_beats(is_max, value, r, best, best_index)) {
        best = value;
        best_index = r;
      }
    }
    out[line] = best_index;
  }
}

template <typename T>
void arg_extreme(bool is_max, const T* in, int64_t* out, int64_t outer, int64_t reduce,
                 int64_t inner, cudaStream_t stream) {
  if (outer * inner == 0) return;
  if (inner == 1) {
    row_arg_kernel<T><<<grid_for(outer), kRowThreads, 0, stream>>>(is_max, in, out, outer, reduce);
    EMBER_CUDA_CHECK_LAUNCH("argmax/argmin: row_arg_kernel<<<>>>");
    return;
  }
  const int64_t lines = outer * inner;
  column_arg_kernel<T>
      <<<grid_for((lines + kRowThreads - 1) / kRowThreads), kRowThreads, 0, stream>>>(
          is_max, in, out, outer, reduce, inner);
  EMBER_CUDA_CHECK_LAUNCH("argmax/argmin: column_arg_kernel<<<>>>");
}

}  // namespace

// GPU run to check (tests/cuda/conv_pool_test.cpp and the op cases): NaN and +-inf lines,
// integer extremes (the identity comes from the host), ties in argmax (first index), few long
// rows (the chunked path merges partial folds: sum_exp partials must be added, not exp'd again).

template <typename T>
void amax(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner, cudaStream_t stream) {
  fold_and_finish<T>(Fold::max, Finish::identity, in, out, outer, reduce, inner, 0, 0, stream);
}

template <typename T>
void amin(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner, cudaStream_t stream) {
  fold_and_finish<T>(Fold::min, Finish::identity, in, out, outer, reduce, inner, 0, 0, stream);
}

template <typename T>
void argmax(const T* in, int64_t* out, int64_t outer, int64_t reduce, int64_t inner,
            cudaStream_t stream) {
  arg_extreme<T>(true, in, out, outer, reduce, inner, stream);
}

template <typename T>
void argmin(const T* in, int64_t* out, int64_t outer, int64_t reduce, int64_t inner,
            cudaStream_t stream) {
  arg_extreme<T>(false, in, out, outer, reduce, inner, stream);
}

template <typename T>
void variance(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner, int64_t correction,
              cudaStream_t stream) {
  using Acc = acc_t<T>;
  const int64_t n = outer * inner;
  if (n == 0) return;
  // Two passes, as the CPU: the mean of each line, then the squared deviations from it.
  Scratch<Acc> mean(n, stream), squares(n, stream);
  fold<T>(Fold::sum, in, mean.data, outer, reduce, inner, static_cast<const Acc*>(nullptr), Acc(0),
          stream);
  finish<Acc, Acc>(Finish::divide, mean.data, static_cast<const Acc*>(nullptr), mean.data, n,
                   static_cast<Acc>(reduce), stream);
  fold<T>(Fold::squared_deviation, in, squares.data, outer, reduce, inner, mean.data, Acc(0),
          stream);
  const Acc divisor = static_cast<Acc>(reduce - correction > 0 ? reduce - correction : 0);
  finish<T, Acc>(Finish::divide, squares.data, static_cast<const Acc*>(nullptr), out, n, divisor,
                 stream);
}

template <typename T>
void logsumexp(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner,
               cudaStream_t stream) {
  using Acc = acc_t<T>;
  const int64_t n = outer * inner;
  if (n == 0) return;
  // m + log(sum(exp(x - m))) with m the line's max, or 0 where that max is infinite.
  Scratch<Acc> shift(n, stream), sums(n, stream);
  fold<T>(Fold::max, in, shift.data, outer, reduce, inner, static_cast<const Acc*>(nullptr), Acc(0),
          stream);
  finish<Acc, Acc>(Finish::zero_infinite, shift.data, static_cast<const Acc*>(nullptr), shift.data,
                   n, Acc(0), stream);
  fold<T>(Fold::sum_exp, in, sums.data, outer, reduce, inner, shift.data, Acc(0), stream);
  finish<T, Acc>(Finish::log_plus_shift, sums.data, shift.data, out, n, Acc(0), stream);
}

template <typename T>
void norm(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner, double p,
          cudaStream_t stream) {
  using Acc = acc_t<T>;
  if (std::isinf(p) && p > 0) {
    fold_and_finish<T>(Fold::abs_max, Finish::identity, in, out, outer, reduce, inner, 0, 0,
                       stream);
  } else if (std::isinf(p)) {
    fold_and_finish<T>(Fold::abs_min, Finish::identity, in, out, outer, reduce, inner, 0, 0,
                       stream);
  } else if (p == 0) {
    fold_and_finish<T>(Fold::nonzero_count, Finish::identity, in, out, outer, reduce, inner, 0, 0,
                       stream);
  } else if (p == 1) {
    fold_and_finish<T>(Fold::abs_sum, Finish::identity, in, out, outer, reduce, inner, 0, 0,
                       stream);
  } else if (p == 2) {
    fold_and_finish<T>(Fold::square_sum, Finish::sqrt, in, out, outer, reduce, inner, 0, 0, stream);
  } else {
    fold_and_finish<T>(Fold::abs_power_sum, Finish::power, in, out, outer, reduce, inner,
                       static_cast<Acc>(p), static_cast<Acc>(1.0 / p), stream);
  }
}

#define EMBER_INSTANTIATE_EXTREMES(T)                                                   \
  template void amax<T>(const T*, T*, int64_t, int64_t, int64_t, cudaStream_t);         \
  template void amin<T>(const T*, T*, int64_t, int64_t, int64_t, cudaStream_t);         \
  template void argmax<T>(const T*, int64_t*, int64_t, int64_t, int64_t, cudaStream_t); \
  template void argmin<T>(const T*, int64_t*, int64_t, int64_t, int64_t, cudaStream_t);
#define EMBER_INSTANTIATE_STATISTICS(T)                                                      \
  template void variance<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, cudaStream_t); \
  template void logsumexp<T>(const T*, T*, int64_t, int64_t, int64_t, cudaStream_t);         \
  template void norm<T>(const T*, T*, int64_t, int64_t, int64_t, double, cudaStream_t);

EMBER_FOR_EACH_NUMERIC_TYPE(EMBER_INSTANTIATE_EXTREMES)
EMBER_INSTANTIATE_STATISTICS(float)
EMBER_INSTANTIATE_STATISTICS(double)
EMBER_INSTANTIATE_STATISTICS(Half)
EMBER_INSTANTIATE_STATISTICS(BFloat16)
#undef EMBER_INSTANTIATE_EXTREMES
#undef EMBER_INSTANTIATE_STATISTICS

}  // namespace ember::kernels::cuda
