// convert_values(in, out): out[j] = convert<Dst>(in[j]) for the W values of one vectorised load
// or store, with the bits of the element-by-element conversion, in fewer instructions.
//
//   float x[8];
//   convert_values(load_packet<8>(a, first).values, x);      // 8 Half -> 8 float
//   Packet<Half, 8> y;
//   convert_values(x, y.values);                              // 8 float -> 8 Half
//
// Element by element, a Half <-> float conversion is the hardware's cvt and a NaN select
// (kernels/common/scalar_types.h: a NaN keeps the portable code's payload bits), and a float ->
// BFloat16 one is about six integer operations. That is what made ember's f16 kernels that only
// move memory run short of the copy rate on an H200 (add_f16_256MB at 77% of copy, bf16 at 92%,
// 2026-11-28): they were bound by instructions, not bytes. Here:
//   - float -> Half and float -> BFloat16 go two at a time through cvt.rn.f16x2.f32 and
//     cvt.rn.bf16x2.f32 (one instruction for two values, round to nearest even, subnormals and
//     overflow as IEEE 754 and as the portable code do; sm_80 and later, one value at a time
//     before);
//   - Half -> float is one cvt.f32.f16 a value (exact);
//   - NaN is tested once for the whole packet, on its 16-bit pairs (three integer operations for
//     two values: detail::half_pair_nan_lanes), on the inputs going to float and on the results
//     coming from it (the hardware makes a NaN of a NaN, never of anything else). A packet with
//     a NaN in it, rare in training, takes the element-by-element conversions, whose NaN bits are
//     the CPU's.
// SASS instructions of a one-packet kernel for sm_90 (ptxas's cubin, the NaN path left out):
// f16 add of 8 values 243 -> 88, bf16 add of 8 values 136 -> 80, f32 -> f16 cast of 4 values
// 54 -> 28 (f32 add of 4 values: 28).
// tests/cuda/cuda_test.cpp runs every 16-bit pattern and 3.4 million float patterns through
// these, in order and shuffled among NaNs, against the CPU
// (SixteenBitConversionsMatchTheCpuOnEveryPatternThatDecides), and the elementwise kernels over
// packets holding NaNs (SixteenBitKernelsKeepTheOtherValuesOfAPacketWithANaN); the pair NaN tests
// themselves are checked on the host (tests/runtime/scalar_types_test.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/convert.h"
#include "kernels/common/scalar_types.h"

namespace ember::kernels::cuda {

namespace packet_detail {

// W values of 16 bits as W / 2 32-bit pairs: value 2i in the low half of pair i (memory order).
template <typename T, int W>
__device__ __forceinline__ void to_pairs(const T (&values)[W], uint32_t (&pairs)[W / 2]) {
  static_assert(sizeof(T) == 2);
  std::memcpy(pairs, values, sizeof(pairs));
}

template <int W>
__device__ __forceinline__ void halves_to_floats(const Half (&in)[W], float (&out)[W]) {
  uint32_t pairs[W / 2];
  to_pairs(in, pairs);
  uint32_t nan_lanes = 0;
#pragma unroll
  for (int i = 0; i < W / 2; ++i)
    nan_lanes |= detail::half_pair_nan_lanes(pairs[i]);
  if (nan_lanes == 0) {
#pragma unroll
    for (int j = 0; j < W; ++j)
      asm("cvt.f32.f16 %0, %1;" : "=f"(out[j]) : "h"(in[j].bits));
  } else {
#pragma unroll
    for (int j = 0; j < W; ++j)
      out[j] = static_cast<float>(in[j]);
  }
}

// float -> Half or BFloat16, two values a cvt; cvt.rn.*x2.f32 puts its first source in the upper
// half of the pair, so value 2i + 1 goes first.
template <typename T, int W>
__device__ __forceinline__ void floats_to_pairs(const float (&in)[W], T (&out)[W]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800  // no paired cvt: one value at a time
#pragma unroll
  for (int j = 0; j < W; ++j)
    out[j] = T(in[j]);
#else
  uint32_t pairs[W / 2];
  uint32_t nan_lanes = 0;
#pragma unroll
  for (int i = 0; i < W / 2; ++i) {
    if constexpr (std::is_same_v<T, Half>) {
      asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(pairs[i]) : "f"(in[2 * i + 1]), "f"(in[2 * i]));
      nan_lanes |= detail::half_pair_nan_lanes(pairs[i]);
    } else {
      asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(pairs[i]) : "f"(in[2 * i + 1]), "f"(in[2 * i]));
      nan_lanes |= detail::bfloat16_pair_nan_lanes(pairs[i]);
    }
  }
  if (nan_lanes == 0) {
    std::memcpy(out, pairs, sizeof(pairs));
  } else {
#pragma unroll
    for (int j = 0; j < W; ++j)
      out[j] = T(in[j]);
  }
#endif
}

}  // namespace packet_detail

template <typename Src, typename Dst, int W>
__device__ __forceinline__ void convert_values(const Src (&in)[W], Dst (&out)[W]) {
  constexpr bool pairs = W % 2 == 0;
  if constexpr (pairs && std::is_same_v<Src, Half> && std::is_same_v<Dst, float>) {
    packet_detail::halves_to_floats(in, out);
  } else if constexpr (pairs && std::is_same_v<Src, float> && is_reduced_float_v<Dst>) {
    packet_detail::floats_to_pairs(in, out);
  } else if constexpr (pairs && is_reduced_float_v<Src> && is_reduced_float_v<Dst> &&
                       !std::is_same_v<Src, Dst>) {
    float middle[W];  // through f32, as convert<Dst> goes
    convert_values(in, middle);
    convert_values(middle, out);
  } else {
#pragma unroll
    for (int j = 0; j < W; ++j)
      out[j] = convert<Dst>(in[j]);
  }
}

}  // namespace ember::kernels::cuda
