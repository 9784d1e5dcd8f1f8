// layer_norm and batch_norm: checks, the fused CPU kernels, running statistics, autograd.
#include "runtime/ops/normalization.h"

#include <optional>

#include "kernels/cpu/normalization.h"
#include "runtime/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"

#if EMBER_WITH_CUDA
#include "kernels/cuda/batch_norm.h"
#include "kernels/cuda/layer_norm.h"
#include "runtime/cuda/stream.h"
#endif

namespace ember {
namespace {

// The dtype statistics are kept in: f32 for 16-bit inputs (as acc_t), else the input's.
DType statistics_dtype(DType dtype) {
  return dtype == DType::f16 || dtype == DType::bf16 ? DType::f32 : dtype;
}

template <typename T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

template <typename T>
T* mutable_data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

Tensor dense_or_undefined(const Tensor& t) {
  return t.defined() ? t.contiguous() : Tensor();
}

#if EMBER_WITH_CUDA
// Running statistics the fused CUDA kernel can update in place: none, or dense in the statistics
// dtype. (Others take the tensor ops.)
bool updatable_in_place(const Tensor& running, DType stat_dtype) {
  return !running.defined() || (running.dtype() == stat_dtype && running.is_contiguous());
}

// The stream the CUDA kernels run on, t's device current while the call it is passed to runs.
cuda::StreamOnDevice stream_of(const Tensor& t) {
  return cuda::StreamOnDevice(t.device().index);
}
#endif

}  // namespace

// ---- layer norm -----------------------------------------------------------------------------

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in,
                  const Tensor& bias_in, double eps) {
  const Tensor x = autocast_fp32(x_in);
  for (const auto& [t, what] : {std::pair{&weight_in, "weight"}, std::pair{&bias_in, "bias"}}) {
    EMBER_CHECK(!t->defined() || t->device() == x.device(), "layer_norm: input ", describe(x),
                " and ", what, " ", describe(*t), " are on different devices; move the ", what,
                " to ", x.device().str(), " (e.g. with .to(", x.device().str(), "))");
  }
  EMBER_CHECK(is_floating(x.dtype()), "layer_norm: expected a floating-point input, got ",
              describe(x), " (convert it with to(DType::f32) first)");
  const int64_t norm_dims = static_cast<int64_t>(normalized_shape.size());
  EMBER_CHECK(norm_dims > 0,
              "layer_norm: normalized_shape is empty; give the trailing dims to "
              "normalise over, e.g. {",
              x.dim() > 0 ? x.size(-1) : 1, "}");
  bool trailing_match = x.dim() >= norm_dims;
  for (int64_t d = 0; trailing_match && d < norm_dims; ++d)
    trailing_match = x.size(x.dim() - norm_dims + d) == normalized_shape[d];
  EMBER_CHECK(trailing_match, "layer_norm: input ", describe(x),
              " does not end with normalized_shape ", shape_str(normalized_shape),
              "; expected an input of shape (*, ", shape_str(normalized_shape).substr(1));
  for (const auto& [t, what] : {std::pair{&weight_in, "weight"}, std::pair{&bias_in, "bias"}}) {
    if (!t->defined()) continue;
    EMBER_CHECK(t->sizes() == normalized_shape, "layer_norm: ", what, " has shape ",
                shape_str(t->sizes()), " but normalized_shape is ", shape_str(normalized_shape),
                "; expected a ", what, " of shape ", shape_str(normalized_shape));
    EMBER_CHECK(is_floating(t->dtype()), "layer_norm: expected a floating-point ", what, ", got ",
                describe(*t));
  }
  // weight and bias compute in the input's dtype (the conversion is recorded, so they still get
  // gradients of their own dtype).
  const Tensor weight = weight_in.defined() ? weight_in.to(x.dtype()) : Tensor();
  const Tensor bias = bias_in.defined() ? bias_in.to(x.dtype()) : Tensor();
  const int64_t cols = shape_numel(normalized_shape);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;

  Tensor input, weight_dense, bias_dense;
  {
    NoGradGuard no_grad;
    input = x.contiguous();
    weight_dense = dense_or_undefined(weight);
    bias_dense = dense_or_undefined(bias);
  }
  Tensor out = empty(x.sizes(), TensorOptions(x.dtype(), x.device()));
  const TensorOptions stat_options(statistics_dtype(x.dtype()), x.device());
  Tensor mean = empty({rows}, stat_options), rstd = empty({rows}, stat_options);
  dispatch_floating(x.dtype(), "layer_norm", [&]<typename T>() {
    using Acc = acc_t<T>;
    const T* x_data = static_cast<const T*>(input.data_ptr());
    T* y_data = static_cast<T*>(out.data_ptr());
    Acc* mean_data = static_cast<Acc*>(mean.data_ptr());
    Acc* rstd_data = static_cast<Acc*>(rstd.data_ptr());
    if (x.is_cuda()) {
#if EMBER_WITH_CUDA
      kernels::cuda::layer_norm<T>(x_data, data_or_null<T>(weight_dense),
                                   data_or_null<T>(bias_dense), y_data, mean_data, rstd_data, rows,
                                   cols, eps, cuda::StreamOnDevice(x.device().index));
#endif
      return;
    }
    kernels::cpu::layer_norm<T>(x_data, data_or_null<T>(weight_dense), data_or_null<T>(bias_dense),
                                y_data, mean_data, rstd_data, rows, cols, eps);
  });
  if (any_requires_grad({&x, &weight, &bias})) {
    // Only the gradients that are wanted are computed (a frozen weight, an input that is data).
    const bool grad_input_wanted = x.requires_grad();
    const bool grad_weight_wanted = weight.defined() && weight.requires_grad();
    const bool grad_bias_wanted = bias.defined() && bias.requires_grad();
    record(OpId::layer_norm, {x, weight, bias}, out, {input, weight_dense, mean, rstd},
           [rows, cols, grad_input_wanted, grad_weight_wanted, grad_bias_wanted,
            norm_shape = normalized_shape](const Tensor& g_in,
                                           const std::vector<Tensor>& s) -> std::vector<Tensor> {
             const Tensor& in = s[0];
             const Tensor g = g_in.to(in.dtype()).contiguous();
             const TensorOptions options(in.dtype(), in.device());
             Tensor grad_x = grad_input_wanted ? empty(in.sizes(), options) : Tensor();
             Tensor grad_weight = grad_weight_wanted ? empty(norm_shape, options) : Tensor();
             Tensor grad_bias = grad_bias_wanted ? empty(norm_shape, options) : Tensor();
             dispatch_floating(in.dtype(), "layer_norm", [&]<typename T>() {
               using Acc = acc_t<T>;
               const T* g_data = static_cast<const T*>(g.data_ptr());
               const T* x_data = static_cast<const T*>(in.data_ptr());
               const Acc* mean_data = static_cast<const Acc*>(s[2].data_ptr());
               const Acc* rstd_data = static_cast<const Acc*>(s[3].data_ptr());
               if (in.is_cuda()) {
#if EMBER_WITH_CUDA
                 kernels::cuda::layer_norm_backward<T>(
                     g_data, x_data, mean_data, rstd_data, data_or_null<T>(s[1]),
                     mutable_data_or_null<T>(grad_x), mutable_data_or_null<T>(grad_weight),
                     mutable_data_or_null<T>(grad_bias), rows, cols,
                     cuda::StreamOnDevice(in.device().index));
#endif
                 return;
               }
               kernels::cpu::layer_norm_backward<T>(
                   g_data, x_data, mean_data, rstd_data, data_or_null<T>(s[1]),
                   mutable_data_or_null<T>(grad_x), mutable_data_or_null<T>(grad_weight),
                   mutable_data_or_null<T>(grad_bias), rows, cols);
             });
             return {grad_x, grad_weight, grad_bias};
           });
  }
  return out;
}

// ---- batch norm -----------------------------------------------------------------------------

namespace {

// batch_norm, and with `relu` batch_norm_relu: the ReLU applied by the apply kernel, and its
// backward by the backward kernels' loads of the gradient (from the saved output).
Tensor batch_norm_op(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                     const Tensor& weight_in, const Tensor& bias_in, bool training, double momentum,
                     double eps, bool relu) {
  for (const auto& [t, what] :
       {std::pair{&running_mean, "running_mean"}, std::pair{&running_var, "running_var"},
        std::pair{&weight_in, "weight"}, std::pair{&bias_in, "bias"}}) {
    EMBER_CHECK(!t->defined() || t->device() == x.device(),
                "batch_norm: expected every tensor on the input's device, but the input is ",
                describe(x), " and the ", what, " is ", describe(*t), "; move it with .to(",
                x.device(), ")");
  }
  EMBER_CHECK(is_floating(x.dtype()), "batch_norm: expected a floating-point input, got ",
              describe(x), " (convert it with to(DType::f32) first)");
  EMBER_CHECK(x.dim() >= 2,
              "batch_norm: expected an input of shape (N, C, ...) with at least 2 "
              "dims, got ",
              describe(x));
  const int64_t batch = x.size(0), channels = x.size(1);
  const int64_t spatial = batch * channels == 0 ? 0 : x.numel() / (batch * channels);
  for (const auto& [t, what] :
       {std::pair{&running_mean, "running_mean"}, std::pair{&running_var, "running_var"},
        std::pair{&weight_in, "weight"}, std::pair{&bias_in, "bias"}}) {
    if (!t->defined()) continue;
    EMBER_CHECK(t->dim() == 1 && t->size(0) == channels, "batch_norm: ", what, " has shape ",
                shape_str(t->sizes()), " but the input ", describe(x), " has ", channels,
                " channels (dim 1); expected a ", what, " of shape (", channels, ")");
    EMBER_CHECK(is_floating(t->dtype()), "batch_norm: expected a floating-point ", what, ", got ",
                describe(*t));
  }
  EMBER_CHECK(running_mean.defined() == running_var.defined(),
              "batch_norm: give both running_mean and running_var, or neither");
  EMBER_CHECK(training || running_mean.defined(),
              "batch_norm: eval mode (training = false) normalises with the running statistics, "
              "but running_mean and running_var are undefined");
  const int64_t count = batch * spatial;
  EMBER_CHECK(!training || count > 1,
              "batch_norm: expected more than 1 value per channel when "
              "training, got input ",
              describe(x));

  // The affine parameters and their gradients stay in the statistics dtype (f32 for f16/bf16
  // inputs), as cuDNN and PyTorch keep them when batch norm runs on 16-bit activations: a
  // gradient summed over batch * spatial values would overflow f16 under a loss scale.
  const DType stat_dtype = statistics_dtype(x.dtype());
  const TensorOptions stat_options(stat_dtype, x.device());
  Tensor input, weight_dense, mean, rstd, scale, shift;
  {
    NoGradGuard no_grad;
    input = x.contiguous();
    weight_dense = weight_in.defined() ? weight_in.to(stat_dtype).contiguous() : Tensor();
    const Tensor bias_dense = bias_in.defined() ? bias_in.to(stat_dtype).contiguous() : Tensor();
    bool per_channel_made = false;  // mean, rstd, scale, shift, and the running statistics
#if EMBER_WITH_CUDA
    if (training && x.is_cuda() && updatable_in_place(running_mean, stat_dtype) &&
        updatable_in_place(running_var, stat_dtype)) {
      // One read of x and one small kernel make every per-channel tensor below.
      mean = empty({channels}, stat_options);
      rstd = empty({channels}, stat_options);
      scale = empty({channels}, stat_options);
      shift = empty({channels}, stat_options);
      dispatch_floating(x.dtype(), "batch_norm", [&]<typename T>() {
        using Acc = acc_t<T>;
        kernels::cuda::BatchNormChannels<Acc> args;
        args.weight = data_or_null<Acc>(weight_dense);
        args.bias = data_or_null<Acc>(bias_dense);
        args.running_mean = mutable_data_or_null<Acc>(running_mean);
        args.running_var = mutable_data_or_null<Acc>(running_var);
        args.eps = eps;
        args.momentum = momentum;
        args.mean = static_cast<Acc*>(mean.data_ptr());
        args.rstd = static_cast<Acc*>(rstd.data_ptr());
        args.scale = static_cast<Acc*>(scale.data_ptr());
        args.shift = static_cast<Acc*>(shift.data_ptr());
        kernels::cuda::batch_norm_training_statistics<T>(
            static_cast<const T*>(input.data_ptr()), args, batch, channels, spatial, stream_of(x));
      });
      // Written in place by the kernel, as mul_/add_ would have: their versions move on.
      for (const Tensor* running : {&running_mean, &running_var})
        if (running->defined()) running->bump_version();
      per_channel_made = true;
    }
#endif
    if (per_channel_made) {
      // done above
    } else if (training) {
      mean = empty({channels}, stat_options);
      Tensor variance = empty({channels}, stat_options);
      dispatch_floating(x.dtype(), "batch_norm", [&]<typename T>() {
        using Acc = acc_t<T>;
        const T* in = static_cast<const T*>(input.data_ptr());
        Acc* mean_data = static_cast<Acc*>(mean.data_ptr());
        Acc* variance_data = static_cast<Acc*>(variance.data_ptr());
#if EMBER_WITH_CUDA
        if (x.is_cuda()) {
          kernels::cuda::batch_norm_statistics<T>(in, mean_data, variance_data, batch, channels,
                                                  spatial, stream_of(x));
          return;
        }
#endif
        kernels::cpu::batch_norm_statistics<T>(in, mean_data, variance_data, batch, channels,
                                               spatial);
      });
      rstd = rsqrt(variance + eps);
      if (running_mean.defined()) {
        // PyTorch's update: the running variance takes the unbiased batch variance.
        const double unbiased = static_cast<double>(count) / static_cast<double>(count - 1);
        Tensor running_mean_ref = running_mean, running_var_ref = running_var;
        running_mean_ref.mul_(1.0 - momentum).add_(mean.to(running_mean.dtype()), momentum);
        running_var_ref.mul_(1.0 - momentum)
            .add_((variance * unbiased).to(running_var.dtype()), momentum);
      }
    } else {
      mean = running_mean.to(stat_dtype).clone();  // a copy: later updates must not reach it
      rstd = rsqrt(running_var.to(stat_dtype) + eps);
    }
    if (!scale.defined()) {
      // y = (x - mean) rstd w + b = x scale + shift
      scale = weight_dense.defined() ? rstd * weight_dense : rstd;
      shift = bias_dense.defined() ? bias_dense - mean * scale : -(mean * scale);
      scale = scale.contiguous();
      shift = shift.contiguous();
    }
  }
  Tensor out = empty(x.sizes(), TensorOptions(x.dtype(), x.device()));
  dispatch_floating(x.dtype(), "batch_norm", [&]<typename T>() {
    using Acc = acc_t<T>;
    const T* in = static_cast<const T*>(input.data_ptr());
    const Acc* scale_data = static_cast<const Acc*>(scale.data_ptr());
    const Acc* shift_data = static_cast<const Acc*>(shift.data_ptr());
    T* out_data = static_cast<T*>(out.data_ptr());
#if EMBER_WITH_CUDA
    if (x.is_cuda()) {
      kernels::cuda::batch_norm_apply<T>(in, scale_data, shift_data, out_data, batch, channels,
                                         spatial, relu, stream_of(x));
      return;
    }
#endif
    kernels::cpu::batch_norm_apply<T>(in, scale_data, shift_data, out_data, batch, channels,
                                      spatial, relu);
  });
  if (any_requires_grad({&x, &weight_in, &bias_in})) {
    // Each parameter's gradient comes back in that parameter's dtype.
    // Only the gradients that are wanted are computed (a frozen weight, an input that is data).
    const bool grad_input_wanted = x.requires_grad();
    const std::optional<DType> weight_dtype = weight_in.defined() && weight_in.requires_grad()
                                                  ? std::optional(weight_in.dtype())
                                                  : std::nullopt;
    const std::optional<DType> bias_dtype = bias_in.defined() && bias_in.requires_grad()
                                                ? std::optional(bias_in.dtype())
                                                : std::nullopt;
    std::vector<Tensor> saved = {input, weight_dense, mean, rstd};
    if (relu) saved.push_back(out);  // ReLU's backward reads its output, as relu() does
    record(relu ? OpId::batch_norm_relu : OpId::batch_norm, {x, weight_in, bias_in}, out, saved,
           [batch, channels, spatial, training, grad_input_wanted, weight_dtype, bias_dtype, relu](
               const Tensor& g_in, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             const Tensor& in = s[0];
             const Tensor g = g_in.to(in.dtype()).contiguous();
             const TensorOptions param_options(statistics_dtype(in.dtype()), in.device());
             Tensor grad_x = grad_input_wanted
                                 ? empty(in.sizes(), TensorOptions(in.dtype(), in.device()))
                                 : Tensor();
             Tensor grad_weight = weight_dtype ? empty({channels}, param_options) : Tensor();
             Tensor grad_bias = bias_dtype ? empty({channels}, param_options) : Tensor();
             dispatch_floating(in.dtype(), "batch_norm", [&]<typename T>() {
               using Acc = acc_t<T>;
               const auto* mean_data = static_cast<const Acc*>(s[2].data_ptr());
               const auto* rstd_data = static_cast<const Acc*>(s[3].data_ptr());
               const T* relu_out = relu ? static_cast<const T*>(s[4].data_ptr()) : nullptr;
#if EMBER_WITH_CUDA
               if (in.is_cuda()) {
                 kernels::cuda::batch_norm_backward<T>(
                     static_cast<const T*>(g.data_ptr()), static_cast<const T*>(in.data_ptr()),
                     mean_data, rstd_data, data_or_null<Acc>(s[1]), mutable_data_or_null<T>(grad_x),
                     mutable_data_or_null<Acc>(grad_weight), mutable_data_or_null<Acc>(grad_bias),
                     batch, channels, spatial, training, relu_out, stream_of(in));
                 return;
               }
#endif
               kernels::cpu::batch_norm_backward<T>(
                   static_cast<const T*>(g.data_ptr()), static_cast<const T*>(in.data_ptr()),
                   mean_data, rstd_data, data_or_null<Acc>(s[1]), mutable_data_or_null<T>(grad_x),
                   mutable_data_or_null<Acc>(grad_weight), mutable_data_or_null<Acc>(grad_bias),
                   batch, channels, spatial, training, relu_out);
             });
             if (weight_dtype) grad_weight = grad_weight.to(*weight_dtype);
             if (bias_dtype) grad_bias = grad_bias.to(*bias_dtype);
             return {grad_x, grad_weight, grad_bias};
           });
  }
  return out;
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  return batch_norm_op(x, running_mean, running_var, weight, bias, training, momentum, eps, false);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps) {
  return batch_norm_op(x, running_mean, running_var, weight, bias, training, momentum, eps, true);
}

}  // namespace ember
