// conv2d: checks, the kernel geometry, autograd through dedicated backward kernels.
#include "runtime/ops/conv.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/common/conv_params.h"
#include "kernels/cpu/conv2d.h"
#include "runtime/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/dispatch.h"
#include "runtime/env.h"
#include "runtime/ops.h"

#if EMBER_WITH_CUDA
#include "kernels/cuda/cudnn_conv.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/stream.h"
#endif

namespace ember {

namespace {

std::atomic<bool> allow_tf32{false};
// EMBER_CUDNN_DETERMINISTIC=0 starts a process with PyTorch's default (the heuristics' best-ranked
// algorithm, deterministic or not). Read on first use, not at static initialisation, so that a
// value other than 0 or 1 is an exception the caller sees, not a termination before main.
std::atomic<bool>& deterministic() {
  static std::atomic<bool> flag{env_switch(
      "EMBER_CUDNN_DETERMINISTIC", true,
      "take a deterministic cuDNN algorithm when there is one; 0 takes the heuristics' best")};
  return flag;
}
// EMBER_CUDNN_BENCHMARK=1 starts a process with torch.backends.cudnn.benchmark = True.
std::atomic<bool>& benchmark() {
  static std::atomic<bool> flag{env_switch(
      "EMBER_CUDNN_BENCHMARK", false,
      "time cuDNN's convolution algorithms on each shape's first call and take the fastest")};
  return flag;
}

// EMBER_CUDNN_GRAPH=1 starts a process with convolutions through cuDNN's graph API.
std::atomic<bool>& graph_api() {
  static std::atomic<bool> flag{
      env_switch("EMBER_CUDNN_GRAPH", false,
                 "choose and run cuDNN convolutions through its graph API, as PyTorch does")};
  return flag;
}

void check_same_device(const Tensor& input, const Tensor& other, const char* what) {
  if (!other.defined()) return;
  EMBER_CHECK(other.device() == input.device(), "conv2d: expected the input, weight and bias on ",
              "the same device, but the input is ", describe(input), " and the ", what, " is ",
              describe(other), "; move them with .to(", input.device(), ")");
}

// "(2,3)". Built by appending: GCC 12 warns falsely (-Wrestrict) on "(" + std::string.
std::string pair_str(Size2 s) {
  std::string text = "(";
  text.append(std::to_string(s.h)).append(",").append(std::to_string(s.w)).append(")");
  return text;
}

kernels::Conv2dParams conv_params(const Tensor& input, const Tensor& weight,
                                  const Conv2dOptions& o) {
  kernels::Conv2dParams p;
  p.batch = input.size(0);
  p.in_channels = input.size(1);
  p.in_height = input.size(2);
  p.in_width = input.size(3);
  p.out_channels = weight.size(0);
  p.kernel_height = weight.size(2);
  p.kernel_width = weight.size(3);
  p.stride_h = o.stride.h;
  p.stride_w = o.stride.w;
  p.pad_h = o.padding.h;
  p.pad_w = o.padding.w;
  p.dilation_h = o.dilation.h;
  p.dilation_w = o.dilation.w;
  p.groups = o.groups;
  return p;
}

void check_conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                  const Conv2dOptions& o) {
  EMBER_CHECK(input.defined() && weight.defined(), "conv2d: got an undefined input or weight");
  check_same_device(input, weight, "weight");
  check_same_device(input, bias, "bias");
  EMBER_CHECK(input.dim() == 4, "conv2d: expected a 4-D input (N, C, H, W), got ", describe(input));
  EMBER_CHECK(weight.dim() == 4, "conv2d: expected a 4-D weight (K, C / groups, R, S), got ",
              describe(weight));
  EMBER_CHECK(is_floating(input.dtype()) && input.dtype() == weight.dtype(),
              "conv2d: expected a floating-point input and weight of the same dtype, got ",
              describe(input), " and ", describe(weight));
  EMBER_CHECK(o.stride.h > 0 && o.stride.w > 0, "conv2d: stride must be positive, got ",
              pair_str(o.stride));
  EMBER_CHECK(o.dilation.h > 0 && o.dilation.w > 0, "conv2d: dilation must be positive, got ",
              pair_str(o.dilation));
  EMBER_CHECK(o.padding.h >= 0 && o.padding.w >= 0, "conv2d: padding must be non-negative, got ",
              pair_str(o.padding));
  EMBER_CHECK(o.groups > 0, "conv2d: groups must be positive, got ", o.groups);
  // Beyond int32 (cuDNN's limit too), the padded size and the kernel's span below overflow.
  constexpr int64_t kLargest = std::numeric_limits<int32_t>::max();
  EMBER_CHECK(
      std::max({o.stride.h, o.stride.w, o.dilation.h, o.dilation.w, o.padding.h, o.padding.w}) <=
          kLargest,
      "conv2d: stride, dilation and padding must be at most 2^31 - 1, got stride ",
      pair_str(o.stride), ", dilation ", pair_str(o.dilation), ", padding ", pair_str(o.padding));
  const int64_t channels = input.size(1), filters = weight.size(0);
  EMBER_CHECK(channels % o.groups == 0 && filters % o.groups == 0, "conv2d: input channels (",
              channels, ") and output channels (", filters, ") must both be divisible by groups (",
              o.groups, ")");
  EMBER_CHECK(weight.size(1) * o.groups == channels, "conv2d: input ", shape_str(input.sizes()),
              " has ", channels, " channels but weight ", shape_str(weight.sizes()),
              " with groups=", o.groups, " expects ", weight.size(1) * o.groups,
              " (weight.size(1) * groups)");
  const int64_t padded_h = input.size(2) + 2 * o.padding.h;
  const int64_t padded_w = input.size(3) + 2 * o.padding.w;
  const int64_t extent_h = o.dilation.h * (weight.size(2) - 1) + 1;
  const int64_t extent_w = o.dilation.w * (weight.size(3) - 1) + 1;
  EMBER_CHECK(extent_h <= padded_h && extent_w <= padded_w, "conv2d: kernel size (", weight.size(2),
              ",", weight.size(3), ") with dilation ", pair_str(o.dilation), " spans (", extent_h,
              ",", extent_w, "), larger than the padded input (", padded_h, ",", padded_w, ")");
  if (bias.defined()) {
    EMBER_CHECK(bias.dtype() == input.dtype(), "conv2d: bias dtype ", bias.dtype(),
                " differs from the input's ", input.dtype());
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == filters, "conv2d: expected a bias of shape (",
                filters, "), got ", describe(bias));
  }
}

#if EMBER_WITH_CUDA
// The cuDNN path. dx, dw and db are computed only where wanted (defined outputs).
kernels::cuda::ConvDataType cudnn_dtype(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return kernels::cuda::ConvDataType::f64;
    case DType::f16:
      return kernels::cuda::ConvDataType::f16;
    case DType::bf16:
      return kernels::cuda::ConvDataType::bf16;
    default:
      return kernels::cuda::ConvDataType::f32;
  }
}

void require_cudnn(const Tensor& input) {
  EMBER_CHECK(kernels::cuda::cudnn_available(), "conv2d: ", describe(input),
              " is on CUDA, and conv2d on CUDA needs cuDNN, but this build of ember has no "
              "cuDNN (CMake did not find cuDNN 9: set CUDNN_ROOT or install the nvidia-cudnn "
              "wheel, then reconfigure); run the convolution on the cpu device");
}

// Workspace blocks from ember's caching allocator, held until the owner goes out of scope (after
// the cuDNN call has been queued: a freed block is reused only by work queued later on the same
// stream).
struct CudaWorkspace {
  Device device;
  std::vector<Tensor> blocks;
  kernels::cuda::WorkspaceAllocator allocator() {
    return [this](size_t bytes) -> void* {
      blocks.push_back(empty({static_cast<int64_t>(bytes)}, TensorOptions(DType::u8, device)));
      return blocks.back().data_ptr();
    };
  }
};

// t's data, 16-byte aligned as cuDNN's vectorised kernels want: a dense view that starts inside
// its storage (x.narrow(0, 1, n) in f16, say) is copied into a fresh block first. The caching
// allocator's blocks start at multiples of 512 bytes into their segments, so fresh tensors are
// aligned.
Tensor aligned_for_cudnn(const Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0) return t;
  NoGradGuard no_grad;
  return t.clone();
}

kernels::cuda::ConvPolicy conv_policy() {
  return {.allow_tf32 = conv_allow_tf32(),
          .deterministic = conv_deterministic(),
          .benchmark = conv_benchmark(),
          .graph = conv_graph_api()};
}

void conv2d_forward_cuda(const kernels::Conv2dParams& params, const Tensor& input_in,
                         const Tensor& weight_in, const Tensor& bias, const Tensor& out) {
  const int device = input_in.device().index;
  cuda::DeviceGuard guard(device);
  const Tensor input = aligned_for_cudnn(input_in), weight = aligned_for_cudnn(weight_in);
  CudaWorkspace workspace{input.device(), {}};
  kernels::cuda::cudnn_conv2d_forward(params, cudnn_dtype(input.dtype()), conv_policy(),
                                      input.data_ptr(), weight.data_ptr(), out.data_ptr(),
                                      workspace.allocator(), cuda::StreamOnDevice(device));
  if (bias.defined()) {
    NoGradGuard no_grad;  // out is not recorded yet: adding the bias is part of this op
    Tensor out_ref = out;
    out_ref.add_(bias.reshape({1, params.out_channels, 1, 1}));
  }
}

void conv2d_backward_cuda(const kernels::Conv2dParams& params, const Tensor& x_in,
                          const Tensor& w_in, const Tensor& dy_in, const Tensor& dx,
                          const Tensor& dw, const Tensor& db) {
  const int device = x_in.device().index;
  cuda::DeviceGuard guard(device);
  const Tensor x = aligned_for_cudnn(x_in), w = aligned_for_cudnn(w_in);
  const Tensor dy = aligned_for_cudnn(dy_in);
  const cudaStream_t stream = cuda::current_stream(device);
  CudaWorkspace workspace{x.device(), {}};
  if (dx.defined()) {
    kernels::cuda::cudnn_conv2d_backward_data(params, cudnn_dtype(x.dtype()), conv_policy(),
                                              dy.data_ptr(), w.data_ptr(), dx.data_ptr(),
                                              workspace.allocator(), stream);
  }
  if (dw.defined()) {
    kernels::cuda::cudnn_conv2d_backward_filter(params, cudnn_dtype(x.dtype()), conv_policy(),
                                                x.data_ptr(), dy.data_ptr(), dw.data_ptr(),
                                                workspace.allocator(), stream);
  }
  if (db.defined()) {
    // Per channel over (N, H, W): one read of dy on batch norm's plan (channel_sums), accumulated
    // in f32 for f16 / bf16 (f64 for f64), then rounded once to db's dtype.
    NoGradGuard no_grad;
    Tensor db_ref = db;
    db_ref.copy_(sum(dy, {0, 2, 3}));
  }
}

// A convolution with no input or no output values: cuDNN's descriptors reject zero sizes.
bool is_empty_convolution(const kernels::Conv2dParams& p) {
  return p.batch == 0 || p.out_channels == 0 || p.in_channels == 0 || p.in_height == 0 ||
         p.in_width == 0;
}
#endif

}  // namespace

Tensor conv2d(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in,
              const Conv2dOptions& options) {
  // Autocast first (an f16 activation meets an f32 weight inside a region); the kernels read
  // dense NCHW data.
  const Tensor input = autocast_lower(input_in).contiguous();
  const Tensor weight = autocast_lower(weight_in).contiguous();
  const Tensor bias = bias_in.defined() ? autocast_lower(bias_in).contiguous() : Tensor();
  check_conv2d(input, weight, bias, options);
  const kernels::Conv2dParams params = conv_params(input, weight, options);
  Tensor out = empty({params.batch, params.out_channels, params.out_height(), params.out_width()},
                     TensorOptions(input.dtype(), input.device()));
  if (input.is_cuda()) {
#if EMBER_WITH_CUDA
    require_cudnn(input);
    if (is_empty_convolution(params)) {
      NoGradGuard no_grad;
      out.fill_(0.0);
      if (bias.defined() && out.numel() > 0) out.add_(bias.reshape({1, params.out_channels, 1, 1}));
    } else {
      conv2d_forward_cuda(params, input, weight, bias, out);
    }
#endif
  } else {
    dispatch_floating(input.dtype(), "conv2d", [&]<typename T>() {
      kernels::cpu::conv2d_forward<T>(
          params, static_cast<const T*>(input.data_ptr()), static_cast<const T*>(weight.data_ptr()),
          bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr,
          static_cast<T*>(out.data_ptr()));
    });
  }
  if (any_requires_grad({&input, &weight, &bias})) {
    const bool grad_input = input.requires_grad(), grad_weight = weight.requires_grad();
    const bool grad_bias = bias.defined() && bias.requires_grad();
    // Only the input and the weight are saved: backward recomputes what it needs from them
    // (direct kernels, or columns unfolded again on the im2col path).
    record(OpId::conv2d, {input, weight, bias}, out, {input, weight},
           [params, grad_input, grad_weight, grad_bias](
               const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             const Tensor dy = g.to(s[0].dtype()).contiguous();
             const Tensor& x = s[0];
             const Tensor& w = s[1];
             const TensorOptions grad_options(x.dtype(), x.device());
             Tensor dx, dw, db;
             if (grad_input) dx = empty(x.sizes(), grad_options);
             if (grad_weight) dw = empty(w.sizes(), grad_options);
             if (grad_bias) db = empty({params.out_channels}, grad_options);
             if (x.is_cuda()) {
#if EMBER_WITH_CUDA
               if (is_empty_convolution(params)) {
                 // No products to sum (cuDNN rejects empty tensors): dx and dw are zero; db is
                 // still the sum of dy.
                 NoGradGuard no_grad;
                 if (dx.defined()) dx.fill_(0.0);
                 if (dw.defined()) dw.fill_(0.0);
                 if (db.defined()) db.copy_(sum(dy, {0, 2, 3}));
               } else {
                 conv2d_backward_cuda(params, x, w, dy, dx, dw, db);
               }
#endif
               return {dx, dw, db};
             }
             dispatch_floating(x.dtype(), "conv2d backward", [&]<typename T>() {
               auto data = [](const Tensor& t) {
                 return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
               };
               kernels::cpu::conv2d_backward<T>(params, data(x), data(w), data(dy), data(dx),
                                                data(dw), data(db));
             });
             return {dx, dw, db};
           });
  }
  return out;
}

void set_conv_allow_tf32(bool allow) {
  allow_tf32.store(allow);
}

bool conv_allow_tf32() {
  return allow_tf32.load();
}

void set_conv_deterministic(bool deterministic_only) {
  deterministic().store(deterministic_only);
}

bool conv_deterministic() {
  return deterministic().load();
}

void set_conv_benchmark(bool measure) {
  benchmark().store(measure);
}

bool conv_benchmark() {
  return benchmark().load();
}

void set_conv_graph_api(bool graph) {
  graph_api().store(graph);
}

bool conv_graph_api() {
  return graph_api().load();
}

}  // namespace ember
