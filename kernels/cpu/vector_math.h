// SIMD helpers for the CPU kernels: math functions written so that loops calling them vectorise
// (no branches, no libm calls), and per-ISA clones of hot loops. Internal to kernels/cpu.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

// EMBER_CLONE_FOR_SIMD on a function compiles it for AVX-512 and AVX2 as well as the baseline
// and picks one at load time: the build targets plain x86-64. Helpers it calls must be
// always_inline to be compiled into each clone.
#if defined(__x86_64__) && defined(__GNUC__)
#define EMBER_CLONE_FOR_SIMD __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define EMBER_CLONE_FOR_SIMD
#endif

// The selects below must become vector blends, which GCC only does when floating-point
// comparisons are not treated as trapping. ember never reads the FP exception flags; files whose
// loops call these functions use EMBER_NO_TRAPPING_MATH too, so that they inline.
// (Clang if-converts these selects by itself and has no such pragma.)
#if defined(__GNUC__) && !defined(__clang__)
#define EMBER_NO_TRAPPING_MATH _Pragma("GCC optimize(\"no-trapping-math\")")
#pragma GCC push_options
#else
#define EMBER_NO_TRAPPING_MATH
#endif
EMBER_NO_TRAPPING_MATH

namespace ember::kernels::cpu {

// exp(x) in f32, within 2 ulp (Cephes' expf): x = n ln2 + f with |f| <= ln2 / 2, a degree-6
// polynomial for exp(f), and 2^n built in the exponent bits. Results below ~1e-38 flush to 0
// (so exp(-inf) is exactly 0, which masked softmax rows rely on); NaN stays NaN.
[[gnu::always_inline]] inline float exp_vectorisable(float x) {
  const bool underflow = x < -87.33654f;
  const bool overflow = x > 88.72283f;
  float clamped = x < -87.33654f ? -87.33654f : x;
  clamped = clamped > 88.3762626647949f ? 88.3762626647949f : clamped;
  // Round to nearest by the 1.5 * 2^23 trick (exact for |t| < 2^22).
  const float t = clamped * 1.44269504088896341f;
  const float n = (t + 12582912.0f) - 12582912.0f;
  float f = clamped - n * 0.693359375f;
  f = f - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * f + 1.3981999507e-3f;
  p = p * f + 8.3334519073e-3f;
  p = p * f + 4.1665795894e-2f;
  p = p * f + 1.6666665459e-1f;
  p = p * f + 5.0000001201e-1f;
  p = p * f * f + f + 1.0f;
  const float n_finite = n == n ? n : 0.0f;  // a NaN input must not reach the int conversion
  const int32_t exponent = (static_cast<int32_t>(n_finite) + 127) << 23;
  const float result = p * __builtin_bit_cast(float, exponent);
  const float big = overflow ? std::numeric_limits<float>::infinity() : result;
  return underflow ? 0.0f : big;
}

// f64 keeps libm's exp: it is the reference precision (gradient checks), not the fast path.
[[gnu::always_inline]] inline double exp_vectorisable(double x) {
  return std::exp(x);
}

}  // namespace ember::kernels::cpu

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
