#include "kernels/cpu/softmax.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/common/convert.h"
#include "kernels/cpu/convert_runs.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/vector_math.h"

// Vector selects in the max and exp loops (see kernels/cpu/vector_math.h).
EMBER_NO_TRAPPING_MATH

namespace ember::kernels::cpu {
namespace {

// Element conversions for this file. Functions defined outside the no-trapping-math region (such
// as convert<>) are not inlined into it, so f32 and f64 must not go through them.
template <typename Dst, typename Src>
[[gnu::always_inline]] inline Dst cast_to(Src value) {
  if constexpr (std::is_same_v<Dst, Src>) {
    return value;
  } else {
    return convert<Dst>(value);
  }
}

// NaN-propagating max of a dense row: a plain max reduction (vectorised) plus a NaN flag.
template <typename Acc>
[[gnu::always_inline]] inline Acc row_max(const Acc* x, int64_t n) {
  Acc m = -std::numeric_limits<Acc>::infinity();
  int nan_seen = 0;
#pragma omp simd reduction(max : m) reduction(| : nan_seen)
  for (int64_t i = 0; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    nan_seen |= x[i] != x[i];
  }
  return nan_seen ? std::numeric_limits<Acc>::quiet_NaN() : m;
}

// One dense row in the accumulator type: x (n) -> y (n). y may alias x. `omp simd` lets the
// sums be reassociated across vector lanes (the build does not use -ffast-math).
template <typename Acc>
[[gnu::always_inline]] inline void softmax_row(const Acc* x, Acc* y, int64_t n, bool log) {
  const Acc m = row_max(x, n);
  Acc total = 0;
  if (log) {
#pragma omp simd reduction(+ : total)
    for (int64_t i = 0; i < n; ++i)
      total += exp_vectorisable(x[i] - m);
    const Acc shift = m + std::log(total);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      y[i] = x[i] - shift;
    return;
  }
#pragma omp simd reduction(+ : total)
  for (int64_t i = 0; i < n; ++i) {
    const Acc e = exp_vectorisable(x[i] - m);
    y[i] = e;
    total += e;
  }
  const Acc scale = Acc(1) / total;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    y[i] *= scale;
}

// Dense rows [begin, end) of f32 or f64 data.
template <typename Acc>
[[gnu::always_inline]] inline void softmax_rows_native(const Acc* in, Acc* out, int64_t begin,
                                                       int64_t end, int64_t n, bool log) {
  for (int64_t r = begin; r < end; ++r)
    softmax_row(in + r * n, out + r * n, n, log);
}

// The f32 rows compiled for AVX-512 and AVX2 as well as the baseline, picked at load time: the
// build targets plain x86-64, and the exp polynomial dominates this loop.
EMBER_CLONE_FOR_SIMD void softmax_rows_f32(const float* in, float* out, int64_t begin, int64_t end,
                                           int64_t n, bool log) {
  softmax_rows_native(in, out, begin, end, n, log);
}

template <typename T>
void softmax_rows(const T* in, T* out, int64_t outer, int64_t dim, bool log) {
  using Acc = acc_t<T>;
  const int threads = threads_for(outer * dim * 8);  // exp makes each element costly
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t chunk = (outer + nt - 1) / nt;
    const int64_t begin = std::min(outer, chunk * t), end = std::min(outer, begin + chunk);
    if constexpr (std::is_same_v<T, float>) {
      softmax_rows_f32(in, out, begin, end, dim, log);
    } else if constexpr (std::is_same_v<T, Acc>) {
      softmax_rows_native(in, out, begin, end, dim, log);
    } else {
      // 16-bit rows go through one f32 row buffer per thread.
      std::vector<float> row(static_cast<size_t>(dim));
      for (int64_t r = begin; r < end; ++r) {
        for (int64_t k = 0; k < dim; ++k)
          row[k] = cast_to<float>(in[r * dim + k]);
        softmax_rows_f32(row.data(), row.data(), 0, 1, dim, log);
        for (int64_t k = 0; k < dim; ++k)
          out[r * dim + k] = cast_to<T>(row[k]);
      }
    }
  }
}

// Strided lines (inner > 1): blocks of neighbouring lines, one row of the block at a time.
constexpr int64_t kColumnBlock = 64;

// body(slab, width) for every block of `width` <= kColumnBlock neighbouring lines of a dense
// (outer, dim, inner) array, `slab` being the offset of the block's first element; the blocks
// are split across threads once outer dim inner x cost_per_element is worth it.
template <typename Body>
void over_column_blocks(int64_t outer, int64_t dim, int64_t inner, int64_t cost_per_element,
                        Body body) {
  const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
  const int threads = threads_for(outer * dim * inner * cost_per_element);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t task = 0; task < outer * blocks; ++task) {
    const int64_t o = task / blocks, begin = (task % blocks) * kColumnBlock;
    body(o * dim * inner + begin, std::min(kColumnBlock, inner - begin));
  }
}

template <typename T>
void softmax_columns(const T* in, T* out, int64_t outer, int64_t dim, int64_t inner, bool log) {
  using Acc = acc_t<T>;
  // exp makes each element costly
  over_column_blocks(outer, dim, inner, 8, [&](int64_t offset, int64_t width) {
    const T* slab = in + offset;
    T* out_slab = out + offset;
    Acc m[kColumnBlock], total[kColumnBlock];
    for (int64_t l = 0; l < width; ++l) {
      m[l] = -std::numeric_limits<Acc>::infinity();
      total[l] = 0;
    }
    for (int64_t r = 0; r < dim; ++r) {
      for (int64_t l = 0; l < width; ++l) {
        const Acc x = cast_to<Acc>(slab[r * inner + l]);
        m[l] = (x > m[l] || x != x) ? x : m[l];
      }
    }
    for (int64_t r = 0; r < dim; ++r) {
      for (int64_t l = 0; l < width; ++l)
        total[l] += exp_vectorisable(cast_to<Acc>(slab[r * inner + l]) - m[l]);
    }
    for (int64_t l = 0; l < width; ++l)
      total[l] = log ? m[l] + std::log(total[l]) : Acc(1) / total[l];
    for (int64_t r = 0; r < dim; ++r) {
      for (int64_t l = 0; l < width; ++l) {
        const Acc x = cast_to<Acc>(slab[r * inner + l]);
        const Acc y = log ? x - total[l] : exp_vectorisable(x - m[l]) * total[l];
        out_slab[r * inner + l] = cast_to<T>(y);
      }
    }
  });
}

// ---- backward ----

// One dense row: grad_in = y (g - sum(g y)) (softmax) or g - exp(y) sum(g) (log_softmax).
// The sum is taken in f64 lanes: a sequential f32 sum drifts by ~2e-5 relative over 32K values,
// and g - dot cancels where the row's gradient is nearly its weighted mean.
template <typename Acc>
[[gnu::always_inline]] inline void softmax_backward_row(const Acc* g, const Acc* y, Acc* grad_in,
                                                        int64_t n, bool log) {
  double dot_sum = 0;
  if (log) {
#pragma omp simd reduction(+ : dot_sum)
    for (int64_t i = 0; i < n; ++i)
      dot_sum += static_cast<double>(g[i]);
  } else {
#pragma omp simd reduction(+ : dot_sum)
    for (int64_t i = 0; i < n; ++i)
      dot_sum += static_cast<double>(g[i]) * static_cast<double>(y[i]);
  }
  const Acc dot = static_cast<Acc>(dot_sum);
  if (log) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      grad_in[i] = g[i] - exp_vectorisable(y[i]) * dot;
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      grad_in[i] = y[i] * (g[i] - dot);
  }
}

template <typename Acc>
[[gnu::always_inline]] inline void softmax_backward_rows_native(const Acc* g, const Acc* y,
                                                                Acc* grad_in, int64_t begin,
                                                                int64_t end, int64_t n, bool log) {
  for (int64_t r = begin; r < end; ++r)
    softmax_backward_row(g + r * n, y + r * n, grad_in + r * n, n, log);
}

EMBER_CLONE_FOR_SIMD void softmax_backward_rows_f32(const float* g, const float* y, float* grad_in,
                                                    int64_t begin, int64_t end, int64_t n,
                                                    bool log) {
  softmax_backward_rows_native(g, y, grad_in, begin, end, n, log);
}

// Dense rows (inner == 1), split across threads in whole rows like the forward.
template <typename T>
void softmax_backward_rows(const T* g, const T* y, T* grad_in, int64_t outer, int64_t dim,
                           bool log) {
  using Acc = acc_t<T>;
  const int threads = threads_for(outer * dim * 2);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t chunk = (outer + nt - 1) / nt;
    const int64_t begin = std::min(outer, chunk * t), end = std::min(outer, begin + chunk);
    if constexpr (std::is_same_v<T, float>) {
      softmax_backward_rows_f32(g, y, grad_in, begin, end, dim, log);
    } else if constexpr (std::is_same_v<T, Acc>) {
      softmax_backward_rows_native(g, y, grad_in, begin, end, dim, log);
    } else {
      // 16-bit rows go through f32 row buffers, one set per thread.
      std::vector<float> g_row(static_cast<size_t>(dim)), y_row(g_row.size());
      for (int64_t r = begin; r < end; ++r) {
        widen_to_f32(g + r * dim, g_row.data(), dim);
        widen_to_f32(y + r * dim, y_row.data(), dim);
        softmax_backward_rows_f32(g_row.data(), y_row.data(), g_row.data(), 0, 1, dim, log);
        narrow_from_f32(g_row.data(), grad_in + r * dim, dim);
      }
    }
  }
}

// Strided lines (inner > 1): blocks of neighbouring lines as in the forward, one row of the block
// at a time, so that the inner loops run along memory (and vectorise).
template <typename T>
void softmax_backward_columns(const T* g, const T* y, T* grad_in, int64_t outer, int64_t dim,
                              int64_t inner, bool log) {
  using Acc = acc_t<T>;
  over_column_blocks(outer, dim, inner, 2, [&](int64_t slab, int64_t width) {
    double dot_sums[kColumnBlock] = {};  // f64, as for dense rows
    for (int64_t r = 0; r < dim; ++r) {
      const T* g_row = g + slab + r * inner;
      const T* y_row = y + slab + r * inner;
      if (log) {
        for (int64_t l = 0; l < width; ++l)
          dot_sums[l] += static_cast<double>(cast_to<Acc>(g_row[l]));
      } else {
        for (int64_t l = 0; l < width; ++l)
          dot_sums[l] += static_cast<double>(cast_to<Acc>(g_row[l])) *
                         static_cast<double>(cast_to<Acc>(y_row[l]));
      }
    }
    Acc dot[kColumnBlock];
    for (int64_t l = 0; l < width; ++l)
      dot[l] = static_cast<Acc>(dot_sums[l]);
    for (int64_t r = 0; r < dim; ++r) {
      const T* g_row = g + slab + r * inner;
      const T* y_row = y + slab + r * inner;
      T* out_row = grad_in + slab + r * inner;
      if (log) {
        for (int64_t l = 0; l < width; ++l)
          out_row[l] = cast_to<T>(cast_to<Acc>(g_row[l]) -
                                  exp_vectorisable(cast_to<Acc>(y_row[l])) * dot[l]);
      } else {
        for (int64_t l = 0; l < width; ++l)
          out_row[l] = cast_to<T>(cast_to<Acc>(y_row[l]) * (cast_to<Acc>(g_row[l]) - dot[l]));
      }
    }
  });
}

}  // namespace

template <typename T>
void softmax(const T* in, T* out, int64_t outer, int64_t dim, int64_t inner, bool log) {
  if (outer == 0 || dim == 0 || inner == 0) return;
  if (inner == 1) {
    softmax_rows(in, out, outer, dim, log);
  } else {
    softmax_columns(in, out, outer, dim, inner, log);
  }
}

template <typename T>
void softmax_backward(const T* grad_out, const T* out, T* grad_in, int64_t outer, int64_t dim,
                      int64_t inner, bool log) {
  if (outer == 0 || dim == 0 || inner == 0) return;
  if (inner == 1) {
    softmax_backward_rows(grad_out, out, grad_in, outer, dim, log);
    return;
  }
  softmax_backward_columns(grad_out, out, grad_in, outer, dim, inner, log);
}

#define EMBER_INSTANTIATE_SOFTMAX(T)                                       \
  template void softmax<T>(const T*, T*, int64_t, int64_t, int64_t, bool); \
  template void softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t, int64_t, bool);
EMBER_INSTANTIATE_SOFTMAX(float)
EMBER_INSTANTIATE_SOFTMAX(double)
EMBER_INSTANTIATE_SOFTMAX(Half)
EMBER_INSTANTIATE_SOFTMAX(BFloat16)

}  // namespace ember::kernels::cpu
