// Joining, splitting, indexing and padding.
#pragma once

#include <optional>

#include <vector>

#include "runtime/tensor.h"

namespace ember {

// Tensors of equal shape except along `dim`; dtypes promote as PyTorch's cat.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Tensors of equal shape, joined along a new dim.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Views of x: pieces of `split_size` along dim (the last may be smaller), or of the given sizes.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
// `chunks` views of (nearly) equal size along dim, as torch.chunk.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// index (k) of i64/i32: x (..., n, ...) -> (..., k, ...) along dim.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j] = x[i][index[i][j]] (dim 1), as torch.gather; index has x's rank.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// A copy of x with src added at index along dim, as torch.scatter_add.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

// Constant padding in torch.nn.functional.pad order: {left, right} of the last dim, then
// {top, bottom} of the one before, ... Negative amounts crop.
Tensor pad(const Tensor& x, const std::vector<int64_t>& padding, double value = 0.0);

// indices (...) of i64/i32 into weight (V, D) -> (..., D); as torch.nn.functional.embedding.
// Positions holding padding_idx (negative: counted from V) read their row but send it no gradient.
// With max_norm, the rows that indices name are first renormalised in place (embedding_renorm_).
Tensor embedding(const Tensor& indices, const Tensor& weight,
                 std::optional<int64_t> padding_idx = std::nullopt,
                 std::optional<double> max_norm = std::nullopt, double norm_type = 2.0);
// In place and outside autograd, as torch.embedding_renorm_: every row of weight (V, D) that
// indices name and whose norm_type-norm exceeds max_norm is scaled by max_norm / (norm + 1e-7).
// It reads every row's norm (V D work), not only the named rows'.
void embedding_renorm_(Tensor& weight, const Tensor& indices, double max_norm,
                       double norm_type = 2.0);

}  // namespace ember
