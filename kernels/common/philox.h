// Philox4x32-10, the counter-based generator of Salmon et al. (SC'11), on the host and the device.
//
// A generator's state is (seed, offset). Element i of a draw that starts at `offset` comes from
// block `offset + i / 4`, word `i % 4`: the numbers depend only on (seed, offset, i), never on the
// thread that computes them, so the CPU and the GPU produce the same values for the same state.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/scalar_types.h"

namespace ember::kernels {

struct PhiloxBlock {
  uint32_t word[4];
};

EMBER_HOST_DEVICE uint32_t philox_mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

// The 4 x 32-bit words of counter block `block` under key `seed`.
EMBER_HOST_DEVICE PhiloxBlock philox4x32_10(uint64_t seed, uint64_t block) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = philox_mulhi(kMul0, c0), lo0 = kMul0 * c0;
    const uint32_t hi1 = philox_mulhi(kMul1, c2), lo1 = kMul1 * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return PhiloxBlock{{c0, c1, c2, c3}};
}

// Random word number `index` of a draw starting at block `offset`.
EMBER_HOST_DEVICE uint32_t philox_word(uint64_t seed, uint64_t offset, uint64_t index) {
  const PhiloxBlock b = philox4x32_10(seed, offset + index / 4);
  return b.word[index % 4];
}

// Uniform in [0, 1) with 24 random bits.
EMBER_HOST_DEVICE float uint_to_unit_float(uint32_t x) {
  return static_cast<float>(x >> 8) * 5.9604644775390625e-8f;
}

// Uniform in (0, 1]: safe to take the log of.
EMBER_HOST_DEVICE float uint_to_open_unit_float(uint32_t x) {
  return static_cast<float>((x >> 8) + 1u) * 5.9604644775390625e-8f;
}

// Uniform in [0, 1) with 53 random bits from two words.
EMBER_HOST_DEVICE double uints_to_unit_double(uint32_t hi, uint32_t lo) {
  const uint64_t bits = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * 1.1102230246251565e-16;
}

// Draw element i as U(i) in [0, 1): 24 random bits (one word) for types of 32 bits or fewer, 53
// (two words) for double. The CPU and CUDA fills both call this one definition, which is what
// makes their numbers equal bit for bit.
template <typename T>
EMBER_HOST_DEVICE double philox_unit(uint64_t seed, uint64_t offset, int64_t i) {
  if constexpr (std::is_same_v<T, double>) {
    return uints_to_unit_double(philox_word(seed, offset, 2 * i),
                                philox_word(seed, offset, 2 * i + 1));
  } else {
    return uint_to_unit_float(philox_word(seed, offset, i));
  }
}

// The same in (0, 1]: safe to take the log of (Box-Muller).
template <typename T>
EMBER_HOST_DEVICE double philox_open_unit(uint64_t seed, uint64_t offset, int64_t i) {
  if constexpr (std::is_same_v<T, double>) {
    return 1.0 - philox_unit<T>(seed, offset, i);
  } else {
    return uint_to_open_unit_float(philox_word(seed, offset, i));
  }
}

// Blocks a draw of n numbers of `words_per_number` words consumes: the offset to advance by.
EMBER_HOST_DEVICE uint64_t philox_blocks_for(uint64_t n, uint64_t words_per_number) {
  return (n * words_per_number + 3) / 4;
}

}  // namespace ember::kernels
