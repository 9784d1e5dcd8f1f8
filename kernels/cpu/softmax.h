// CPU softmax and log-softmax along the middle dim of a dense (outer, dim, inner) array.
//
//   in (outer, dim, inner) -> out (outer, dim, inner)
//
// Stable: each line's max is subtracted before exponentiating. One fused pass set per line (max,
// sum of exponentials, write) over cache-resident rows; f16/bf16 compute in f32.
#pragma once

#include <cstdint>

#include "kernels/common/scalar_types.h"

namespace ember::kernels::cpu {

// log = false: out = exp(x - max) / sum(exp(x - max)); log = true: out = x - logsumexp(x).
template <typename T>
void softmax(const T* in, T* out, int64_t outer, int64_t dim, int64_t inner, bool log);

// From the forward output y and the incoming gradient g (same layout):
//   softmax:     grad_in = y * (g - sum(g * y))
//   log_softmax: grad_in = g - exp(y) * sum(g)
template <typename T>
void softmax_backward(const T* grad_out, const T* out, T* grad_in, int64_t outer, int64_t dim,
                      int64_t inner, bool log);

}  // namespace ember::kernels::cpu
