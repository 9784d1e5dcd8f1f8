// Mixed-precision helpers for the gradient scaler.
//
//   grad (n) in {f32, f16, bf16} -> grad * inv_scale in place; returns whether any element of the
//   scaled or unscaled gradient is Inf or NaN.
//
// One pass does both jobs (PyTorch's _amp_foreach_non_finite_check_and_unscale_), so a step reads
// every gradient once. The check looks at the input value: an overflowed f16 gradient is Inf before
// and after the multiply.
#pragma once

#include <cstdint>

#include "kernels/common/scalar_types.h"

namespace ember::kernels::cpu {

template <typename T>
bool amp_unscale_and_check(T* grad, int64_t n, float inv_scale);

}  // namespace ember::kernels::cpu
