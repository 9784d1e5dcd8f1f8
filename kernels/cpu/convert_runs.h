// Dense runs of 16-bit floats widened to f32 and narrowed back, compiled for AVX-512 and AVX2 as
// well as the baseline. The CPU's 16-bit kernels do their arithmetic in f32: converting a row
// into an f32 buffer first lets the arithmetic loop be the same vectorised loop as the f32
// kernel's, instead of a loop that converts element by element on the baseline ISA.
// Internal to kernels/cpu.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/common/scalar_types.h"

namespace ember::kernels::cpu {

// src (n) -> dst (n) f32, exact.
void widen_to_f32(const BFloat16* src, float* dst, int64_t n);
void widen_to_f32(const Half* src, float* dst, int64_t n);
// src (n) f32 -> dst (n), rounded to nearest even (NaN stays NaN), bit for bit as convert<T>.
void narrow_from_f32(const float* src, BFloat16* dst, int64_t n);
void narrow_from_f32(const float* src, Half* dst, int64_t n);

// The binary16 loops this CPU can run, best first (the one widen_to_f32 and narrow_from_f32 use):
// "avx512" (F, BW and VL), "f16c" (x86's conversion instructions), "scalar". Tests check each.
struct HalfConversionLoops {
  const char* name;
  void (*widen)(const uint16_t* src, float* dst, int64_t n);
  void (*narrow)(const float* src, uint16_t* dst, int64_t n);
};
const std::vector<HalfConversionLoops>& half_conversion_loops();

inline void widen_to_f32(const float* src, float* dst, int64_t n) {
  if (src != dst) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
inline void narrow_from_f32(const float* src, float* dst, int64_t n) {
  if (src != dst) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// A dense run of T seen as acc_t<T> values (f32 for the 16-bit floats): the run itself when T is
// its own accumulation type, else `buffer` filled with the widened run.
template <typename T, typename Acc = acc_t<T>>
const Acc* accumulate_run(const T* src, Acc* buffer, int64_t n) {
  if constexpr (std::is_same_v<T, Acc>) {
    return src;
  } else {
    widen_to_f32(src, buffer, n);
    return buffer;
  }
}

// Where an acc_t<T> result for a dense run of T is written (the run itself when T is its own
// accumulation type, else `buffer`), and store_accumulated to narrow it into the run after (a
// no-op in the first case).
template <typename T, typename Acc = acc_t<T>>
Acc* accumulate_destination(T* dst, Acc* buffer) {
  if constexpr (std::is_same_v<T, Acc>) {
    return dst;
  } else {
    return buffer;
  }
}
template <typename T, typename Acc = acc_t<T>>
void store_accumulated(const Acc* result, T* dst, int64_t n) {
  if constexpr (!std::is_same_v<T, Acc>) narrow_from_f32(result, dst, n);
}

// dst (n) = scratch (n) + *bias (bias null: none), in T. For 16-bit T the bias is added into
// `scratch` (a workspace the caller rewrites anyway) and the run narrowed in one pass.
template <typename T, typename Acc = acc_t<T>>
void store_plus_bias(Acc* scratch, const Acc* bias, T* dst, int64_t n) {
  const Acc add = bias != nullptr ? *bias : Acc(0);
  if constexpr (std::is_same_v<T, Acc>) {
    for (int64_t i = 0; i < n; ++i)
      dst[i] = scratch[i] + add;
  } else {
    if (bias != nullptr)
      for (int64_t i = 0; i < n; ++i)
        scratch[i] += add;
    narrow_from_f32(scratch, dst, n);
  }
}

}  // namespace ember::kernels::cpu
