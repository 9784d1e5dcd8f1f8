#include "kernels/cpu/convert_runs.h"

#include "kernels/cpu/vector_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define EMBER_HAVE_F16C_LOOPS 1
// GCC 12's AVX-512 intrinsics start from an undefined register that it then reports as
// maybe-uninitialized (GCC bug 105593, fixed in 13).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
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

namespace {

EMBER_CLONE_FOR_SIMD void narrow_bfloat16_cloned(const float* src, uint16_t* bits, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    bits[i] = detail::float_to_bfloat16_bits(src[i]);
}

#if EMBER_HAVE_F16C_LOOPS
// The AVX-512 loops below need BW and VL besides F for their tails: the last 1 to 15 elements
// are loaded and stored with masks (16-bit lanes), not left to a scalar loop. Feature maps of
// 7, 14 or 28 columns are mostly tail.
#define EMBER_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))

bool cpu_has_avx512_for_loops() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

// The lanes [0, n) of 16, for n < 16.
EMBER_AVX512_TARGET __mmask16 first_lanes(int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}

// float_to_bfloat16_bits on 16 lanes. GCC's own vectorisation of the loop above, in 256-bit
// halves with packs and byte blends, runs about 40 instructions per 16 elements; this is 11.
EMBER_AVX512_TARGET __m256i bfloat16_bits_of(__m512 values) {
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i low_mantissa = _mm512_set1_epi32(0x7f), quiet = _mm512_set1_epi32(0x40);
  const __m512i x = _mm512_castps_si512(values);
  const __m512i upper = _mm512_srli_epi32(x, 16);
  const __m512i odd = _mm512_and_si512(upper, one);
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(bias, odd)), 16);
  // NaN: truncated, and kept a NaN when the truncated mantissa would be zero.
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, magnitude), inf);
  const __mmask16 emptied = _mm512_testn_epi32_mask(upper, low_mantissa);
  const __m512i nan_bits = _mm512_mask_or_epi32(upper, emptied, upper, quiet);
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, nan_bits));
}

EMBER_AVX512_TARGET void narrow_bfloat16_avx512(const float* src, uint16_t* bits, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bits + i),
                        bfloat16_bits_of(_mm512_loadu_ps(src + i)));
  if (i < n) {
    const __mmask16 lanes = first_lanes(n - i);
    _mm256_mask_storeu_epi16(bits + i, lanes,
                             bfloat16_bits_of(_mm512_maskz_loadu_ps(lanes, src + i)));
  }
}
#endif

using NarrowBFloat16 = void (*)(const float*, uint16_t*, int64_t);

NarrowBFloat16 pick_narrow_bfloat16() {
#if EMBER_HAVE_F16C_LOOPS
  if (cpu_has_avx512_for_loops()) return narrow_bfloat16_avx512;
#endif
  return narrow_bfloat16_cloned;
}

}  // namespace

void narrow_from_f32(const float* src, BFloat16* dst, int64_t n) {
  static const NarrowBFloat16 narrow = pick_narrow_bfloat16();
  narrow(src, reinterpret_cast<uint16_t*>(dst), n);
}

// binary16's subnormals, Inf and NaN make scalar_types.h's conversions long chains of bit-mask
// selects: GCC vectorises loops over them, but they run 3 to 7 times slower than x86's instructions
// for it (F16C: vcvtph2ps and vcvtps2ph, 8 lanes with AVX, 16 with AVX-512), which give
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

EMBER_AVX512_TARGET void widen_half_avx512(const uint16_t* bits, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(half));
  }
  if (i < n) {
    const __mmask16 lanes = first_lanes(n - i);
    _mm512_mask_storeu_ps(dst + i, lanes,
                          _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lanes, bits + i)));
  }
}

EMBER_AVX512_TARGET void narrow_half_avx512(const float* src, uint16_t* bits, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i half = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), kRoundToNearestEven);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bits + i), half);
  }
  if (i < n) {
    const __mmask16 lanes = first_lanes(n - i);
    const __m512 values = _mm512_maskz_loadu_ps(lanes, src + i);
    _mm256_mask_storeu_epi16(bits + i, lanes, _mm512_cvtps_ph(values, kRoundToNearestEven));
  }
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

// CPUID leaf 1, ECX bit 29: not every compiler's __builtin_cpu_supports knows "f16c" (clang 14
// does not).
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

// Best first.
std::vector<HalfConversionLoops> available_half_loops() {
  std::vector<HalfConversionLoops> loops;
#if EMBER_HAVE_F16C_LOOPS
  if (cpu_has_avx512_for_loops())
    loops.push_back({"avx512", widen_half_avx512, narrow_half_avx512});
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx") && cpu_has_f16c())
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
