#include <cstdint>

#include "kernels/common/convert.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/layer_norm.h"
#include "kernels/cuda/row_reduce.cuh"
#include "kernels/cuda/scratch.h"

namespace ember::kernels::cuda {
namespace {

namespace dm = device_math;
using rows::Combine;
using rows::Group;

// Column sums for grad_weight / grad_bias: a block of (kTileWidth, kTileRows) threads per tile of
// kTileWidth adjacent columns and one chunk of rows (threadIdx.x walks the columns: coalesced).
constexpr int kTileWidth = 32;
constexpr int kTileRows = 8;
constexpr int64_t kRowsPerChunk = 128;
constexpr int64_t kMaxGridY = 65535;

// x (rows, cols) -> y (rows, cols), mean and rstd (rows). Mirrors kernels/cpu/normalization.cpp's
// layer_norm_rows: mean, then the mean of squared deviations, then the write.
template <bool kBlock, typename T>
__global__ void __launch_bounds__(rows::kMaxThreads)
    layer_norm_rows_kernel(const T* x, const T* weight, const T* bias, T* y, acc_t<T>* mean,
                           acc_t<T>* rstd, int64_t rows, int64_t cols, double eps,
                           bool vectorised) {
  using Acc = acc_t<T>;
  using G = Group<kBlock>;
  const Acc count = static_cast<Acc>(cols);
  for (int64_t r = G::first_row(); r < rows; r += G::row_step()) {
    const T* in = x + r * cols;
    Acc total = 0;
    rows::for_each<kBlock>(in, cols, vectorised,
                           [&](int64_t, T value) { total += convert<Acc>(value); });
    const Acc m = G::template all_reduce<Combine::sum>(total, Acc(0)) / count;
    Acc squares = 0;
    rows::for_each<kBlock>(in, cols, vectorised, [&](int64_t, T value) {
      const Acc d = convert<Acc>(value) - m;
      squares += d * d;
    });
    const Acc variance = G::template all_reduce<Combine::sum>(squares, Acc(0)) / count;
    const Acc s = Acc(1) / dm::sqrt(variance + static_cast<Acc>(eps));
    if (G::rank() == 0) {
      mean[r] = m;
      rstd[r] = s;
    }
    rows::map<kBlock>(y + r * cols, in, static_cast<const T*>(nullptr), cols, vectorised,
                      [=](int64_t k, T value, T) {
                        Acc out = (convert<Acc>(value) - m) * s;
                        if (weight != nullptr) out = out * convert<Acc>(weight[k]);
                        if (bias != nullptr) out = out + convert<Acc>(bias[k]);
                        return convert<T>(out);
                      });
  }
}

// grad_out, x (rows, cols) -> grad_x (rows, cols): per row the sums of gw and gw * xhat, then
// the elementwise formula of layer_norm_backward.
template <bool kBlock, typename T>
__global__ void __launch_bounds__(rows::kMaxThreads)
    layer_norm_grad_x_kernel(const T* grad_out, const T* x, const acc_t<T>* mean,
                             const acc_t<T>* rstd, const T* weight, T* grad_x, int64_t rows,
                             int64_t cols, bool vectorised) {
  using Acc = acc_t<T>;
  using G = Group<kBlock>;
  const Acc count = static_cast<Acc>(cols);
  for (int64_t r = G::first_row(); r < rows; r += G::row_step()) {
    const T* g = grad_out + r * cols;
    const T* in = x + r * cols;
    const Acc m = mean[r], s = rstd[r];
    Acc sum_gw = 0, sum_gw_xhat = 0;
    rows::for_each<kBlock>(g, cols, vectorised, [&](int64_t k, T value) {
      const Acc gk = convert<Acc>(value);
      const Acc gw = weight != nullptr ? gk * convert<Acc>(weight[k]) : gk;
      const Acc xhat = (convert<Acc>(in[k]) - m) * s;
      sum_gw += gw;
      sum_gw_xhat += gw * xhat;
    });
    const Acc mean_gw = G::template all_reduce<Combine::sum>(sum_gw, Acc(0)) / count;
    const Acc mean_gw_xhat = G::template all_reduce<Combine::sum>(sum_gw_xhat, Acc(0)) / count;
    rows::map<kBlock>(grad_x + r * cols, g, in, cols, vectorised,
                      [=](int64_t k, T g_value, T x_value) {
                        const Acc gk = convert<Acc>(g_value);
                        const Acc gw = weight != nullptr ? gk * convert<Acc>(weight[k]) : gk;
                        const Acc xhat = (convert<Acc>(x_value) - m) * s;
                        return convert<T>(s * (gw - mean_gw - xhat * mean_gw_xhat));
                      });
  }
}

// Pass 1 of grad_weight / grad_bias. Block (tile, chunk) -> partial_* (chunks, cols): the sums of
// grad_out xhat and grad_out over the chunk's rows. Either output may be null.
template <typename T>
__global__ void layer_norm_param_partials_kernel(const T* grad_out, const T* x,
                                                 const acc_t<T>* mean, const acc_t<T>* rstd,
                                                 acc_t<T>* partial_weight, acc_t<T>* partial_bias,
                                                 int64_t rows, int64_t cols,
                                                 int64_t rows_per_chunk) {
  using Acc = acc_t<T>;
  __shared__ Acc weight_slices[kTileRows][kTileWidth + 1];
  __shared__ Acc bias_slices[kTileRows][kTileWidth + 1];
  const int64_t column = static_cast<int64_t>(blockIdx.x) * kTileWidth + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  Acc dw = 0, db = 0;
  if (column < cols) {
    for (int64_t r = begin + threadIdx.y; r < end; r += kTileRows) {
      const Acc g = convert<Acc>(grad_out[r * cols + column]);
      const Acc xhat = (convert<Acc>(x[r * cols + column]) - mean[r]) * rstd[r];
      dw += g * xhat;
      db += g;
    }
  }
  weight_slices[threadIdx.y][threadIdx.x] = dw;
  bias_slices[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && column < cols) {
    for (int slice = 1; slice < kTileRows; ++slice) {
      dw += weight_slices[slice][threadIdx.x];
      db += bias_slices[slice][threadIdx.x];
    }
    if (partial_weight != nullptr) partial_weight[chunk * cols + column] = dw;
    if (partial_bias != nullptr) partial_bias[chunk * cols + column] = db;
  }
}

// Pass 2: partial (chunks, cols) -> out (cols), summed over the chunks in order, then cast.
template <typename T>
__global__ void layer_norm_param_finish_kernel(const acc_t<T>* partial_weight,
                                               const acc_t<T>* partial_bias, T* grad_weight,
                                               T* grad_bias, int64_t chunks, int64_t cols) {
  using Acc = acc_t<T>;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < cols;
       k += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    Acc dw = 0, db = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      if (grad_weight != nullptr) dw += partial_weight[c * cols + k];
      if (grad_bias != nullptr) db += partial_bias[c * cols + k];
    }
    if (grad_weight != nullptr) grad_weight[k] = convert<T>(dw);
    if (grad_bias != nullptr) grad_bias[k] = convert<T>(db);
  }
}

}  // namespace

template <typename T>
void layer_norm(const T* x, const T* weight, const T* bias, T* y, acc_t<T>* mean, acc_t<T>* rstd,
                int64_t rows, int64_t cols, double eps, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const rows::LaunchShape shape = rows::launch_shape(rows, cols);
  // weight and bias are read one value at a time: only x and y need the alignment.
  const bool vectorised = rows::vector_aligned<T>(cols, {x, y});
  if (shape.block_per_row) {
    layer_norm_rows_kernel<true, T><<<shape.blocks, shape.threads, 0, stream>>>(
        x, weight, bias, y, mean, rstd, rows, cols, eps, vectorised);
  } else {
    layer_norm_rows_kernel<false, T><<<shape.blocks, shape.threads, 0, stream>>>(
        x, weight, bias, y, mean, rstd, rows, cols, eps, vectorised);
  }
  EMBER_CUDA_CHECK_LAUNCH("layer_norm: layer_norm_rows_kernel<<<>>>");
}

template <typename T>
void layer_norm_backward(const T* grad_out, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                         const T* weight, T* grad_x, T* grad_weight, T* grad_bias, int64_t rows,
                         int64_t cols, cudaStream_t stream) {
  using Acc = acc_t<T>;
  if (cols == 0) return;
  if (grad_x != nullptr && rows > 0) {
    const rows::LaunchShape shape = rows::launch_shape(rows, cols);
    const bool vectorised = rows::vector_aligned<T>(cols, {grad_out, x, grad_x});
    if (shape.block_per_row) {
      layer_norm_grad_x_kernel<true, T><<<shape.blocks, shape.threads, 0, stream>>>(
          grad_out, x, mean, rstd, weight, grad_x, rows, cols, vectorised);
    } else {
      layer_norm_grad_x_kernel<false, T><<<shape.blocks, shape.threads, 0, stream>>>(
          grad_out, x, mean, rstd, weight, grad_x, rows, cols, vectorised);
    }
    EMBER_CUDA_CHECK_LAUNCH("layer_norm_backward: layer_norm_grad_x_kernel<<<>>>");
  }
  if (grad_weight == nullptr && grad_bias == nullptr) return;
  // Chunks of rows: enough blocks to fill the GPU when there are many rows, at most kMaxGridY.
  int64_t rows_per_chunk = kRowsPerChunk;
  if ((rows + rows_per_chunk - 1) / rows_per_chunk > kMaxGridY)
    rows_per_chunk = (rows + kMaxGridY - 1) / kMaxGridY;
  const int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  // Weight partials (chunks, cols), then bias partials (chunks, cols).
  const Scratch<Acc> scratch(2 * chunks * cols, stream);
  Acc* partial = chunks > 0 ? scratch.data : nullptr;
  if (chunks > 0) {
    const dim3 grid(static_cast<unsigned>((cols + kTileWidth - 1) / kTileWidth),
                    static_cast<unsigned>(chunks));
    layer_norm_param_partials_kernel<T><<<grid, dim3(kTileWidth, kTileRows), 0, stream>>>(
        grad_out, x, mean, rstd, grad_weight != nullptr ? partial : nullptr,
        grad_bias != nullptr ? partial + chunks * cols : nullptr, rows, cols, rows_per_chunk);
    EMBER_CUDA_CHECK_LAUNCH("layer_norm_backward: layer_norm_param_partials_kernel<<<>>>");
  }
  // With no rows (chunks == 0) this writes zeros, as the CPU kernel does.
  layer_norm_param_finish_kernel<T><<<blocks_for(cols), kThreadsPerBlock, 0, stream>>>(
      partial, partial != nullptr ? partial + chunks * cols : nullptr, grad_weight, grad_bias,
      chunks, cols);
  EMBER_CUDA_CHECK_LAUNCH("layer_norm_backward: layer_norm_param_finish_kernel<<<>>>");
}

#define EMBER_INSTANTIATE_LAYER_NORM(T)                                                        \
  template void layer_norm<T>(const T*, const T*, const T*, T*, acc_t<T>*, acc_t<T>*, int64_t, \
                              int64_t, double, cudaStream_t);                                  \
  template void layer_norm_backward<T>(const T*, const T*, const acc_t<T>*, const acc_t<T>*,   \
                                       const T*, T*, T*, T*, int64_t, int64_t, cudaStream_t);
EMBER_INSTANTIATE_LAYER_NORM(float)
EMBER_INSTANTIATE_LAYER_NORM(double)
EMBER_INSTANTIATE_LAYER_NORM(Half)
EMBER_INSTANTIATE_LAYER_NORM(BFloat16)
#undef EMBER_INSTANTIATE_LAYER_NORM

}  // namespace ember::kernels::cuda
