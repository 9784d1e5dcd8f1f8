// Reductions over any set of dims (empty = all dims), with keepdim. 16-bit floats accumulate in
// f32.
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace ember {

using Dims = std::vector<int64_t>;

// Integer and bool inputs sum to i64, as in PyTorch; `dtype` (optional) overrides the result.
Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);

}  // namespace ember
