// cuBLAS(Lt) behind kernels/cuda/gemm.h: f32, f16 and bf16 through cuBLASLt (f32 accumulation;
// TF32 tensor cores for f32 only when allowed), f64 through plain cuBLAS.
//
// ember's matrices are row-major and cuBLAS's are column-major. A row-major (m, n) matrix is the
// column-major (n, m) matrix of the same bytes, so c = op(a) @ op(b) is computed as the
// column-major product c^T (n, m) = op(b)^T (n, k) @ op(a)^T (k, m): the operands swap places and
// keep their own transpose flags and leading dimensions. No operand is ever copied here.
//
// One cuBLASLt handle per device, one workspace per (device, stream) (two streams must not share
// scratch memory), and the matmul descriptor, layouts and chosen algorithm cached per shape
// (dtype, flags, sizes, leading dims, batch strides, pointer alignments). When cuBLASLt offers no
// algorithm for a shape, the product goes to cublasGemmStridedBatchedEx instead.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/gemm.h"

namespace ember::kernels::cuda {

// T: float, double, Half or BFloat16.
template <typename T>
void gemm_cublas(const GemmShape& shape, bool allow_tf32, float alpha, const T* a, const T* b,
                 float beta, T* c, cudaStream_t stream);

}  // namespace ember::kernels::cuda
