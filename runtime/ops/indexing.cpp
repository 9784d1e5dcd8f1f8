// Joining, splitting, indexing and padding: checks, dispatch to the gather / scatter-add kernels,
// autograd. cat, stack, split, chunk and pad are built from views and copies, so they work on
// every device and dtype; the index ops run the kernels of kernels/cpu/indexing.h, or on CUDA
// those of kernels/cuda/indexing.h (with the plan's offset tables copied to the device).
#include "runtime/ops/indexing.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/indexing.h"
#include "runtime/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"

#if EMBER_WITH_CUDA
#include "kernels/cuda/indexing.h"
#include "runtime/cuda/stream.h"
#endif

namespace ember {
namespace {

// ---- the (outer, along, inner) plan handed to the kernels --------------------------------------

// Offsets of every position of dims [begin, end) of `sizes`, in row-major order, stepping
// `strides`: dims an operand lacks (a broadcast index) have stride 0.
std::vector<int64_t> position_offsets(const Shape& sizes, const Shape& strides, int64_t begin,
                                      int64_t end) {
  std::vector<int64_t> offsets{0};
  for (int64_t d = begin; d < end; ++d) {
    std::vector<int64_t> next;
    next.reserve(offsets.size() * static_cast<size_t>(sizes[d]));
    for (const int64_t base : offsets) {
      for (int64_t k = 0; k < sizes[d]; ++k)
        next.push_back(base + k * strides[d]);
    }
    offsets = std::move(next);
  }
  return offsets;
}

// An iteration over `sizes` around `dim`, and where each operand (given by its strides over
// those sizes) keeps element (o, j, i).
struct IndexPlan {
  kernels::cpu::IndexIteration iteration;
  std::vector<std::vector<int64_t>> outer, inner;
  std::vector<kernels::cpu::IndexedOperand> operands;
};

IndexPlan plan_indexing(const Shape& sizes, int64_t dim, const std::vector<Shape>& strides) {
  const int64_t ndim = static_cast<int64_t>(sizes.size());
  IndexPlan plan;
  plan.iteration.outer = shape_numel(Shape(sizes.begin(), sizes.begin() + dim));
  plan.iteration.along = sizes[dim];
  plan.iteration.inner = shape_numel(Shape(sizes.begin() + dim + 1, sizes.end()));
  for (const Shape& s : strides) {
    plan.outer.push_back(position_offsets(sizes, s, 0, dim));
    plan.inner.push_back(position_offsets(sizes, s, dim + 1, ndim));
  }
  for (size_t k = 0; k < strides.size(); ++k) {
    const std::vector<int64_t>& inner = plan.inner[k];
    int64_t step = inner.size() > 1 ? inner[1] : 1;
    for (size_t i = 0; i < inner.size() && step >= 0; ++i) {
      if (inner[i] != static_cast<int64_t>(i) * step) step = -1;
    }
    plan.operands.push_back({plan.outer[k].data(), inner.data(), strides[k][dim], step});
  }
  return plan;
}

#if EMBER_WITH_CUDA
// Copies the plan's offset tables to `device` and points its operands at the copies, for the
// CUDA kernels; the returned tensor owns the copies (it must outlive the queued kernel, which the
// stream-ordered caching allocator guarantees once it is freed after the launch). Tables the
// kernels can do without (one outer position; an inner run with a step) stay behind as null
// pointers, so embedding and index_select on dim 0 copy nothing to the device.
Tensor move_plan_tables_to(IndexPlan& plan, const Device& device) {
  const bool one_outer = plan.iteration.outer == 1;
  std::vector<int64_t> tables;
  std::vector<std::pair<int64_t, int64_t>> starts;  // (outer, inner) of each operand; -1: none
  for (size_t k = 0; k < plan.operands.size(); ++k) {
    std::pair<int64_t, int64_t> start{-1, -1};
    if (!one_outer) {
      start.first = static_cast<int64_t>(tables.size());
      tables.insert(tables.end(), plan.outer[k].begin(), plan.outer[k].end());
    }
    if (plan.operands[k].inner_step < 0) {
      start.second = static_cast<int64_t>(tables.size());
      tables.insert(tables.end(), plan.inner[k].begin(), plan.inner[k].end());
    }
    starts.push_back(start);
  }
  Tensor on_device;
  const int64_t* base = nullptr;
  if (!tables.empty()) {
    on_device = from_vector(tables, {static_cast<int64_t>(tables.size())},
                            TensorOptions(DType::i64, device));
    base = on_device.data<int64_t>();
  }
  for (size_t k = 0; k < plan.operands.size(); ++k) {
    plan.operands[k].outer_offsets = starts[k].first < 0 ? nullptr : base + starts[k].first;
    plan.operands[k].inner_offsets = starts[k].second < 0 ? nullptr : base + starts[k].second;
  }
  return on_device;
}
#endif

// The strides of a dense 1-D index (k) broadcast over every dim of an `ndim` iteration but `dim`.
Shape broadcast_index_strides(int64_t ndim, int64_t dim) {
  Shape strides(static_cast<size_t>(ndim), 0);
  strides[dim] = 1;
  return strides;
}

// ---- checks ------------------------------------------------------------------------------------

// Every operand on the first one's device.
void check_same_device(const char* op, const Tensor& first,
                       std::initializer_list<const Tensor*> others) {
  for (const Tensor* t : others)
    EMBER_CHECK(t->device() == first.device(), op, ": expected every tensor on ",
                first.device().str(), ", like the input (", describe(first), "), but got ",
                describe(*t), "; move them to one device with .to()");
}

void check_index_dtype(const char* op, const Tensor& index) {
  EMBER_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, op,
              ": expected an index tensor of dtype i64 or i32, got ", describe(index));
}

// Every value of the dense `index` must lie in [0, limit): an error naming the op otherwise.
// On CUDA a small kernel finds the first bad position and the host reads it back (one
// synchronisation per op), so a bad index is an ember error rather than a device-side assert.
void check_indices(const char* op, const Tensor& index, int64_t limit, const char* what) {
  dispatch_index(index.dtype(), op, [&]<typename I>() {
    int64_t bad = -1;
    int64_t value = 0;
    if (index.is_cuda()) {
#if EMBER_WITH_CUDA
      // Positions are below numel(), which a double (item's path) holds exactly: it means none.
      const int64_t none = index.numel();
      Tensor first_bad = scalar_tensor(none, TensorOptions(DType::i64, index.device()));
      kernels::cuda::first_out_of_range<I>(static_cast<const I*>(index.data_ptr()), index.numel(),
                                           limit, first_bad.data<int64_t>(),
                                           cuda::StreamOnDevice(index.device().index));
      const int64_t found = first_bad.item<int64_t>();
      if (found != none) {
        bad = found;
        value = index.reshape({index.numel()}).narrow(0, bad, 1).item<int64_t>();
      }
#endif
    } else {
      const I* values = static_cast<const I*>(index.data_ptr());
      bad = kernels::cpu::first_out_of_range<I>(values, index.numel(), limit);
      if (bad >= 0) value = static_cast<int64_t>(values[bad]);
    }
    EMBER_CHECK(bad < 0, op, ": index ", value, " (at position ", bad,
                " of the index) is out of range for ", what, " of size ", limit,
                "; valid indices are [0, ", limit, ")");
  });
}

// ---- kernel launches (no autograd) -------------------------------------------------------------

// out (sizes) = x gathered along dim at index; index_strides map out's positions to the dense
// index.
void run_gather(const char* op, const Tensor& out, const Tensor& x, const Tensor& index,
                const Shape& index_strides, int64_t dim) {
  if (out.numel() == 0) return;
  IndexPlan plan = plan_indexing(out.sizes(), dim, {out.strides(), x.strides(), index_strides});
  if (out.is_cuda()) {
#if EMBER_WITH_CUDA
    const Tensor tables = move_plan_tables_to(plan, out.device());
    auto launch = [&]<typename T>() {
      dispatch_index(index.dtype(), op, [&]<typename I>() {
        kernels::cuda::gather<T, I>(plan.iteration, static_cast<T*>(out.data_ptr()),
                                    plan.operands[0], static_cast<const T*>(x.data_ptr()),
                                    plan.operands[1], static_cast<const I*>(index.data_ptr()),
                                    plan.operands[2], cuda::StreamOnDevice(out.device().index));
      });
    };
    // A gather only moves elements: one kernel per element width serves every dtype.
    switch (out.element_size()) {
      case 1:
        return launch.template operator()<uint8_t>();
      case 2:
        return launch.template operator()<uint16_t>();
      case 4:
        return launch.template operator()<uint32_t>();
      case 8:
        return launch.template operator()<uint64_t>();
      default:
        EMBER_FAIL(op, ": no CUDA gather for elements of ", out.element_size(), " bytes");
    }
#endif
  }
  dispatch_all(x.dtype(), op, [&]<typename T>() {
    dispatch_index(index.dtype(), op, [&]<typename I>() {
      kernels::cpu::gather<T, I>(plan.iteration, static_cast<T*>(out.data_ptr()), plan.operands[0],
                                 static_cast<const T*>(x.data_ptr()), plan.operands[1],
                                 static_cast<const I*>(index.data_ptr()), plan.operands[2]);
    });
  });
}

// out += src scattered along dim at index, over the iteration `sizes` (src's positions).
void run_scatter_add(const char* op, const Tensor& out, const Tensor& src, const Tensor& index,
                     const Shape& sizes, const Shape& index_strides, int64_t dim) {
  if (shape_numel(sizes) == 0) return;
  IndexPlan plan = plan_indexing(sizes, dim, {out.strides(), src.strides(), index_strides});
  if (out.is_cuda()) {
#if EMBER_WITH_CUDA
    const Tensor tables = move_plan_tables_to(plan, out.device());
    dispatch_numeric(out.dtype(), op, [&]<typename T>() {
      dispatch_index(index.dtype(), op, [&]<typename I>() {
        kernels::cuda::scatter_add<T, I>(plan.iteration, static_cast<T*>(out.data_ptr()),
                                         plan.operands[0], static_cast<const T*>(src.data_ptr()),
                                         plan.operands[1], static_cast<const I*>(index.data_ptr()),
                                         plan.operands[2],
                                         cuda::StreamOnDevice(out.device().index));
      });
    });
    return;
#endif
  }
  dispatch_numeric(out.dtype(), op, [&]<typename T>() {
    dispatch_index(index.dtype(), op, [&]<typename I>() {
      kernels::cpu::scatter_add<T, I>(plan.iteration, static_cast<T*>(out.data_ptr()),
                                      plan.operands[0], static_cast<const T*>(src.data_ptr()),
                                      plan.operands[1], static_cast<const I*>(index.data_ptr()),
                                      plan.operands[2]);
    });
  });
}

// zeros (shape) with src added at the dense 1-D index along dim: the adjoint of index_select.
Tensor index_add_into_zeros(const char* op, const Shape& shape, int64_t dim, const Tensor& index,
                            const Tensor& src) {
  Tensor out = zeros(shape, TensorOptions(src.dtype(), src.device()));
  run_scatter_add(op, out, src, index, src.sizes(), broadcast_index_strides(src.dim(), dim), dim);
  return out;
}

// zeros (shape) with src added at index (index's shape) along dim: the adjoint of gather.
Tensor scatter_add_into_zeros(const char* op, const Shape& shape, int64_t dim, const Tensor& index,
                              const Tensor& src) {
  Tensor out = zeros(shape, TensorOptions(src.dtype(), src.device()));
  run_scatter_add(op, out, src, index, index.sizes(), index.strides(), dim);
  return out;
}

// x gathered at the dense index (index's shape) along dim, into a dense tensor.
Tensor gather_dense(const char* op, const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = empty(index.sizes(), TensorOptions(x.dtype(), x.device()));
  run_gather(op, out, x, index, index.strides(), dim);
  return out;
}

// A tensor of `shape` holding `part` in its leading corner and zeros elsewhere (part is smaller
// or equal in every dim).
Tensor zero_extend(const Tensor& part, const Shape& shape) {
  if (part.sizes() == shape) return part;
  Tensor out = zeros(shape, TensorOptions(part.dtype(), part.device()));
  Tensor corner = out;
  for (int64_t d = 0; d < part.dim(); ++d)
    corner = corner.narrow(d, 0, part.size(d));
  corner.copy_(part);
  return out;
}

}  // namespace

// ---- joining and splitting ---------------------------------------------------------------------

Tensor cat(const std::vector<Tensor>& tensors_in, int64_t dim_in) {
  EMBER_CHECK(!tensors_in.empty(), "cat: expected a non-empty list of tensors");
  const std::vector<Tensor> promoted = autocast_promote(tensors_in);
  // PyTorch's legacy rule: 1-D empty tensors join anything (they are skipped), but still take
  // part in type promotion.
  auto skipped = [](const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; };
  DType dtype = promoted[0].dtype();
  for (size_t k = 1; k < promoted.size(); ++k)
    dtype = promote_types(dtype, promoted[k].dtype());
  int64_t reference = -1;
  for (size_t k = 0; k < promoted.size(); ++k) {
    const Tensor& t = promoted[k];
    EMBER_CHECK(t.dim() > 0, "cat: zero-dimensional tensor (at position ", k,
                ") cannot be concatenated; unsqueeze it or use stack");
    EMBER_CHECK(t.device() == promoted[0].device(),
                "cat: expected all tensors on the same device, but tensor 0 is ",
                describe(promoted[0]), " and tensor ", k, " is ", describe(t));
    if (reference < 0 && !skipped(t)) reference = static_cast<int64_t>(k);
  }
  if (reference < 0) return empty({0}, TensorOptions(dtype, promoted[0].device()));
  const Tensor& first = promoted[reference];
  const int64_t dim = wrap_dim(dim_in, first.dim(), "cat");
  Shape out_shape = first.sizes();
  out_shape[dim] = 0;
  for (size_t k = 0; k < promoted.size(); ++k) {
    const Tensor& t = promoted[k];
    if (skipped(t)) continue;
    EMBER_CHECK(t.dim() == first.dim(), "cat: tensors must have the same number of dims, but ",
                "tensor ", reference, " has shape ", shape_str(first.sizes()), " and tensor ", k,
                " has shape ", shape_str(t.sizes()));
    for (int64_t d = 0; d < t.dim(); ++d) {
      EMBER_CHECK(d == dim || t.size(d) == first.size(d), "cat: sizes of tensors must match ",
                  "except in dim ", dim, ", but tensor ", reference, " has shape ",
                  shape_str(first.sizes()), " and tensor ", k, " has shape ", shape_str(t.sizes()),
                  " (dim ", d, ": ", first.size(d), " vs ", t.size(d), ")");
    }
    out_shape[dim] += t.size(dim);
  }

  std::vector<Tensor> inputs;
  std::vector<int64_t> lengths;
  for (const Tensor& t : promoted) {
    inputs.push_back(t.to(dtype));
    lengths.push_back(skipped(t) ? -1 : t.size(dim));
  }
  Tensor out = empty(out_shape, TensorOptions(dtype, first.device()));
  {
    NoGradGuard no_grad;
    int64_t offset = 0;
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (lengths[k] <= 0) continue;
      out.narrow(dim, offset, lengths[k]).copy_(inputs[k]);
      offset += lengths[k];
    }
  }
  if (any_requires_grad(inputs)) {
    record(OpId::cat, inputs, out, {},
           [dim, lengths](const Tensor& g, const std::vector<Tensor>&) -> std::vector<Tensor> {
             // Each input's gradient is its slice of g.
             std::vector<Tensor> grads;
             int64_t offset = 0;
             for (const int64_t length : lengths) {
               if (length < 0) {
                 grads.push_back(zeros({0}, TensorOptions(g.dtype(), g.device())));
                 continue;
               }
               grads.push_back(g.narrow(dim, offset, length));
               offset += length;
             }
             return grads;
           });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim_in) {
  EMBER_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  const int64_t dim = wrap_dim(dim_in, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> unsqueezed;
  for (size_t k = 0; k < tensors.size(); ++k) {
    EMBER_CHECK(tensors[k].sizes() == tensors[0].sizes(),
                "stack: expected all tensors to have the same shape, but tensor 0 has shape ",
                shape_str(tensors[0].sizes()), " and tensor ", k, " has shape ",
                shape_str(tensors[k].sizes()));
    unsqueezed.push_back(tensors[k].unsqueeze(dim));
  }
  return cat(unsqueezed, dim);
}

namespace {

// split's node, with one output per piece. Its backward writes each piece's gradient into its
// place in one gradient of the input's shape, zeros where a piece got none, as PyTorch's
// SplitBackward does. (Pieces recorded as separate slices would each give a zero-filled gradient
// of the whole input, for the engine to sum.)
class SplitBackward final : public Node {
 public:
  SplitBackward(Shape input_shape, int64_t dim, std::vector<int64_t> lengths)
      : Node(OpId::split),
        input_shape_(std::move(input_shape)),
        dim_(dim),
        lengths_(std::move(lengths)) {}

  uint32_t num_outputs() const override { return static_cast<uint32_t>(lengths_.size()); }

  // The engine calls apply_outputs; one gradient alone is that of a split into one piece.
  std::vector<Tensor> apply(const Tensor& grad_output) override {
    EMBER_CHECK(lengths_.size() == 1, "backward of split: one gradient for ", lengths_.size(),
                " pieces");
    return apply_outputs({grad_output});
  }

  std::vector<Tensor> apply_outputs(const std::vector<Tensor>& grad_outputs) override {
    auto has_gradient = [](const Tensor& g) { return g.defined(); };
    const auto reached = std::find_if(grad_outputs.begin(), grad_outputs.end(), has_gradient);
    EMBER_CHECK(reached != grad_outputs.end(), "backward of split: no piece has a gradient");
    // Where a piece got no gradient, one contiguous fill of zeros beats filling its strided place.
    const bool every_piece = std::all_of(grad_outputs.begin(), grad_outputs.end(), has_gradient);
    const TensorOptions options(reached->dtype(), reached->device());
    Tensor grad = every_piece ? empty(input_shape_, options) : zeros(input_shape_, options);
    int64_t offset = 0;
    for (size_t k = 0; k < lengths_.size(); ++k) {
      if (grad_outputs[k].defined()) grad.narrow(dim_, offset, lengths_[k]).copy_(grad_outputs[k]);
      offset += lengths_[k];
    }
    return {grad};
  }

 private:
  Shape input_shape_;
  int64_t dim_;
  std::vector<int64_t> lengths_;  // of each piece along dim_
};

// Views of x of `lengths` along `dim` (their sum is x's size there), with one node for all.
std::vector<Tensor> split_into(const Tensor& x, int64_t dim, const std::vector<int64_t>& lengths) {
  std::vector<Tensor> pieces;
  {
    NoGradGuard no_grad;  // the pieces' history is the one node below, not a slice each
    int64_t start = 0;
    for (const int64_t length : lengths) {
      pieces.push_back(x.narrow(dim, start, length));
      start += length;
    }
  }
  if (!pieces.empty() && any_requires_grad({&x})) {
    set_history(std::make_shared<SplitBackward>(x.sizes(), dim, lengths), {x}, pieces);
  }
  return pieces;
}

}  // namespace

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim_in) {
  EMBER_CHECK(x.dim() > 0, "split: cannot split a 0-d tensor");
  const int64_t dim = wrap_dim(dim_in, x.dim(), "split");
  const int64_t n = x.size(dim);
  EMBER_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: split_size must be positive",
              " (got ", split_size, " for dim ", dim, " of size ", n, ")");
  std::vector<int64_t> lengths;
  for (int64_t start = 0; start < n; start += split_size)
    lengths.push_back(std::min(split_size, n - start));
  if (n == 0) lengths = {0};
  return split_into(x, dim, lengths);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim_in) {
  EMBER_CHECK(x.dim() > 0, "split: cannot split a 0-d tensor");
  const int64_t dim = wrap_dim(dim_in, x.dim(), "split");
  int64_t total = 0;
  for (const int64_t s : sizes) {
    EMBER_CHECK(s >= 0 && !__builtin_add_overflow(total, s, &total),
                "split: sizes must be non-negative and sum within int64, got ", shape_str(sizes));
  }
  EMBER_CHECK(total == x.size(dim), "split: sizes ", shape_str(sizes), " sum to ", total,
              " but dim ", dim, " of the tensor of shape ", shape_str(x.sizes()), " has size ",
              x.size(dim));
  return split_into(x, dim, sizes);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim_in) {
  EMBER_CHECK(chunks > 0, "chunk: the number of chunks must be positive, got ", chunks);
  EMBER_CHECK(x.dim() > 0, "chunk: cannot chunk a 0-d tensor");
  const int64_t dim = wrap_dim(dim_in, x.dim(), "chunk");
  // torch.chunk: pieces of ceil(n / chunks), so there may be fewer than `chunks` of them.
  const int64_t n = x.size(dim);
  return split(x, n == 0 ? 0 : (n - 1) / chunks + 1, dim);
}

// ---- indexing ----------------------------------------------------------------------------------

Tensor index_select(const Tensor& x, int64_t dim_in, const Tensor& index_in) {
  const char* op = "index_select";
  check_same_device(op, x, {&index_in});
  check_index_dtype(op, index_in);
  EMBER_CHECK(x.dim() > 0, op, ": expected a tensor of at least 1 dim, got ", describe(x));
  EMBER_CHECK(index_in.dim() <= 1, op, ": expected a 1-D index, got ", describe(index_in));
  const int64_t dim = wrap_dim(dim_in, x.dim(), op);
  const Tensor index = index_in.reshape({index_in.numel()}).contiguous();
  check_indices(op, index, x.size(dim), "the selected dim");
  Shape out_shape = x.sizes();
  out_shape[dim] = index.numel();
  Tensor out = empty(out_shape, TensorOptions(x.dtype(), x.device()));
  run_gather(op, out, x, index, broadcast_index_strides(x.dim(), dim), dim);
  if (any_requires_grad({&x})) {
    const Shape in_shape = x.sizes();
    record(OpId::index_select, {x}, out, {index},
           [in_shape, dim](const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             return {index_add_into_zeros("index_select backward", in_shape, dim, s[0], g)};
           });
  }
  return out;
}

Tensor gather(const Tensor& x, int64_t dim_in, const Tensor& index_in) {
  const char* op = "gather";
  check_same_device(op, x, {&index_in});
  check_index_dtype(op, index_in);
  EMBER_CHECK(x.dim() > 0, op, ": expected a tensor of at least 1 dim, got ", describe(x));
  EMBER_CHECK(index_in.dim() == x.dim(), op, ": index must have as many dims as the input, got ",
              "input ", shape_str(x.sizes()), " and index ", shape_str(index_in.sizes()));
  const int64_t dim = wrap_dim(dim_in, x.dim(), op);
  for (int64_t d = 0; d < x.dim(); ++d) {
    EMBER_CHECK(d == dim || index_in.size(d) <= x.size(d), op, ": index of shape ",
                shape_str(index_in.sizes()), " is larger than the input of shape ",
                shape_str(x.sizes()), " in dim ", d, " (only dim ", dim, " may differ)");
  }
  const Tensor index = index_in.contiguous();
  check_indices(op, index, x.size(dim), "the gathered dim");
  Tensor out = gather_dense(op, x, dim, index);
  if (any_requires_grad({&x})) {
    const Shape in_shape = x.sizes();
    record(OpId::gather, {x}, out, {index},
           [in_shape, dim](const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             return {scatter_add_into_zeros("gather backward", in_shape, dim, s[0], g)};
           });
  }
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t dim_in, const Tensor& index_in, const Tensor& src) {
  const char* op = "scatter_add";
  check_same_device(op, x, {&index_in, &src});
  check_index_dtype(op, index_in);
  EMBER_CHECK(x.dtype() == src.dtype(), op, ": expected src of the input's dtype, got input ",
              describe(x), " and src ", describe(src));
  EMBER_CHECK(x.dtype() != DType::boolean, op, ": not supported for bool tensors");
  EMBER_CHECK(x.dim() > 0, op, ": expected a tensor of at least 1 dim, got ", describe(x));
  EMBER_CHECK(index_in.dim() == x.dim() && src.dim() == x.dim(), op,
              ": input, index and src must have the same number of dims, got input ",
              shape_str(x.sizes()), ", index ", shape_str(index_in.sizes()), " and src ",
              shape_str(src.sizes()));
  const int64_t dim = wrap_dim(dim_in, x.dim(), op);
  for (int64_t d = 0; d < x.dim(); ++d) {
    EMBER_CHECK(index_in.size(d) <= src.size(d) && (d == dim || index_in.size(d) <= x.size(d)), op,
                ": index of shape ", shape_str(index_in.sizes()), " must be no larger than src ",
                shape_str(src.sizes()), " in every dim, and no larger than the input ",
                shape_str(x.sizes()), " in every dim but ", dim, " (dim ", d, " is too large)");
  }
  const Tensor index = index_in.contiguous();
  check_indices(op, index, x.size(dim), "the scattered dim");
  Tensor out;
  {
    NoGradGuard no_grad;  // the clone is part of this op, not a node of its own
    out = x.clone();
    run_scatter_add(op, out, src, index, index.sizes(), index.strides(), dim);
  }
  if (any_requires_grad({&x, &src})) {
    const Shape src_shape = src.sizes();
    record(OpId::scatter_add, {x, src}, out, {index},
           [dim, src_shape](const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             // src's elements outside index's shape never reach the output: gradient zero.
             const Tensor grad_src = gather_dense("scatter_add backward", g, dim, s[0]);
             return {g, zero_extend(grad_src, src_shape)};
           });
  }
  return out;
}

// ---- padding and embedding ---------------------------------------------------------------------

Tensor pad(const Tensor& x, const std::vector<int64_t>& padding, double value) {
  EMBER_CHECK(padding.size() % 2 == 0, "pad: padding must have an even number of entries ",
              "({left, right} per dim, last dim first), got ", shape_str(padding));
  const int64_t padded_dims = static_cast<int64_t>(padding.size()) / 2;
  EMBER_CHECK(padded_dims <= x.dim(), "pad: padding ", shape_str(padding), " covers ", padded_dims,
              " dims but the input of shape ", shape_str(x.sizes()), " has only ", x.dim());
  // Per dim: where the kept part of x starts in x and in the output, and its length.
  Shape out_shape = x.sizes();
  std::vector<int64_t> in_start(x.dim(), 0), out_start(x.dim(), 0), kept(x.sizes());
  bool crops = false;
  for (int64_t k = 0; k < padded_dims; ++k) {
    const int64_t d = x.dim() - 1 - k;
    const int64_t before = padding[2 * k], after = padding[2 * k + 1];
    const int64_t n = x.size(d);
    EMBER_CHECK(before >= -n && after >= -n, "pad: padding ", shape_str(padding), " of dim ", d,
                " of size ", n, " crops more than the dim holds");
    EMBER_CHECK(!__builtin_add_overflow(n, before, &out_shape[d]) &&
                    !__builtin_add_overflow(out_shape[d], after, &out_shape[d]),
                "pad: padding ", shape_str(padding), " of dim ", d, " of size ", n,
                " overflows int64");
    EMBER_CHECK(out_shape[d] >= 0, "pad: padding ", shape_str(padding), " of dim ", d, " of size ",
                n, " gives a negative size ", out_shape[d]);
    in_start[d] = std::max<int64_t>(0, -before);
    out_start[d] = std::max<int64_t>(0, before);
    kept[d] = std::max<int64_t>(0, n - in_start[d] - std::max<int64_t>(0, -after));
    crops = crops || before < 0 || after < 0;
  }
  auto region = [](Tensor t, const std::vector<int64_t>& start, const std::vector<int64_t>& len) {
    for (size_t d = 0; d < start.size(); ++d)
      t = t.narrow(static_cast<int64_t>(d), start[d], len[d]);
    return t;
  };
  Tensor out = full(out_shape, value, TensorOptions(x.dtype(), x.device()));
  {
    NoGradGuard no_grad;
    if (shape_numel(kept) > 0) region(out, out_start, kept).copy_(region(x, in_start, kept));
  }
  if (any_requires_grad({&x})) {
    const Shape in_shape = x.sizes();
    record(OpId::pad, {x}, out, {},
           [=](const Tensor& g, const std::vector<Tensor>&) -> std::vector<Tensor> {
             // The gradient is g cropped back; cropped-away input elements get zero.
             const Tensor inner = region(g, out_start, kept);
             if (!crops) return {inner};
             Tensor grad = zeros(in_shape, TensorOptions(g.dtype(), g.device()));
             if (shape_numel(kept) > 0) region(grad, in_start, kept).copy_(inner);
             return {grad};
           });
  }
  return out;
}

void embedding_renorm_(Tensor& weight, const Tensor& indices, double max_norm, double norm_type) {
  const char* op = "embedding_renorm_";
  check_same_device(op, weight, {&indices});
  check_index_dtype(op, indices);
  EMBER_CHECK(weight.dim() == 2 && is_floating(weight.dtype()), op,
              ": expected a floating-point weight of shape (num_embeddings, dim), got ",
              describe(weight));
  EMBER_CHECK(std::isfinite(max_norm) && max_norm >= 0.0, op,
              ": max_norm must be a finite number >= 0, got ", max_norm);
  const int64_t vocabulary = weight.size(0);
  const Tensor flat = indices.reshape({indices.numel()}).contiguous().to(DType::i64);
  check_indices(op, flat, vocabulary, "the embedding table (num_embeddings)");
  NoGradGuard no_grad;
  const TensorOptions counting(DType::f32, weight.device());
  const Tensor uses =
      scatter_add(zeros({vocabulary}, counting), 0, flat, ones({flat.numel()}, counting));
  const Tensor norms = norm(weight, norm_type, {1}, true);                     // (V, 1)
  const Tensor too_long = mul(gt(uses, 0).unsqueeze(1), gt(norms, max_norm));  // named and too long
  weight.mul_(where(too_long, max_norm / (norms + 1e-7), 1.0));
}

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx,
                 std::optional<double> max_norm, double norm_type) {
  const char* op = "embedding";
  if (max_norm) {
    Tensor table = weight;  // the same storage: renormalised in place, as PyTorch's
    embedding_renorm_(table, indices, *max_norm, norm_type);
  }
  check_same_device(op, weight, {&indices});
  check_index_dtype(op, indices);
  EMBER_CHECK(weight.dim() == 2, op, ": expected a weight of shape (num_embeddings, dim), got ",
              describe(weight));
  const int64_t vocabulary = weight.size(0), width = weight.size(1);
  if (padding_idx) {
    EMBER_CHECK(*padding_idx >= -vocabulary && *padding_idx < vocabulary, op, ": padding_idx ",
                *padding_idx, " is outside the embedding table of ", vocabulary,
                " rows (expected -", vocabulary, " <= padding_idx < ", vocabulary, ")");
    if (*padding_idx < 0) *padding_idx += vocabulary;
  }
  // indices (...) -> flat (K); out (K, D) viewed as (..., D).
  const Tensor flat = indices.reshape({indices.numel()}).contiguous();
  check_indices(op, flat, vocabulary, "the embedding table (num_embeddings)");
  Shape out_shape = indices.sizes();
  out_shape.push_back(width);
  Tensor rows = empty({flat.numel(), width}, TensorOptions(weight.dtype(), weight.device()));
  run_gather(op, rows, weight, flat, broadcast_index_strides(2, 0), 0);
  Tensor out = rows.view(out_shape);
  if (any_requires_grad({&weight})) {
    record(
        OpId::embedding, {weight}, out, {flat},
        [vocabulary, width, padding_idx](const Tensor& g,
                                         const std::vector<Tensor>& s) -> std::vector<Tensor> {
          // Rows picked several times sum their gradients; padding positions add nothing (not
          // even a NaN or inf of theirs, as PyTorch's embedding_backward skips them).
          Tensor g_rows = g.reshape({s[0].numel(), width});
          if (padding_idx) {
            const Tensor is_padding = eq(s[0], *padding_idx).unsqueeze(1);  // (K, 1)
            g_rows = where(is_padding, zeros_like(g_rows), g_rows);
          }
          return {index_add_into_zeros("embedding backward", {vocabulary, width}, 0, s[0], g_rows)};
        });
  }
  return out;
}

}  // namespace ember
