// The windows of 2-D pooling, one definition for the CPU and the CUDA kernels
// (kernels/cpu/pooling.cpp, kernels/cuda/pooling.cu): which input rows and columns output (p, q)
// reads, what an average divides by, and, for the CUDA backward (one thread per input element),
// which outputs may read a given input. tests/runtime/pool_windows_test.cpp checks them against
// brute force on the host.
#pragma once

#include <cstdint>

#include "kernels/common/scalar_types.h"

namespace ember::kernels {

// x (planes = N C, H, W) -> y (planes, P, Q).
struct Pool2dGeometry {
  int64_t planes = 0;      // N C
  int64_t in_height = 0;   // H
  int64_t in_width = 0;    // W
  int64_t out_height = 0;  // P
  int64_t out_width = 0;   // Q
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;  // max pooling: window elements this far apart
  int64_t divisor_override = 0;            // average pooling: when > 0, every window's divisor
};

// Outputs along one axis of `padded` positions (input + both paddings) for windows spanning
// `extent` of them, as PyTorch's pooling_output_shape: with ceil_mode a last, partial window is
// kept unless it would start in the end padding (at or past `start_limit` = input + padding).
inline int64_t pooled_size(int64_t padded, int64_t extent, int64_t stride, int64_t start_limit,
                           bool ceil_mode) {
  int64_t size = (padded - extent + (ceil_mode ? stride - 1 : 0)) / stride + 1;
  if (ceil_mode && (size - 1) * stride >= start_limit) --size;
  return size;
}

// The window of output (p, q): rows h_begin, h_begin + dilation_h, ... below h_end, likewise
// columns, all inside the real input (empty only for a dilated window that holds padding alone);
// and the size of the window clipped to the padded input (count_include_pad's divisor; average
// pooling has no dilation).
struct PoolWindow {
  int64_t h_begin, h_end, w_begin, w_end;
  int64_t padded_size;
};

// The first of start, start + step, ... that is not negative.
EMBER_HOST_DEVICE int64_t first_inside(int64_t start, int64_t step) {
  return start >= 0 ? start : start + (-start + step - 1) / step * step;
}

EMBER_HOST_DEVICE int64_t smaller_of(int64_t a, int64_t b) {
  return a < b ? a : b;
}

EMBER_HOST_DEVICE PoolWindow pool_window(const Pool2dGeometry& g, int64_t p, int64_t q) {
  const int64_t h_start = p * g.stride_h - g.pad_h, w_start = q * g.stride_w - g.pad_w;
  const int64_t h_end =
      smaller_of(h_start + (g.kernel_h - 1) * g.dilation_h + 1, g.in_height + g.pad_h);
  const int64_t w_end =
      smaller_of(w_start + (g.kernel_w - 1) * g.dilation_w + 1, g.in_width + g.pad_w);
  return {first_inside(h_start, g.dilation_h), smaller_of(h_end, g.in_height),
          first_inside(w_start, g.dilation_w), smaller_of(w_end, g.in_width),
          (h_end - h_start) * (w_end - w_start)};
}

// What an average over `window` divides by: divisor_override, else the padded window
// (count_include_pad, PyTorch's default) or the real elements in it.
EMBER_HOST_DEVICE int64_t average_divisor(const Pool2dGeometry& g, const PoolWindow& window,
                                          bool count_include_pad) {
  if (g.divisor_override > 0) return g.divisor_override;
  if (count_include_pad) return window.padded_size;
  return (window.h_end - window.h_begin) * (window.w_end - window.w_begin);
}

// PyTorch's adaptive bins along one axis: [floor(i in / out), ceil((i + 1) in / out)).
EMBER_HOST_DEVICE int64_t adaptive_bin_start(int64_t i, int64_t in, int64_t out) {
  return (i * in) / out;
}
EMBER_HOST_DEVICE int64_t adaptive_bin_end(int64_t i, int64_t in, int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

// Outputs [begin, end) along one axis whose windows may hold input position i: a superset that
// the caller narrows (with pool_window, or max pooling's saved indices).
struct OutputRange {
  int64_t begin, end;
};

// Window o spans o stride - pad <= i < o stride - pad + extent, where extent is the dilated
// kernel, (kernel - 1) dilation + 1.
EMBER_HOST_DEVICE OutputRange outputs_touching(int64_t i, int64_t out, int64_t extent,
                                               int64_t stride, int64_t pad) {
  const int64_t last = (i + pad) / stride;  // o stride <= i + pad
  const int64_t first_numerator = i + pad - extent + 1;
  const int64_t first = first_numerator <= 0 ? 0 : (first_numerator + stride - 1) / stride;
  return {first, smaller_of(last + 1, out)};
}

// Bin o holds i iff floor(o in / out) <= i < ceil((o + 1) in / out).
EMBER_HOST_DEVICE OutputRange adaptive_outputs_touching(int64_t i, int64_t in, int64_t out) {
  return {(i * out) / in, smaller_of(((i + 1) * out + in - 1) / in, out)};
}

}  // namespace ember::kernels
