// Brings any reduction to the (outer, reduce, inner) form the kernels take.
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace ember {

struct ReductionPlan {
  Tensor input;         // dense; viewed as (leading, outer, reduce, inner), dims 0 and 2 reduced
  int64_t leading = 1;  // other than 1 only where plan_reduction was allowed it
  int64_t outer = 1;
  int64_t reduce = 1;
  int64_t inner = 1;
  std::vector<bool> reduced;  // per input dim
  Shape out_shape;            // the result's shape (keepdim applied)
  Shape keepdim_shape;  // the result's shape with reduced dims kept as 1 (for broadcasting back)
};

// `dims` empty means every dim. A contiguous input whose reduced dims are adjacent is used as it
// is; so is one whose reduced dims are a leading run and one more (NCHW's (0, 2, 3)) where the
// caller's kernel takes a leading reduced dim (`leading_allowed`); otherwise the reduced dims are
// permuted last and the input copied once.
ReductionPlan plan_reduction(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                             const char* op, bool leading_allowed = false);

// The values each result is reduced over.
inline int64_t reduced_count(const ReductionPlan& plan) {
  return plan.leading * plan.reduce;
}

}  // namespace ember
