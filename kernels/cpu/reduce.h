// CPU reductions over the middle dim of a dense (outer, reduce, inner) array.
//
//   in (outer, reduce, inner) -> out (outer, inner)
//
// The runtime brings any reduction to this form (permuting and copying only when it must).
// Accumulation: f32 for f32/f16/bf16 (in blocks summed in f64, so long rows stay accurate),
// f64 for f64, i64 for integers.
#pragma once

#include <cstdint>

#include "kernels/common/scalar_types.h"

namespace ember::kernels::cpu {

// The element type a sum of T is stored in: integers widen to i64, floats keep their type.
template <typename T>
struct SumOutput {
  using type = T;
};
template <>
struct SumOutput<int32_t> {
  using type = int64_t;
};
template <>
struct SumOutput<uint8_t> {
  using type = int64_t;
};
template <>
struct SumOutput<bool> {
  using type = int64_t;
};
template <typename T>
using sum_output_t = typename SumOutput<T>::type;

template <typename T>
void sum(const T* in, sum_output_t<T>* out, int64_t outer, int64_t reduce, int64_t inner);

}  // namespace ember::kernels::cpu
