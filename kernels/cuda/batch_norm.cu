// CUDA batch norm. batch_norm_plan.h says how the work is shared out; this file holds the kernels.
//
//   statistics: statistics_partial_kernel   (channel_blocks, splits) blocks: Welford per thread,
//                                            merged per block -> partial (channels, splits)
//               statistics_finalize_kernel  a warp per channel merges its splits -> mean, variance
//                                            or, in training, mean, rstd, scale, shift and the
//                                            running statistics' update (BatchNormChannels)
//   apply:      apply_kernel                y = x scale[c] + shift[c], or its ReLU (kRelu)
//   backward:   grad_sums_partial_kernel    sum(g), sum(g (x - mean)) per (channel, split)
//               grad_finalize_kernel        per channel: grad_weight, grad_bias and the three
//                                           coefficients of grad_x
//               grad_input_kernel           grad_x = scale (g - mean_g - (x - mean) slope)
//   channel sums: channel_sum_partial_kernel, channel_sum_finalize_kernel   sum(x) per channel
// With kRelu the backward kernels read g through ReLU's backward: 0 where the fused forward's
// output is <= 0 (load_gradient).
//
// The statistics and channel sums load a group of vectors per thread before folding any in
// (for_each_channel_vector_group), in the plain walk's order.
//
// Every partial lands in a fixed slot and is merged in a fixed order, so results are bitwise
// repeatable (no atomics).
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/common/convert.h"
#include "kernels/common/welford.h"
#include "kernels/cuda/batch_norm.h"
#include "kernels/cuda/batch_norm_plan.h"
#include "kernels/cuda/convert_values.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/row_reduce.cuh"
#include "kernels/cuda/scratch.h"

namespace ember::kernels::cuda {
namespace {

constexpr int kWarps = kBatchNormThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;

// ---- loads and stores of kVec values (one 16-byte vector, or one value) ----

// Vectors a thread of the one-tensor reductions (statistics, channel sums) loads before it folds
// any in (for_each_channel_vector_group). The backward sums read two or three tensors a vector
// and keep the plain walk: grouping them would raise their registers (f16 with the ReLU: 40 to
// 79 a thread) as much as their loads in flight, for no more bytes in flight a multiprocessor.
constexpr int kGroupedLoads = 4;

// kVec values as they sit in memory: loaded, not yet converted.
template <typename T, int kVec>
using Raw = std::conditional_t<kVec == 1, T, rows::Vector<T>>;

template <typename T, int kVec>
__device__ __forceinline__ Raw<T, kVec> load_raw(const T* at) {
  static_assert(kVec == 1 || kVec == rows::kVectorWidth<T>);
  return *reinterpret_cast<const Raw<T, kVec>*>(at);
}

template <typename Acc, typename T, int kVec>
__device__ __forceinline__ void convert_raw(const Raw<T, kVec>& raw, Acc (&values)[kVec]) {
  if constexpr (kVec == 1) {
    values[0] = convert<Acc>(raw);
  } else {
    convert_values(raw.v, values);
  }
}

template <typename Acc, typename T, int kVec>
__device__ __forceinline__ void load(const T* at, Acc (&values)[kVec]) {
  convert_raw<Acc, T, kVec>(load_raw<T, kVec>(at), values);
}

// The reductions' walk over channel c's vectors of x (this block's split, this thread's share),
// loaded kGroupedLoads at a time: fold(values) for each vector, converted to Acc, in the plain
// walk's order.
template <typename Acc, typename T, int kVec, typename Fold>
__device__ __forceinline__ void fold_channel_vectors(const T* x, const BatchNormPlan& plan,
                                                     int64_t c, Fold&& fold) {
  constexpr int kGroup = kGroupedLoads;
  const auto load_and_fold = [&](const int64_t(&at)[kGroup], int count) {
    Raw<T, kVec> raw[kGroup];
#pragma unroll
    for (int i = 0; i < kGroup; ++i)  // every load issued before any value is used
      if (i < count) raw[i] = load_raw<T, kVec>(x + at[i]);
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      if (i >= count) break;
      Acc values[kVec];
      convert_raw<Acc, T, kVec>(raw[i], values);
      fold(values);
    }
  };
  for_each_channel_vector_group<kGroup>(plan, c, blockIdx.y, threadIdx.x, threadIdx.y,
                                        load_and_fold);
}

template <typename T, typename Acc, int kVec>
__device__ __forceinline__ void store(T* at, const Acc (&values)[kVec]) {
  if constexpr (kVec == 1) {
    *at = convert<T>(values[0]);
  } else {
    rows::Vector<T> vector;
    convert_values(values, vector.v);
    *reinterpret_cast<rows::Vector<T>*>(at) = vector;
  }
}

// g (kVec values at `at`), through ReLU's backward when kRelu: 0 where relu_out <= 0; a NaN
// output passes g on, as relu's own backward.
template <bool kRelu, typename Acc, typename T, int kVec>
__device__ __forceinline__ void load_gradient(const T* grad_out, const T* relu_out, int64_t at,
                                              Acc (&g)[kVec]) {
  load(grad_out + at, g);
  if constexpr (kRelu) {
    Acc out[kVec];
    load(relu_out + at, out);
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      g[i] = out[i] <= Acc(0) ? Acc(0) : g[i];
  }
}

// ---- block-wide merges; every thread of the block calls them, thread (0, 0) gets the result ----

__device__ __forceinline__ int linear_thread() {
  return static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x);
}

template <typename Acc>
__device__ __forceinline__ WelfordStats<Acc> warp_merge(WelfordStats<Acc> s) {
#pragma unroll
  for (int width = 16; width > 0; width /= 2) {
    WelfordStats<Acc> other;
    other.count = __shfl_down_sync(kFullMask, s.count, width);
    other.mean = __shfl_down_sync(kFullMask, s.mean, width);
    other.m2 = __shfl_down_sync(kFullMask, s.m2, width);
    s = merge(s, other);
  }
  return s;
}

template <typename Acc>
__device__ WelfordStats<Acc> block_merge(WelfordStats<Acc> s) {
  __shared__ Acc counts[kWarps], means[kWarps], m2s[kWarps];
  const int lane = linear_thread() % 32, warp = linear_thread() / 32;
  s = warp_merge(s);
  if (lane == 0) {
    counts[warp] = s.count;
    means[warp] = s.mean;
    m2s[warp] = s.m2;
  }
  __syncthreads();
  if (warp == 0) {
    s = WelfordStats<Acc>{};
    if (lane < kWarps) s = {counts[lane], means[lane], m2s[lane]};
    s = warp_merge(s);
  }
  __syncthreads();  // the arrays are reused by the next channel
  return s;
}

template <typename Acc>
__device__ __forceinline__ Acc warp_sum(Acc value) {
#pragma unroll
  for (int width = 16; width > 0; width /= 2)
    value += __shfl_down_sync(kFullMask, value, width);
  return value;
}

// The block's totals of a and b.
template <typename Acc>
__device__ void block_sum_pair(Acc& a, Acc& b) {
  __shared__ Acc a_totals[kWarps], b_totals[kWarps];
  const int lane = linear_thread() % 32, warp = linear_thread() / 32;
  a = warp_sum(a);
  b = warp_sum(b);
  if (lane == 0) {
    a_totals[warp] = a;
    b_totals[warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    a = warp_sum(lane < kWarps ? a_totals[lane] : Acc(0));
    b = warp_sum(lane < kWarps ? b_totals[lane] : Acc(0));
  }
  __syncthreads();  // the arrays are reused by the next channel
}

// ---- statistics ----

// partial (channels, splits, 3): count, mean, m2 of the values block (b, split) read.
template <typename T, int kVec>
__global__ __launch_bounds__(kBatchNormThreads) void statistics_partial_kernel(const T* x,
                                                                               BatchNormPlan plan,
                                                                               acc_t<T>* partial) {
  using Acc = acc_t<T>;
  for (int64_t c = blockIdx.x; c < plan.channels; c += gridDim.x) {
    WelfordStats<Acc> s;
    fold_channel_vectors<Acc, T, kVec>(
        x, plan, c, [&](const Acc(&values)[kVec]) { s = merge(s, of_values(values)); });
    s = block_merge(s);
    if (linear_thread() == 0) {
      Acc* out = partial + (c * plan.splits + blockIdx.y) * 3;
      out[0] = s.count;
      out[1] = s.mean;
      out[2] = s.m2;
    }
  }
}

// A warp per channel: the channel's splits merged in order -> mean[c] and variance[c] (biased),
// each where not null, and (when out.rstd is not null) the rest of BatchNormChannels.
template <typename Acc>
__global__ void statistics_finalize_kernel(const Acc* partial, BatchNormPlan plan, Acc* variance,
                                           BatchNormChannels<Acc> out) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const int64_t values = plan.batch * plan.spatial;
  const Acc count = static_cast<Acc>(values);
  for (int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
       c < plan.channels; c += warps) {
    WelfordStats<Acc> s;
    for (int64_t split = lane; split < plan.splits; split += 32) {
      const Acc* in = partial + (c * plan.splits + split) * 3;
      s = merge(s, WelfordStats<Acc>{in[0], in[1], in[2]});
    }
    s = warp_merge(s);
    if (lane != 0) continue;
    const Acc m = count > Acc(0) ? s.mean : Acc(0);
    const Acc var = count > Acc(0) ? s.m2 / count : Acc(0);
    if (out.mean) out.mean[c] = m;
    if (variance) variance[c] = var;
    if (!out.rstd) continue;
    // The formulas of the tensor-op path (runtime/ops/normalization.cpp), in Acc.
    const Acc rstd = Acc(1) / sqrt(var + static_cast<Acc>(out.eps));
    const Acc scale = out.weight ? rstd * out.weight[c] : rstd;
    out.rstd[c] = rstd;
    out.scale[c] = scale;
    out.shift[c] = (out.bias ? out.bias[c] : Acc(0)) - m * scale;
    if (out.running_mean) {
      const Acc keep = static_cast<Acc>(1.0 - out.momentum);
      const Acc take = static_cast<Acc>(out.momentum);
      const Acc unbiased =
          static_cast<Acc>(static_cast<double>(values) / static_cast<double>(values - 1));
      out.running_mean[c] = out.running_mean[c] * keep + m * take;
      out.running_var[c] = out.running_var[c] * keep + (var * unbiased) * take;
    }
  }
}

// ---- apply ----

template <typename T, int kVec, bool kRelu>
__global__ __launch_bounds__(kBatchNormThreads) void apply_kernel(const T* x, const acc_t<T>* scale,
                                                                  const acc_t<T>* shift, T* y,
                                                                  BatchNormPlan plan) {
  using Acc = acc_t<T>;
  for_each_plane_vector(plan, blockIdx.x, gridDim.x, threadIdx.x, threadIdx.y,
                        [&](int64_t c, int64_t at) {
                          const Acc a = scale[c], b = shift[c];
                          Acc values[kVec];
                          load(x + at, values);
#pragma unroll
                          for (int i = 0; i < kVec; ++i) {
                            values[i] = values[i] * a + b;
                            // relu's `v < 0 ? 0 : v`, which keeps NaN
                            if constexpr (kRelu)
                              values[i] = values[i] < Acc(0) ? Acc(0) : values[i];
                          }
                          store(y + at, values);
                        });
}

// ---- backward ----

// partial (channels, splits, 2): sum(g) and sum(g (x - mean[c])) over what block (b, split) read.
template <typename T, int kVec, bool kRelu>
__global__ __launch_bounds__(kBatchNormThreads) void grad_sums_partial_kernel(
    const T* grad_out, const T* relu_out, const T* x, const acc_t<T>* mean, BatchNormPlan plan,
    acc_t<T>* partial) {
  using Acc = acc_t<T>;
  for (int64_t c = blockIdx.x; c < plan.channels; c += gridDim.x) {
    const Acc m = mean[c];
    Acc sum_g = 0, sum_g_centered = 0;
    for_each_channel_vector(plan, c, blockIdx.y, threadIdx.x, threadIdx.y, [&](int64_t at) {
      Acc g[kVec], values[kVec];
      load_gradient<kRelu>(grad_out, relu_out, at, g);
      load(x + at, values);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        sum_g += g[i];
        sum_g_centered += g[i] * (values[i] - m);
      }
    });
    block_sum_pair(sum_g, sum_g_centered);
    if (linear_thread() == 0) {
      Acc* out = partial + (c * plan.splits + blockIdx.y) * 2;
      out[0] = sum_g;
      out[1] = sum_g_centered;
    }
  }
}

// A warp per channel: the splits' sums -> grad_weight[c] = sum(g xhat), grad_bias[c] = sum(g)
// (each if wanted), and coefficients (channels, 3) of grad_x: scale = w rstd, mean_g, slope =
// rstd mean(g xhat); in eval mode the statistics are constants and mean_g = slope = 0.
template <typename Acc>
__global__ void grad_finalize_kernel(const Acc* partial, const Acc* rstd, const Acc* weight,
                                     BatchNormPlan plan, bool training, Acc* grad_weight,
                                     Acc* grad_bias, Acc* coefficients) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const Acc count = static_cast<Acc>(plan.batch * plan.spatial);
  for (int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
       c < plan.channels; c += warps) {
    Acc sum_g = 0, sum_g_centered = 0;
    for (int64_t split = lane; split < plan.splits; split += 32) {
      sum_g += partial[(c * plan.splits + split) * 2];
      sum_g_centered += partial[(c * plan.splits + split) * 2 + 1];
    }
    sum_g = warp_sum(sum_g);
    sum_g_centered = warp_sum(sum_g_centered);
    if (lane != 0) continue;
    const Acc s = rstd[c];
    const Acc sum_g_xhat = sum_g_centered * s;  // xhat = (x - mean) rstd
    if (grad_weight) grad_weight[c] = sum_g_xhat;
    if (grad_bias) grad_bias[c] = sum_g;
    if (!coefficients) continue;
    const bool centre = training && count > Acc(0);
    coefficients[c * 3] = (weight ? weight[c] : Acc(1)) * s;
    coefficients[c * 3 + 1] = centre ? sum_g / count : Acc(0);
    coefficients[c * 3 + 2] = centre ? s * (sum_g_xhat / count) : Acc(0);
  }
}

// In eval (training false), grad_x = g scale alone: x does not enter, so a NaN or infinite x
// leaves its gradient finite, as in PyTorch (the centred form would multiply it by a zero slope).
template <typename T, int kVec, bool kRelu>
__global__ __launch_bounds__(kBatchNormThreads) void grad_input_kernel(
    const T* grad_out, const T* relu_out, const T* x, const acc_t<T>* mean,
    const acc_t<T>* coefficients, T* grad_x, BatchNormPlan plan, bool training) {
  using Acc = acc_t<T>;
  for_each_plane_vector(
      plan, blockIdx.x, gridDim.x, threadIdx.x, threadIdx.y, [&](int64_t c, int64_t at) {
        const Acc m = mean[c], scale = coefficients[c * 3], mean_g = coefficients[c * 3 + 1],
                  slope = coefficients[c * 3 + 2];
        Acc g[kVec], values[kVec];
        load_gradient<kRelu>(grad_out, relu_out, at, g);
        load(x + at, values);
#pragma unroll
        for (int i = 0; i < kVec; ++i)
          values[i] = training ? scale * (g[i] - mean_g - (values[i] - m) * slope) : g[i] * scale;
        store(grad_x + at, values);
      });
}

// ---- channel sums ----

// partial (channels, splits): sum(x) over what block (b, split) read.
template <typename T, int kVec>
__global__ __launch_bounds__(kBatchNormThreads) void channel_sum_partial_kernel(const T* x,
                                                                                BatchNormPlan plan,
                                                                                acc_t<T>* partial) {
  using Acc = acc_t<T>;
  for (int64_t c = blockIdx.x; c < plan.channels; c += gridDim.x) {
    Acc total = 0, none = 0;  // block_sum_pair's second sum, unused
    fold_channel_vectors<Acc, T, kVec>(x, plan, c, [&](const Acc(&values)[kVec]) {
#pragma unroll
      for (int i = 0; i < kVec; ++i)
        total += values[i];
    });
    block_sum_pair(total, none);
    if (linear_thread() == 0) partial[c * plan.splits + blockIdx.y] = total;
  }
}

// A warp per channel: the channel's splits summed in order -> sums[c].
template <typename Acc>
__global__ void channel_sum_finalize_kernel(const Acc* partial, BatchNormPlan plan, Acc* sums) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
       c < plan.channels; c += warps) {
    Acc total = 0;
    for (int64_t split = lane; split < plan.splits; split += 32)
      total += partial[c * plan.splits + split];
    total = warp_sum(total);
    if (lane == 0) sums[c] = total;
  }
}

// ---- launch shapes ----

int multiprocessors() {
  int device = 0, count = 0;
  EMBER_CUDA_KERNEL_CHECK(cudaGetDevice(&device));
  EMBER_CUDA_KERNEL_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

// 16-byte vectors when every plane of every tensor in `pointers` starts 16-byte aligned.
template <typename T>
int vector_width_for(int64_t spatial, std::initializer_list<const void*> pointers) {
  return rows::vector_aligned<T>(spatial, pointers) ? rows::kVectorWidth<T> : 1;
}

// How many blocks of `Kernel` a multiprocessor holds at once: its registers decide (on sm_90,
// 4 for the reductions that keep four loads in flight, 6 for the others). Asked once a kernel:
// the answer depends on the architecture, and a process whose GPUs differ gets a grid sized for
// the first, which costs speed, not correctness.
template <auto Kernel>
int resident_blocks_of() {
  static const int blocks = [] {
    int count = 0;
    EMBER_CUDA_KERNEL_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&count, Kernel, kBatchNormThreads, 0));
    return count > 0 ? count : 1;
  }();
  return blocks;
}

// The plan of an elementwise pass (its grid does not depend on the occupancy), or of a reduction
// whose kernel holds blocks_per_sm blocks a multiprocessor.
template <typename T>
BatchNormPlan plan_for(int64_t batch, int64_t channels, int64_t spatial,
                       std::initializer_list<const void*> pointers,
                       int blocks_per_sm = kBatchNormBlocksPerSm) {
  return plan_batch_norm(batch, channels, spatial, vector_width_for<T>(spatial, pointers),
                         multiprocessors(), blocks_per_sm);
}

dim3 block_of(const BatchNormPlan& plan) {
  return dim3(static_cast<unsigned>(plan.threads_x), static_cast<unsigned>(plan.threads_y));
}
dim3 reduction_grid(const BatchNormPlan& plan) {
  return dim3(static_cast<unsigned>(plan.channel_blocks), static_cast<unsigned>(plan.splits));
}
unsigned finalize_blocks(int64_t channels) {
  const int64_t blocks = (channels + kWarps - 1) / kWarps;
  return static_cast<unsigned>(blocks < kBatchNormMaxGrid ? blocks : kBatchNormMaxGrid);
}

// launch.template operator()<kVec, kRelu>() with the plan's vector width (a 16-byte vector or one
// value) and `relu` as template arguments.
template <typename T, typename Launch>
void with_vector_width_and_relu(int vector_width, bool relu, Launch launch) {
  constexpr int kVector = rows::kVectorWidth<T>;
  if (vector_width > 1) {
    if (relu) {
      launch.template operator()<kVector, true>();
    } else {
      launch.template operator()<kVector, false>();
    }
  } else if (relu) {
    launch.template operator()<1, true>();
  } else {
    launch.template operator()<1, false>();
  }
}

// The statistics' two kernels; finalize writes `variance` (if not null) and what `out` asks for.
template <typename T>
void run_statistics(const T* x, acc_t<T>* variance, const BatchNormChannels<acc_t<T>>& out,
                    int64_t batch, int64_t channels, int64_t spatial, cudaStream_t stream) {
  using Acc = acc_t<T>;
  if (channels == 0) return;
  constexpr int kVector = rows::kVectorWidth<T>;
  const int blocks_per_sm = vector_width_for<T>(spatial, {x}) > 1
                                ? resident_blocks_of<statistics_partial_kernel<T, kVector>>()
                                : resident_blocks_of<statistics_partial_kernel<T, 1>>();
  const BatchNormPlan plan = plan_for<T>(batch, channels, spatial, {x}, blocks_per_sm);
  const Scratch<Acc> partial(plan.channels * plan.splits * 3, stream);
  if (plan.vector_width > 1) {
    statistics_partial_kernel<T, rows::kVectorWidth<T>>
        <<<reduction_grid(plan), block_of(plan), 0, stream>>>(x, plan, partial.data);
  } else {
    statistics_partial_kernel<T, 1>
        <<<reduction_grid(plan), block_of(plan), 0, stream>>>(x, plan, partial.data);
  }
  EMBER_CUDA_CHECK_LAUNCH("batch_norm: statistics_partial_kernel<<<>>>");
  statistics_finalize_kernel<Acc><<<finalize_blocks(channels), kBatchNormThreads, 0, stream>>>(
      partial.data, plan, variance, out);
  EMBER_CUDA_CHECK_LAUNCH("batch_norm: statistics_finalize_kernel<<<>>>");
}

}  // namespace

template <typename T>
void batch_norm_statistics(const T* x, acc_t<T>* mean, acc_t<T>* variance, int64_t batch,
                           int64_t channels, int64_t spatial, cudaStream_t stream) {
  BatchNormChannels<acc_t<T>> out;
  out.mean = mean;
  run_statistics(x, variance, out, batch, channels, spatial, stream);
}

template <typename T>
void batch_norm_training_statistics(const T* x, const BatchNormChannels<acc_t<T>>& channel_args,
                                    int64_t batch, int64_t channels, int64_t spatial,
                                    cudaStream_t stream) {
  run_statistics<T>(x, nullptr, channel_args, batch, channels, spatial, stream);
}

template <typename T>
void batch_norm_apply(const T* x, const acc_t<T>* scale, const acc_t<T>* shift, T* y, int64_t batch,
                      int64_t channels, int64_t spatial, bool relu, cudaStream_t stream) {
  if (batch * channels * spatial == 0) return;
  const BatchNormPlan plan = plan_for<T>(batch, channels, spatial, {x, y});
  const unsigned blocks = static_cast<unsigned>(plan.plane_blocks);
  with_vector_width_and_relu<T>(plan.vector_width, relu, [&]<int kVec, bool kRelu>() {
    apply_kernel<T, kVec, kRelu><<<blocks, block_of(plan), 0, stream>>>(x, scale, shift, y, plan);
  });
  EMBER_CUDA_CHECK_LAUNCH("batch_norm: apply_kernel<<<>>>");
}

template <typename T>
void batch_norm_backward(const T* grad_out, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                         const acc_t<T>* weight, T* grad_x, acc_t<T>* grad_weight,
                         acc_t<T>* grad_bias, int64_t batch, int64_t channels, int64_t spatial,
                         bool training, const T* relu_out, cudaStream_t stream) {
  using Acc = acc_t<T>;
  if (channels == 0) return;
  const bool relu = relu_out != nullptr;
  int blocks_per_sm = 1;
  with_vector_width_and_relu<T>(
      vector_width_for<T>(spatial, {grad_out, x, grad_x, relu_out}), relu,
      [&]<int kVec, bool kRelu>() {
        blocks_per_sm = resident_blocks_of<grad_sums_partial_kernel<T, kVec, kRelu>>();
      });
  const BatchNormPlan plan =
      plan_for<T>(batch, channels, spatial, {grad_out, x, grad_x, relu_out}, blocks_per_sm);
  const Scratch<Acc> partial(plan.channels * plan.splits * 2, stream);
  const Scratch<Acc> coefficients(grad_x ? plan.channels * 3 : 0, stream);
  with_vector_width_and_relu<T>(plan.vector_width, relu, [&]<int kVec, bool kRelu>() {
    grad_sums_partial_kernel<T, kVec, kRelu><<<reduction_grid(plan), block_of(plan), 0, stream>>>(
        grad_out, relu_out, x, mean, plan, partial.data);
  });
  EMBER_CUDA_CHECK_LAUNCH("batch_norm: grad_sums_partial_kernel<<<>>>");
  grad_finalize_kernel<Acc><<<finalize_blocks(channels), kBatchNormThreads, 0, stream>>>(
      partial.data, rstd, weight, plan, training, grad_weight, grad_bias,
      grad_x ? coefficients.data : nullptr);
  EMBER_CUDA_CHECK_LAUNCH("batch_norm: grad_finalize_kernel<<<>>>");
  if (!grad_x || batch * spatial == 0) return;
  const unsigned blocks = static_cast<unsigned>(plan.plane_blocks);
  with_vector_width_and_relu<T>(plan.vector_width, relu, [&]<int kVec, bool kRelu>() {
    grad_input_kernel<T, kVec, kRelu><<<blocks, block_of(plan), 0, stream>>>(
        grad_out, relu_out, x, mean, coefficients.data, grad_x, plan, training);
  });
  EMBER_CUDA_CHECK_LAUNCH("batch_norm: grad_input_kernel<<<>>>");
}

template <typename T>
void channel_sums(const T* x, acc_t<T>* sums, int64_t batch, int64_t channels, int64_t spatial,
                  cudaStream_t stream) {
  using Acc = acc_t<T>;
  if (channels == 0) return;
  constexpr int kVector = rows::kVectorWidth<T>;
  const int blocks_per_sm = vector_width_for<T>(spatial, {x}) > 1
                                ? resident_blocks_of<channel_sum_partial_kernel<T, kVector>>()
                                : resident_blocks_of<channel_sum_partial_kernel<T, 1>>();
  const BatchNormPlan plan = plan_for<T>(batch, channels, spatial, {x}, blocks_per_sm);
  const Scratch<Acc> partial(plan.channels * plan.splits, stream);
  if (plan.vector_width > 1) {
    channel_sum_partial_kernel<T, rows::kVectorWidth<T>>
        <<<reduction_grid(plan), block_of(plan), 0, stream>>>(x, plan, partial.data);
  } else {
    channel_sum_partial_kernel<T, 1>
        <<<reduction_grid(plan), block_of(plan), 0, stream>>>(x, plan, partial.data);
  }
  EMBER_CUDA_CHECK_LAUNCH("channel_sums: channel_sum_partial_kernel<<<>>>");
  channel_sum_finalize_kernel<Acc>
      <<<finalize_blocks(channels), kBatchNormThreads, 0, stream>>>(partial.data, plan, sums);
  EMBER_CUDA_CHECK_LAUNCH("channel_sums: channel_sum_finalize_kernel<<<>>>");
}

#define EMBER_INSTANTIATE_BATCH_NORM(T)                                                         \
  template void batch_norm_statistics<T>(const T*, acc_t<T>*, acc_t<T>*, int64_t, int64_t,      \
                                         int64_t, cudaStream_t);                                \
  template void batch_norm_training_statistics<T>(const T*, const BatchNormChannels<acc_t<T>>&, \
                                                  int64_t, int64_t, int64_t, cudaStream_t);     \
  template void batch_norm_apply<T>(const T*, const acc_t<T>*, const acc_t<T>*, T*, int64_t,    \
                                    int64_t, int64_t, bool, cudaStream_t);                      \
  template void batch_norm_backward<T>(const T*, const T*, const acc_t<T>*, const acc_t<T>*,    \
                                       const acc_t<T>*, T*, acc_t<T>*, acc_t<T>*, int64_t,      \
                                       int64_t, int64_t, bool, const T*, cudaStream_t);         \
  template void channel_sums<T>(const T*, acc_t<T>*, int64_t, int64_t, int64_t, cudaStream_t);
EMBER_INSTANTIATE_BATCH_NORM(float)
EMBER_INSTANTIATE_BATCH_NORM(double)
EMBER_INSTANTIATE_BATCH_NORM(Half)
EMBER_INSTANTIATE_BATCH_NORM(BFloat16)
#undef EMBER_INSTANTIATE_BATCH_NORM

}  // namespace ember::kernels::cuda
