#include "kernels/cpu/normalization.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/convert.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/vector_math.h"

namespace ember::kernels::cpu {
namespace {

// Sum of a dense row. `omp simd` lets the sum be split across vector lanes (the build does not
// use -ffast-math, so a plain loop would stay sequential).
template <typename T, typename Acc = acc_t<T>>
[[gnu::always_inline]] inline Acc row_sum(const T* x, int64_t n) {
  Acc total = 0;
#pragma omp simd reduction(+ : total)
  for (int64_t i = 0; i < n; ++i)
    total += convert<Acc>(x[i]);
  return total;
}

// Sum of squared deviations from `mean` (the second pass of a two-pass variance).
template <typename T, typename Acc = acc_t<T>>
[[gnu::always_inline]] inline Acc row_squared_deviations(const T* x, int64_t n, Acc mean) {
  Acc total = 0;
#pragma omp simd reduction(+ : total)
  for (int64_t i = 0; i < n; ++i) {
    const Acc d = convert<Acc>(x[i]) - mean;
    total += d * d;
  }
  return total;
}

// Rows [begin, end) of the layer norm forward. The row (cols values) stays in L1/L2 between
// its three passes: mean, variance, write.
template <typename T>
[[gnu::always_inline]] inline void layer_norm_rows(const T* x, const T* weight, const T* bias, T* y,
                                                   acc_t<T>* mean, acc_t<T>* rstd, int64_t begin,
                                                   int64_t end, int64_t cols, double eps) {
  using Acc = acc_t<T>;
  for (int64_t r = begin; r < end; ++r) {
    const T* in = x + r * cols;
    T* out = y + r * cols;
    const Acc m = row_sum(in, cols) / static_cast<Acc>(cols);
    const Acc variance = row_squared_deviations(in, cols, m) / static_cast<Acc>(cols);
    const Acc s = Acc(1) / std::sqrt(variance + static_cast<Acc>(eps));
    mean[r] = m;
    rstd[r] = s;
    if (weight && bias) {
      for (int64_t k = 0; k < cols; ++k)
        out[k] = convert<T>((convert<Acc>(in[k]) - m) * s * convert<Acc>(weight[k]) +
                            convert<Acc>(bias[k]));
    } else if (weight) {
      for (int64_t k = 0; k < cols; ++k)
        out[k] = convert<T>((convert<Acc>(in[k]) - m) * s * convert<Acc>(weight[k]));
    } else if (bias) {
      for (int64_t k = 0; k < cols; ++k)
        out[k] = convert<T>((convert<Acc>(in[k]) - m) * s + convert<Acc>(bias[k]));
    } else {
      for (int64_t k = 0; k < cols; ++k)
        out[k] = convert<T>((convert<Acc>(in[k]) - m) * s);
    }
  }
}

// The f32 rows compiled for AVX-512 and AVX2 too (the build targets plain x86-64).
EMBER_CLONE_FOR_SIMD void layer_norm_rows_f32(const float* x, const float* weight,
                                              const float* bias, float* y, float* mean, float* rstd,
                                              int64_t begin, int64_t end, int64_t cols,
                                              double eps) {
  layer_norm_rows(x, weight, bias, y, mean, rstd, begin, end, cols, eps);
}

// Splits [0, n) into one contiguous chunk per thread.
struct Chunk {
  int64_t begin, end;
};
inline Chunk thread_chunk(int64_t n) {
  const int t = omp_get_thread_num(), nt = omp_get_num_threads();
  const int64_t size = (n + nt - 1) / nt;
  const int64_t begin = std::min(n, size * t);
  return {begin, std::min(n, begin + size)};
}

}  // namespace

template <typename T>
void layer_norm(const T* x, const T* weight, const T* bias, T* y, acc_t<T>* mean, acc_t<T>* rstd,
                int64_t rows, int64_t cols, double eps) {
  const int threads = threads_for(rows * cols * 2);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const Chunk c = thread_chunk(rows);
    if constexpr (std::is_same_v<T, float>) {
      layer_norm_rows_f32(x, weight, bias, y, mean, rstd, c.begin, c.end, cols, eps);
    } else {
      layer_norm_rows(x, weight, bias, y, mean, rstd, c.begin, c.end, cols, eps);
    }
  }
}

template <typename T>
void layer_norm_backward(const T* grad_out, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                         const T* weight, T* grad_x, T* grad_weight, T* grad_bias, int64_t rows,
                         int64_t cols) {
  using Acc = acc_t<T>;
  const bool want_params = grad_weight || grad_bias;
  const int threads = threads_for(rows * cols * 4);
  // Per-thread partial sums of grad_weight / grad_bias, added up after the parallel region.
  std::vector<std::vector<Acc>> partial_weight(threads), partial_bias(threads);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int t = omp_get_thread_num();
    const Chunk c = thread_chunk(rows);
    std::vector<Acc>& dw = partial_weight[t];
    std::vector<Acc>& db = partial_bias[t];
    if (want_params) {
      dw.assign(static_cast<size_t>(cols), Acc(0));
      db.assign(static_cast<size_t>(cols), Acc(0));
    }
    for (int64_t r = c.begin; r < c.end; ++r) {
      const T* g = grad_out + r * cols;
      const T* in = x + r * cols;
      const Acc m = mean[r], s = rstd[r];
      double sum_gw = 0, sum_gw_xhat = 0;  // f64: a sequential f32 sum drifts at 32K values
      for (int64_t k = 0; k < cols; ++k) {
        const Acc gk = convert<Acc>(g[k]);
        const Acc xhat = (convert<Acc>(in[k]) - m) * s;
        const Acc gw = weight ? gk * convert<Acc>(weight[k]) : gk;
        sum_gw += gw;
        sum_gw_xhat += gw * xhat;
        if (want_params) {
          dw[k] += gk * xhat;
          db[k] += gk;
        }
      }
      const Acc mean_gw = static_cast<Acc>(sum_gw / static_cast<double>(cols));
      const Acc mean_gw_xhat = static_cast<Acc>(sum_gw_xhat / static_cast<double>(cols));
      if (grad_x) {
        T* out = grad_x + r * cols;
        for (int64_t k = 0; k < cols; ++k) {
          const Acc gk = convert<Acc>(g[k]);
          const Acc xhat = (convert<Acc>(in[k]) - m) * s;
          const Acc gw = weight ? gk * convert<Acc>(weight[k]) : gk;
          out[k] = convert<T>(s * (gw - mean_gw - xhat * mean_gw_xhat));
        }
      }
    }
  }
  if (!want_params) return;
  for (int64_t k = 0; k < cols; ++k) {
    Acc dw = 0, db = 0;
    for (int t = 0; t < threads; ++t) {
      if (partial_weight[t].empty()) continue;
      dw += partial_weight[t][k];
      db += partial_bias[t][k];
    }
    if (grad_weight) grad_weight[k] = convert<T>(dw);
    if (grad_bias) grad_bias[k] = convert<T>(db);
  }
}

#define EMBER_INSTANTIATE_NORMALIZATION(T)                                                     \
  template void layer_norm<T>(const T*, const T*, const T*, T*, acc_t<T>*, acc_t<T>*, int64_t, \
                              int64_t, double);                                                \
  template void layer_norm_backward<T>(const T*, const T*, const acc_t<T>*, const acc_t<T>*,   \
                                       const T*, T*, T*, T*, int64_t, int64_t);
EMBER_INSTANTIATE_NORMALIZATION(float)
EMBER_INSTANTIATE_NORMALIZATION(double)
EMBER_INSTANTIATE_NORMALIZATION(Half)
EMBER_INSTANTIATE_NORMALIZATION(BFloat16)

}  // namespace ember::kernels::cpu
