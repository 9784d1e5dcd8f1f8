#include "kernels/cpu/convert_runs.h"

#include "kernels/cpu/vector_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define EMBER_HAVE_F16C_LOOPS 1
#else
#define EMBER_HAVE_F16C_LOOPS 0
#endif

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

// binary16 has branches (subnormals, Inf/NaN) that GCC does not vectorise; x86 has instructions
// for it instead (F16C: vcvtph2ps and vcvtps2ph, 8 lanes with AVX, 16 with AVX-512), which give
// scalar_types.h's bits exactly (round to nearest even, NaNs quieted). The loops below are
// picked once, by what the CPU has.

namespace {

void widen_half_scalar(const uint16_t* bits, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = detail::half_bits_to_float(bits[i]);
}

void narrow_half_scalar(const float* src, uint16_t* bits, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    bits[i] = detail::float_to_half_bits(src[i]);
}

#if EMBER_HAVE_F16C_LOOPS
constexpr int kRoundToNearestEven = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
// The masked forms with every lane on: the unmasked intrinsics start from an undefined register,
// which GCC 12 reports as maybe-uninitialized.
constexpr __mmask16 kAllLanes = 0xffff;

__attribute__((target("avx512f"))) void widen_half_avx512(const uint16_t* bits, float* dst,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + i));
    _mm512_storeu_ps(dst + i, _mm512_maskz_cvtph_ps(kAllLanes, half));
  }
  widen_half_scalar(bits + i, dst + i, n - i);
}

__attribute__((target("avx512f"))) void narrow_half_avx512(const float* src, uint16_t* bits,
                                                           int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i half =
        _mm512_maskz_cvtps_ph(kAllLanes, _mm512_loadu_ps(src + i), kRoundToNearestEven);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bits + i), half);
  }
  narrow_half_scalar(src + i, bits + i, n - i);
}

__attribute__((target("avx,f16c"))) void widen_half_f16c(const uint16_t* bits, float* dst,
                                                         int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bits + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(half));
  }
  widen_half_scalar(bits + i, dst + i, n - i);
}

__attribute__((target("avx,f16c"))) void narrow_half_f16c(const float* src, uint16_t* bits,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kRoundToNearestEven);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(bits + i), half);
  }
  narrow_half_scalar(src + i, bits + i, n - i);
}
#endif

// Best first.
std::vector<HalfConversionLoops> available_half_loops() {
  std::vector<HalfConversionLoops> loops;
#if EMBER_HAVE_F16C_LOOPS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f"))
    loops.push_back({"avx512f", widen_half_avx512, narrow_half_avx512});
  if (__builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c"))
    loops.push_back({"f16c", widen_half_f16c, narrow_half_f16c});
#endif
  loops.push_back({"scalar", widen_half_scalar, narrow_half_scalar});
  return loops;
}

const HalfConversionLoops& best_half_loops() {
  static const HalfConversionLoops best = available_half_loops().front();
  return best;
}

}  // namespace

const std::vector<HalfConversionLoops>& half_conversion_loops() {
  static const std::vector<HalfConversionLoops> loops = available_half_loops();
  return loops;
}

void widen_to_f32(const Half* src, float* dst, int64_t n) {
  best_half_loops().widen(reinterpret_cast<const uint16_t*>(src), dst, n);
}

void narrow_from_f32(const float* src, Half* dst, int64_t n) {
  best_half_loops().narrow(src, reinterpret_cast<uint16_t*>(dst), n);
}

}  // namespace ember::kernels::cpu
