#include "kernels/cpu/normalization.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/convert.h"
#include "kernels/cpu/convert_runs.h"
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

// Rows [begin, end) of the layer norm backward in f32 or f64: g, x, dx dense (rows, cols); w the
// weight or null; dw, db this thread's partial parameter gradients (added to) or null; dx null
// when grad_x is not wanted. With xhat = (x - mean) rstd and gw = g w:
//   dx = rstd (gw - mean(gw) - xhat mean(gw xhat)),  dw += g xhat,  db += g.
// The two row sums are taken in f64 lanes (a sequential f32 sum drifts at 32K values). dx may
// alias g: each element is read before it is written.
template <typename Acc>
[[gnu::always_inline]] inline void layer_norm_backward_rows(const Acc* g_rows, const Acc* x_rows,
                                                            const Acc* mean, const Acc* rstd,
                                                            const Acc* w, Acc* dx_rows, Acc* dw,
                                                            Acc* db, int64_t begin, int64_t end,
                                                            int64_t cols) {
  for (int64_t r = begin; r < end; ++r) {
    const Acc* g = g_rows + r * cols;
    const Acc* x = x_rows + r * cols;
    const Acc m = mean[r], s = rstd[r];
    if (dw) {
#pragma omp simd
      for (int64_t k = 0; k < cols; ++k) {
        dw[k] += g[k] * ((x[k] - m) * s);
        db[k] += g[k];
      }
    }
    if (!dx_rows) continue;
    double sum_gw = 0, sum_gw_xhat = 0;
    if (w) {
#pragma omp simd reduction(+ : sum_gw, sum_gw_xhat)
      for (int64_t k = 0; k < cols; ++k) {
        const Acc gw = g[k] * w[k];
        sum_gw += static_cast<double>(gw);
        sum_gw_xhat += static_cast<double>(gw * ((x[k] - m) * s));
      }
    } else {
#pragma omp simd reduction(+ : sum_gw, sum_gw_xhat)
      for (int64_t k = 0; k < cols; ++k) {
        sum_gw += static_cast<double>(g[k]);
        sum_gw_xhat += static_cast<double>(g[k] * ((x[k] - m) * s));
      }
    }
    Acc* dx = dx_rows + r * cols;
    const Acc mean_gw = static_cast<Acc>(sum_gw / static_cast<double>(cols));
    const Acc mean_gw_xhat = static_cast<Acc>(sum_gw_xhat / static_cast<double>(cols));
    if (w) {
#pragma omp simd
      for (int64_t k = 0; k < cols; ++k)
        dx[k] = s * (g[k] * w[k] - mean_gw - ((x[k] - m) * s) * mean_gw_xhat);
    } else {
#pragma omp simd
      for (int64_t k = 0; k < cols; ++k)
        dx[k] = s * (g[k] - mean_gw - ((x[k] - m) * s) * mean_gw_xhat);
    }
  }
}

EMBER_CLONE_FOR_SIMD void layer_norm_backward_rows_f32(const float* g, const float* x,
                                                       const float* mean, const float* rstd,
                                                       const float* w, float* dx, float* dw,
                                                       float* db, int64_t begin, int64_t end,
                                                       int64_t cols) {
  layer_norm_backward_rows(g, x, mean, rstd, w, dx, dw, db, begin, end, cols);
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
  // 16-bit weights widened once for all rows.
  std::vector<float> weight_f32;
  if constexpr (is_reduced_float_v<T>) {
    if (weight) {
      weight_f32.resize(static_cast<size_t>(cols));
      widen_to_f32(weight, weight_f32.data(), cols);
    }
  }
  // Per-thread partial sums of grad_weight / grad_bias, added up after the parallel region.
  std::vector<std::vector<Acc>> partial_weight(threads), partial_bias(threads);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int t = omp_get_thread_num();
    const Chunk c = thread_chunk(rows);
    Acc* dw = nullptr;
    Acc* db = nullptr;
    if (want_params) {
      partial_weight[t].assign(static_cast<size_t>(cols), Acc(0));
      partial_bias[t].assign(static_cast<size_t>(cols), Acc(0));
      dw = partial_weight[t].data();
      db = partial_bias[t].data();
    }
    if constexpr (std::is_same_v<T, float>) {
      layer_norm_backward_rows_f32(grad_out, x, mean, rstd, weight, grad_x, dw, db, c.begin, c.end,
                                   cols);
    } else if constexpr (std::is_same_v<T, Acc>) {
      layer_norm_backward_rows(grad_out, x, mean, rstd, weight, grad_x, dw, db, c.begin, c.end,
                               cols);
    } else {
      // 16-bit rows go through f32 row buffers, one set per thread.
      std::vector<float> g_row(static_cast<size_t>(cols)), x_row(g_row.size());
      for (int64_t r = c.begin; r < c.end; ++r) {
        widen_to_f32(grad_out + r * cols, g_row.data(), cols);
        widen_to_f32(x + r * cols, x_row.data(), cols);
        // The row's grad_x overwrites its grad_out buffer (each element is read before written).
        layer_norm_backward_rows_f32(g_row.data(), x_row.data(), mean + r, rstd + r,
                                     weight ? weight_f32.data() : nullptr,
                                     grad_x ? g_row.data() : nullptr, dw, db, 0, 1, cols);
        if (grad_x) narrow_from_f32(g_row.data(), grad_x + r * cols, cols);
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
