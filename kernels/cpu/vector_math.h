// SIMD helpers for the CPU kernels: math functions written so that loops calling them vectorise
// (no branches, no libm calls), and per-ISA clones of hot loops. Internal to kernels/cpu.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

// EMBER_CLONE_FOR_SIMD on a function compiles it for AVX-512 and AVX2 as well as the baseline
// and picks one at load time: the build targets plain x86-64. Helpers it calls must be
// always_inline to be compiled into each clone. ThreadSanitizer builds go without: the resolver
// that picks a clone runs during relocation, before TSan has started, and its instrumented code
// crashes.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_THREAD__)
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

// tanh(x) in f32, within ~2e-7 relative: Cephes' odd polynomial for |x| < 0.625 (where the
// exp form below would cancel), 1 - 2 / (exp(2|x|) + 1) with x's sign above. Saturates to +-1
// (exp overflows to inf), keeps +-0 and NaN.
[[gnu::always_inline]] inline float tanh_vectorisable(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float large_abs = 1.0f - 2.0f / (exp_vectorisable(2.0f * ax) + 1.0f);
  const float large = x < 0.0f ? -large_abs : large_abs;
  return ax < 0.625f ? small : large;
}

[[gnu::always_inline]] inline double tanh_vectorisable(double x) {
  return std::tanh(x);
}

// 1 / (1 + exp(-x)): 0 at -inf (exp overflows to inf), 1 at +inf, NaN stays NaN.
[[gnu::always_inline]] inline float sigmoid_vectorisable(float x) {
  return 1.0f / (1.0f + exp_vectorisable(-x));
}

[[gnu::always_inline]] inline double sigmoid_vectorisable(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// GELU's tanh approximation 0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3). In f32 it is
// written x * sigmoid(2z), the same function, which keeps its relative accuracy for negative x
// where 1 + tanh(z) would cancel. f64 keeps the textbook form on libm.
inline constexpr double kGeluTanhScale = 0.79788456080286535588;  // sqrt(2 / pi)
inline constexpr double kGeluTanhCubic = 0.044715;

[[gnu::always_inline]] inline float gelu_tanh_vectorisable(float x) {
  const float z =
      static_cast<float>(kGeluTanhScale) * (x + static_cast<float>(kGeluTanhCubic) * x * x * x);
  return x * sigmoid_vectorisable(2.0f * z);
}

[[gnu::always_inline]] inline double gelu_tanh_vectorisable(double x) {
  const double inner = kGeluTanhScale * (x + kGeluTanhCubic * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(inner));
}

}  // namespace ember::kernels::cpu

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
