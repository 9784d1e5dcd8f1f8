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

}  // namespace ember::kernels::cuda
