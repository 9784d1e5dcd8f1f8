// Whether a layout may take the vectorised row path of the CUDA elementwise loop
// (strided_loop.cuh), as plain C++: the launch asks it on the host, and the tests ask it on
// machines without a GPU (tests/cuda/row_vector_plan_test.cpp).
//
//   out (N, C, H, W) = x (N, C, H, W) + bias (1, C, 1, 1)
//   -> layout sizes [N, C, H*W], strides out and x [C*H*W, H*W, 1], bias [0, 1, 0]
//
// The innermost dim is the row (H*W elements here). A packet is kVector (W) consecutive elements
// of the iteration: linear indices p*W .. p*W + W - 1. When the row holds a whole number of
// packets, no packet crosses from one row into the next, so inside a packet every operand steps
// by its innermost stride. The path takes layouts where that stride is 1 for some operands
// (dense along the row: one Packet load or store, out and x above) and 0 for the others
// (broadcast along the row: one element used for all W lanes, the bias above). A dense operand's
// packets all start on a W-element boundary when its base pointer does and its outer strides are
// multiples of W (then each row starts on one, and a row is whole packets).
//
// The walk from a packet's first element to the operands' offsets is the 32-bit one
// (strided_offsets_32): the layout must have fewer than 2^31 elements.
//
// A flat layout (every operand dense along one dim) is not the row path's: it takes the flat
// vector path, or the scalar one when misaligned.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/common/fast_divider.h"
#include "kernels/common/strided_layout.h"

namespace ember::kernels::cuda {

// Whether `pointer` may be read as Packet<T, W>s (W elements of T as one aligned access,
// strided_loop.cuh) starting at element 0.
template <int W, typename T>
inline bool packet_aligned(const T* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % (sizeof(T) * W) == 0;
}

// Bit k set when the k-th pointer is packet_aligned<W>: a body's aligned_operands(), its operands
// in order (the output first).
template <int W, typename... Ts>
inline uint32_t packet_aligned_operands(const Ts*... pointers) {
  uint32_t bits = 0;
  int k = 0;
  ((bits |= (packet_aligned<W>(pointers) ? uint32_t{1} << k : 0u), ++k), ...);
  return bits;
}

struct RowVectorPlan {
  bool usable = false;
  uint32_t row_broadcast = 0;  // bit k: operand k's innermost stride is 0
};

// `vector_width`: W, the body's kVector. `aligned_operands`: bit k set when operand k's base
// pointer is aligned to W elements of its type (packet_aligned). Operand 0 is the output: it must
// be dense along the row (an output broadcast along it would write one element W times).
inline RowVectorPlan plan_row_vectors(const StridedLayout& layout, int vector_width,
                                      uint32_t aligned_operands) {
  const RowVectorPlan unusable;
  if (vector_width <= 1 || layout.ndim < 1 || layout.is_flat()) return unusable;
  const int64_t numel = layout.numel();
  if (numel <= 0 || numel > kFastDivisionLimit) return unusable;
  const int inner = layout.ndim - 1;
  if (layout.sizes[inner] % vector_width != 0) return unusable;
  if (layout.strides[0][inner] != 1) return unusable;

  RowVectorPlan plan;
  for (int k = 0; k < layout.num_operands; ++k) {
    const int64_t row_stride = layout.strides[k][inner];
    if (row_stride == 0) {
      plan.row_broadcast |= uint32_t{1} << k;
      continue;
    }
    if (row_stride != 1) return unusable;
    if ((aligned_operands >> k & 1u) == 0) return unusable;
    for (int d = 0; d < inner; ++d) {
      if (layout.strides[k][d] % vector_width != 0) return unusable;
    }
  }
  plan.usable = true;
  return plan;
}

}  // namespace ember::kernels::cuda
