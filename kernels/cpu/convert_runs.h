// Dense runs of 16-bit floats widened to f32 and narrowed back, compiled for AVX-512 and AVX2 as
// well as the baseline. The CPU's 16-bit kernels do their arithmetic in f32: converting a row
// into an f32 buffer first lets the arithmetic loop be the same vectorised loop as the f32
// kernel's, instead of a loop that converts element by element on the baseline ISA.
// Internal to kernels/cpu.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/scalar_types.h"

namespace ember::kernels::cpu {

// src (n) -> dst (n) f32, exact.
void widen_to_f32(const BFloat16* src, float* dst, int64_t n);
void widen_to_f32(const Half* src, float* dst, int64_t n);
// src (n) f32 -> dst (n), rounded to nearest even (NaN stays NaN), bit for bit as convert<T>.
void narrow_from_f32(const float* src, BFloat16* dst, int64_t n);
void narrow_from_f32(const float* src, Half* dst, int64_t n);

inline void widen_to_f32(const float* src, float* dst, int64_t n) {
  if (src != dst) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
inline void narrow_from_f32(const float* src, float* dst, int64_t n) {
  if (src != dst) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// An f32 view of a dense run of T: for f32 the run itself, otherwise `buffer` filled with it.
template <typename T>
const float* as_f32(const T* src, float* buffer, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return src;
  } else {
    widen_to_f32(src, buffer, n);
    return buffer;
  }
}

// Where an f32 result for a dense run of T is written: T's run itself for f32, else `buffer`
// (to be narrowed into the run with narrow_from_f32 after).
template <typename T>
float* f32_destination(T* dst, float* buffer) {
  if constexpr (std::is_same_v<T, float>) {
    return dst;
  } else {
    return buffer;
  }
}

}  // namespace ember::kernels::cpu
