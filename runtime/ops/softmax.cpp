// softmax and log_softmax along one dim: checks, the fused CPU and CUDA kernels, autograd.
#include "kernels/cpu/softmax.h"
#include "runtime/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"

#if EMBER_WITH_CUDA
#include "kernels/cuda/softmax.h"
#include "runtime/cuda/stream.h"
#endif

namespace ember {
namespace {

// x viewed as (outer, size, inner) around `dim`.
struct LineShape {
  int64_t outer = 1, size = 1, inner = 1;
};

LineShape lines_around(const Shape& shape, int64_t dim) {
  LineShape lines;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) lines.outer *= shape[d];
    if (d == dim) lines.size = shape[d];
    if (d > dim) lines.inner *= shape[d];
  }
  return lines;
}

// The forward kernel of x's device: in, out dense (outer, size, inner).
void softmax_kernel(const Tensor& in, const Tensor& out, const LineShape& lines, bool log,
                    const char* name) {
  dispatch_floating(in.dtype(), name, [&]<typename T>() {
    const T* x = static_cast<const T*>(in.data_ptr());
    T* y = static_cast<T*>(out.data_ptr());
    if (in.is_cuda()) {
#if EMBER_WITH_CUDA
      kernels::cuda::softmax<T>(x, y, lines.outer, lines.size, lines.inner, log,
                                cuda::StreamOnDevice(in.device().index));
#endif
      return;
    }
    kernels::cpu::softmax<T>(x, y, lines.outer, lines.size, lines.inner, log);
  });
}

// The backward kernel of y's device: g, y, grad dense (outer, size, inner).
void softmax_backward_kernel(const Tensor& g, const Tensor& y, const Tensor& grad,
                             const LineShape& lines, bool log, const char* name) {
  dispatch_floating(y.dtype(), name, [&]<typename T>() {
    const T* g_data = static_cast<const T*>(g.data_ptr());
    const T* y_data = static_cast<const T*>(y.data_ptr());
    T* grad_data = static_cast<T*>(grad.data_ptr());
    if (y.is_cuda()) {
#if EMBER_WITH_CUDA
      kernels::cuda::softmax_backward<T>(g_data, y_data, grad_data, lines.outer, lines.size,
                                         lines.inner, log, cuda::StreamOnDevice(y.device().index));
#endif
      return;
    }
    kernels::cpu::softmax_backward<T>(g_data, y_data, grad_data, lines.outer, lines.size,
                                      lines.inner, log);
  });
}

Tensor softmax_op(const Tensor& x_in, int64_t dim_in, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  const Tensor x = autocast_fp32(x_in);
  EMBER_CHECK(is_floating(x.dtype()), name, ": expected a floating-point tensor, got ", describe(x),
              " (convert it with to(DType::f32) first)");
  const int64_t dim = wrap_dim(dim_in, x.dim(), name);
  const LineShape lines = lines_around(x.sizes(), dim);
  Tensor input;
  {
    NoGradGuard no_grad;
    input = x.contiguous();
  }
  Tensor out = empty(x.sizes(), TensorOptions(x.dtype(), x.device()));
  softmax_kernel(input, out, lines, log, name);
  if (any_requires_grad({&x})) {
    // Only the output is needed: softmax: y (g - sum(g y)); log_softmax: g - exp(y) sum(g).
    record(log ? OpId::log_softmax : OpId::softmax, {x}, out, {out},
           [lines, log, name](const Tensor& g_in,
                              const std::vector<Tensor>& s) -> std::vector<Tensor> {
             const Tensor g = g_in.to(s[0].dtype()).contiguous();
             const Tensor& y = s[0];
             Tensor grad = empty(y.sizes(), TensorOptions(y.dtype(), y.device()));
             softmax_backward_kernel(g, y, grad, lines, log, name);
             return {grad};
           });
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  return softmax_op(x, dim, false);
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_op(x, dim, true);
}

}  // namespace ember
