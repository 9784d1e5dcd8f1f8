// CUDA reductions over the middle dim of a dense (outer, reduce, inner) array, queued on `stream`.
//
//   in (outer, reduce, inner) -> out (outer, inner)
//
// Same contract as kernels/cpu/reduce.h: f32 accumulation for f32/f16/bf16, f64 for f64, i64 for
// integers and bool (whose sums are stored as i64, sum_output_t).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cpu/reduce.h"  // sum_output_t, shared by both backends

namespace ember::kernels::cuda {

using cpu::sum_output_t;

template <typename T>
void sum(const T* in, sum_output_t<T>* out, int64_t outer, int64_t reduce, int64_t inner,
         cudaStream_t stream);

// ---- kernels/cuda/reduce_stats.cu: the rest of kernels/cpu/reduce.h, same contracts ----
// All of them fold lines with one shared kernel and a runtime switch on the fold (max, min, sums
// of transformed values); reduce >= 1 for the extremes.

// All numeric dtypes. NaN propagates.
template <typename T>
void amax(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner, cudaStream_t stream);
template <typename T>
void amin(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner, cudaStream_t stream);
// All numeric dtypes: the index of the first extreme; the first NaN wins.
template <typename T>
void argmax(const T* in, int64_t* out, int64_t outer, int64_t reduce, int64_t inner,
            cudaStream_t stream);
template <typename T>
void argmin(const T* in, int64_t* out, int64_t outer, int64_t reduce, int64_t inner,
            cudaStream_t stream);
// f32, f64, f16, bf16.
template <typename T>
void variance(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner, int64_t correction,
              cudaStream_t stream);
template <typename T>
void logsumexp(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner,
               cudaStream_t stream);
template <typename T>
void norm(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner, double p,
          cudaStream_t stream);

}  // namespace ember::kernels::cuda
