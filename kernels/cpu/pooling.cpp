#include "kernels/cpu/pooling.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/common/convert.h"
#include "kernels/common/pool_windows.h"
#include "kernels/common/scalar_types.h"
#include "kernels/cpu/convert_runs.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/vector_math.h"

namespace ember::kernels::cpu {

namespace {

template <typename T>
using accumulate_t = std::conditional_t<is_reduced_float_v<T>, float, T>;

// body(plane) for every plane, split across threads once the total work is worth it.
template <typename Body>
void over_planes(int64_t planes, int64_t work_per_plane, Body body) {
  const int threads = threads_for(planes * std::max<int64_t>(1, work_per_plane));
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t plane = 0; plane < planes; ++plane)
    body(plane);
}

// ---- max pooling with 2x2 windows at stride 2, no padding (ResNet9's pools) ----
// Each output row reads two whole input rows, so the row pair is converted once (16-bit) and the
// window maxima become one vectorised loop of selects.

constexpr int64_t kMaxFastRow = 1024;  // widest input row the fast path buffers

bool is_plain_2x2_pool(const Pool2dGeometry& g) {
  return g.kernel_h == 2 && g.kernel_w == 2 && g.stride_h == 2 && g.stride_w == 2 && g.pad_h == 0 &&
         g.pad_w == 0 && g.dilation_h == 1 && g.dilation_w == 1 &&
         2 * g.out_height <= g.in_height && 2 * g.out_width <= g.in_width &&
         g.in_width <= kMaxFastRow;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#endif
EMBER_NO_TRAPPING_MATH

// top, bottom (2 Q) -> out (Q), index (Q): the maximum of each 2x2 window and its flat position in
// the plane, top_position being the position of top[0]. The first maximum in row-major order wins
// ties, and the first NaN wins outright, as in the generic loop.
EMBER_CLONE_FOR_SIMD void max_of_2x2_windows(const float* top, const float* bottom, int64_t Q,
                                             int64_t top_position, int64_t width, float* out,
                                             int64_t* index) {
  for (int64_t q = 0; q < Q; ++q) {
    const float candidates[3] = {top[2 * q + 1], bottom[2 * q], bottom[2 * q + 1]};
    const int64_t offsets[3] = {1, width, width + 1};
    float best = top[2 * q];
    int64_t best_offset = 0;
    for (int k = 0; k < 3; ++k) {
      const float v = candidates[k];
      const bool take = best == best && (v > best || v != v);
      best = take ? v : best;
      best_offset = take ? offsets[k] : best_offset;
    }
    out[q] = best;
    index[q] = top_position + 2 * q + best_offset;
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// A narrow plane's output rows are taken several at a time: their top input rows side by side in
// one buffer and their bottom rows in another, so that the window loop runs over many windows
// (an 8x8 plane has 4 windows per row: too few to vectorise, and the scalar loop's branches
// mispredict on random data, 5x slower per window). The positions are then made plane-relative.
// Rows of kFewWindows or more windows are read in place (f32): copying them costs more (16x16
// planes took 0.28 ms per 128x64 batch in place, 0.38 through the buffers).
constexpr int64_t kFewWindows = 8;

template <typename T>
void max_pool_2x2_plane(const Pool2dGeometry& g, const T* in, T* out, int64_t* index) {
  const int64_t W = g.in_width, Q = g.out_width;
  const int64_t rows_per_call = Q < kFewWindows ? kMaxFastRow / (2 * Q) : 1;
  float top_buffer[kMaxFastRow], bottom_buffer[kMaxFastRow], out_buffer[kMaxFastRow / 2];
  for (int64_t p = 0; p < g.out_height; p += rows_per_call) {
    const int64_t rows = std::min(rows_per_call, g.out_height - p);
    const float* top;
    const float* bottom;
    if (rows == 1) {  // a wide row: read in place where T is f32
      top = accumulate_run(in + 2 * p * W, top_buffer, 2 * Q);
      bottom = accumulate_run(in + 2 * p * W + W, bottom_buffer, 2 * Q);
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        widen_to_f32(in + 2 * (p + r) * W, top_buffer + r * 2 * Q, 2 * Q);
        widen_to_f32(in + 2 * (p + r) * W + W, bottom_buffer + r * 2 * Q, 2 * Q);
      }
      top = top_buffer;
      bottom = bottom_buffer;
    }
    // Window j = r Q + q of the call starts at 2 j in the buffers and at 2 (p + r) W + 2 q in the
    // plane: the loop writes 2 p W + 2 j + offset, short of the plane's position by 2 r (W - Q).
    float* row_out = accumulate_destination(out + p * Q, out_buffer);
    max_of_2x2_windows(top, bottom, rows * Q, 2 * p * W, W, row_out, index + p * Q);
    for (int64_t r = 1; r < rows; ++r)
      for (int64_t q = 0; q < Q; ++q)
        index[(p + r) * Q + q] += 2 * r * (W - Q);
    store_accumulated(static_cast<const float*>(row_out), out + p * Q, rows * Q);
  }
}

}  // namespace

template <typename T>
void max_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y, int64_t* indices) {
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  if constexpr (!std::is_same_v<T, double>) {
    if (is_plain_2x2_pool(g)) {
      over_planes(g.planes, out_plane * 4, [&](int64_t plane) {
        max_pool_2x2_plane(g, x + plane * in_plane, y + plane * out_plane,
                           indices + plane * out_plane);
      });
      return;
    }
  }
  over_planes(g.planes, out_plane * g.kernel_h * g.kernel_w, [&](int64_t plane) {
    const T* in = x + plane * in_plane;
    T* out = y + plane * out_plane;
    int64_t* index = indices + plane * out_plane;
    for (int64_t p = 0; p < g.out_height; ++p) {
      for (int64_t q = 0; q < g.out_width; ++q) {
        const PoolWindow w = pool_window(g, p, q);
        using Acc = accumulate_t<T>;
        Acc best = -std::numeric_limits<Acc>::infinity();
        // A dilated window can hold padding only (kernel 2, dilation 3, padding 1 over 2 rows: rows
        // -1 and 2): -inf, as PyTorch, with index -1, which the backward skips.
        const bool empty = w.h_begin >= w.h_end || w.w_begin >= w.w_end;
        int64_t best_index = empty ? -1 : w.h_begin * g.in_width + w.w_begin;
        for (int64_t h = w.h_begin; h < w.h_end; h += g.dilation_h) {
          for (int64_t c = w.w_begin; c < w.w_end; c += g.dilation_w) {
            const Acc value = static_cast<Acc>(in[h * g.in_width + c]);
            if (value > best || std::isnan(value)) {
              best = value;
              best_index = h * g.in_width + c;
              if (std::isnan(value)) break;
            }
          }
          if (std::isnan(best)) break;
        }
        out[p * g.out_width + q] = convert<T>(best);
        index[p * g.out_width + q] = best_index;
      }
    }
  });
}

template <typename T>
void max_pool2d_backward(const Pool2dGeometry& g, const T* grad_y, const int64_t* indices,
                         T* grad_x) {
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  using Acc = accumulate_t<T>;
  over_planes(g.planes, in_plane + out_plane, [&](int64_t plane) {
    T* dx = grad_x + plane * in_plane;
    const T* dy = grad_y + plane * out_plane;
    const int64_t* index = indices + plane * out_plane;
    if constexpr (std::is_same_v<T, Acc>) {
      std::fill(dx, dx + in_plane, T(0));
      for (int64_t i = 0; i < out_plane; ++i)
        if (index[i] >= 0) dx[index[i]] += dy[i];
    } else {
      // 16-bit: dy widened and the plane summed in f32, narrowed once (an element that several
      // overlapping windows picked is rounded once, not after each addition).
      thread_local std::vector<Acc> sums, dy_wide;
      sums.assign(static_cast<size_t>(in_plane), Acc(0));
      dy_wide.resize(static_cast<size_t>(out_plane));
      widen_to_f32(dy, dy_wide.data(), out_plane);
      for (int64_t i = 0; i < out_plane; ++i)
        if (index[i] >= 0) sums[index[i]] += dy_wide[i];
      narrow_from_f32(sums.data(), dx, in_plane);
    }
  });
}

template <typename T>
void avg_pool2d_forward(const Pool2dGeometry& g, bool count_include_pad, const T* x, T* y) {
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  using Acc = accumulate_t<T>;
  over_planes(g.planes, out_plane * g.kernel_h * g.kernel_w, [&](int64_t plane) {
    const T* in = x + plane * in_plane;
    T* out = y + plane * out_plane;
    for (int64_t p = 0; p < g.out_height; ++p) {
      for (int64_t q = 0; q < g.out_width; ++q) {
        const PoolWindow w = pool_window(g, p, q);
        Acc total = 0;
        for (int64_t h = w.h_begin; h < w.h_end; ++h) {
          for (int64_t c = w.w_begin; c < w.w_end; ++c)
            total += static_cast<Acc>(in[h * g.in_width + c]);
        }
        const int64_t divisor = average_divisor(g, w, count_include_pad);
        out[p * g.out_width + q] =
            divisor > 0 ? convert<T>(total / static_cast<Acc>(divisor)) : T(0);
      }
    }
  });
}

template <typename T>
void avg_pool2d_backward(const Pool2dGeometry& g, bool count_include_pad, const T* grad_y,
                         T* grad_x) {
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  using Acc = accumulate_t<T>;
  over_planes(g.planes, out_plane * g.kernel_h * g.kernel_w, [&](int64_t plane) {
    // Accumulated in the wider type, one plane at a time, then rounded once.
    std::vector<Acc> dx(static_cast<size_t>(in_plane), Acc(0));
    const T* dy = grad_y + plane * out_plane;
    for (int64_t p = 0; p < g.out_height; ++p) {
      for (int64_t q = 0; q < g.out_width; ++q) {
        const PoolWindow w = pool_window(g, p, q);
        const int64_t divisor = average_divisor(g, w, count_include_pad);
        if (divisor == 0) continue;
        const Acc share = static_cast<Acc>(dy[p * g.out_width + q]) / static_cast<Acc>(divisor);
        for (int64_t h = w.h_begin; h < w.h_end; ++h) {
          for (int64_t c = w.w_begin; c < w.w_end; ++c)
            dx[static_cast<size_t>(h * g.in_width + c)] += share;
        }
      }
    }
    T* out = grad_x + plane * in_plane;
    for (int64_t i = 0; i < in_plane; ++i)
      out[i] = convert<T>(dx[static_cast<size_t>(i)]);
  });
}

template <typename T>
void adaptive_avg_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y) {
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  using Acc = accumulate_t<T>;
  over_planes(g.planes, in_plane + out_plane, [&](int64_t plane) {
    const T* in = x + plane * in_plane;
    T* out = y + plane * out_plane;
    for (int64_t p = 0; p < g.out_height; ++p) {
      const int64_t h_begin = adaptive_bin_start(p, g.in_height, g.out_height);
      const int64_t h_end = adaptive_bin_end(p, g.in_height, g.out_height);
      for (int64_t q = 0; q < g.out_width; ++q) {
        const int64_t w_begin = adaptive_bin_start(q, g.in_width, g.out_width);
        const int64_t w_end = adaptive_bin_end(q, g.in_width, g.out_width);
        Acc total = 0;
        for (int64_t h = h_begin; h < h_end; ++h) {
          for (int64_t c = w_begin; c < w_end; ++c)
            total += static_cast<Acc>(in[h * g.in_width + c]);
        }
        const int64_t count = (h_end - h_begin) * (w_end - w_begin);
        out[p * g.out_width + q] = convert<T>(total / static_cast<Acc>(count));
      }
    }
  });
}

template <typename T>
void adaptive_avg_pool2d_backward(const Pool2dGeometry& g, const T* grad_y, T* grad_x) {
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  using Acc = accumulate_t<T>;
  over_planes(g.planes, in_plane + out_plane, [&](int64_t plane) {
    std::vector<Acc> dx(static_cast<size_t>(in_plane), Acc(0));
    const T* dy = grad_y + plane * out_plane;
    for (int64_t p = 0; p < g.out_height; ++p) {
      const int64_t h_begin = adaptive_bin_start(p, g.in_height, g.out_height);
      const int64_t h_end = adaptive_bin_end(p, g.in_height, g.out_height);
      for (int64_t q = 0; q < g.out_width; ++q) {
        const int64_t w_begin = adaptive_bin_start(q, g.in_width, g.out_width);
        const int64_t w_end = adaptive_bin_end(q, g.in_width, g.out_width);
        const int64_t count = (h_end - h_begin) * (w_end - w_begin);
        const Acc share = static_cast<Acc>(dy[p * g.out_width + q]) / static_cast<Acc>(count);
        for (int64_t h = h_begin; h < h_end; ++h) {
          for (int64_t c = w_begin; c < w_end; ++c)
            dx[static_cast<size_t>(h * g.in_width + c)] += share;
        }
      }
    }
    T* out = grad_x + plane * in_plane;
    for (int64_t i = 0; i < in_plane; ++i)
      out[i] = convert<T>(dx[static_cast<size_t>(i)]);
  });
}

#define EMBER_INSTANTIATE_POOLING(T)                                                         \
  template void max_pool2d_forward<T>(const Pool2dGeometry&, const T*, T*, int64_t*);        \
  template void max_pool2d_backward<T>(const Pool2dGeometry&, const T*, const int64_t*, T*); \
  template void avg_pool2d_forward<T>(const Pool2dGeometry&, bool, const T*, T*);            \
  template void avg_pool2d_backward<T>(const Pool2dGeometry&, bool, const T*, T*);           \
  template void adaptive_avg_pool2d_forward<T>(const Pool2dGeometry&, const T*, T*);         \
  template void adaptive_avg_pool2d_backward<T>(const Pool2dGeometry&, const T*, T*);
EMBER_INSTANTIATE_POOLING(float)
EMBER_INSTANTIATE_POOLING(double)
EMBER_INSTANTIATE_POOLING(Half)
EMBER_INSTANTIATE_POOLING(BFloat16)
#undef EMBER_INSTANTIATE_POOLING

}  // namespace ember::kernels::cpu
