// StridedLayout: how the operands of an elementwise kernel walk memory.
//
// Every operand shares one iteration shape `sizes` (ndim <= kMaxDims, innermost last); operand k
// steps `strides[k][d]` elements along dim d (0 for a broadcast dim). Runtime code builds it with
// dims of size 1 dropped and neighbouring dims merged wherever every operand allows, so a
// contiguous tensor is a single dim and kernels can take their flat fast path.
#pragma once

#include <cstdint>

namespace ember::kernels {

inline constexpr int kMaxDims = 12;
inline constexpr int kMaxOperands = 4;

struct StridedLayout {
  int ndim = 0;
  int num_operands = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d)
      n *= sizes[d];
    return n;
  }
  // True when every operand is dense and in order (stride 1 along a single dim), or empty.
  bool is_flat() const {
    if (ndim == 0) return true;
    if (ndim != 1) return false;
    for (int k = 0; k < num_operands; ++k) {
      if (strides[k][0] != 1) return false;
    }
    return true;
  }
};

}  // namespace ember::kernels
