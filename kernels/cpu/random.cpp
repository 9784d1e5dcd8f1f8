#include "kernels/cpu/random.h"

#include <cmath>

#include "kernels/common/convert.h"
#include "kernels/common/philox.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu {
namespace {}  // namespace

template <typename T>
void uniform(T* out, int64_t n, double low, double high, uint64_t seed, uint64_t offset) {
  const int threads = threads_for(n);
#pragma omp parallel for num_threads(threads) if (threads > 1)
  for (int64_t i = 0; i < n; ++i)
    out[i] = convert<T>(low + (high - low) * philox_unit<T>(seed, offset, i));
}

template <typename T>
void normal(T* out, int64_t n, double mean, double std, uint64_t seed, uint64_t offset) {
  // Pair p uses uniforms 2p and 2p+1 and gives elements 2p (cos) and 2p+1 (sin).
  const int64_t pairs = (n + 1) / 2;
  const int threads = threads_for(n);
#pragma omp parallel for num_threads(threads) if (threads > 1)
  for (int64_t p = 0; p < pairs; ++p) {
    const double u1 = philox_open_unit<T>(seed, offset, 2 * p);
    const double u2 = philox_unit<T>(seed, offset, 2 * p + 1);
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 6.283185307179586 * u2;
    out[2 * p] = convert<T>(mean + std * radius * std::cos(angle));
    if (2 * p + 1 < n) out[2 * p + 1] = convert<T>(mean + std * radius * std::sin(angle));
  }
}

template <typename T>
void randint(T* out, int64_t n, int64_t low, int64_t high, uint64_t seed, uint64_t offset) {
  // In uint64: a range wider than 2^63 - 1 (low < 0 < high) would overflow int64.
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  const int threads = threads_for(n);
#pragma omp parallel for num_threads(threads) if (threads > 1)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t word = (static_cast<uint64_t>(philox_word(seed, offset, 2 * i)) << 32) |
                          philox_word(seed, offset, 2 * i + 1);
    out[i] = convert<T>(static_cast<int64_t>(static_cast<uint64_t>(low) + word % range));
  }
}

template <typename T>
void bernoulli(T* out, int64_t n, double p, uint64_t seed, uint64_t offset) {
  const int threads = threads_for(n);
#pragma omp parallel for num_threads(threads) if (threads > 1)
  for (int64_t i = 0; i < n; ++i) {
    out[i] = convert<T>(uint_to_unit_float(philox_word(seed, offset, i)) < p ? 1 : 0);
  }
}

#define EMBER_INSTANTIATE_FLOAT(T)                                           \
  template void uniform<T>(T*, int64_t, double, double, uint64_t, uint64_t); \
  template void normal<T>(T*, int64_t, double, double, uint64_t, uint64_t);
EMBER_INSTANTIATE_FLOAT(float)
EMBER_INSTANTIATE_FLOAT(double)
EMBER_INSTANTIATE_FLOAT(Half)
EMBER_INSTANTIATE_FLOAT(BFloat16)
#undef EMBER_INSTANTIATE_FLOAT

#define EMBER_INSTANTIATE_ANY(T)                                               \
  template void randint<T>(T*, int64_t, int64_t, int64_t, uint64_t, uint64_t); \
  template void bernoulli<T>(T*, int64_t, double, uint64_t, uint64_t);
EMBER_FOR_EACH_ELEMENT_TYPE(EMBER_INSTANTIATE_ANY)
#undef EMBER_INSTANTIATE_ANY

}  // namespace ember::kernels::cpu
