// ember's own GEMM kernels for f16 and bf16, kept side by side as a teaching ladder (each in a
// file of its own; the benchmark bench/gpu/gemm_bench.cpp runs them all against cuBLAS):
//
//   v1  gemm_mma_v1_tiled.cu     shared-memory tiles, one output per thread, CUDA cores
//   v2  gemm_mma_v2_mma.cu       tensor cores: mma.sync m16n8k16 fed by ldmatrix
//   v3  gemm_mma_v3_pipeline.cu  v2 + cp.async and a 3-stage shared-memory pipeline
//   v4  gemm_mma_v4_wgmma.cu     Hopper only: wgmma + TMA + mbarriers, 4 stages (built for sm_90a
//                                when the build targets 90: EMBER_GEMM_SM90A)
//
// Same contract as kernels/cuda/gemm.h (row-major, optional transposes, any m, n, k, uniform batch
// strides, c = alpha * a @ b + beta * c), f32 accumulation, output rounded to nearest even like
// the CPU's f16/bf16 GEMM. v2 and v3 need sm_80 (bf16 mma, cp.async); the dispatcher in
// gemm.cpp never picks them below.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/gemm.h"

namespace ember::kernels::cuda {

// T: Half or BFloat16.
template <typename T>
void gemm_mma_v1(const GemmShape& shape, float alpha, const T* a, const T* b, float beta, T* c,
                 cudaStream_t stream);
template <typename T>
void gemm_mma_v2(const GemmShape& shape, float alpha, const T* a, const T* b, float beta, T* c,
                 cudaStream_t stream);
template <typename T>
void gemm_mma_v3(const GemmShape& shape, float alpha, const T* a, const T* b, float beta, T* c,
                 cudaStream_t stream);

#if EMBER_GEMM_SM90A
// Runs v4 where it applies (gemm_mma_v4_handles: a not transposed, b transposed, TMA-aligned),
// else v3. Only on an sm_90 device: its code exists for sm_90a alone.
template <typename T>
void gemm_mma_v4(const GemmShape& shape, float alpha, const T* a, const T* b, float beta, T* c,
                 cudaStream_t stream);
bool gemm_mma_v4_handles(const GemmShape& shape, const void* a, const void* b);
#endif

}  // namespace ember::kernels::cuda
