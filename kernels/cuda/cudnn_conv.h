// 2-D convolutions through cuDNN 9 (the v7-style API it still ships), on dense NCHW arrays.
//
//   x (N, C, H, W), w (K, C / groups, R, S) -> y (N, K, P, Q)     (kernels/common/conv_params.h)
//
// forward: y = conv(x, w); backward_data: dx = conv^T(dy, w); backward_filter: dw from x and dy.
// Each overwrites its output. f16 and bf16 compute in f32 (tensor cores allowed); f32 uses FMA
// math only (no TF32), so a CUDA result matches the CPU's to f32 rounding, unless the policy
// allows TF32 (inputs rounded to a 10-bit mantissa); f64 computes in f64.
//
// The algorithm of each (geometry, dtype, direction, device, policy) is chosen once and cached:
// the best-ranked supported one whose workspace is at most 1 GiB, a deterministic one first
// unless the policy says otherwise. The ranking is cuDNN's heuristics'
// (cudnnGetConvolution*Algorithm_v7: no runs, no memory of its own), or with the policy's
// benchmark the measured time of one run of each algorithm (cudnnFind*AlgorithmEx, on the
// call's own buffers, whose output it overwrites before the call computes it, and a workspace of
// the largest any algorithm needs, up to 1 GiB). Measured times vary from run to run, so two
// processes may choose differently; within a process the first choice stays.
// With the policy's `graph`, the choice and the run go through cuDNN's graph API instead
// (cudnn_graph_conv.h): an execution plan per (problem, handle) from the engine configurations its
// heuristics rank (mode A, PyTorch's default), under the same rules (no TF32 for exact f32, a
// deterministic engine first when asked for) and the same 1 GiB; with the policy's benchmark, the
// fastest of up to 32 allowed plans, each run once to warm up and once timed on the call's own
// buffers (PyTorch's cudnn.benchmark on its v8 path). A problem the graph API has no allowed
// engine for and an operand not 16-byte aligned take the v7-style path. EMBER_CUDNN_LOG=1 prints
// each choice to stderr, with the host time the choice took and that of the problem's first run
// (timed between two synchronisations of the stream, so that cuDNN's set-up on first use shows);
// cudnn_conv_algorithm_searches() counts the choices made, so a test can see the cache work.
// Workspace comes from the caller (the runtime hands out blocks of its caching allocator).
//
// A build without cuDNN still has these functions: cudnn_available() is false and the others
// throw CudaError saying that this build has no cuDNN.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "kernels/common/conv_params.h"

namespace ember::kernels::cuda {

enum class ConvDirection { forward, backward_data, backward_filter };
enum class ConvDataType { f32, f64, f16, bf16 };

// How cuDNN may compute: PyTorch's torch.backends.cudnn.allow_tf32, .deterministic and .benchmark,
// whose defaults there are true, false and false; ember's are exact, reproducible and unmeasured.
struct ConvPolicy {
  bool allow_tf32 = false;    // f32 only: tensor cores with TF32 inputs
  bool deterministic = true;  // a deterministic algorithm when the ranking offers one (false: the
                              // best-ranked one, which may add with atomics)
  bool benchmark = false;     // rank the algorithms by running each once (cudnnFind*) instead of
                              // by the heuristics
  bool graph = false;         // choose and run through cuDNN's graph API, PyTorch's path (below)
};

// Whether this build links cuDNN.
bool cudnn_available();

// Returns `bytes` of device memory that stays valid for work queued on the stream of the call it
// is given to (nullptr is fine for 0 bytes).
using WorkspaceAllocator = std::function<void*(size_t bytes)>;

// y (N, K, P, Q) = conv(x, w), no bias.
void cudnn_conv2d_forward(const Conv2dParams& params, ConvDataType dtype, const ConvPolicy& policy,
                          const void* x, const void* w, void* y,
                          const WorkspaceAllocator& workspace, cudaStream_t stream);
// dx (N, C, H, W) from dy (N, K, P, Q) and w.
void cudnn_conv2d_backward_data(const Conv2dParams& params, ConvDataType dtype,
                                const ConvPolicy& policy, const void* dy, const void* w, void* dx,
                                const WorkspaceAllocator& workspace, cudaStream_t stream);
// dw (K, C / groups, R, S) from x and dy.
void cudnn_conv2d_backward_filter(const Conv2dParams& params, ConvDataType dtype,
                                  const ConvPolicy& policy, const void* x, const void* dy, void* dw,
                                  const WorkspaceAllocator& workspace, cudaStream_t stream);

// How many algorithm choices have been made (cache misses) since the program started.
int64_t cudnn_conv_algorithm_searches();
// How many graph-API choices ended in a plan, and how many in the v7-style path instead.
int64_t cudnn_conv_graph_plans_built();
int64_t cudnn_conv_graph_fallbacks();
// With the policy's benchmark: how many graph-API problems have had their plans timed (once per
// problem and device; other handles build the plan measured fastest).
int64_t cudnn_conv_graph_measurements();
// How many cuDNN handles have been created since the program started (threads that end give
// theirs back to a pool for the next thread).
int64_t cudnn_handles_created();

}  // namespace ember::kernels::cuda
