// convert<Dst>(value): the one conversion between any two element types ember stores.
// 16-bit floats go through f32 (so Half -> BFloat16 rounds once, from the exact f32 value);
// anything to bool is "not zero".
#pragma once

#include <type_traits>

#include "kernels/common/scalar_types.h"

namespace ember {

template <typename T>
inline constexpr bool is_reduced_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename Dst, typename Src>
EMBER_HOST_DEVICE Dst convert(Src value) {
  if constexpr (std::is_same_v<Dst, Src>) {
    return value;
  } else if constexpr (is_reduced_float_v<Src>) {
    return convert<Dst>(static_cast<float>(value));
  } else if constexpr (std::is_same_v<Dst, bool>) {
    return value != Src(0);
  } else if constexpr (is_reduced_float_v<Dst>) {
    return Dst(static_cast<float>(value));
  } else {
    return static_cast<Dst>(value);
  }
}

}  // namespace ember
