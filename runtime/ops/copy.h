// Copies and conversions, which everything that changes a tensor's dtype or device is built from.
// All accept non-contiguous inputs; the results are contiguous.
#pragma once

#include "runtime/tensor.h"

namespace ember {

Tensor to_dtype(const Tensor& x, DType dtype);  // differentiable
// differentiable; non_blocking: see Tensor::to
Tensor to_device(const Tensor& x, const Device& device, bool non_blocking = false);
Tensor clone(const Tensor& x);                   // a contiguous copy; differentiable
void copy_into(Tensor& dst, const Tensor& src);  // dst's shape; broadcasts; no autograd
void fill_into(Tensor& dst, const Scalar& value);

}  // namespace ember
