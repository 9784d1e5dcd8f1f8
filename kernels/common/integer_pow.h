// base^exponent in an integer type, as PyTorch computes it for integer tensors: by repeated
// squaring, wrapping on overflow as the type's own multiplications would (3^21 in i32 is
// 1870418611), and for a negative exponent the integer part of the exact result: 1 for base 1,
// +-1 for base -1, 0 otherwise. (std::pow through double, then a cast back, is undefined once the
// result leaves the type's range.) Shared by the CPU and CUDA kernels.
#pragma once

#include <type_traits>

#include "kernels/common/scalar_types.h"

namespace ember::kernels {

template <typename I>
EMBER_HOST_DEVICE I integer_pow(I base, I exponent) {
  static_assert(std::is_integral_v<I>, "integer_pow: an integer type");
  if constexpr (std::is_signed_v<I>) {
    if (exponent < 0) {
      if (base == 1) return I(1);
      if (base == -1) return exponent % 2 == 0 ? I(1) : I(-1);
      return I(0);
    }
  }
  // Unsigned arithmetic wraps by definition; the cast back gives the two's-complement value.
  using U = std::make_unsigned_t<I>;
  U result = 1, square = static_cast<U>(base);
  for (U remaining = static_cast<U>(exponent); remaining != 0; remaining >>= 1) {
    if (remaining & 1U) result = static_cast<U>(result * square);
    square = static_cast<U>(square * square);
  }
  return static_cast<I>(result);
}

}  // namespace ember::kernels
