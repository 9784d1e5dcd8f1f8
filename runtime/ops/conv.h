// 2-D convolution and pooling over NCHW tensors.
#pragma once

#include <optional>

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

// PyTorch's torch.backends.cudnn.allow_tf32: f32 convolutions on CUDA may round their inputs to
// TF32 (10-bit mantissa) to use the tensor cores. Off by default in ember, so that an f32 result
// on the GPU matches the CPU's; PyTorch has it on by default. The CPU ignores it.
void set_conv_allow_tf32(bool allow);
bool conv_allow_tf32();

// torch.backends.cudnn.deterministic: true (ember's default) takes a deterministic cuDNN
// algorithm when the heuristics offer one, so that two runs give the same bits; false takes their
// best-ranked one, which may add with atomics (PyTorch's default). EMBER_CUDNN_DETERMINISTIC=0
// starts a process with false. The CPU is deterministic either way. The variable is read on the
// first call of either function (or of a CUDA convolution): a value other than 0 or 1 throws.
void set_conv_deterministic(bool deterministic_only);
bool conv_deterministic();

// torch.backends.cudnn.benchmark: false (the default, in ember as in PyTorch) ranks cuDNN's
// algorithms for a new convolution shape by its heuristics; true runs each algorithm once on the
// first call of each shape and ranks them by the time measured (the first call takes longer).
// The deterministic rule above still applies to the ranking, so a run stays reproducible within
// a process; another process may measure, and so choose, differently. EMBER_CUDNN_BENCHMARK=1
// starts a process with true (read as EMBER_CUDNN_DETERMINISTIC is). The CPU ignores it.
void set_conv_benchmark(bool measure);
bool conv_benchmark();

// How cuDNN is asked: false (the default) through its v7-style API (cudnnGetConvolution*_v7,
// cudnnConvolution*), true through its graph API (an execution plan from the engine
// configurations of its heuristics, mode A), the path PyTorch takes. The rules above hold for
// both (benchmark times the graph API's plans instead of the v7-style algorithms); the graph
// API's ranking may pick other kernels. For a convolution the graph API offers no allowed engine
// for, the v7-style path runs. EMBER_CUDNN_GRAPH=1 starts
// a process with true (read as EMBER_CUDNN_DETERMINISTIC is). The CPU ignores it.
void set_conv_graph_api(bool graph);
bool conv_graph_api();

struct Pool2dOptions {
  Size2 kernel_size = 1;
  Size2 stride = 0;  // 0: the kernel size, as PyTorch
  Size2 padding = 0;
  Size2 dilation = 1;                         // max_pool2d only
  bool ceil_mode = false;                     // round the output size up, as PyTorch
  bool count_include_pad = true;              // avg_pool2d only
  std::optional<int64_t> divisor_override{};  // avg_pool2d only: every window's divisor
};

// x (N, C, H, W) -> (N, C, P, Q); padding counts as -inf for max, as 0 for avg.
// P = (H + 2 padding.h - dilation.h (kernel.h - 1) - 1) / stride.h + 1, rounded up with ceil_mode
// (less one where the last window would start in the bottom padding, as PyTorch); likewise Q.
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options);
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options);
// x (N, C, H, W) -> (N, C, output_size.h, output_size.w), PyTorch's bin edges.
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);

}  // namespace ember
