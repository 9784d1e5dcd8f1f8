#include <cstdint>
#include <type_traits>

#include "kernels/common/convert.h"
#include "kernels/common/philox.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/random.h"

namespace ember::kernels::cuda {
namespace {

// The arithmetic below uses __dmul_rn/__dadd_rn where the CPU code has a multiply then an add:
// nvcc would otherwise fuse them into one FMA, rounding once instead of twice, and the numbers
// would no longer match the CPU's bit for bit.

__device__ __forceinline__ int64_t grid_start() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_step() {
  return static_cast<int64_t>(blockDim.x) * gridDim.x;
}

template <typename T>
__global__ void uniform_kernel(T* out, int64_t n, double low, double high, uint64_t seed,
                               uint64_t offset) {
  const double range = high - low;
  for (int64_t i = grid_start(); i < n; i += grid_step())
    out[i] = convert<T>(__dadd_rn(low, __dmul_rn(range, philox_unit<T>(seed, offset, i))));
}

// out (n): thread p writes elements 2p (cos) and 2p+1 (sin) from uniforms 2p and 2p+1.
template <typename T>
__global__ void normal_kernel(T* out, int64_t n, double mean, double std, uint64_t seed,
                              uint64_t offset) {
  const int64_t pairs = (n + 1) / 2;
  for (int64_t p = grid_start(); p < pairs; p += grid_step()) {
    const double u1 = philox_open_unit<T>(seed, offset, 2 * p);
    const double u2 = philox_unit<T>(seed, offset, 2 * p + 1);
    const double radius = ::sqrt(__dmul_rn(-2.0, ::log(u1)));
    const double angle = __dmul_rn(6.283185307179586, u2);
    const double scale = __dmul_rn(std, radius);
    out[2 * p] = convert<T>(__dadd_rn(mean, __dmul_rn(scale, ::cos(angle))));
    if (2 * p + 1 < n) out[2 * p + 1] = convert<T>(__dadd_rn(mean, __dmul_rn(scale, ::sin(angle))));
  }
}

template <typename T>
__global__ void randint_kernel(T* out, int64_t n, int64_t low, uint64_t range, uint64_t seed,
                               uint64_t offset) {
  for (int64_t i = grid_start(); i < n; i += grid_step()) {
    const uint64_t word = (static_cast<uint64_t>(philox_word(seed, offset, 2 * i)) << 32) |
                          philox_word(seed, offset, 2 * i + 1);
    out[i] = convert<T>(static_cast<int64_t>(static_cast<uint64_t>(low) + word % range));
  }
}

template <typename T>
__global__ void bernoulli_kernel(T* out, int64_t n, double p, uint64_t seed, uint64_t offset) {
  for (int64_t i = grid_start(); i < n; i += grid_step())
    out[i] = convert<T>(uint_to_unit_float(philox_word(seed, offset, i)) < p ? 1 : 0);
}

}  // namespace

template <typename T>
void uniform(T* out, int64_t n, double low, double high, uint64_t seed, uint64_t offset,
             cudaStream_t stream) {
  if (n <= 0) return;
  uniform_kernel<T>
      <<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(out, n, low, high, seed, offset);
  EMBER_CUDA_CHECK_LAUNCH("uniform<<<>>>");
}

template <typename T>
void normal(T* out, int64_t n, double mean, double std, uint64_t seed, uint64_t offset,
            cudaStream_t stream) {
  if (n <= 0) return;
  normal_kernel<T>
      <<<blocks_for((n + 1) / 2), kThreadsPerBlock, 0, stream>>>(out, n, mean, std, seed, offset);
  EMBER_CUDA_CHECK_LAUNCH("normal<<<>>>");
}

template <typename T>
void randint(T* out, int64_t n, int64_t low, int64_t high, uint64_t seed, uint64_t offset,
             cudaStream_t stream) {
  if (n <= 0) return;
  // In uint64: a range wider than 2^63 - 1 (low < 0 < high) would overflow int64.
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  randint_kernel<T>
      <<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(out, n, low, range, seed, offset);
  EMBER_CUDA_CHECK_LAUNCH("randint<<<>>>");
}

template <typename T>
void bernoulli(T* out, int64_t n, double p, uint64_t seed, uint64_t offset, cudaStream_t stream) {
  if (n <= 0) return;
  bernoulli_kernel<T><<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(out, n, p, seed, offset);
  EMBER_CUDA_CHECK_LAUNCH("bernoulli<<<>>>");
}

// runtime/random.cpp: uniform and normal for the floating dtypes, randint and bernoulli for all.
#define EMBER_INSTANTIATE_FLOAT(T)                                                         \
  template void uniform<T>(T*, int64_t, double, double, uint64_t, uint64_t, cudaStream_t); \
  template void normal<T>(T*, int64_t, double, double, uint64_t, uint64_t, cudaStream_t);
EMBER_INSTANTIATE_FLOAT(float)
EMBER_INSTANTIATE_FLOAT(double)
EMBER_INSTANTIATE_FLOAT(Half)
EMBER_INSTANTIATE_FLOAT(BFloat16)
#undef EMBER_INSTANTIATE_FLOAT

#define EMBER_INSTANTIATE_ANY(T)                                                             \
  template void randint<T>(T*, int64_t, int64_t, int64_t, uint64_t, uint64_t, cudaStream_t); \
  template void bernoulli<T>(T*, int64_t, double, uint64_t, uint64_t, cudaStream_t);
EMBER_FOR_EACH_ELEMENT_TYPE(EMBER_INSTANTIATE_ANY)
#undef EMBER_INSTANTIATE_ANY

}  // namespace ember::kernels::cuda
