#include "kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <climits>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/common/convert.h"
#include "kernels/common/scalar_types.h"

namespace ember::kernels::cpu {

namespace {

blasint to_blas_int(int64_t value) {
  if (value < 0 || value > INT_MAX) {
    throw std::invalid_argument("gemm: size " + std::to_string(value) +
                                " does not fit OpenBLAS's 32-bit integers");
  }
  return static_cast<blasint>(value);
}

CBLAS_TRANSPOSE blas_trans(bool transposed) {
  return transposed ? CblasTrans : CblasNoTrans;
}

// c (m, n) = beta * c when there is nothing to multiply (k == 0): BLAS may skip the scaling.
template <typename T>
void scale_only(const GemmShape& s, float beta, T* c) {
  for (int64_t i = 0; i < s.m; ++i) {
    T* row = c + i * s.ldc;
    for (int64_t j = 0; j < s.n; ++j)
      row[j] = beta == 0.0f ? T(0) : convert<T>(beta * convert<float>(row[j]));
  }
}

template <typename T>
void blas_gemm(const GemmShape& s, float alpha, const T* a, const T* b, float beta, T* c) {
  const blasint m = to_blas_int(s.m), n = to_blas_int(s.n), k = to_blas_int(s.k);
  const blasint lda = to_blas_int(s.lda), ldb = to_blas_int(s.ldb), ldc = to_blas_int(s.ldc);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, blas_trans(s.trans_a), blas_trans(s.trans_b), m, n, k, alpha, a, lda,
                b, ldb, beta, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, blas_trans(s.trans_a), blas_trans(s.trans_b), m, n, k, alpha, a, lda,
                b, ldb, beta, c, ldc);
  }
}

// op(x) (rows, cols) of a 16-bit matrix -> dense f32 (rows, cols).
template <typename T>
void to_f32_block(const T* x, bool transposed, int64_t rows, int64_t cols, int64_t ld, float* out) {
  const int threads = rows * cols >= 65536 ? blas_threads_for_caller() : 1;
#pragma omp parallel for num_threads(threads) if (threads > 1)
  for (int64_t i = 0; i < rows; ++i) {
    float* dst = out + i * cols;
    if (transposed) {
      for (int64_t j = 0; j < cols; ++j)
        dst[j] = static_cast<float>(x[j * ld + i]);
    } else {
      const T* src = x + i * ld;
      for (int64_t j = 0; j < cols; ++j)
        dst[j] = static_cast<float>(src[j]);
    }
  }
}

// The 16-bit path: one f32 GEMM on converted blocks, f32 accumulation, rounded once at the end.
template <typename T>
void reduced_gemm(const GemmShape& s, float alpha, const T* a, const T* b, float beta, T* c) {
  std::vector<float> a32(static_cast<size_t>(s.m * s.k)), b32(static_cast<size_t>(s.k * s.n));
  std::vector<float> c32(static_cast<size_t>(s.m * s.n));
  to_f32_block(a, s.trans_a, s.m, s.k, s.lda, a32.data());
  to_f32_block(b, s.trans_b, s.k, s.n, s.ldb, b32.data());
  if (beta != 0.0f) to_f32_block(c, false, s.m, s.n, s.ldc, c32.data());
  GemmShape dense{false, false, s.m, s.n, s.k, s.k, s.n, s.n};
  blas_gemm<float>(dense, alpha, a32.data(), b32.data(), beta, c32.data());
  const int threads = s.m * s.n >= 65536 ? blas_threads_for_caller() : 1;
#pragma omp parallel for num_threads(threads) if (threads > 1)
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j)
      c[i * s.ldc + j] = T(c32[static_cast<size_t>(i * s.n + j)]);
  }
}

}  // namespace

struct BlasThreadsLease::State {
  std::mutex mutex;
  std::condition_variable released;
  int threads = 0;          // OpenBLAS's count as last set here (0: not set yet)
  int active = 0;           // calls running with it
  int changes_waiting = 0;  // calls waiting to set another
};

BlasThreadsLease::BlasThreadsLease(int threads) {
  State& s = state();
  std::unique_lock lock(s.mutex);
  if (s.active > 0 && (s.threads != threads || s.changes_waiting > 0)) {
    const bool change = s.threads != threads;
    if (change) ++s.changes_waiting;
    s.released.wait(lock, [&] {
      return s.active == 0 || (s.threads == threads && (change || s.changes_waiting == 0));
    });
    if (change) --s.changes_waiting;
  }
  if (s.threads != threads || openblas_get_num_threads() != threads) {  // (or set by others)
    openblas_set_num_threads(threads);
    s.threads = threads;
  }
  ++s.active;
}

BlasThreadsLease::~BlasThreadsLease() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (--s.active == 0) s.released.notify_all();
}

BlasThreadsLease::State& BlasThreadsLease::state() {
  static State instance;
  return instance;
}

int blas_threads() {
  return openblas_get_num_threads();
}

const char* blas_kernels() {
  return openblas_get_corename();
}

int blas_threads_for_caller() {
  return omp_in_parallel() ? 1 : omp_get_max_threads();
}

template <typename T>
void gemm(const GemmShape& s, float alpha, const T* a, const T* b, float beta, T* c) {
  if (s.m == 0 || s.n == 0) return;
  if (s.k == 0) {
    scale_only(s, beta, c);
    return;
  }
  const BlasThreadsLease lease(blas_threads_for_caller());
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    blas_gemm<T>(s, alpha, a, b, beta, c);
  } else {
    reduced_gemm<T>(s, alpha, a, b, beta, c);
  }
}

template <typename T>
void gemm_batched(const GemmShape& s, int64_t batch, float alpha, const T* a,
                  const int64_t* a_offsets, const T* b, const int64_t* b_offsets, float beta, T* c,
                  const int64_t* c_offsets) {
  for (int64_t i = 0; i < batch; ++i)
    gemm<T>(s, alpha, a + a_offsets[i], b + b_offsets[i], beta, c + c_offsets[i]);
}

#define EMBER_INSTANTIATE_GEMM(T)                                                           \
  template void gemm<T>(const GemmShape&, float, const T*, const T*, float, T*);            \
  template void gemm_batched<T>(const GemmShape&, int64_t, float, const T*, const int64_t*, \
                                const T*, const int64_t*, float, T*, const int64_t*);
EMBER_INSTANTIATE_GEMM(float)
EMBER_INSTANTIATE_GEMM(double)
EMBER_INSTANTIATE_GEMM(Half)
EMBER_INSTANTIATE_GEMM(BFloat16)
#undef EMBER_INSTANTIATE_GEMM

}  // namespace ember::kernels::cpu
