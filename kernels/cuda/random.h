// CUDA fills from Philox (kernels/common/philox.h), queued on `stream`.
//
// Element i depends only on (seed, offset, i), and every step repeats kernels/cpu/random.cpp's
// arithmetic in the same order and precision, so the same generator state gives the same numbers
// as the CPU: bit for bit for uniform, randint and bernoulli; normal goes through log/sin/cos,
// where CUDA's double functions may differ from the host's in the last bit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ember::kernels::cuda {

// out[i] = low + (high - low) * U(i), U uniform in [0, 1): one word per f32 value, two per f64.
template <typename T>
void uniform(T* out, int64_t n, double low, double high, uint64_t seed, uint64_t offset,
             cudaStream_t stream);
// out[i] = mean + std * N(i), by Box-Muller over consecutive pairs of uniforms.
template <typename T>
void normal(T* out, int64_t n, double mean, double std, uint64_t seed, uint64_t offset,
            cudaStream_t stream);
// out[i] = low + word(i) mod (high - low) (64-bit words: two per value).
template <typename T>
void randint(T* out, int64_t n, int64_t low, int64_t high, uint64_t seed, uint64_t offset,
             cudaStream_t stream);
// out[i] = U(i) < p
template <typename T>
void bernoulli(T* out, int64_t n, double p, uint64_t seed, uint64_t offset, cudaStream_t stream);

}  // namespace ember::kernels::cuda
