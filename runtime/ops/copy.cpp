// Copies and conversions: between dtypes and devices, with broadcasting, and the autograd of the
// differentiable ones. Every other op that moves data between devices comes through here.
#include "runtime/ops/copy.h"

#include "kernels/common/convert.h"
#include "kernels/cpu/elementwise.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/cuda_hooks.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"
#include "runtime/ops/layout.h"

#if EMBER_WITH_CUDA
#include "kernels/cuda/elementwise.h"
#include "runtime/cuda/stream.h"
#endif

namespace ember {

namespace {

// dst <- src on the same device, with dtype conversion and broadcasting.
void copy_same_device(const Tensor& dst, const Tensor& src) {
  const kernels::StridedLayout layout = make_layout(dst, {&src}, "copy_");
  if (dst.is_cuda()) {
#if EMBER_WITH_CUDA
    dispatch_all(dst.dtype(), "copy_", [&]<typename Dst>() {
      dispatch_all(src.dtype(), "copy_", [&]<typename Src>() {
        kernels::cuda::copy<Dst, Src>(layout, static_cast<Dst*>(dst.data_ptr()),
                                      static_cast<const Src*>(src.data_ptr()),
                                      cuda::StreamOnDevice(dst.device().index));
      });
    });
#endif
    return;
  }
  dispatch_all(dst.dtype(), "copy_", [&]<typename Dst>() {
    dispatch_all(src.dtype(), "copy_", [&]<typename Src>() {
      kernels::cpu::copy<Dst, Src>(layout, static_cast<Dst*>(dst.data_ptr()),
                                   static_cast<const Src*>(src.data_ptr()));
    });
  });
}

// Moves a contiguous tensor's bytes to another device. With non_blocking, a copy from pinned
// memory, or to the host (into new pinned memory), is left running on the current stream.
Tensor transfer(const Tensor& src, const Device& device, bool non_blocking = false) {
  check_device_available(device);
  const Tensor dense = src.contiguous();
  const bool async_to_host = non_blocking && device.is_cpu() && dense.is_cuda();
  Tensor out = async_to_host ? empty_pinned(dense.sizes(), dense.dtype())
                             : empty(dense.sizes(), TensorOptions(dense.dtype(), device));
  if (dense.nbytes() == 0) return out;
  using cuda_hooks::CopyKind;
  if (dense.is_cpu()) {
    const bool async = non_blocking && dense.is_pinned();
    cuda_hooks::copy_bytes(out.data_ptr(), dense.data_ptr(), dense.nbytes(),
                           CopyKind::host_to_device, device.index,
                           async ? dense.storage()->data() : nullptr);
  } else if (device.is_cpu()) {
    cuda_hooks::copy_bytes(out.data_ptr(), dense.data_ptr(), dense.nbytes(),
                           CopyKind::device_to_host, dense.device().index,
                           async_to_host ? out.storage()->data() : nullptr);
  } else {
    cuda_hooks::copy_between_devices(out.data_ptr(), device.index, dense.data_ptr(),
                                     dense.device().index, dense.nbytes());
  }
  return out;
}

}  // namespace

void copy_into(Tensor& dst, const Tensor& src) {
  EMBER_CHECK(!(grad_enabled() && (src.requires_grad() || dst.requires_grad())),
              "copy_: autograd through copy_ is not supported (", describe(dst), " <- ",
              describe(src),
              "); use clone(), to() or the out-of-place ops, or wrap the copy in "
              "NoGradGuard");
  broadcast_shapes(dst.sizes(), src.sizes(), "copy_");
  Tensor source = src;
  if (src.device() != dst.device()) source = transfer(src, dst.device());
  if (source.storage() == dst.storage() && !source.is_same(dst)) source = source.clone();
  copy_same_device(dst, source);
  dst.bump_version();
}

void fill_into(Tensor& dst, const Scalar& value) {
  EMBER_CHECK(!(grad_enabled() && dst.requires_grad() && dst.is_leaf()),
              "fill_: a leaf tensor that requires grad cannot be modified in place; wrap it in "
              "NoGradGuard");
  const kernels::StridedLayout layout = make_layout(dst, {}, "fill_");
  if (dst.is_cuda()) {
#if EMBER_WITH_CUDA
    dispatch_all(dst.dtype(), "fill_", [&]<typename T>() {
      kernels::cuda::fill<T>(
          layout, static_cast<T*>(dst.data_ptr()),
          value.is_floating() ? convert<T>(value.to_double()) : convert<T>(value.to_int()),
          cuda::StreamOnDevice(dst.device().index));
    });
#endif
  } else {
    dispatch_all(dst.dtype(), "fill_", [&]<typename T>() {
      const T typed =
          value.is_floating() ? convert<T>(value.to_double()) : convert<T>(value.to_int());
      kernels::cpu::fill<T>(layout, static_cast<T*>(dst.data_ptr()), typed);
    });
  }
  dst.bump_version();
}

Tensor to_dtype(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor out = empty(x.sizes(), TensorOptions(dtype, x.device()));
  copy_same_device(out, x);
  if (is_floating(dtype) && any_requires_grad({&x})) {
    const DType from = x.dtype();
    record(OpId::to_dtype, {x}, out, {},
           [from](const Tensor& g, const std::vector<Tensor>&) -> std::vector<Tensor> {
             return {g.to(from)};
           });
  }
  return out;
}

Tensor to_device(const Tensor& x, const Device& device, bool non_blocking) {
  if (x.device() == device) return x;
  Tensor out = transfer(x, device, non_blocking);
  if (any_requires_grad({&x})) {
    const Device from = x.device();
    record(OpId::to_device, {x}, out, {},
           [from](const Tensor& g, const std::vector<Tensor>&) -> std::vector<Tensor> {
             return {g.to(from)};
           });
  }
  return out;
}

Tensor clone(const Tensor& x) {
  Tensor out = empty(x.sizes(), TensorOptions(x.dtype(), x.device()));
  copy_same_device(out, x);
  if (any_requires_grad({&x})) {
    record(OpId::clone, {x}, out, {},
           [](const Tensor& g, const std::vector<Tensor>&) -> std::vector<Tensor> { return {g}; });
  }
  return out;
}

}  // namespace ember
