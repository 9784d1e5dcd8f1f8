// 2-D convolution and pooling over NCHW tensors.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace ember {

// A (height, width) pair; one number means both: `{.stride = 2, .padding = 1}`.
struct Size2 {
  int64_t h = 0;
  int64_t w = 0;
  Size2() = default;
  Size2(int64_t both) : h(both), w(both) {}  // NOLINT: lets `.stride = 2` read naturally
  Size2(int64_t height, int64_t width) : h(height), w(width) {}
  bool operator==(const Size2&) const = default;
};

struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
};

// input (N, C, H, W), weight (K, C / groups, R, S), bias (K) or undefined -> (N, K, P, Q)
// P = (H + 2 padding.h - dilation.h (R - 1) - 1) / stride.h + 1, likewise Q.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dOptions& options = {});

struct Pool2dOptions {
  Size2 kernel_size = 1;
  Size2 stride = 0;  // 0: the kernel size, as PyTorch
  Size2 padding = 0;
  bool count_include_pad = true;  // avg_pool2d only
};

// x (N, C, H, W) -> (N, C, P, Q); padding counts as -inf for max, as 0 for avg.
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options);
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options);
// x (N, C, H, W) -> (N, C, output_size.h, output_size.w), PyTorch's bin edges.
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);

}  // namespace ember
