// CPU fills from Philox (kernels/common/philox.h); element i depends only on (seed, offset, i).
#pragma once

#include <cstdint>

namespace ember::kernels::cpu {

// out[i] = low + (high - low) * U(i), U uniform in [0, 1): one word per f32 value, two per f64.
template <typename T>
void uniform(T* out, int64_t n, double low, double high, uint64_t seed, uint64_t offset);
// out[i] = mean + std * N(i), by Box-Muller over consecutive pairs of uniforms.
template <typename T>
void normal(T* out, int64_t n, double mean, double std, uint64_t seed, uint64_t offset);
// out[i] = low + word(i) mod (high - low) (64-bit words: two per value).
template <typename T>
void randint(T* out, int64_t n, int64_t low, int64_t high, uint64_t seed, uint64_t offset);
// out[i] = U(i) < p
template <typename T>
void bernoulli(T* out, int64_t n, double p, uint64_t seed, uint64_t offset);

// Philox words each fill consumes per element.
inline constexpr uint64_t words_per_uniform(bool f64) {
  return f64 ? 2 : 1;
}

}  // namespace ember::kernels::cpu
