// 2-D convolutions through cuDNN's graph API: the backend descriptors of cudnn_graph.h, the path
// PyTorch takes by default (through cudnn-frontend) where cudnn_conv.cpp takes the v7-style one.
// Internal to kernels/cuda: cudnn_conv.cpp calls it when the policy asks for the graph API.
//
//   forward          x (N, C, H, W), w (K, C / groups, R, S) -> y (N, K, P, Q)
//   backward data    dy (N, K, P, Q), w                      -> dx (N, C, H, W)
//   backward filter  x, dy                                   -> dw (K, C / groups, R, S)
//
// One operation graph per problem (a single convolution node on dense NCHW tensors, 16-byte
// aligned, f32 compute for f16 / bf16 / f32, f64 for f64). Its engine configurations come ranked
// from cuDNN's heuristics (mode A, "instant", as PyTorch's default); the first one whose numerical
// notes the policy allows and whose execution plan finalises within 1 GiB of workspace is kept:
//   - never one that converts its inputs down (CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) or
//     reduces in less than f32 (..._REDUCED_PRECISION_REDUCTION);
//   - f32 without TF32, and f64: none on tensor cores (..._TENSOR_CORE);
//   - deterministic policy: one that does not add with atomics (..._NONDETERMINISTIC) first,
//     then any, as the v7-style path.
// (PyTorch's filter is the same less the reduced-precision rule.)
//
// Needs cudnn.h: include it only where EMBER_WITH_CUDNN is set.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/conv_params.h"
#include "kernels/cuda/cudnn_conv.h"

namespace ember::kernels::cuda::graph_conv {

struct Problem {
  Conv2dParams params;
  ConvDataType dtype = ConvDataType::f32;
  ConvDirection direction = ConvDirection::forward;
  bool allow_tf32 = false;    // f32 only
  bool deterministic = true;  // an engine without CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC first
};

// One backend descriptor, destroyed with this object.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  cudnnBackendDescriptor_t get() const { return raw_; }

 private:
  cudnnBackendDescriptor_t raw_ = nullptr;
};

// The problem's convolution operation, finalised: its three tensors, the convolution descriptor
// and the operation node. Needs neither a handle nor a GPU, so a host test can check that cuDNN
// accepts every attribute ember sets, for each direction and dtype.
struct Operation {
  std::unique_ptr<Descriptor> x, w, y;  // x or dx, w or dw, y or dy
  std::unique_ptr<Descriptor> convolution;
  std::unique_ptr<Descriptor> node;
};
Operation make_operation(const Problem& problem);

// What a problem's plans are built from: its operation, the graph, the heuristics and their
// engine configurations. Every plan made from them keeps them alive (as cudnn-frontend's plans
// keep theirs).
struct Sources {
  Operation operation;
  std::unique_ptr<Descriptor> graph, heuristics;
  std::vector<std::unique_ptr<Descriptor>> configs;
};

// A finalised execution plan and what the log says of it.
struct Plan {
  std::shared_ptr<const Sources> sources;  // declared first: it outlives the plan
  std::unique_ptr<Descriptor> plan;
  int64_t workspace_bytes = 0;
  int64_t engine = -1;        // CUDNN_ATTR_ENGINE_GLOBAL_INDEX
  int rank = 0;               // its place in the heuristics' ranking
  int candidates = 0;         // how many configurations the heuristics gave
  int64_t first_engine = -1;  // the heuristics' first, allowed or not
  bool deterministic = true;  // no CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
  std::string notes;          // its numerical and behaviour notes ("tensor_core, ...")
  // Measured choices only (the policy's benchmark): its time and the fastest plan's, in ms.
  float time_ms = -1, fastest_time_ms = -1;
};

// What plans are made for: a handle (plans that run on its device, with it), or a device only
// described (cuDNN's device-properties descriptor, from the JSON cuDNN writes for a device: plans
// that finalise without a GPU and cannot run, cuDNN's "deviceless" compilation, since 9.8). A host
// test checks the heuristics' ranking and the policy's filters on an H200 described so.
struct Target {
  cudnnHandle_t handle = nullptr;
  const Descriptor* device = nullptr;
  static Target of(cudnnHandle_t handle) { return Target{handle, nullptr}; }
  static Target described(const Descriptor& device) { return Target{nullptr, &device}; }
};

// A device's description from its JSON (the CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION that
// describe_device_of writes); throws a CudaError when cuDNN refuses it.
std::unique_ptr<Descriptor> describe_device(const std::string& json);
// The JSON that describes the device of `handle` (for a host test to use later).
std::string describe_device_of(cudnnHandle_t handle);

// Which of the allowed plans make_plans keeps.
struct PlanSearch {
  size_t limit = 1;    // at most this many
  int only_rank = -1;  // >= 0: only the configuration at this place in the heuristics' ranking
                       // (the one another handle measured fastest: the ranking is the device's)
  // When set, a plan that finalises is kept only if works(plan) says so: the caller runs it
  // once, and one that cuDNN refuses to execute is passed over, as cudnn-frontend does.
  std::function<bool(const Plan&)> works;
};

// The plans for `target` (a handle's may only be run with it) of the configurations the policy
// allows and that finalise within 1 GiB of workspace, as `search` says, in the heuristics' order
// with the deterministic ones first when the policy asks for determinism. Empty, with `why`
// saying what was tried, when there is none.
std::vector<std::unique_ptr<Plan>> make_plans(const Target& target, const Problem& problem,
                                              const PlanSearch& search, std::string* why);

// Runs `plan` on the problem's operands, each a device pointer 16-byte aligned: forward
// (in_a = x, in_b = w, out = y), backward data (dy, w, dx), backward filter (x, dy, dw).
// `workspace` holds at least plan.workspace_bytes. The output is overwritten.
void execute(cudnnHandle_t handle, const Plan& plan, const Problem& problem, const void* in_a,
             const void* in_b, void* out, void* workspace);

}  // namespace ember::kernels::cuda::graph_conv
