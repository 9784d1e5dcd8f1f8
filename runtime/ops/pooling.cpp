// Pooling over NCHW tensors: max (with saved argmax positions), average, adaptive average.
#include "kernels/cpu/pooling.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"
#include "runtime/ops/conv.h"

#if EMBER_WITH_CUDA
#include "kernels/cuda/pooling.h"
#include "runtime/cuda/stream.h"
#endif

namespace ember {

namespace {

// "(2,3)". Built by appending: GCC 12 warns falsely (-Wrestrict) on "(" + std::string.
std::string pair_str(Size2 s) {
  std::string text = "(";
  text.append(std::to_string(s.h)).append(",").append(std::to_string(s.w)).append(")");
  return text;
}

void check_pool_input(const Tensor& x, const char* op) {
  EMBER_CHECK(x.defined(), op, ": got an undefined tensor");
  EMBER_CHECK(x.dim() == 4, op, ": expected a 4-D input (N, C, H, W), got ", describe(x));
  EMBER_CHECK(is_floating(x.dtype()), op, ": expected a floating-point input, got ", describe(x));
}

// x (N, C, H, W) and the options -> the kernels' geometry; the checks PyTorch makes.
kernels::Pool2dGeometry pool_geometry(const Tensor& x, const Pool2dOptions& o, const char* op) {
  const Size2 kernel = o.kernel_size;
  const Size2 stride = (o.stride.h == 0 && o.stride.w == 0) ? kernel : o.stride;
  EMBER_CHECK(kernel.h > 0 && kernel.w > 0, op, ": kernel_size must be positive, got ",
              pair_str(kernel));
  EMBER_CHECK(stride.h > 0 && stride.w > 0, op, ": stride must be positive, got ",
              pair_str(stride));
  EMBER_CHECK(o.dilation.h > 0 && o.dilation.w > 0, op, ": dilation must be positive, got ",
              pair_str(o.dilation));
  // Beyond int32 the kernel's span and the padded size below overflow int64.
  constexpr int64_t kLargest = std::numeric_limits<int32_t>::max();
  EMBER_CHECK(
      std::max({kernel.h, kernel.w, stride.h, stride.w, o.dilation.h, o.dilation.w}) <= kLargest,
      op, ": kernel_size, stride and dilation must be at most 2^31 - 1, got kernel_size ",
      pair_str(kernel), ", stride ", pair_str(stride), ", dilation ", pair_str(o.dilation));
  EMBER_CHECK(o.padding.h >= 0 && o.padding.w >= 0 && 2 * o.padding.h <= kernel.h &&
                  2 * o.padding.w <= kernel.w,
              op, ": padding ", pair_str(o.padding),
              " must be non-negative and at most half the kernel size ", pair_str(kernel));
  // An empty plane would still get padded windows (kernel 2, padding 1: one output) whose max
  // index 0 lies outside the plane: the CPU backward would write past grad_x.
  EMBER_CHECK(x.size(2) > 0 && x.size(3) > 0, op, ": expected a non-empty plane, got ",
              describe(x));
  kernels::Pool2dGeometry g;
  g.planes = x.size(0) * x.size(1);
  g.in_height = x.size(2);
  g.in_width = x.size(3);
  g.kernel_h = kernel.h;
  g.kernel_w = kernel.w;
  g.stride_h = stride.h;
  g.stride_w = stride.w;
  g.pad_h = o.padding.h;
  g.pad_w = o.padding.w;
  g.dilation_h = o.dilation.h;
  g.dilation_w = o.dilation.w;
  const int64_t extent_h = (kernel.h - 1) * g.dilation_h + 1;
  const int64_t extent_w = (kernel.w - 1) * g.dilation_w + 1;
  const int64_t padded_h = g.in_height + 2 * g.pad_h, padded_w = g.in_width + 2 * g.pad_w;
  EMBER_CHECK(extent_h <= padded_h && extent_w <= padded_w, op, ": kernel size ", pair_str(kernel),
              (g.dilation_h > 1 || g.dilation_w > 1)
                  ? " (dilated to " + pair_str({extent_h, extent_w}) + ")"
                  : "",
              " is larger than the padded input (", padded_h, ",", padded_w, ") of ", describe(x));
  g.out_height =
      kernels::pooled_size(padded_h, extent_h, stride.h, g.in_height + g.pad_h, o.ceil_mode);
  g.out_width =
      kernels::pooled_size(padded_w, extent_w, stride.w, g.in_width + g.pad_w, o.ceil_mode);
  return g;
}

Shape output_shape(const Tensor& x, const kernels::Pool2dGeometry& g) {
  return {x.size(0), x.size(1), g.out_height, g.out_width};
}

#if EMBER_WITH_CUDA
using Stream = cudaStream_t;
#else
using Stream = void*;  // never used: there are no CUDA tensors without CUDA
#endif

// Runs `cpu()` or, for a CUDA tensor, `cuda(stream)`, in the dtype of `like`.
template <typename Cpu, typename Cuda>
void run_pooling(const Tensor& like, const char* op, Cpu cpu, Cuda cuda_kernel) {
  dispatch_floating(like.dtype(), op, [&]<typename T>() {
    if (like.is_cuda()) {
#if EMBER_WITH_CUDA
      cuda_kernel.template operator()<T>(cuda::StreamOnDevice(like.device().index));
#else
      static_cast<void>(cuda_kernel);
#endif
      return;
    }
    cpu.template operator()<T>();
  });
}

}  // namespace

Tensor max_pool2d(const Tensor& x_in, const Pool2dOptions& options) {
  check_pool_input(x_in, "max_pool2d");
  const Tensor x = x_in.contiguous();
  EMBER_CHECK(!options.divisor_override, "max_pool2d: divisor_override is for avg_pool2d only");
  const kernels::Pool2dGeometry g = pool_geometry(x, options, "max_pool2d");
  Tensor out = empty(output_shape(x, g), TensorOptions(x.dtype(), x.device()));
  Tensor indices = empty(output_shape(x, g), TensorOptions(DType::i64, x.device()));
  auto* index_data = static_cast<int64_t*>(indices.data_ptr());
  run_pooling(
      x, "max_pool2d",
      [&]<typename T>() {
        kernels::cpu::max_pool2d_forward<T>(g, static_cast<const T*>(x.data_ptr()),
                                            static_cast<T*>(out.data_ptr()), index_data);
      },
      [&]<typename T>([[maybe_unused]] Stream stream) {
#if EMBER_WITH_CUDA
        kernels::cuda::max_pool2d_forward<T>(g, static_cast<const T*>(x.data_ptr()),
                                             static_cast<T*>(out.data_ptr()), index_data, stream);
#endif
      });
  if (any_requires_grad({&x})) {
    record(OpId::max_pool2d, {x}, out, {indices},
           [g, input_shape = x.sizes()](const Tensor& grad,
                                        const std::vector<Tensor>& s) -> std::vector<Tensor> {
             const Tensor dy = grad.contiguous();
             Tensor dx = empty(input_shape, TensorOptions(dy.dtype(), dy.device()));
             const auto* index_data = static_cast<const int64_t*>(s[0].data_ptr());
             run_pooling(
                 dy, "max_pool2d backward",
                 [&]<typename T>() {
                   kernels::cpu::max_pool2d_backward<T>(g, static_cast<const T*>(dy.data_ptr()),
                                                        index_data, static_cast<T*>(dx.data_ptr()));
                 },
                 [&]<typename T>([[maybe_unused]] Stream stream) {
#if EMBER_WITH_CUDA
                   kernels::cuda::max_pool2d_backward<T>(g, static_cast<const T*>(dy.data_ptr()),
                                                         index_data, static_cast<T*>(dx.data_ptr()),
                                                         stream);
#endif
                 });
             return {dx};
           });
  }
  return out;
}

Tensor avg_pool2d(const Tensor& x_in, const Pool2dOptions& options) {
  check_pool_input(x_in, "avg_pool2d");
  const Tensor x = x_in.contiguous();
  EMBER_CHECK(options.dilation.h == 1 && options.dilation.w == 1,
              "avg_pool2d: dilation is for max_pool2d only (PyTorch's avg_pool2d has none), got ",
              pair_str(options.dilation));
  EMBER_CHECK(!options.divisor_override || *options.divisor_override > 0,
              "avg_pool2d: divisor_override must be positive, got ",
              options.divisor_override.value_or(0));
  kernels::Pool2dGeometry g = pool_geometry(x, options, "avg_pool2d");
  g.divisor_override = options.divisor_override.value_or(0);
  const bool include_pad = options.count_include_pad;
  Tensor out = empty(output_shape(x, g), TensorOptions(x.dtype(), x.device()));
  run_pooling(
      x, "avg_pool2d",
      [&]<typename T>() {
        kernels::cpu::avg_pool2d_forward<T>(g, include_pad, static_cast<const T*>(x.data_ptr()),
                                            static_cast<T*>(out.data_ptr()));
      },
      [&]<typename T>([[maybe_unused]] Stream stream) {
#if EMBER_WITH_CUDA
        kernels::cuda::avg_pool2d_forward<T>(g, include_pad, static_cast<const T*>(x.data_ptr()),
                                             static_cast<T*>(out.data_ptr()), stream);
#endif
      });
  if (any_requires_grad({&x})) {
    record(OpId::avg_pool2d, {x}, out, {},
           [g, include_pad, input_shape = x.sizes()](
               const Tensor& grad, const std::vector<Tensor>&) -> std::vector<Tensor> {
             const Tensor dy = grad.contiguous();
             Tensor dx = empty(input_shape, TensorOptions(dy.dtype(), dy.device()));
             run_pooling(
                 dy, "avg_pool2d backward",
                 [&]<typename T>() {
                   kernels::cpu::avg_pool2d_backward<T>(g, include_pad,
                                                        static_cast<const T*>(dy.data_ptr()),
                                                        static_cast<T*>(dx.data_ptr()));
                 },
                 [&]<typename T>([[maybe_unused]] Stream stream) {
#if EMBER_WITH_CUDA
                   kernels::cuda::avg_pool2d_backward<T>(g, include_pad,
                                                         static_cast<const T*>(dy.data_ptr()),
                                                         static_cast<T*>(dx.data_ptr()), stream);
#endif
                 });
             return {dx};
           });
  }
  return out;
}

Tensor adaptive_avg_pool2d(const Tensor& x_in, Size2 output_size) {
  check_pool_input(x_in, "adaptive_avg_pool2d");
  EMBER_CHECK(output_size.h > 0 && output_size.w > 0,
              "adaptive_avg_pool2d: output size must be positive, got ", pair_str(output_size));
  EMBER_CHECK(x_in.size(2) > 0 && x_in.size(3) > 0,
              "adaptive_avg_pool2d: expected a non-empty plane, got ", describe(x_in));
  const Tensor x = x_in.contiguous();
  kernels::Pool2dGeometry g;
  g.planes = x.size(0) * x.size(1);
  g.in_height = x.size(2);
  g.in_width = x.size(3);
  g.out_height = output_size.h;
  g.out_width = output_size.w;
  Tensor out = empty(output_shape(x, g), TensorOptions(x.dtype(), x.device()));
  run_pooling(
      x, "adaptive_avg_pool2d",
      [&]<typename T>() {
        kernels::cpu::adaptive_avg_pool2d_forward<T>(g, static_cast<const T*>(x.data_ptr()),
                                                     static_cast<T*>(out.data_ptr()));
      },
      [&]<typename T>([[maybe_unused]] Stream stream) {
#if EMBER_WITH_CUDA
        kernels::cuda::adaptive_avg_pool2d_forward<T>(g, static_cast<const T*>(x.data_ptr()),
                                                      static_cast<T*>(out.data_ptr()), stream);
#endif
      });
  if (any_requires_grad({&x})) {
    record(OpId::adaptive_avg_pool2d, {x}, out, {},
           [g, input_shape = x.sizes()](const Tensor& grad,
                                        const std::vector<Tensor>&) -> std::vector<Tensor> {
             const Tensor dy = grad.contiguous();
             Tensor dx = empty(input_shape, TensorOptions(dy.dtype(), dy.device()));
             run_pooling(
                 dy, "adaptive_avg_pool2d backward",
                 [&]<typename T>() {
                   kernels::cpu::adaptive_avg_pool2d_backward<T>(
                       g, static_cast<const T*>(dy.data_ptr()), static_cast<T*>(dx.data_ptr()));
                 },
                 [&]<typename T>([[maybe_unused]] Stream stream) {
#if EMBER_WITH_CUDA
                   kernels::cuda::adaptive_avg_pool2d_backward<T>(
                       g, static_cast<const T*>(dy.data_ptr()), static_cast<T*>(dx.data_ptr()),
                       stream);
#endif
                 });
             return {dx};
           });
  }
  return out;
}

}  // namespace ember
