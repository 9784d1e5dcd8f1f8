// CPU gather / scatter-add along one dim of strided operands.
//
// The runtime views every indexing op as an iteration (outer, along, inner) around the indexed
// dim: outer = the dims before it, inner = the dims after it. Each operand says where element
// (o, j, i) lives through an IndexedOperand, so non-contiguous operands need no copy and an index
// can be broadcast (offsets of 0) over the dims it does not have:
//
//   index_select: x (outer, n, inner), index (k) broadcast -> out (outer, k, inner)
//   gather:       x (..., n, ...), index (..., k, ...)     -> out (..., k, ...)
//   scatter_add:  out (..., n, ...) += src (..., k, ...) at index (..., k, ...)
//
// Index values are trusted here: the runtime checks them first with first_out_of_range.
#pragma once

#include <cstdint>

namespace ember::kernels::cpu {

// Element (o, j, i) of an operand is at outer_offsets[o] + j * along_stride + inner_offsets[i].
struct IndexedOperand {
  const int64_t* outer_offsets = nullptr;  // (outer)
  const int64_t* inner_offsets = nullptr;  // (inner)
  int64_t along_stride = 0;
  // When inner_offsets[i] == i * inner_step for every i (a dense run: 1; a broadcast index: 0),
  // the kernels take a loop the compiler can vectorise; -1 otherwise.
  int64_t inner_step = -1;
};

struct IndexIteration {
  int64_t outer = 1;
  int64_t along = 1;  // positions of the index along the indexed dim
  int64_t inner = 1;
};

// out(o, j, i) = x(o, index(o, j, i), i): x's along_stride steps over the indexed dim.
template <typename T, typename I>
void gather(const IndexIteration& iteration, T* out, const IndexedOperand& out_at, const T* x,
            const IndexedOperand& x_at, const I* index, const IndexedOperand& index_at);

// out(o, index(o, j, i), i) += src(o, j, i). Deterministic: every output element is summed by one
// thread, in increasing j. 16-bit floats add in f32 and round once per add.
template <typename T, typename I>
void scatter_add(const IndexIteration& iteration, T* out, const IndexedOperand& out_at,
                 const T* src, const IndexedOperand& src_at, const I* index,
                 const IndexedOperand& index_at);

// The position of the first value of index (count, dense) outside [0, limit), or -1.
template <typename I>
int64_t first_out_of_range(const I* index, int64_t count, int64_t limit);

}  // namespace ember::kernels::cpu
