// Reductions over any set of dims (empty = all dims), with keepdim. 16-bit floats accumulate in
// f32.
#pragma once

#include <optional>
#include <vector>

#include "runtime/tensor.h"

namespace ember {

using Dims = std::vector<int64_t>;

// Integer and bool inputs sum to i64, as in PyTorch; `dtype` (optional) overrides the result.
Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
// Largest / smallest value over dims (torch.amax / amin); NaN propagates. The gradient goes to
// the arg-extreme elements, split evenly between ties. Where the result is NaN: without dims
// (torch.max(x)) the NaN elements share the gradient; with dims (torch.amax) the slice gets NaN.
Tensor max(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor min(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
// Index (i64) of the first largest value along dim, or into the flattened tensor when no dim.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
// torch.max(x, dim) / torch.min(x, dim): the extreme value along dim and its index (i64), the
// first one as argmax (a NaN wins). The gradient goes to that one element only, as PyTorch's
// (amax above splits it between ties).
struct ValuesAndIndices {
  Tensor values;
  Tensor indices;
};
ValuesAndIndices max_with_indices(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesAndIndices min_with_indices(const Tensor& x, int64_t dim, bool keepdim = false);
// Variance with Bessel's correction by default (correction = 1), as torch.var.
Tensor var(const Tensor& x, const Dims& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Dims& dims = {}, int64_t correction = 1, bool keepdim = false);
// log(sum(exp(x))) over dims, computed stably.
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim = false);
// The p-norm over dims (p = 2: Euclidean; p = 1; p = inf: max |x|).
Tensor norm(const Tensor& x, double p = 2.0, const Dims& dims = {}, bool keepdim = false);

}  // namespace ember
