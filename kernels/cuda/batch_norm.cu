#include <cstdint>

#include "kernels/common/convert.h"
#include "kernels/cuda/batch_norm.h"
#include "kernels/cuda/launch.h"

namespace ember::kernels::cuda {
namespace {

constexpr int kChannelThreads = 512;  // one block per channel
constexpr int64_t kMaxBlocks = 65535;

template <typename Acc>
__device__ __forceinline__ Acc warp_sum(Acc value) {
#pragma unroll
  for (int width = 16; width > 0; width /= 2)
    value += __shfl_down_sync(0xffffffffu, value, width);
  return value;
}

// The block's total of `value`, returned to every thread. Every thread must call it.
template <typename Acc>
__device__ Acc block_sum(Acc value) {
  __shared__ Acc warp_totals[kChannelThreads / 32];
  __shared__ Acc total;
  value = warp_sum(value);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_totals[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < kChannelThreads / 32 ? warp_totals[lane] : Acc(0);
    value = warp_sum(value);
    if (lane == 0) total = value;
  }
  __syncthreads();
  const Acc result = total;
  __syncthreads();  // warp_totals and total are reused by the next call
  return result;
}

// body(offset) for each of channel c's batch * spatial values in x (batch, channels, spatial),
// shared among the block's threads. Planes at least a block wide are walked row by row (no
// division per value); smaller ones (batch_norm1d: spatial = 1) as one flat range.
template <typename Body>
__device__ __forceinline__ void for_channel_values(int64_t c, int64_t batch, int64_t channels,
                                                   int64_t spatial, Body body) {
  if (spatial >= blockDim.x) {
    for (int64_t n = 0; n < batch; ++n) {
      const int64_t plane = (n * channels + c) * spatial;
      for (int64_t k = threadIdx.x; k < spatial; k += blockDim.x)
        body(plane + k);
    }
    return;
  }
  const int64_t count = batch * spatial;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t n = i / spatial, k = i - n * spatial;
    body((n * channels + c) * spatial + k);
  }
}

// Block c: mean[c], variance[c] (two passes: the mean, then squared deviations from it).
template <typename T>
__global__ void statistics_kernel(const T* x, acc_t<T>* mean, acc_t<T>* variance, int64_t batch,
                                  int64_t channels, int64_t spatial) {
  using Acc = acc_t<T>;
  const int64_t count = batch * spatial;
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    Acc total = 0;
    for_channel_values(c, batch, channels, spatial,
                       [&](int64_t at) { total += convert<Acc>(x[at]); });
    const Acc m = count > 0 ? block_sum(total) / static_cast<Acc>(count) : Acc(0);
    Acc squares = 0;
    for_channel_values(c, batch, channels, spatial, [&](int64_t at) {
      const Acc d = convert<Acc>(x[at]) - m;
      squares += d * d;
    });
    squares = block_sum(squares);
    if (threadIdx.x == 0) {
      mean[c] = m;
      variance[c] = count > 0 ? squares / static_cast<Acc>(count) : Acc(0);
    }
  }
}

template <typename T>
__global__ void apply_kernel(const T* x, const acc_t<T>* scale, const acc_t<T>* shift, T* y,
                             int64_t numel, int64_t channels, int64_t spatial) {
  using Acc = acc_t<T>;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel;
       i += step) {
    const int64_t c = (i / spatial) % channels;
    y[i] = convert<T>(convert<Acc>(x[i]) * scale[c] + shift[c]);
  }
}

// Block c: the two sums of channel c, then (if wanted) its grad_x.
template <typename T>
__global__ void backward_kernel(const T* grad_out, const T* x, const acc_t<T>* mean,
                                const acc_t<T>* rstd, const T* weight, T* grad_x, T* grad_weight,
                                T* grad_bias, int64_t batch, int64_t channels, int64_t spatial,
                                bool training) {
  using Acc = acc_t<T>;
  const int64_t count = batch * spatial;
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    const Acc m = mean[c], s = rstd[c];
    const Acc w = weight ? convert<Acc>(weight[c]) : Acc(1);
    Acc sum_g = 0, sum_g_xhat = 0;
    for_channel_values(c, batch, channels, spatial, [&](int64_t at) {
      const Acc g = convert<Acc>(grad_out[at]);
      sum_g += g;
      sum_g_xhat += g * (convert<Acc>(x[at]) - m) * s;
    });
    sum_g = block_sum(sum_g);
    sum_g_xhat = block_sum(sum_g_xhat);
    if (threadIdx.x == 0) {
      if (grad_weight) grad_weight[c] = convert<T>(sum_g_xhat);
      if (grad_bias) grad_bias[c] = convert<T>(sum_g);
    }
    if (!grad_x) continue;
    const Acc mean_g = training && count > 0 ? sum_g / static_cast<Acc>(count) : Acc(0);
    const Acc mean_g_xhat = training && count > 0 ? sum_g_xhat / static_cast<Acc>(count) : Acc(0);
    for_channel_values(c, batch, channels, spatial, [&](int64_t at) {
      const Acc xhat = (convert<Acc>(x[at]) - m) * s;
      grad_x[at] = convert<T>(w * s * (convert<Acc>(grad_out[at]) - mean_g - xhat * mean_g_xhat));
    });
  }
}

unsigned channel_blocks(int64_t channels) {
  return static_cast<unsigned>(channels < kMaxBlocks ? channels : kMaxBlocks);
}

}  // namespace

// GPU run to check: a channel whose batch * spatial values exceed the block (count > 512, e.g.
// the (512, 64, 32, 32) activations of resnet9), spatial = 1 (batch_norm1d), and f16 inputs with
// a large mean (the two-pass variance must not cancel).
template <typename T>
void batch_norm_statistics(const T* x, acc_t<T>* mean, acc_t<T>* variance, int64_t batch,
                           int64_t channels, int64_t spatial, cudaStream_t stream) {
  if (channels == 0) return;
  statistics_kernel<T><<<channel_blocks(channels), kChannelThreads, 0, stream>>>(
      x, mean, variance, batch, channels, spatial);
  EMBER_CUDA_CHECK_LAUNCH("batch_norm: statistics_kernel<<<>>>");
}

template <typename T>
void batch_norm_apply(const T* x, const acc_t<T>* scale, const acc_t<T>* shift, T* y, int64_t batch,
                      int64_t channels, int64_t spatial, cudaStream_t stream) {
  const int64_t numel = batch * channels * spatial;
  if (numel == 0) return;
  apply_kernel<T><<<blocks_for(numel), kThreadsPerBlock, 0, stream>>>(x, scale, shift, y, numel,
                                                                      channels, spatial);
  EMBER_CUDA_CHECK_LAUNCH("batch_norm: apply_kernel<<<>>>");
}

template <typename T>
void batch_norm_backward(const T* grad_out, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                         const T* weight, T* grad_x, T* grad_weight, T* grad_bias, int64_t batch,
                         int64_t channels, int64_t spatial, bool training, cudaStream_t stream) {
  if (channels == 0) return;
  backward_kernel<T><<<channel_blocks(channels), kChannelThreads, 0, stream>>>(
      grad_out, x, mean, rstd, weight, grad_x, grad_weight, grad_bias, batch, channels, spatial,
      training);
  EMBER_CUDA_CHECK_LAUNCH("batch_norm: backward_kernel<<<>>>");
}

#define EMBER_INSTANTIATE_BATCH_NORM(T)                                                       \
  template void batch_norm_statistics<T>(const T*, acc_t<T>*, acc_t<T>*, int64_t, int64_t,    \
                                         int64_t, cudaStream_t);                              \
  template void batch_norm_apply<T>(const T*, const acc_t<T>*, const acc_t<T>*, T*, int64_t,  \
                                    int64_t, int64_t, cudaStream_t);                          \
  template void batch_norm_backward<T>(const T*, const T*, const acc_t<T>*, const acc_t<T>*,  \
                                       const T*, T*, T*, T*, int64_t, int64_t, int64_t, bool, \
                                       cudaStream_t);
EMBER_INSTANTIATE_BATCH_NORM(float)
EMBER_INSTANTIATE_BATCH_NORM(double)
EMBER_INSTANTIATE_BATCH_NORM(Half)
EMBER_INSTANTIATE_BATCH_NORM(BFloat16)
#undef EMBER_INSTANTIATE_BATCH_NORM

}  // namespace ember::kernels::cuda
