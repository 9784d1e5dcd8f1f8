// The geometry of a 2-D convolution, shared by the CPU and CUDA kernels.
//
//   input (N, C, H, W), weight (K, C / groups, R, S) -> output (N, K, P, Q)
//   P = (H + 2 pad_h - dilation_h (R - 1) - 1) / stride_h + 1, likewise Q.
#pragma once

#include <cstdint>

namespace ember::kernels {

struct Conv2dParams {
  int64_t batch = 0;          // N
  int64_t in_channels = 0;    // C
  int64_t in_height = 0;      // H
  int64_t in_width = 0;       // W
  int64_t out_channels = 0;   // K
  int64_t kernel_height = 0;  // R
  int64_t kernel_width = 0;   // S
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;

  int64_t out_height() const {
    return (in_height + 2 * pad_h - dilation_h * (kernel_height - 1) - 1) / stride_h + 1;
  }
  int64_t out_width() const {
    return (in_width + 2 * pad_w - dilation_w * (kernel_width - 1) - 1) / stride_w + 1;
  }
  bool operator==(const Conv2dParams&) const = default;
};

}  // namespace ember::kernels
