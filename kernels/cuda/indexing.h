// CUDA gather / scatter-add along one dim of strided operands: kernels/cpu/indexing.h on the GPU,
// queued on `stream`, with the same (outer, along, inner) iteration and IndexedOperand plans; the
// plans' offset tables (outer_offsets, inner_offsets) must be device pointers. outer_offsets may
// be null when iteration.outer == 1, and inner_offsets when the operand's inner_step >= 0: the
// common embedding / index_select (dim 0) case then needs no table on the device.
//
//   index_select: x (outer, n, inner), index (k) broadcast -> out (outer, k, inner)
//   gather:       x (..., n, ...), index (..., k, ...)     -> out (..., k, ...)
//   scatter_add:  out (..., n, ...) += src (..., k, ...) at index (..., k, ...)
//
// Index values are trusted by gather and scatter_add: the runtime checks them first with
// first_out_of_range.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cpu/indexing.h"

namespace ember::kernels::cuda {

// out(o, j, i) = x(o, index(o, j, i), i). A gather only moves elements, so it is instantiated per
// element width: T is uint8_t, uint16_t, uint32_t or uint64_t (any dtype of that size).
template <typename T, typename I>
void gather(const cpu::IndexIteration& iteration, T* out, const cpu::IndexedOperand& out_at,
            const T* x, const cpu::IndexedOperand& x_at, const I* index,
            const cpu::IndexedOperand& index_at, cudaStream_t stream);

// out(o, index(o, j, i), i) += src(o, j, i), for T in f32, f64, f16, bf16, i32, i64, u8.
//
// One thread per source element and an atomic add (f16 and bf16 with the 16-bit atomics of sm_70
// and sm_80, rounding once per add as the CPU does): the embedding backward has few columns and
// many rows, and a thread per column walking the rows in order (the CPU's deterministic scheme)
// would leave most of the GPU idle and run a long serial chain. The price is that the order of
// the adds, so the last bits of a float sum where indices repeat, can change from run to run.
// u8 has no byte atomic: it takes the CPU's scheme (a thread per (o, i) column, j in order).
template <typename T, typename I>
void scatter_add(const cpu::IndexIteration& iteration, T* out, const cpu::IndexedOperand& out_at,
                 const T* src, const cpu::IndexedOperand& src_at, const I* index,
                 const cpu::IndexedOperand& index_at, cudaStream_t stream);

// *first_bad (i64, set to count by the caller) becomes the smallest position of the dense
// index (count) whose value lies outside [0, limit), if any. The caller reads it back: one host
// synchronisation, which buys an ember error naming the op instead of a device-side assert.
template <typename I>
void first_out_of_range(const I* index, int64_t count, int64_t limit, int64_t* first_bad,
                        cudaStream_t stream);

}  // namespace ember::kernels::cuda
