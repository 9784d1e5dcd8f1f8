#include "kernels/cpu/run_sums.h"

#include "kernels/cpu/vector_math.h"

namespace ember::kernels::cpu {

EMBER_CLONE_FOR_SIMD float sum_run(const float* x, int64_t n) {
  float total = 0.0f;
#pragma omp simd reduction(+ : total)
  for (int64_t i = 0; i < n; ++i)
    total += x[i];
  return total;
}

double sum_run(const double* x, int64_t n) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i)
    total += x[i];
  return total;
}

}  // namespace ember::kernels::cpu
