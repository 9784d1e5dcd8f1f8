#include "kernels/cuda/gemm_cublaslt.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <type_traits>
#include <utility>

#include "kernels/common/scalar_types.h"
#include "kernels/cuda/check.h"

namespace ember::kernels::cuda {

namespace {

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line) {
  std::ostringstream message;
  message << "cuBLAS error: " << call << " failed at " << file << ":" << line << ": "
          << cublasGetStatusName(status) << " (" << cublasGetStatusString(status) << ")";
  if (status == CUBLAS_STATUS_NOT_INITIALIZED)
    message << "; is a GPU visible? check nvidia-smi and CUDA_VISIBLE_DEVICES";
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE)
    message << "; EMBER_GEMM=ember runs ember's own kernels for f16/bf16 instead";
  throw CudaError(message.str());
}

#define EMBER_CUBLAS_CHECK(call)                                           \
  do {                                                                     \
    const cublasStatus_t ember_cublas_status_ = (call);                    \
    if (ember_cublas_status_ != CUBLAS_STATUS_SUCCESS)                     \
      throw_cublas_error(ember_cublas_status_, #call, __FILE__, __LINE__); \
  } while (false)

template <typename T>
constexpr cudaDataType_t data_type_of() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  if constexpr (std::is_same_v<T, double>) return CUDA_R_64F;
  if constexpr (std::is_same_v<T, Half>) return CUDA_R_16F;
  return CUDA_R_16BF;
}

int current_device() {
  int device = 0;
  EMBER_CUDA_KERNEL_CHECK(cudaGetDevice(&device));
  return device;
}

// The largest power of two (at most 256) dividing every byte offset the library may start a
// matrix at: cuBLASLt assumes 256-byte aligned operands unless told otherwise, and a view into
// the middle of a tensor is often aligned to its element size only.
uint32_t alignment_of(const void* pointer, int64_t batch, int64_t stride_elements,
                      size_t element_size) {
  uint64_t combined = reinterpret_cast<uintptr_t>(pointer) | 256u;
  if (batch > 1) combined |= static_cast<uint64_t>(stride_elements) * element_size;
  return static_cast<uint32_t>(combined & (~combined + 1));  // lowest set bit
}

// ---- per-device state ---------------------------------------------------------------------------

// Scratch memory cuBLASLt may use. NVIDIA's advice: 32 MiB on Hopper, 4 MiB before.
size_t workspace_bytes_for(int device) {
  int major = 0;
  EMBER_CUDA_KERNEL_CHECK(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 9 ? (size_t{32} << 20) : (size_t{4} << 20);
}

struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

// Everything below lives until the process ends: handles and workspaces are reused by every
// product, and releasing them at exit (after the driver may have shut down) helps nobody.
struct CublasState {
  std::mutex mutex;
  std::map<int, cublasLtHandle_t> lt_handles;                    // per device
  std::map<int, cublasHandle_t> handles;                         // per device (f64 and fallbacks)
  std::map<std::pair<int, cudaStream_t>, Workspace> workspaces;  // per (device, stream)
};

CublasState& state() {
  static CublasState* s = new CublasState();  // never destroyed: see above
  return *s;
}

// Caller holds state().mutex.
cublasLtHandle_t lt_handle_for(int device) {
  auto [it, inserted] = state().lt_handles.try_emplace(device, nullptr);
  if (inserted) EMBER_CUBLAS_CHECK(cublasLtCreate(&it->second));
  return it->second;
}

Workspace workspace_for(int device, cudaStream_t stream) {
  auto [it, inserted] = state().workspaces.try_emplace({device, stream});
  if (inserted) {
    it->second.bytes = workspace_bytes_for(device);
    EMBER_CUDA_KERNEL_CHECK(cudaMalloc(&it->second.data, it->second.bytes));
  }
  return it->second;
}

// ---- plans: descriptors and algorithm per shape
// ---------------------------------------------------

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a_layout = nullptr, b_layout = nullptr, c_layout = nullptr;
  bool has_algo = false;  // false: cuBLASLt has none for this shape; use cublasGemmEx
  cublasLtMatmulAlgo_t algo{};
};

using PlanKey = std::array<int64_t, 18>;
std::map<PlanKey, Plan>& plans() {
  static auto* cache = new std::map<PlanKey, Plan>();  // never destroyed, like the handles
  return *cache;
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                                   int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows),
                                                static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                        &count, sizeof(count)));
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return layout;
}

// The column-major problem cuBLAS sees (see the header): c^T (n, m) = op(b)^T @ op(a)^T.
// Caller holds state().mutex.
template <typename T>
const Plan& plan_for(const GemmShape& s, bool tf32, int device, cublasLtHandle_t handle,
                     const Workspace& workspace, const T* a, const T* b, const T* c) {
  const uint32_t align_a = alignment_of(a, s.batch, s.stride_a, sizeof(T));
  const uint32_t align_b = alignment_of(b, s.batch, s.stride_b, sizeof(T));
  const uint32_t align_c = alignment_of(c, s.batch, s.stride_c, sizeof(T));
  const PlanKey key = {device,     static_cast<int64_t>(data_type_of<T>()),
                       tf32,       s.trans_a,
                       s.trans_b,  s.m,
                       s.n,        s.k,
                       s.lda,      s.ldb,
                       s.ldc,      s.batch,
                       s.stride_a, s.stride_b,
                       s.stride_c, align_a,
                       align_b,    align_c};
  if (auto cached = plans().find(key); cached != plans().end()) return cached->second;

  // Built aside and cached only once complete: a failure leaves no half-made plan behind.
  Plan plan;
  const cudaDataType_t type = data_type_of<T>();
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, compute, CUDA_R_32F));
  // cuBLAS's first operand is ember's b, its second ember's a.
  const int32_t op_first = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t op_second = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                    &op_first, sizeof(op_first)));
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                    &op_second, sizeof(op_second)));
  // Layouts describe the stored matrices, column-major: b (k, n) row-major is (n, k) with ld ldb;
  // b stored (n, k) row-major (trans_b) is (k, n). Likewise a; c (m, n) is (n, m).
  plan.a_layout = s.trans_b ? make_layout(type, s.k, s.n, s.ldb, s.batch, s.stride_b)
                            : make_layout(type, s.n, s.k, s.ldb, s.batch, s.stride_b);
  plan.b_layout = s.trans_a ? make_layout(type, s.m, s.k, s.lda, s.batch, s.stride_a)
                            : make_layout(type, s.k, s.m, s.lda, s.batch, s.stride_a);
  plan.c_layout = make_layout(type, s.n, s.m, s.ldc, s.batch, s.stride_c);

  cublasLtMatmulPreference_t preference = nullptr;
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace_bytes = workspace.bytes;
  EMBER_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace_bytes, sizeof(workspace_bytes)));
  // cuBLAS's A is ember's b and its B ember's a.
  const std::array<std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t>, 4> alignments = {{
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c},
  }};
  for (const auto& [attribute, bytes] : alignments)
    EMBER_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(preference, attribute, &bytes, sizeof(bytes)));
  // A split-K algorithm may add its parts in the output type (f16/bf16: a rounding per part) or
  // in the compute type (f32). 16-bit products take only the latter: each is then one f32 sum
  // rounded once, as on the CPU. (PyTorch allows the former unless
  // torch.backends.cuda.matmul.allow_{fp16,bf16}_reduced_precision_reduction is False.)
  const uint32_t reductions =
      std::is_same_v<T, float>
          ? uint32_t{CUBLASLT_REDUCTION_SCHEME_MASK}
          : uint32_t{CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE};
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions, sizeof(reductions)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.a_layout, plan.b_layout, plan.c_layout,
                                     plan.c_layout, preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  // NOT_SUPPORTED: no algorithm for this shape, which the fallback handles; anything else is an
  // error worth reporting.
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) {
    EMBER_CUBLAS_CHECK(status);
  }
  plan.has_algo = status == CUBLAS_STATUS_SUCCESS && found > 0;
  if (plan.has_algo) plan.algo = result.algo;
  return plans().emplace(key, plan).first->second;
}

// Plain cuBLAS, for f64 and for shapes cuBLASLt declines. Caller holds state().mutex: the
// handle's stream and math mode are set per call.
template <typename T>
void gemm_classic(const GemmShape& s, bool tf32, int device, float alpha, const T* a, const T* b,
                  float beta, T* c, cudaStream_t stream) {
  auto [it, inserted] = state().handles.try_emplace(device, nullptr);
  if (inserted) EMBER_CUBLAS_CHECK(cublasCreate(&it->second));
  cublasHandle_t handle = it->second;
  EMBER_CUBLAS_CHECK(cublasSetStream(handle, stream));
  // No reduced-precision reductions, as in the cuBLASLt preference above.
  const int math = (tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  EMBER_CUBLAS_CHECK(cublasSetMathMode(handle, static_cast<cublasMath_t>(math)));
  const cudaDataType_t type = data_type_of<T>();
  const double alpha64 = alpha, beta64 = beta;
  const bool f64 = std::is_same_v<T, double>;
  const void* alpha_ptr = f64 ? static_cast<const void*>(&alpha64) : &alpha;
  const void* beta_ptr = f64 ? static_cast<const void*>(&beta64) : &beta;
  const cublasComputeType_t compute =
      f64 ? CUBLAS_COMPUTE_64F : (tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
  EMBER_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
      handle, s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, s.n,
      s.m, s.k, alpha_ptr, b, type, s.ldb, s.stride_b, a, type, s.lda, s.stride_a, beta_ptr, c,
      type, s.ldc, s.stride_c, s.batch, compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

template <typename T>
void gemm_cublas(const GemmShape& shape, bool allow_tf32, float alpha, const T* a, const T* b,
                 float beta, T* c, cudaStream_t stream) {
  if (shape.m == 0 || shape.n == 0 || shape.batch == 0) return;
  const bool tf32 = allow_tf32 && std::is_same_v<T, float>;
  const int device = current_device();
  std::lock_guard<std::mutex> lock(state().mutex);
  // k == 0 (c = beta * c) is BLAS's quick case; cuBLASLt need not accept it.
  if (std::is_same_v<T, double> || shape.k == 0) {
    gemm_classic<T>(shape, tf32, device, alpha, a, b, beta, c, stream);
    return;
  }
  const cublasLtHandle_t handle = lt_handle_for(device);
  const Workspace workspace = workspace_for(device, stream);
  const Plan& plan = plan_for<T>(shape, tf32, device, handle, workspace, a, b, c);
  if (!plan.has_algo) {
    gemm_classic<T>(shape, tf32, device, alpha, a, b, beta, c, stream);
    return;
  }
  EMBER_CUBLAS_CHECK(cublasLtMatmul(handle, plan.desc, &alpha, b, plan.a_layout, a, plan.b_layout,
                                    &beta, c, plan.c_layout, c, plan.c_layout, &plan.algo,
                                    workspace.data, workspace.bytes, stream));
}

template void gemm_cublas<float>(const GemmShape&, bool, float, const float*, const float*, float,
                                 float*, cudaStream_t);
template void gemm_cublas<double>(const GemmShape&, bool, float, const double*, const double*,
                                  float, double*, cudaStream_t);
template void gemm_cublas<Half>(const GemmShape&, bool, float, const Half*, const Half*, float,
                                Half*, cudaStream_t);
template void gemm_cublas<BFloat16>(const GemmShape&, bool, float, const BFloat16*, const BFloat16*,
                                    float, BFloat16*, cudaStream_t);

}  // namespace ember::kernels::cuda
