// Matrix products through OpenBLAS (f32, f64) on the CPU and cuBLAS(Lt) or ember's own kernels
// on CUDA; f16 and bf16 compute with f32 accumulation everywhere.
#pragma once

#include <optional>
#include <string_view>

#include "runtime/tensor.h"

namespace ember {

// torch.matmul: a (..., n, k) @ b (..., k, m) -> (..., n, m), batch dims broadcast; a 1-D
// operand is a vector (prepended / appended 1, removed from the result).
// Error: `matmul: shapes (4,3) and (5,2) cannot be multiplied (3 != 5)`.
Tensor matmul(const Tensor& a, const Tensor& b);
// a (B, n, k) @ b (B, k, m) -> (B, n, m); no broadcasting.
Tensor bmm(const Tensor& a, const Tensor& b);
// x (..., in) @ weight (out, in)^T + bias (out) -> (..., out). `bias` may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- how CUDA tensors are multiplied ----------------------------------------------------------

// Who computes matmul, bmm and linear (forward and backward) on CUDA tensors. ember's own
// kernels (kernels/cuda/gemm_mma.h) cover f16 and bf16; f32 and f64 always go to cuBLAS.
enum class CudaGemmBackend {
  cublas,    // EMBER_GEMM=cublas (the default): cuBLASLt, plain cuBLAS for f64
  ember,     // EMBER_GEMM=ember: the best ember version for the GPU (v3 from sm_80, else v1)
  ember_v1,  // EMBER_GEMM=ember-v1: shared-memory tiled, CUDA cores
  ember_v2,  // EMBER_GEMM=ember-v2: mma.sync + ldmatrix
  ember_v3,  // EMBER_GEMM=ember-v3: v2 + cp.async 3-stage pipeline
  ember_v4,  // EMBER_GEMM=ember-v4: wgmma + TMA, sm_90 only (v3 for the layouts it lacks)
};

// "cublas", "ember", "ember-v1", ... (the EMBER_GEMM spelling).
const char* cuda_gemm_backend_name(CudaGemmBackend backend);
// The backend an EMBER_GEMM value names. Error: `EMBER_GEMM=foo is not a GEMM backend; expected
// one of cublas, ember, ember-v1, ember-v2, ember-v3, ember-v4`.
CudaGemmBackend parse_cuda_gemm_backend(std::string_view name);
// set_cuda_gemm_backend's choice if any, else EMBER_GEMM (read at every call, so a test or a
// benchmark may change it), else cublas.
CudaGemmBackend cuda_gemm_backend();
// Whether `backend` runs on CUDA device `device` (ember-v2/v3 need sm_80, ember-v4 an sm_90 GPU
// and a build targeting 90); false in a build without CUDA.
bool cuda_gemm_backend_available(CudaGemmBackend backend, int device = 0);
// Overrides EMBER_GEMM for the whole process; nullopt returns to it.
void set_cuda_gemm_backend(std::optional<CudaGemmBackend> backend);

// PyTorch's torch.backends.cuda.matmul.allow_tf32: f32 products on CUDA may round their inputs
// to TF32 (10-bit mantissa) to use the tensor cores. Off by default, as in PyTorch.
void set_matmul_allow_tf32(bool allow);
bool matmul_allow_tf32();

}  // namespace ember
