// Shape arithmetic shared by the ops: broadcasting, and the StridedLayout handed to kernels.
#pragma once

#include <vector>

#include "kernels/common/strided_layout.h"
#include "runtime/tensor.h"

namespace ember {

// The shape `a` and `b` broadcast to; an error naming `op` if they cannot.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// The layout of an elementwise op writing `out` from `inputs`, each input broadcast to out's
// shape (an input whose shape does not broadcast is an error naming `op`). Dims of size 1 are
// dropped and mergeable neighbours merged, so dense operands become one flat run.
kernels::StridedLayout make_layout(const Tensor& out, const std::vector<const Tensor*>& inputs,
                                   const char* op);

// The same for operands given as (shape, strides) pairs over one iteration shape.
kernels::StridedLayout make_layout(const Shape& shape, const std::vector<const Shape*>& strides);

}  // namespace ember
