// CUDA elementwise kernels on strided operands: the same ops and semantics as
// kernels/cpu/elementwise.h, queued on `stream`.
//
// Each takes a StridedLayout over its operands (out first) built by the runtime. A grid-stride
// loop turns each linear index into every operand's offset; a layout whose operands are all dense
// skips that arithmetic. 16-bit floats compute in f32, like the CPU kernels.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/op_kinds.h"
#include "kernels/common/strided_layout.h"

namespace ember::kernels::cuda {

// out = op(in); operands {out, in}. `scalar` is pow_scalar's exponent.
template <typename T>
void unary(UnaryOp op, const StridedLayout& layout, T* out, const T* in, double scalar,
           cudaStream_t stream);

// out = op(a, b); operands {out, a, b}. `alpha` scales b for add and sub.
template <typename T>
void binary(BinaryOp op, const StridedLayout& layout, T* out, const T* a, const T* b, double alpha,
            cudaStream_t stream);

// out = a <op> b as bool; operands {out, a, b}.
template <typename T>
void compare(CompareOp op, const StridedLayout& layout, bool* out, const T* a, const T* b,
             cudaStream_t stream);

// out = in, converted from Src to Dst (round to nearest even into f16/bf16); operands {out, in}.
template <typename Dst, typename Src>
void copy(const StridedLayout& layout, Dst* out, const Src* in, cudaStream_t stream);

// out = value; operands {out}.
template <typename T>
void fill(const StridedLayout& layout, T* out, T value, cudaStream_t stream);

// out = cond ? a : b; operands {out, cond, a, b}.
template <typename T>
void where(const StridedLayout& layout, T* out, const bool* cond, const T* a, const T* b,
           cudaStream_t stream);

}  // namespace ember::kernels::cuda
