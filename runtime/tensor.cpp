// Tensor: metadata, views (with their autograd nodes), and the autograd entry points.
#include "runtime/tensor.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "runtime/autograd/engine.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/ops.h"

namespace ember {

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

int64_t shape_numel(const Shape& shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t s : shape) {
    EMBER_CHECK(!__builtin_mul_overflow(n, s, &n), "shape ", shape_str(shape),
                " has more elements than an int64 counts");
  }
  return n;
}

// A size-0 dimension makes no elements but not a zero stride (PyTorch's rule), so a shape such as
// (2^40, 2^40, 0) is checked here too: the strides of its other dimensions would overflow.
Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = step;
    EMBER_CHECK(!__builtin_mul_overflow(step, std::max<int64_t>(shape[i], 1), &step), "shape ",
                shape_str(shape), " is too large: its strides overflow an int64");
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t bound = std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dim 0 and -1
  EMBER_CHECK(dim >= -bound && dim < bound, op, ": dim ", dim, " is out of range for a ", ndim,
              "-D tensor (expected ", -bound, " .. ", bound - 1, ")");
  return dim < 0 ? dim + bound : dim;
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined tensor";
  return detail::concat(t.dtype(), " ", shape_str(t.sizes()), " on ", t.device());
}

// ---- metadata ----------------------------------------------------------------------------------

// (wrap_dim lets dim 0 and -1 through for a 0-d tensor, as reductions over them allow; a 0-d
// tensor has no size or stride to read.)
int64_t Tensor::size(int64_t d) const {
  EMBER_CHECK(dim() > 0, "size: dim ", d, " of a 0-d tensor, which has no dims");
  return sizes()[wrap_dim(d, dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  EMBER_CHECK(dim() > 0, "stride: dim ", d, " of a 0-d tensor, which has no dims");
  return strides()[wrap_dim(d, dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  const TensorImpl* p = checked();
  int64_t expected = 1;
  for (size_t i = p->sizes.size(); i-- > 0;) {
    if (p->sizes[i] == 1) continue;
    if (p->sizes[i] == 0) return true;
    if (p->strides[i] != expected) return false;
    expected *= p->sizes[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  const TensorImpl* p = checked();
  return static_cast<char*>(p->storage->data()) + p->offset * static_cast<int64_t>(element_size());
}

double Tensor::item_double() const {
  EMBER_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ",
              shape_str(sizes()));
  const Tensor host = to(Device::cpu()).to(DType::f64).contiguous();
  return *static_cast<const double*>(host.data_ptr());
}

// ---- autograd ----------------------------------------------------------------------------------

namespace {
AutogradMeta& autograd_meta(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (!impl->autograd) impl->autograd = std::make_shared<AutogradMeta>();
  return *impl->autograd;
}
}  // namespace

bool Tensor::requires_grad() const {
  const auto& meta = checked()->autograd;
  return meta != nullptr && meta->requires_grad;
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  EMBER_CHECK(
      is_leaf() || requires_grad,
      "requires_grad_(false): only a leaf can stop requiring grad; use detach() on a result "
      "of an op");
  EMBER_CHECK(!requires_grad || is_floating(dtype()),
              "requires_grad_: only floating-point tensors can require gradients, got ", dtype());
  autograd_meta(*this).requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const {
  const auto& meta = checked()->autograd;
  return meta == nullptr || meta->grad_fn == nullptr;
}

Tensor Tensor::grad() const {
  const auto& meta = checked()->autograd;
  return meta ? meta->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    EMBER_CHECK(grad.sizes() == sizes() && grad.dtype() == dtype() && grad.device() == device(),
                "set_grad: the gradient must match the tensor: got ", describe(grad), ", expected ",
                describe(*this));
  }
  autograd_meta(*this).grad = grad;
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> kNone;
  const auto& meta = checked()->autograd;
  return meta ? meta->grad_fn : kNone;
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>(*checked());
  impl->autograd = nullptr;
  return Tensor(std::move(impl));
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  run_backward({*this}, {gradient}, retain_graph);
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  EMBER_CHECK(is_leaf() && requires_grad(),
              "register_post_accumulate_grad_hook: only a leaf tensor that requires grad has an "
              "accumulated gradient");
  autograd_meta(*this).post_accumulate_hooks.push_back(std::move(hook));
}

// ---- views -------------------------------------------------------------------------------------

namespace {

// A view of `base` with new sizes/strides/offset over the same storage. No autograd.
Tensor make_view(const Tensor& base, Shape sizes, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->is_view = true;
  return Tensor(std::move(impl));
}

// The strides that let `new_shape` view the same elements as (sizes, strides) without a copy,
// or nothing if no such strides exist (PyTorch's computeStride).
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides,
                                  const Shape& new_shape) {
  if (sizes.empty()) return Shape(new_shape.size(), 1);
  const int64_t numel = shape_numel(sizes);
  if (numel == 0) return contiguous_strides(new_shape);
  Shape new_strides(new_shape.size());
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

Shape infer_shape(const Shape& shape, int64_t numel, const char* op, const Shape& from) {
  Shape out = shape;
  int64_t known = 1;
  int infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      EMBER_CHECK(infer_at < 0, op, ": only one dimension can be -1, got ", shape_str(shape));
      infer_at = static_cast<int>(i);
    } else {
      EMBER_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in shape ", shape_str(shape));
      // Saturated past int64 (no shape that large matches any input; a later 0 still gives 0).
      if (__builtin_mul_overflow(known, out[i], &known)) known = INT64_MAX;
    }
  }
  if (infer_at >= 0) {
    EMBER_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape),
                " is invalid for input of shape ", shape_str(from), " (", numel, " elements)");
    out[infer_at] = numel / known;
  }
  EMBER_CHECK(shape_numel(out) == numel, op, ": shape ", shape_str(shape),
              " is invalid for input of shape ", shape_str(from), " (", numel, " elements)");
  return out;
}

// Records a reshape-like view (backward: reshape the gradient back to the input's shape).
Tensor record_reshape(const Tensor& input, const Tensor& output) {
  if (any_requires_grad({&input})) {
    Shape in_shape = input.sizes();
    record(OpId::reshape, {input}, output, {},
           [in_shape](const Tensor& g, const std::vector<Tensor>&) -> std::vector<Tensor> {
             return {g.reshape(in_shape)};
           });
  }
  return output;
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  const Shape target = infer_shape(shape, numel(), "view", sizes());
  auto strides_for_view = view_strides(sizes(), strides(), target);
  EMBER_CHECK(strides_for_view.has_value(), "view: shape ", shape_str(shape),
              " is not compatible with the input's size ", shape_str(sizes()), " and stride ",
              shape_str(strides()),
              " (at least one dimension spans two contiguous subspaces); "
              "use reshape() instead");
  return record_reshape(*this, make_view(*this, target, *strides_for_view, storage_offset()));
}

Tensor Tensor::reshape(const Shape& shape) const {
  const Shape target = infer_shape(shape, numel(), "reshape", sizes());
  if (auto s = view_strides(sizes(), strides(), target)) {
    return record_reshape(*this, make_view(*this, target, *s, storage_offset()));
  }
  return contiguous().view(target);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  const int64_t nd = dim();
  EMBER_CHECK(static_cast<int64_t>(dims.size()) == nd, "permute: expected ", nd,
              " dims for a tensor of shape ", shape_str(sizes()), ", got ", shape_str(dims));
  Shape new_sizes(nd), new_strides(nd);
  std::vector<int64_t> inverse(nd, -1);
  for (int64_t i = 0; i < nd; ++i) {
    const int64_t d = wrap_dim(dims[i], nd, "permute");
    EMBER_CHECK(inverse[d] < 0, "permute: dim ", d, " appears twice in ", shape_str(dims));
    inverse[d] = i;
    new_sizes[i] = sizes()[d];
    new_strides[i] = strides()[d];
  }
  Tensor out = make_view(*this, new_sizes, new_strides, storage_offset());
  if (any_requires_grad({this})) {
    record(OpId::permute, {*this}, out, {},
           [inverse](const Tensor& g, const std::vector<Tensor>&) -> std::vector<Tensor> {
             return {g.permute(inverse)};
           });
  }
  return out;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  const int64_t nd = dim();
  if (nd == 0) return *this;
  std::vector<int64_t> order(nd);
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[wrap_dim(dim0, nd, "transpose")], order[wrap_dim(dim1, nd, "transpose")]);
  return permute(order);
}

Tensor Tensor::t() const {
  EMBER_CHECK(dim() <= 2, "t: expects a tensor with at most 2 dims, got shape ",
              shape_str(sizes()));
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  EMBER_CHECK(dim() > 0, "slice: cannot slice a 0-d tensor");
  EMBER_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = sizes()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape new_sizes = sizes(), new_strides = strides();
  // (Written so that a huge step cannot overflow: a slice of at most one value keeps its stride.)
  new_sizes[d] = end == start ? 0 : (end - start - 1) / step + 1;
  if (new_sizes[d] > 1) new_strides[d] *= step;
  Tensor out = make_view(*this, new_sizes, new_strides, storage_offset() + start * strides()[d]);
  if (any_requires_grad({this})) {
    Shape in_shape = sizes();
    record(OpId::slice, {*this}, out, {},
           [in_shape, d, start, end, step](const Tensor& g,
                                           const std::vector<Tensor>&) -> std::vector<Tensor> {
             Tensor grad = zeros(in_shape, TensorOptions(g.dtype(), g.device()));
             grad.slice(d, start, end, step).copy_(g);
             return {grad};
           });
  }
  return out;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  EMBER_CHECK(dim() > 0, "narrow: cannot narrow a 0-d tensor");
  d = wrap_dim(d, dim(), "narrow");
  const int64_t n = size(d);
  if (start < 0) start += n;
  EMBER_CHECK(start >= 0 && length >= 0 && length <= n - start, "narrow: start ", start,
              " and length ", length, " are out of range for dim ", d, " of size ", n);
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  EMBER_CHECK(dim() > 0, "select: cannot select from a 0-d tensor");
  d = wrap_dim(d, dim(), "select");
  const int64_t n = sizes()[d];
  EMBER_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d,
              " of size ", n);
  if (index < 0) index += n;
  Shape new_sizes = sizes(), new_strides = strides();
  new_sizes.erase(new_sizes.begin() + d);
  new_strides.erase(new_strides.begin() + d);
  Tensor out = make_view(*this, new_sizes, new_strides, storage_offset() + index * strides()[d]);
  if (any_requires_grad({this})) {
    Shape in_shape = sizes();
    record(
        OpId::select, {*this}, out, {},
        [in_shape, d, index](const Tensor& g, const std::vector<Tensor>&) -> std::vector<Tensor> {
          Tensor grad = zeros(in_shape, TensorOptions(g.dtype(), g.device()));
          grad.select(d, index).copy_(g);
          return {grad};
        });
  }
  return out;
}

Tensor Tensor::expand(const Shape& shape) const {
  const int64_t nd = static_cast<int64_t>(shape.size());
  EMBER_CHECK(nd >= dim(), "expand: the target shape ", shape_str(shape), " has fewer dims than ",
              shape_str(sizes()));
  Shape new_sizes(nd), new_strides(nd);
  const int64_t lead = nd - dim();
  for (int64_t i = 0; i < nd; ++i) {
    if (i < lead) {
      EMBER_CHECK(shape[i] >= 0, "expand: size -1 is not allowed in a new leading dim (",
                  shape_str(shape), ")");
      new_sizes[i] = shape[i];
      new_strides[i] = 0;
      continue;
    }
    const int64_t have = sizes()[i - lead];
    const int64_t want = shape[i] == -1 ? have : shape[i];
    EMBER_CHECK(have == want || have == 1, "expand: cannot expand shape ", shape_str(sizes()),
                " to ", shape_str(shape), " (dim ", i, ": ", have, " vs ", want, ")");
    new_sizes[i] = want;
    new_strides[i] = have == want ? strides()[i - lead] : 0;
  }
  Tensor out = make_view(*this, new_sizes, new_strides, storage_offset());
  if (any_requires_grad({this})) {
    Shape in_shape = sizes();
    record(OpId::expand, {*this}, out, {},
           [in_shape](const Tensor& g, const std::vector<Tensor>&) -> std::vector<Tensor> {
             return {sum_to(g, in_shape)};
           });
  }
  return out;
}

Tensor Tensor::squeeze() const {
  Shape new_sizes, new_strides;
  for (int64_t i = 0; i < dim(); ++i) {
    if (sizes()[i] == 1) continue;
    new_sizes.push_back(sizes()[i]);
    new_strides.push_back(strides()[i]);
  }
  return record_reshape(*this, make_view(*this, new_sizes, new_strides, storage_offset()));
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim(), "squeeze");
  if (sizes()[d] != 1) return *this;
  Shape new_sizes = sizes(), new_strides = strides();
  new_sizes.erase(new_sizes.begin() + d);
  new_strides.erase(new_strides.begin() + d);
  return record_reshape(*this, make_view(*this, new_sizes, new_strides, storage_offset()));
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape new_sizes = sizes(), new_strides = strides();
  const int64_t stride = d < dim() ? strides()[d] * sizes()[d] : 1;
  new_sizes.insert(new_sizes.begin() + d, 1);
  new_strides.insert(new_strides.begin() + d, stride);
  return record_reshape(*this, make_view(*this, new_sizes, new_strides, storage_offset()));
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  EMBER_CHECK(start_dim <= end_dim, "flatten: start_dim ", start_dim, " is after end_dim ",
              end_dim);
  Shape shape(sizes().begin(), sizes().begin() + start_dim);
  int64_t merged = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i)
    merged *= sizes()[i];
  shape.push_back(merged);
  shape.insert(shape.end(), sizes().begin() + end_dim + 1, sizes().end());
  return reshape(shape);
}

Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : clone();
}

// ---- copies and conversions
// ----------------------------------------------------------------------

Tensor Tensor::to(DType target) const {
  return dtype() == target ? *this : ember::to_dtype(*this, target);
}

Tensor Tensor::to(const Device& target) const {
  return device() == target ? *this : ember::to_device(*this, target);
}

Tensor Tensor::to(const Device& target, bool non_blocking) const {
  return device() == target ? *this : ember::to_device(*this, target, non_blocking);
}

Tensor Tensor::pin_memory() const {
  EMBER_CHECK(is_cpu(), "pin_memory: only CPU tensors can be pinned, not ", describe(*this));
  if (is_pinned()) return *this;
  Tensor out = empty_pinned(sizes(), dtype());
  NoGradGuard no_grad;
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(const Device& target, DType target_dtype) const {
  return to(target).to(target_dtype);
}

Tensor Tensor::clone() const {
  return ember::clone(*this);
}

Tensor& Tensor::copy_(const Tensor& source) {
  ember::copy_into(*this, source);
  return *this;
}

Tensor& Tensor::fill_(const Scalar& value) {
  ember::fill_into(*this, value);
  return *this;
}

Tensor& Tensor::zero_() {
  return fill_(0);
}

Tensor& Tensor::add_(const Tensor& other, const Scalar& alpha) {
  ember::binary_inplace(kernels::BinaryOp::add, *this, other, alpha);
  return *this;
}
Tensor& Tensor::sub_(const Tensor& other, const Scalar& alpha) {
  ember::binary_inplace(kernels::BinaryOp::sub, *this, other, alpha);
  return *this;
}
Tensor& Tensor::mul_(const Tensor& other) {
  ember::binary_inplace(kernels::BinaryOp::mul, *this, other, 1);
  return *this;
}
Tensor& Tensor::div_(const Tensor& other) {
  ember::binary_inplace(kernels::BinaryOp::div, *this, other, 1);
  return *this;
}
void Tensor::set_data(const Tensor& data) const {
  EMBER_CHECK(data.defined(), "set_data: the new data is an undefined tensor");
  EMBER_CHECK(is_leaf(), "set_data: only leaf tensors can be given new data, got ",
              describe(*this));
  EMBER_CHECK(!requires_grad() || is_floating(data.dtype()),
              "set_data: a tensor that requires grad needs floating-point data, got ",
              describe(data));
  TensorImpl* self = impl();
  const bool layout_changes = self->sizes != data.sizes() || self->dtype != data.dtype();
  self->storage = data.storage();
  self->sizes = data.sizes();
  self->strides = data.strides();
  self->offset = data.storage_offset();
  self->dtype = data.dtype();
  self->is_view = data.is_view();
  if (layout_changes && self->autograd) self->autograd->grad = Tensor();
}

// The number becomes a 0-d tensor of the dtype it meets this tensor with, so that promotion rules
// apply as to the out-of-place op (an i64 tensor cannot take `mul_(1.5)`); an f16/bf16 tensor
// keeps a number its dtype cannot hold in f32, as the out-of-place ops do.
Tensor& Tensor::add_(const Scalar& other) {
  ember::binary_inplace(kernels::BinaryOp::add, *this, other);
  return *this;
}
Tensor& Tensor::sub_(const Scalar& other) {
  ember::binary_inplace(kernels::BinaryOp::sub, *this, other);
  return *this;
}
Tensor& Tensor::mul_(const Scalar& other) {
  ember::binary_inplace(kernels::BinaryOp::mul, *this, other);
  return *this;
}
Tensor& Tensor::div_(const Scalar& other) {
  ember::binary_inplace(kernels::BinaryOp::div, *this, other);
  return *this;
}

}  // namespace ember
