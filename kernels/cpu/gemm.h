// Matrix products on the CPU: OpenBLAS for f32 and f64; f16 and bf16 go through f32 blocks
// (converted in, one f32 GEMM with f32 accumulation, converted back).
//
//   c (m, n) = alpha * op(a) (m, k) @ op(b) (k, n) + beta * c
//
// All matrices are row-major with a leading dimension (the step between rows, in elements).
// `trans_a` means `a` is stored as (k, m) with leading dimension lda and used transposed; this
// is how a transposed view (unit stride along its rows) is handed over without a copy.
#pragma once

#include <cstdint>

namespace ember::kernels::cpu {

struct GemmShape {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
};

// One product. beta == 0 overwrites c (NaNs in c do not leak through).
template <typename T>
void gemm(const GemmShape& shape, float alpha, const T* a, const T* b, float beta, T* c);

// `batch` products with the same shape; matrix i of each operand starts at offsets[i] elements
// from its base pointer (offsets of 0 repeat a broadcast operand). Loops over the batch: each
// product is parallelised by BLAS itself.
template <typename T>
void gemm_batched(const GemmShape& shape, int64_t batch, float alpha, const T* a,
                  const int64_t* a_offsets, const T* b, const int64_t* b_offsets, float beta, T* c,
                  const int64_t* c_offsets);

// OpenBLAS (Debian's pthreads build) keeps its own thread pool, whose size is one setting for
// the whole process. Every gemm sets it for its call: omp_get_max_threads() when called outside
// an OpenMP region (so omp_set_num_threads and OMP_NUM_THREADS are followed and the two pools
// take turns on the same cores), and 1 when called from inside one (each OpenMP thread runs its
// own single-threaded product; nothing is oversubscribed).
int blas_threads_for_caller();  // the count gemm uses from the calling context
int blas_threads();             // OpenBLAS's count now

// A result's bits depend on that count: OpenBLAS blocks k by it (sgemm (8, 36, 12544) differs in
// 237 of 288 outputs between 1 and 2 threads on Haswell). So every gemm holds a lease on the
// count it wants while it runs: calls that want the same count run together, and a call that
// wants another waits until they are done (calls arriving meanwhile queue behind it). Threads
// that multiply at once (DataParallel's replicas) thus get the bits they would get alone. Code
// that calls OpenBLAS itself beside ember holds one too.
class BlasThreadsLease {
 public:
  explicit BlasThreadsLease(int threads);  // blocks until OpenBLAS runs `threads` for this caller
  ~BlasThreadsLease();
  BlasThreadsLease(const BlasThreadsLease&) = delete;
  BlasThreadsLease& operator=(const BlasThreadsLease&) = delete;

 private:
  struct State;
  static State& state();
};

// The kernels OpenBLAS picked for this CPU ("SkylakeX", "Haswell", ...), for benchmark reports:
// OPENBLAS_CORETYPE overrides the choice, and AVX-512 kernels run about twice as fast as the AVX2
// ones where the CPU has both (sgemm at 1024^2 on Zen 5: 232 against 125 GFLOP/s per core).
const char* blas_kernels();

}  // namespace ember::kernels::cpu
