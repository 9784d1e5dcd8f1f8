// Half (IEEE binary16) and BFloat16 (bfloat16) storage types with bit-exact conversions.
//
// Both are 2-byte structs holding raw bits; arithmetic happens in float. Conversions from float
// round to nearest even, keep ±Inf, keep NaN (and its payload where it fits), and produce
// subnormals exactly, so every one of the 65,536 bit patterns survives a round trip through float
// (binary16's signalling NaNs come back quiet: see below). The same code runs on the host and in
// CUDA kernels.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define EMBER_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define EMBER_HOST_DEVICE [[gnu::always_inline]] inline
#endif

namespace ember {

namespace detail {

EMBER_HOST_DEVICE uint32_t float_bits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
#endif
}

EMBER_HOST_DEVICE float bits_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

// binary16 conversions quiet a NaN as IEEE 754 asks of a format conversion, and as x86's F16C
// instructions (vcvtph2ps, vcvtps2ph) do: the quiet bit is set, the rest of the payload kept
// (truncated to 9 bits going to binary16). The CPU's vectorised runs use those instructions and
// must give these bits (tests/runtime/convert_runs_test.cpp).

// cond ? a : b as bit masks. The two conversions below compute every candidate and keep one, so
// that loops converting element by element vectorise: with `?:` GCC moves each candidate's float
// arithmetic into a branch of its own, which (floating point possibly trapping) it then cannot
// turn back into a vector select.
EMBER_HOST_DEVICE uint32_t select_bits(bool cond, uint32_t a, uint32_t b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return (a & mask) | (b & ~mask);
}

// float -> binary16, round to nearest even: the host's code, and the reference that the device's
// one-instruction conversion below must match bit for bit (tests/cuda/cuda_test.cpp).
EMBER_HOST_DEVICE uint16_t portable_float_to_half_bits(float value) {
  const uint32_t all_bits = float_bits(value);
  const uint32_t sign = (all_bits >> 16) & 0x8000u;
  const uint32_t bits = all_bits & 0x7fffffffu;
  const uint32_t nan = sign | 0x7e00u | ((bits >> 13) & 0x1ffu);  // quiet, payload kept
  const uint32_t inf = sign | 0x7c00u;
  // Below the smallest normal half (2^-14): adding 0.5 puts the float's last mantissa bit at
  // 2^-24, the half subnormal step, so the FPU's own round-to-nearest-even does the rounding.
  const uint32_t subnormal = sign | (float_bits(bits_float(bits) + 0.5f) - 0x3f000000u);
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  const uint32_t normal = sign | ((bits + 0xc8000fffu + ((bits >> 13) & 1u)) >> 13);
  // >= 65520 (Inf included) rounds to Inf.
  const uint32_t finite = select_bits(bits < 0x38800000u, subnormal, normal);
  return static_cast<uint16_t>(
      select_bits(bits > 0x7f800000u, nan, select_bits(bits >= 0x477ff000u, inf, finite)));
}

// binary16 -> float, exact: the host's code, and the device's reference, as above.
EMBER_HOST_DEVICE float portable_half_bits_to_float(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  const uint32_t quiet = select_bits(mantissa != 0, 0x00400000u, 0u);  // Inf keeps mantissa 0
  const uint32_t inf_or_nan = sign | 0x7f800000u | quiet | (mantissa << 13);
  // Zero or subnormal: mantissa * 2^-24 is exact in float (converted as signed: SSE2 has that).
  const float magnitude =
      static_cast<float>(static_cast<int32_t>(mantissa)) * 5.9604644775390625e-8f;
  const uint32_t subnormal = sign | float_bits(magnitude);
  const uint32_t normal = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  return bits_float(
      select_bits(exponent == 0x1fu, inf_or_nan, select_bits(exponent == 0, subnormal, normal)));
}

// The conversions every Half goes through. On the device, the hardware's cvt instruction does
// the work: the portable code above is some twenty integer operations a conversion, which made
// every f16 kernel that reads or writes memory compute-bound (the f16 training step was 2.7 ms
// slower than the bf16 one on an H200, 2026-11-28). cvt.rn.f16.f32 rounds to nearest even,
// makes subnormals and overflows to Inf as IEEE 754 does, and cvt.f32.f16 is exact; only a NaN
// differs (the hardware may return its canonical NaN), so a NaN takes the portable code's bits,
// which keep the payload as the host (and x86's F16C) does.
EMBER_HOST_DEVICE uint16_t float_to_half_bits(float value) {
#if defined(__CUDA_ARCH__)
  uint16_t converted;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(converted) : "f"(value));
  const uint32_t bits = float_bits(value);
  const uint32_t nan = ((bits >> 16) & 0x8000u) | 0x7e00u | ((bits >> 13) & 0x1ffu);
  return (bits & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>(nan) : converted;
#else
  return portable_float_to_half_bits(value);
#endif
}

// The float bits of a binary16 NaN, as the portable code makes them (sign, quiet bit, the 10
// payload bits at the top of the float's mantissa), in three operations: shifted left by 16, the
// half's sign is the float's, and an arithmetic shift right by 3 puts its exponent and payload in
// place, spreading the sign over bits the OR sets anyway. Only for NaNs (checked on the host for
// every one: tests/runtime/scalar_types_test.cpp).
EMBER_HOST_DEVICE uint32_t half_nan_to_float_bits(uint16_t half) {
  const int32_t moved = static_cast<int32_t>(static_cast<uint32_t>(half) << 16) >> 3;
  return static_cast<uint32_t>(moved) | 0x7fc00000u;
}

EMBER_HOST_DEVICE float half_bits_to_float(uint16_t half) {
#if defined(__CUDA_ARCH__)
  float converted;
  asm("cvt.f32.f16 %0, %1;" : "=f"(converted) : "h"(half));
  // cvt makes a NaN of a NaN (and of nothing else), perhaps its canonical one.
  return converted != converted ? bits_float(half_nan_to_float_bits(half)) : converted;
#else
  return portable_half_bits_to_float(half);
#endif
}

// float -> bfloat16, round to nearest even. Written with selects rather than an early return,
// so that loops over it vectorise (the 16-bit paths of the CPU kernels convert every element).
EMBER_HOST_DEVICE uint16_t float_to_bfloat16_bits(float value) {
  const uint32_t bits = float_bits(value);
  // NaN: truncate, and keep it a NaN when the truncated mantissa would be zero.
  const uint16_t upper = static_cast<uint16_t>(bits >> 16);
  const uint16_t nan = (upper & 0x7fu) == 0 ? static_cast<uint16_t>(upper | 0x40u) : upper;
  const uint32_t odd = (bits >> 16) & 1u;
  const uint16_t rounded = static_cast<uint16_t>((bits + 0x7fffu + odd) >> 16);
  return (bits & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
}

EMBER_HOST_DEVICE float bfloat16_bits_to_float(uint16_t value) {
  return bits_float(static_cast<uint32_t>(value) << 16);
}

// NaN tests on two 16-bit values at once, one in each half of `pair` (the CUDA kernels' packet
// conversions, kernels/cuda/convert_values.cuh). A lane's magnitude (its low 15 bits) is above
// the Inf pattern exactly when adding (Inf's pattern's complement within 15 bits) carries into
// the lane's bit 15; at most 0x7fff + 0x03ff = 0x83fe, so no lane carries into the next. Nonzero
// when either lane is a NaN; callers OR several pairs' results and test once.
EMBER_HOST_DEVICE uint32_t half_pair_nan_lanes(uint32_t pair) {
  return ((pair & 0x7fff7fffu) + 0x03ff03ffu) & 0x80008000u;  // NaN: magnitude > 0x7c00
}

EMBER_HOST_DEVICE uint32_t bfloat16_pair_nan_lanes(uint32_t pair) {
  return ((pair & 0x7fff7fffu) + 0x007f007fu) & 0x80008000u;  // NaN: magnitude > 0x7f80
}

}  // namespace detail

struct alignas(2) Half {
  uint16_t bits = 0;

  Half() = default;
  EMBER_HOST_DEVICE Half(float value) : bits(detail::float_to_half_bits(value)) {}       // NOLINT
  EMBER_HOST_DEVICE operator float() const { return detail::half_bits_to_float(bits); }  // NOLINT
  EMBER_HOST_DEVICE static Half from_bits(uint16_t raw) {
    Half h;
    h.bits = raw;
    return h;
  }
};

struct alignas(2) BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  EMBER_HOST_DEVICE BFloat16(float value)  // NOLINT
      : bits(detail::float_to_bfloat16_bits(value)) {}
  EMBER_HOST_DEVICE operator float() const {  // NOLINT
    return detail::bfloat16_bits_to_float(bits);
  }
  EMBER_HOST_DEVICE static BFloat16 from_bits(uint16_t raw) {
    BFloat16 b;
    b.bits = raw;
    return b;
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

// The type arithmetic on T happens in: float for the 16-bit floats, T itself otherwise.
template <typename T>
struct AccumulateTypeOf {
  using type = T;
};
template <>
struct AccumulateTypeOf<Half> {
  using type = float;
};
template <>
struct AccumulateTypeOf<BFloat16> {
  using type = float;
};
template <typename T>
using acc_t = typename AccumulateTypeOf<T>::type;

}  // namespace ember

// The element types of ember's dtypes, for explicit instantiations: M(T) for each of them.
// One list, so a kernel file cannot forget a dtype that runtime/dispatch.h may ask for.
#define EMBER_FOR_EACH_NUMERIC_TYPE(M) \
  M(float) M(double) M(Half) M(BFloat16) M(int32_t) M(int64_t) M(uint8_t)
#define EMBER_FOR_EACH_ELEMENT_TYPE(M) EMBER_FOR_EACH_NUMERIC_TYPE(M) M(bool)
