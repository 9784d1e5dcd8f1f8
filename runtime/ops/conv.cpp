// conv2d: checks, the kernel geometry, autograd through dedicated backward kernels.
#include "runtime/ops/conv.h"

#include "kernels/common/conv_params.h"
#include "kernels/cpu/conv2d.h"
#include "runtime/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"

namespace ember {

namespace {

void check_cpu(const Tensor& t, const char* op) {
  if (t.defined() && t.is_cuda())
    EMBER_FAIL(op, ": not implemented for CUDA tensors yet (", describe(t), ")");
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
  check_cpu(input, "conv2d");
  check_cpu(weight, "conv2d");
  check_cpu(bias, "conv2d");
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
                     input.dtype());
  dispatch_floating(input.dtype(), "conv2d", [&]<typename T>() {
    kernels::cpu::conv2d_forward<T>(
        params, static_cast<const T*>(input.data_ptr()), static_cast<const T*>(weight.data_ptr()),
        bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr,
        static_cast<T*>(out.data_ptr()));
  });
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
             Tensor dx, dw, db;
             if (grad_input) dx = empty(x.sizes(), x.dtype());
             if (grad_weight) dw = empty(w.sizes(), w.dtype());
             if (grad_bias) db = empty({params.out_channels}, w.dtype());
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

}  // namespace ember
