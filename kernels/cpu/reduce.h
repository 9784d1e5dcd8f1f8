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
// in (leading, outer, reduce, inner) -> out (outer, inner): the sum over dims 0 and 2, reading
// in once (a per-channel sum of NCHW is (N, C, H W, 1)). Accumulation as sum's.
template <typename T>
void sum_leading(const T* in, sum_output_t<T>* out, int64_t leading, int64_t outer, int64_t reduce,
                 int64_t inner);

// ---- kernels/cpu/reduce_stats.cpp: every type below but the integers computes in acc_t<T> ----

// Largest / smallest value of each line (reduce >= 1); a NaN anywhere in a line is its result.
// All numeric dtypes.
template <typename T>
void amax(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner);
template <typename T>
void amin(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner);

// Index along `reduce` of the first largest / smallest value (reduce >= 1); NaN counts as both
// the largest and the smallest, so the first NaN wins. All numeric dtypes.
template <typename T>
void argmax(const T* in, int64_t* out, int64_t outer, int64_t reduce, int64_t inner);
template <typename T>
void argmin(const T* in, int64_t* out, int64_t outer, int64_t reduce, int64_t inner);

// The floating-point statistics below take f32, f64, f16 and bf16.
// sum((x - mean)^2) / (reduce - correction), two passes (the mean first) for accuracy; a divisor
// <= 0 gives inf or NaN, as torch.var.
template <typename T>
void variance(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner,
              int64_t correction);
// log(sum(exp(x))) = m + log(sum(exp(x - m))) with m the line's max (0 when m is infinite).
template <typename T>
void logsumexp(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner);
// (sum |x|^p)^(1/p); p = inf: max |x|; p = -inf: min |x|; p = 0: the count of non-zeros.
template <typename T>
void norm(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner, double p);

}  // namespace ember::kernels::cpu
