// Math on the type a kernel computes in (acc_t<T>: float, double or an integer), mirroring what
// the CPU kernels get from <cmath>: float calls the f32 function, double the f64 one, and an
// integer goes through double (std::exp(int) is a double on the CPU too).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

namespace ember::kernels::cuda::device_math {

#define EMBER_DEVICE_MATH_1(name, float_fn, double_fn)            \
  template <typename Acc>                                         \
  __device__ __forceinline__ Acc name(Acc x) {                    \
    if constexpr (std::is_same_v<Acc, float>) {                   \
      return float_fn(x);                                         \
    } else if constexpr (std::is_same_v<Acc, double>) {           \
      return double_fn(x);                                        \
    } else {                                                      \
      return static_cast<Acc>(double_fn(static_cast<double>(x))); \
    }                                                             \
  }

EMBER_DEVICE_MATH_1(exp, ::expf, ::exp)
EMBER_DEVICE_MATH_1(log, ::logf, ::log)
EMBER_DEVICE_MATH_1(sqrt, ::sqrtf, ::sqrt)
EMBER_DEVICE_MATH_1(sin, ::sinf, ::sin)
EMBER_DEVICE_MATH_1(cos, ::cosf, ::cos)
EMBER_DEVICE_MATH_1(tanh, ::tanhf, ::tanh)
EMBER_DEVICE_MATH_1(erf, ::erff, ::erf)
EMBER_DEVICE_MATH_1(erfc, ::erfcf, ::erfc)
EMBER_DEVICE_MATH_1(log1p, ::log1pf, ::log1p)
EMBER_DEVICE_MATH_1(expm1, ::expm1f, ::expm1)
#undef EMBER_DEVICE_MATH_1

template <typename Acc>
__device__ __forceinline__ Acc pow(Acc x, Acc y) {
  if constexpr (std::is_same_v<Acc, float>) {
    return ::powf(x, y);
  } else if constexpr (std::is_same_v<Acc, double>) {
    return ::pow(x, y);
  } else {
    return static_cast<Acc>(::pow(static_cast<double>(x), static_cast<double>(y)));
  }
}

// Spelled out so that unsigned types do not compare with 0 (a warning in nvcc).
template <typename Acc>
__device__ __forceinline__ bool is_negative(Acc x) {
  if constexpr (std::is_unsigned_v<Acc>) {
    return false;
  } else {
    return x < Acc(0);
  }
}

template <typename Acc>
__device__ __forceinline__ bool is_nan(Acc x) {
  if constexpr (std::is_floating_point_v<Acc>) {
    return x != x;
  } else {
    return false;
  }
}

}  // namespace ember::kernels::cuda::device_math
