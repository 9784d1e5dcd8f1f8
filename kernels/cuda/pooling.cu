#include <math_constants.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/convert.h"
#include "kernels/common/pool_windows.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/pooling.h"

namespace ember::kernels::cuda {
namespace {

// Which pooling a shared kernel computes (a runtime switch: one kernel per dtype, not per op).
enum class Pool { max, average, adaptive_average };

template <typename Acc>
__device__ __forceinline__ Acc negative_infinity() {
  if constexpr (std::is_same_v<Acc, double>) {
    return -CUDART_INF;
  } else {
    return -CUDART_INF_F;
  }
}

// The window of output (p, q) (kernels/common/pool_windows.h, as the CPU's), or adaptive
// pooling's bin, and the divisor of an average over it.
struct Window {
  int64_t h_begin, h_end, w_begin, w_end;
  int64_t divisor;
};

__device__ Window window_of(const Pool2dGeometry& g, Pool pool, bool count_include_pad, int64_t p,
                            int64_t q) {
  if (pool == Pool::adaptive_average) {
    Window w{adaptive_bin_start(p, g.in_height, g.out_height),
             adaptive_bin_end(p, g.in_height, g.out_height),
             adaptive_bin_start(q, g.in_width, g.out_width),
             adaptive_bin_end(q, g.in_width, g.out_width), 0};
    w.divisor = (w.h_end - w.h_begin) * (w.w_end - w.w_begin);
    return w;
  }
  const PoolWindow w = pool_window(g, p, q);
  return {w.h_begin, w.h_end, w.w_begin, w.w_end, average_divisor(g, w, count_include_pad)};
}

// Outputs along one axis whose windows may hold input position i: a superset, narrowed by
// window_of or by max pooling's saved indices. `extent` is the dilated kernel.
__device__ OutputRange outputs_that_may_read(Pool pool, int64_t i, int64_t in, int64_t out,
                                             int64_t extent, int64_t stride, int64_t pad) {
  if (pool == Pool::adaptive_average) return adaptive_outputs_touching(i, in, out);
  return outputs_touching(i, out, extent, stride, pad);
}

// One thread per output element. indices is written for max pooling only.
template <typename T>
__global__ void pool_forward_kernel(Pool pool, Pool2dGeometry g, bool count_include_pad, const T* x,
                                    T* y, int64_t* indices, int64_t numel) {
  using Acc = acc_t<T>;
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel;
       i += step) {
    const int64_t plane = i / out_plane, p = (i % out_plane) / g.out_width, q = i % g.out_width;
    const T* in = x + plane * in_plane;
    const Window w = window_of(g, pool, count_include_pad, p, q);
    if (pool == Pool::max) {
      // As the CPU: the first maximum wins ties, a NaN wins and stops the search.
      Acc best = negative_infinity<Acc>();
      // A dilated window of padding only: -inf with index -1, as the CPU.
      const bool empty = w.h_begin >= w.h_end || w.w_begin >= w.w_end;
      int64_t best_index = empty ? -1 : w.h_begin * g.in_width + w.w_begin;
      bool found_nan = false;
      for (int64_t h = w.h_begin; h < w.h_end && !found_nan; h += g.dilation_h) {
        for (int64_t c = w.w_begin; c < w.w_end; c += g.dilation_w) {
          const Acc value = convert<Acc>(in[h * g.in_width + c]);
          if (value > best || device_math::is_nan(value)) {
            best = value;
            best_index = h * g.in_width + c;
            if (device_math::is_nan(value)) {
              found_nan = true;
              break;
            }
          }
        }
      }
      y[i] = convert<T>(best);
      indices[i] = best_index;
    } else {
      Acc total = 0;
      for (int64_t h = w.h_begin; h < w.h_end; ++h) {
        for (int64_t c = w.w_begin; c < w.w_end; ++c)
          total += convert<Acc>(in[h * g.in_width + c]);
      }
      y[i] = w.divisor > 0 ? convert<T>(total / static_cast<Acc>(w.divisor)) : T(0);
    }
  }
}

// One thread per input element: the sum of the output gradients that reach it.
template <typename T>
__global__ void pool_backward_kernel(Pool pool, Pool2dGeometry g, bool count_include_pad,
                                     const T* grad_y, const int64_t* indices, T* grad_x,
                                     int64_t numel) {
  using Acc = acc_t<T>;
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel;
       i += step) {
    const int64_t plane = i / in_plane, position = i % in_plane;
    const int64_t h = position / g.in_width, c = position % g.in_width;
    const T* dy = grad_y + plane * out_plane;
    const int64_t extent_h = (g.kernel_h - 1) * g.dilation_h + 1;
    const int64_t extent_w = (g.kernel_w - 1) * g.dilation_w + 1;
    const OutputRange rows =
        outputs_that_may_read(pool, h, g.in_height, g.out_height, extent_h, g.stride_h, g.pad_h);
    const OutputRange columns =
        outputs_that_may_read(pool, c, g.in_width, g.out_width, extent_w, g.stride_w, g.pad_w);
    Acc total = 0;
    for (int64_t p = rows.begin; p < rows.end; ++p) {
      for (int64_t q = columns.begin; q < columns.end; ++q) {
        const int64_t o = p * g.out_width + q;
        if (pool == Pool::max) {
          if (indices[plane * out_plane + o] == position) total += convert<Acc>(dy[o]);
          continue;
        }
        const Window w = window_of(g, pool, count_include_pad, p, q);
        if (h < w.h_begin || h >= w.h_end || c < w.w_begin || c >= w.w_end || w.divisor == 0)
          continue;
        total += convert<Acc>(dy[o]) / static_cast<Acc>(w.divisor);
      }
    }
    grad_x[i] = convert<T>(total);
  }
}

// ---- max pooling over 2x2 windows at stride 2 that tile the input exactly ----
// (resnet9's pools, and most CNNs'.) Every input belongs to exactly one window, so the backward is
// one thread per output writing its four inputs, with no search for the windows that reach an
// input. Blocks walk the positions of a plane (blockIdx.x, 32-bit arithmetic: a plane is far
// below 2^31 values) and planes grid-stride (blockIdx.y): no 64-bit division per value. Planes
// of at most half a block's threads share a block, kThreadsPerBlock / positions of them
// (resnet9's 16x16 -> 8x8 pool has 64 outputs a plane, its 8x8 -> 4x4 pool 16): with a block per
// plane, 3/4 and 15/16 of the threads would have nothing to do. (A plane of 129 to 255 outputs
// still takes a block of its own.)

struct Tiled2x2 {
  int64_t planes;
  int out_height, out_width;  // the input is (2 out_height, 2 out_width)
  int planes_per_block;       // 1 when a plane has kThreadsPerBlock outputs or more
};

// (A plane's 4 P Q inputs must be indexable by an int.)
bool tiles_2x2(const Pool2dGeometry& g) {
  return g.kernel_h == 2 && g.kernel_w == 2 && g.stride_h == 2 && g.stride_w == 2 && g.pad_h == 0 &&
         g.pad_w == 0 && g.dilation_h == 1 && g.dilation_w == 1 &&
         g.in_height == 2 * g.out_height && g.in_width == 2 * g.out_width &&
         g.out_height * g.out_width < (int64_t{1} << 29);
}

Tiled2x2 tiled_2x2(const Pool2dGeometry& g) {
  const int64_t positions = g.out_height * g.out_width;
  const int64_t per_block = positions < kThreadsPerBlock ? kThreadsPerBlock / positions : 1;
  return {g.planes, static_cast<int>(g.out_height), static_cast<int>(g.out_width),
          static_cast<int>(per_block)};
}

constexpr int64_t kMaxPlaneBlocks = 65535;  // grid.y

dim3 grid_2x2(const Tiled2x2& t) {
  const int64_t positions = static_cast<int64_t>(t.out_height) * t.out_width;
  const int64_t plane_groups = (t.planes + t.planes_per_block - 1) / t.planes_per_block;
  const int64_t blocks_y = plane_groups < kMaxPlaneBlocks ? plane_groups : kMaxPlaneBlocks;
  return dim3(static_cast<unsigned>((positions + kThreadsPerBlock - 1) / kThreadsPerBlock),
              static_cast<unsigned>(blocks_y));
}

// This thread's output position in its planes and the positions of its window's four inputs, in
// row order; its first plane and the step to its next one. False for a thread with no position
// (past a plane's end, or past the planes a block holds).
struct ThreadWindow {
  int position;
  int window[4];
  int64_t first_plane, plane_step;
};

__device__ __forceinline__ bool window_of_thread(const Tiled2x2& t, ThreadWindow& w) {
  const int positions = t.out_height * t.out_width;
  int plane_in_block = 0;
  if (t.planes_per_block > 1) {  // gridDim.x == 1: the block's threads cover several planes
    plane_in_block = static_cast<int>(threadIdx.x) / positions;
    w.position = static_cast<int>(threadIdx.x) - plane_in_block * positions;
    if (plane_in_block >= t.planes_per_block) return false;
  } else {
    w.position = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (w.position >= positions) return false;
  }
  const int p = w.position / t.out_width, q = w.position - p * t.out_width;
  const int in_width = 2 * t.out_width;
  w.window[0] = 2 * p * in_width + 2 * q;
  w.window[1] = w.window[0] + 1;
  w.window[2] = w.window[0] + in_width;
  w.window[3] = w.window[0] + in_width + 1;
  w.first_plane = static_cast<int64_t>(blockIdx.y) * t.planes_per_block + plane_in_block;
  w.plane_step = static_cast<int64_t>(gridDim.y) * t.planes_per_block;
  return true;
}

// As pool_forward_kernel's max (and the CPU): the window's values in row order, the first maximum
// wins ties, a NaN wins and ends the search.
template <typename T>
__global__ void max_pool_2x2_forward_kernel(Tiled2x2 t, const T* x, T* y, int64_t* indices) {
  using Acc = acc_t<T>;
  const int positions = t.out_height * t.out_width;
  ThreadWindow w;
  if (!window_of_thread(t, w)) return;
  for (int64_t plane = w.first_plane; plane < t.planes; plane += w.plane_step) {
    const T* in = x + plane * 4 * positions;
    Acc best = negative_infinity<Acc>();
    int best_index = w.window[0];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const Acc value = convert<Acc>(in[w.window[k]]);
      if (value > best || device_math::is_nan(value)) {
        best = value;
        best_index = w.window[k];
        if (device_math::is_nan(value)) break;
      }
    }
    y[plane * positions + w.position] = convert<T>(best);
    indices[plane * positions + w.position] = best_index;
  }
}

// Output (p, q)'s gradient to its saved position; zeros to the window's other three inputs.
template <typename T>
__global__ void max_pool_2x2_backward_kernel(Tiled2x2 t, const T* grad_y, const int64_t* indices,
                                             T* grad_x) {
  using Acc = acc_t<T>;
  const int positions = t.out_height * t.out_width;
  ThreadWindow w;
  if (!window_of_thread(t, w)) return;
  for (int64_t plane = w.first_plane; plane < t.planes; plane += w.plane_step) {
    const int64_t saved = indices[plane * positions + w.position];
    // As pool_backward_kernel: a sum from 0 in Acc, so -0.0 arrives as +0.0 on both paths.
    Acc total = 0;
    total += convert<Acc>(grad_y[plane * positions + w.position]);
    // Converted once, not once per input (each a cvt and a NaN select in f16).
    const T gradient = convert<T>(total), zero = convert<T>(Acc(0));
    T* out = grad_x + plane * 4 * positions;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      out[w.window[k]] = w.window[k] == saved ? gradient : zero;
  }
}

template <typename T>
void pool_forward(const char* what, Pool pool, const Pool2dGeometry& g, bool count_include_pad,
                  const T* x, T* y, int64_t* indices, cudaStream_t stream) {
  const int64_t numel = g.planes * g.out_height * g.out_width;
  if (numel == 0) return;
  pool_forward_kernel<T><<<blocks_for(numel), kThreadsPerBlock, 0, stream>>>(
      pool, g, count_include_pad, x, y, indices, numel);
  EMBER_CUDA_CHECK_LAUNCH(what);
}

template <typename T>
void pool_backward(const char* what, Pool pool, const Pool2dGeometry& g, bool count_include_pad,
                   const T* grad_y, const int64_t* indices, T* grad_x, cudaStream_t stream) {
  const int64_t numel = g.planes * g.in_height * g.in_width;
  if (numel == 0) return;
  pool_backward_kernel<T><<<blocks_for(numel), kThreadsPerBlock, 0, stream>>>(
      pool, g, count_include_pad, grad_y, indices, grad_x, numel);
  EMBER_CUDA_CHECK_LAUNCH(what);
}

}  // namespace

// GPU run to check: windows that overlap (stride < kernel) and padding, for the gather in
// backward (outputs_that_may_read must not miss a window; tests/runtime/pool_windows_test.cpp
// checks that on the host); adaptive bins that overlap (3x4 -> 5x5) and the global average of
// resnet9's head; 2x2 windows on even sizes (the tiled kernels) and on odd ones (the generic
// kernels, which leave the last row and column out); ceil_mode, dilation and divisor_override.
template <typename T>
void max_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y, int64_t* indices,
                        cudaStream_t stream) {
  if (tiles_2x2(g)) {
    if (g.planes * g.out_height * g.out_width == 0) return;
    const Tiled2x2 t = tiled_2x2(g);
    max_pool_2x2_forward_kernel<T><<<grid_2x2(t), kThreadsPerBlock, 0, stream>>>(t, x, y, indices);
    EMBER_CUDA_CHECK_LAUNCH("max_pool2d: max_pool_2x2_forward_kernel<<<>>>");
    return;
  }
  pool_forward("max_pool2d: pool_forward_kernel<<<>>>", Pool::max, g, false, x, y, indices, stream);
}

template <typename T>
void max_pool2d_backward(const Pool2dGeometry& g, const T* grad_y, const int64_t* indices,
                         T* grad_x, cudaStream_t stream) {
  if (tiles_2x2(g)) {
    if (g.planes * g.out_height * g.out_width == 0) return;
    const Tiled2x2 t = tiled_2x2(g);
    max_pool_2x2_backward_kernel<T>
        <<<grid_2x2(t), kThreadsPerBlock, 0, stream>>>(t, grad_y, indices, grad_x);
    EMBER_CUDA_CHECK_LAUNCH("max_pool2d backward: max_pool_2x2_backward_kernel<<<>>>");
    return;
  }
  pool_backward("max_pool2d backward: pool_backward_kernel<<<>>>", Pool::max, g, false, grad_y,
                indices, grad_x, stream);
}

template <typename T>
void avg_pool2d_forward(const Pool2dGeometry& g, bool count_include_pad, const T* x, T* y,
                        cudaStream_t stream) {
  pool_forward("avg_pool2d: pool_forward_kernel<<<>>>", Pool::average, g, count_include_pad, x, y,
               static_cast<int64_t*>(nullptr), stream);
}

template <typename T>
void avg_pool2d_backward(const Pool2dGeometry& g, bool count_include_pad, const T* grad_y,
                         T* grad_x, cudaStream_t stream) {
  pool_backward("avg_pool2d backward: pool_backward_kernel<<<>>>", Pool::average, g,
                count_include_pad, grad_y, static_cast<const int64_t*>(nullptr), grad_x, stream);
}

template <typename T>
void adaptive_avg_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y, cudaStream_t stream) {
  pool_forward("adaptive_avg_pool2d: pool_forward_kernel<<<>>>", Pool::adaptive_average, g, false,
               x, y, static_cast<int64_t*>(nullptr), stream);
}

template <typename T>
void adaptive_avg_pool2d_backward(const Pool2dGeometry& g, const T* grad_y, T* grad_x,
                                  cudaStream_t stream) {
  pool_backward("adaptive_avg_pool2d backward: pool_backward_kernel<<<>>>", Pool::adaptive_average,
                g, false, grad_y, static_cast<const int64_t*>(nullptr), grad_x, stream);
}

#define EMBER_INSTANTIATE_POOLING(T)                                                               \
  template void max_pool2d_forward<T>(const Pool2dGeometry&, const T*, T*, int64_t*,               \
                                      cudaStream_t);                                               \
  template void max_pool2d_backward<T>(const Pool2dGeometry&, const T*, const int64_t*, T*,        \
                                       cudaStream_t);                                              \
  template void avg_pool2d_forward<T>(const Pool2dGeometry&, bool, const T*, T*, cudaStream_t);    \
  template void avg_pool2d_backward<T>(const Pool2dGeometry&, bool, const T*, T*, cudaStream_t);   \
  template void adaptive_avg_pool2d_forward<T>(const Pool2dGeometry&, const T*, T*, cudaStream_t); \
  template void adaptive_avg_pool2d_backward<T>(const Pool2dGeometry&, const T*, T*, cudaStream_t);
EMBER_INSTANTIATE_POOLING(float)
EMBER_INSTANTIATE_POOLING(double)
EMBER_INSTANTIATE_POOLING(Half)
EMBER_INSTANTIATE_POOLING(BFloat16)
#undef EMBER_INSTANTIATE_POOLING

}  // namespace ember::kernels::cuda
