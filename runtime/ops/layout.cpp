#include "runtime/ops/layout.h"

#include <algorithm>

namespace ember {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t ndim = std::max(a.size(), b.size());
  Shape out(ndim);
  for (size_t i = 0; i < ndim; ++i) {
    const int64_t sa = i < ndim - a.size() ? 1 : a[i - (ndim - a.size())];
    const int64_t sb = i < ndim - b.size() ? 1 : b[i - (ndim - b.size())];
    EMBER_CHECK(sa == sb || sa == 1 || sb == 1, op, ": shapes ", shape_str(a), " and ",
                shape_str(b), " cannot be broadcast together (dim ", i, ": ", sa, " vs ", sb, ")");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

kernels::StridedLayout make_layout(const Shape& shape, const std::vector<const Shape*>& strides) {
  kernels::StridedLayout layout;
  layout.num_operands = static_cast<int>(strides.size());
  EMBER_CHECK(layout.num_operands <= kernels::kMaxOperands, "too many operands for one kernel");
  // Keep dims of size > 1, outermost first.
  int ndim = 0;
  int64_t dims_sizes[64];
  int64_t dims_strides[kernels::kMaxOperands][64];
  EMBER_CHECK(shape.size() <= 64, "tensors of more than 64 dims are not supported");
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    dims_sizes[ndim] = shape[d];
    for (int k = 0; k < layout.num_operands; ++k)
      dims_strides[k][ndim] = (*strides[k])[d];
    ++ndim;
  }
  // Merge an outer dim into the inner one when every operand steps over the inner one exactly.
  int merged = 0;
  for (int d = 0; d < ndim; ++d) {
    if (merged > 0) {
      bool mergeable = true;
      for (int k = 0; k < layout.num_operands; ++k) {
        mergeable =
            mergeable && layout.strides[k][merged - 1] == dims_strides[k][d] * dims_sizes[d];
      }
      if (mergeable) {
        layout.sizes[merged - 1] *= dims_sizes[d];
        for (int k = 0; k < layout.num_operands; ++k)
          layout.strides[k][merged - 1] = dims_strides[k][d];
        continue;
      }
    }
    EMBER_CHECK(merged < kernels::kMaxDims, "elementwise op over a layout of more than ",
                kernels::kMaxDims, " non-mergeable dims is not supported");
    layout.sizes[merged] = dims_sizes[d];
    for (int k = 0; k < layout.num_operands; ++k)
      layout.strides[k][merged] = dims_strides[k][d];
    ++merged;
  }
  layout.ndim = merged;
  if (merged == 0 && shape_numel(shape) == 0) {
    // Keep the emptiness visible: one dim of size 0.
    layout.ndim = 1;
    layout.sizes[0] = 0;
  }
  return layout;
}

kernels::StridedLayout make_layout(const Tensor& out, const std::vector<const Tensor*>& inputs,
                                   const char* op) {
  const Shape& shape = out.sizes();
  std::vector<Shape> strides;
  strides.reserve(inputs.size() + 1);
  strides.push_back(out.strides());
  for (const Tensor* input : inputs) {
    const Shape& in_shape = input->sizes();
    EMBER_CHECK(in_shape.size() <= shape.size(), op, ": input of shape ", shape_str(in_shape),
                " cannot broadcast to the output shape ", shape_str(shape));
    const size_t lead = shape.size() - in_shape.size();
    Shape s(shape.size(), 0);
    for (size_t d = 0; d < in_shape.size(); ++d) {
      const int64_t want = shape[lead + d];
      EMBER_CHECK(in_shape[d] == want || in_shape[d] == 1, op, ": input of shape ",
                  shape_str(in_shape), " cannot broadcast to the output shape ", shape_str(shape));
      s[lead + d] = in_shape[d] == 1 ? 0 : input->strides()[d];
    }
    strides.push_back(std::move(s));
  }
  std::vector<const Shape*> pointers;
  for (const Shape& s : strides)
    pointers.push_back(&s);
  return make_layout(shape, pointers);
}

}  // namespace ember
