#include "kernels/cpu/convert_runs.h"

#include "kernels/cpu/vector_math.h"

namespace ember::kernels::cpu {

// The loops work on the raw 16-bit patterns: scalar_types.h's conversions are branch-free, and
// on uint16_t arrays (rather than the wrapper structs) GCC vectorises them in each clone.

EMBER_CLONE_FOR_SIMD void widen_to_f32(const BFloat16* src, float* dst, int64_t n) {
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i)
    dst[i] = detail::bfloat16_bits_to_float(bits[i]);
}

EMBER_CLONE_FOR_SIMD void narrow_from_f32(const float* src, BFloat16* dst, int64_t n) {
  uint16_t* bits = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i)
    bits[i] = detail::float_to_bfloat16_bits(src[i]);
}

// binary16 has branches (subnormals, Inf/NaN): these stay element-wise conversions, in a clone.
EMBER_CLONE_FOR_SIMD void widen_to_f32(const Half* src, float* dst, int64_t n) {
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i)
    dst[i] = detail::half_bits_to_float(bits[i]);
}

EMBER_CLONE_FOR_SIMD void narrow_from_f32(const float* src, Half* dst, int64_t n) {
  uint16_t* bits = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i)
    bits[i] = detail::float_to_half_bits(src[i]);
}

}  // namespace ember::kernels::cpu
