// a + b, a - b, a * b and -a in T's own width, shared by the CPU and CUDA kernels. Signed integers
// wrap as two's complement (i32 2147483647 + 1 is -2147483648, what PyTorch's kernels give)
// through unsigned arithmetic, which is defined to wrap: signed overflow itself is undefined in
// C++, and an optimiser may assume it never happens. Floating types and unsigned integers use the
// plain operators (for 8- and 16-bit integers C++ computes in int, and the cast back wraps).
#pragma once

#include <type_traits>

#include "kernels/common/scalar_types.h"

namespace ember::kernels {

template <typename T>
inline constexpr bool kWrapsThroughUnsigned =
    std::is_integral_v<T>&& std::is_signed_v<T> && !std::is_same_v<T, bool>;

template <typename T>
EMBER_HOST_DEVICE T wrapping_add(T a, T b) {
  if constexpr (kWrapsThroughUnsigned<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return static_cast<T>(a + b);
  }
}

template <typename T>
EMBER_HOST_DEVICE T wrapping_sub(T a, T b) {
  if constexpr (kWrapsThroughUnsigned<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
  } else {
    return static_cast<T>(a - b);
  }
}

template <typename T>
EMBER_HOST_DEVICE T wrapping_mul(T a, T b) {
  if constexpr (kWrapsThroughUnsigned<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return static_cast<T>(a * b);
  }
}

template <typename T>
EMBER_HOST_DEVICE T wrapping_neg(T a) {
  if constexpr (kWrapsThroughUnsigned<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(U(0) - static_cast<U>(a)));
  } else {
    return static_cast<T>(-a);
  }
}

}  // namespace ember::kernels
