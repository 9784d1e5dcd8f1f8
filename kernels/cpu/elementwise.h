// CPU elementwise kernels on strided operands.
//
// Each takes a StridedLayout over its operands (out first) built by the runtime; a layout whose
// operands are all dense runs the flat loop the compiler vectorises. 16-bit floats compute in f32.
#pragma once

#include <cstdint>

#include "kernels/common/op_kinds.h"
#include "kernels/common/strided_layout.h"

namespace ember::kernels::cpu {

// out = op(in); operands {out, in}. `scalar` is pow_scalar's exponent.
template <typename T>
void unary(UnaryOp op, const StridedLayout& layout, T* out, const T* in, double scalar);

// out = op(a, b); operands {out, a, b}. `alpha` scales b for add and sub.
template <typename T>
void binary(BinaryOp op, const StridedLayout& layout, T* out, const T* a, const T* b, double alpha);

// out = a <op> b as bool; operands {out, a, b}.
template <typename T>
void compare(CompareOp op, const StridedLayout& layout, bool* out, const T* a, const T* b);

// out = in, converted from Src to Dst (round to nearest even into f16/bf16); operands {out, in}.
template <typename Dst, typename Src>
void copy(const StridedLayout& layout, Dst* out, const Src* in);

// out = value; operands {out}.
template <typename T>
void fill(const StridedLayout& layout, T* out, T value);

// out = cond ? a : b; operands {out, cond, a, b}.
template <typename T>
void where(const StridedLayout& layout, T* out, const bool* cond, const T* a, const T* b);

}  // namespace ember::kernels::cpu
