// CUDA softmax and log-softmax along the middle dim of a dense (outer, dim, inner) array, queued
// on `stream`: the same contract as kernels/cpu/softmax.h (f32 accumulation for f16/bf16; a NaN
// in a line makes the whole line NaN; a line of -inf gives NaN, as on the CPU).
//
//   in (outer, dim, inner) -> out (outer, dim, inner)
//
// inner == 1 (rows): one warp per row up to 1024 values, one block per longer row; three passes
// over the row (max, sum of exponentials, write), the row re-read from L1/L2 rather than kept in
// shared memory, so any length works. inner > 1: one thread per line, reading with stride inner
// (neighbouring threads read neighbouring addresses).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ember::kernels::cuda {

// log = false: out = exp(x - max) / sum(exp(x - max)); log = true: out = x - logsumexp(x).
template <typename T>
void softmax(const T* in, T* out, int64_t outer, int64_t dim, int64_t inner, bool log,
             cudaStream_t stream);

// From the forward output y and the incoming gradient g (same layout):
//   softmax:     grad_in = y * (g - sum(g * y))
//   log_softmax: grad_in = g - exp(y) * sum(g)
template <typename T>
void softmax_backward(const T* grad_out, const T* out, T* grad_in, int64_t outer, int64_t dim,
                      int64_t inner, bool log, cudaStream_t stream);

}  // namespace ember::kernels::cuda
