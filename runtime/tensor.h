// Tensor: a cheap, shared handle to sizes, strides, an offset and a dtype over a Storage.
//
// Copying a Tensor copies the handle, never the data. Views (view, permute, slice, expand, ...)
// share the storage of the tensor they come from; writes through a view are seen by the base.
// The ops live in runtime/ops.h; this header keeps the handle, its views and its autograd hooks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/scalar.h"
#include "runtime/storage.h"

namespace ember {

using Shape = std::vector<int64_t>;

// "(4,3)", "()" for a 0-d shape.
std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);
// Row-major strides of a dense tensor of this shape.
Shape contiguous_strides(const Shape& shape);
// Wraps a possibly negative dim into [0, ndim); an error names `op` otherwise.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

class Node;
struct AutogradMeta;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape sizes;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  bool is_view = false;                    // shares its storage with the tensor it was made from
  std::shared_ptr<AutogradMeta> autograd;  // null until autograd needs it
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  // Same handle (not merely equal values).
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata -------------------------------------------------------------------------------
  const Shape& sizes() const { return checked()->sizes; }
  const Shape& shape() const { return checked()->sizes; }
  const Shape& strides() const { return checked()->strides; }
  int64_t dim() const { return static_cast<int64_t>(checked()->sizes.size()); }
  int64_t size(int64_t dim) const;    // negative dims count from the end
  int64_t stride(int64_t dim) const;  // idem
  int64_t numel() const { return shape_numel(checked()->sizes); }
  int64_t storage_offset() const { return checked()->offset; }
  DType dtype() const { return checked()->dtype; }
  Device device() const { return checked()->storage->device(); }
  size_t element_size() const { return ember::element_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  bool is_view() const { return checked()->is_view; }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  const std::shared_ptr<Storage>& storage() const { return checked()->storage; }

  // ---- data -----------------------------------------------------------------------------------
  // Address of the first element (the offset applied). Raw: no dtype or device check.
  void* data_ptr() const;
  // Typed address of the first element; the dtype must be T's.
  template <typename T>
  T* data() const {
    EMBER_CHECK(dtype() == dtype_of<T>, "data<", dtype_name(dtype_of<T>), ">: tensor has dtype ",
                dtype());
    return static_cast<T*>(data_ptr());
  }
  // The value of a one-element tensor on any device, converted to T.
  template <typename T>
  T item() const {
    return static_cast<T>(item_double());
  }
  double item_double() const;

  // ---- autograd -------------------------------------------------------------------------------
  bool requires_grad() const;
  // Marks a leaf as needing a gradient (only floating-point leaves can).
  Tensor& requires_grad_(bool requires_grad = true);
  bool is_leaf() const;
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  const std::shared_ptr<Node>& grad_fn() const;
  // A new handle on the same data, cut off from the graph (shares the version counter).
  Tensor detach() const;
  // Back-propagates from this tensor. `gradient` may be empty for a one-element tensor.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  // On a leaf: `hook(leaf)` runs each backward pass once the leaf's .grad holds its full gradient.
  void register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  uint32_t version() const { return storage()->version(); }
  void bump_version() const { storage()->bump_version(); }

  // Points this handle, and every copy of it, at `data`'s storage, shape and dtype, as PyTorch's
  // `param.data = data`: how a module converts its parameters while its members keep working.
  // requires_grad and hooks stay; the gradient is dropped when the shape or dtype changes.
  void set_data(const Tensor& data) const;

  // ---- views (share storage) ------------------------------------------------------------------
  Tensor view(const Shape& shape) const;     // one size may be -1; needs compatible strides
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose
  Tensor slice(int64_t dim, int64_t start, int64_t end,
               int64_t step = 1) const;  // clamps like Python
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a size
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor broadcast_to(const Shape& shape) const { return expand(shape); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;  // itself when already contiguous

  // ---- copies and conversions ----------------------------------------------------------------
  Tensor to(DType dtype) const;  // itself when already that dtype
  Tensor to(const Device& device) const;
  // With non_blocking, a copy between pinned host memory and a GPU is left running on the current
  // stream: from a pinned tensor to the GPU, and from the GPU into a new pinned tensor. Read the
  // result, or write the pinned source, only after synchronising the stream (ember keeps the
  // pinned memory from reuse until the copy is done, not from the caller's writes). Other copies
  // are synchronous, as to(device).
  Tensor to(const Device& device, bool non_blocking) const;
  Tensor to(const Device& device, DType dtype) const;
  Tensor clone() const;
  // A copy in pinned (page-locked) host memory, itself when already pinned; a CPU tensor only.
  Tensor pin_memory() const;
  bool is_pinned() const { return storage()->is_pinned(); }
  Tensor& copy_(const Tensor& source);  // broadcasts, converts dtype and device
  Tensor& fill_(const Scalar& value);
  Tensor& zero_();

  // ---- in-place arithmetic (bump the version counter) -----------------------------------------
  Tensor& add_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& sub_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& mul_(const Tensor& other);
  Tensor& div_(const Tensor& other);
  Tensor& add_(const Scalar& other);
  Tensor& sub_(const Scalar& other);
  Tensor& mul_(const Scalar& other);
  Tensor& div_(const Scalar& other);

  // Printed like PyTorch's repr: tensor([[1., 2.], [3., 4.]], dtype=..., requires_grad=True)
  std::string str() const;

 private:
  TensorImpl* checked() const {
    EMBER_CHECK(impl_ != nullptr, "use of an undefined tensor (default-constructed Tensor)");
    return impl_.get();
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& tensor);

// Describes a tensor for error messages: "f32 (4,3) on cpu".
std::string describe(const Tensor& tensor);

// ---- creation (runtime/creation.cpp) ---------------------------------------------------------
struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  bool requires_grad = false;

  TensorOptions() = default;
  TensorOptions(DType d) : dtype(d) {}  // NOLINT: lets `zeros({2}, DType::f64)` read naturally
  TensorOptions(Device dev) : device(dev) {}  // NOLINT
  TensorOptions(DType d, Device dev) : dtype(d), device(dev) {}
  TensorOptions with_requires_grad(bool value = true) const {
    TensorOptions copy = *this;
    copy.requires_grad = value;
    return copy;
  }
};

Tensor empty(const Shape& shape, TensorOptions options = {});
// Uninitialised, contiguous, in pinned host memory (needs CUDA and a GPU).
Tensor empty_pinned(const Shape& shape, DType dtype = DType::f32);
Tensor empty_strided(const Shape& shape, const Shape& strides, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, const Scalar& value, TensorOptions options = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, const Scalar& value);
// start, start + step, ... below end (above it for a negative step), as torch.arange: i64 when
// every argument is an integer and no dtype is given, else f32 (or options.dtype).
Tensor arange(const Scalar& end, std::optional<TensorOptions> options = std::nullopt);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1,
              std::optional<TensorOptions> options = std::nullopt);
// `steps` values from start to end inclusive, evenly spaced (steps >= 0).
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
// (n, m) with ones on the diagonal; m defaults to n.
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, TensorOptions options = {});
// A 0-d tensor holding `value`.
Tensor scalar_tensor(const Scalar& value, TensorOptions options = {});
// Copies host values into a new tensor of `shape` (CPU, then moved to options.device).
Tensor from_vector(const std::vector<float>& values, const Shape& shape,
                   TensorOptions options = {});
Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions options);
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, TensorOptions options);
// Wraps caller-owned CPU memory without copying; the caller keeps it alive.
Tensor from_blob(void* data, const Shape& shape, DType dtype);
// The elements of a tensor (any device, any layout) as host values of type T.
template <typename T>
std::vector<T> to_vector(const Tensor& t);

}  // namespace ember
