// Batch norm on the CPU: x viewed as (batch, channels, spatial), statistics per channel.
//
// Every pass walks the (batch) planes of one channel in chunks of at most kChunk values. The
// arithmetic runs on f32 (f64 for f64) runs: an f32 tensor's own memory, or a 16-bit chunk
// widened into a stack buffer (convert_runs.h). The f32 loops are compiled for AVX-512 and AVX2
// as well as the baseline, and their sums are split across vector lanes, so the f32 and 16-bit
// forms share one vectorised loop; f64 stays on the plain loops (it is the reference precision).
#include <omp.h>

#include <algorithm>
#include <type_traits>

#include "kernels/common/convert.h"
#include "kernels/cpu/convert_runs.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/normalization.h"
#include "kernels/cpu/run_sums.h"
#include "kernels/cpu/vector_math.h"

namespace ember::kernels::cpu {
namespace {

constexpr int64_t kChunk = 1024;

// ---- the loops over one run, for Acc = float (cloned below) or double ----

// sum((x - mean)^2): the second pass of a two-pass variance.
template <typename Acc>
[[gnu::always_inline]] inline Acc squared_deviations_loop(const Acc* x, int64_t n, Acc mean) {
  Acc total = 0;
#pragma omp simd reduction(+ : total)
  for (int64_t i = 0; i < n; ++i) {
    const Acc d = x[i] - mean;
    total += d * d;
  }
  return total;
}

// y = x a + b.
template <typename Acc>
[[gnu::always_inline]] inline void affine_loop(const Acc* x, Acc a, Acc b, Acc* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = x[i] * a + b;
}

// y = relu(x a + b), as `v < 0 ? 0 : v` (relu's own form: it keeps NaN).
template <typename Acc>
[[gnu::always_inline]] inline void affine_relu_loop(const Acc* x, Acc a, Acc b, Acc* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const Acc v = x[i] * a + b;
    y[i] = v < Acc(0) ? Acc(0) : v;
  }
}

// ReLU's backward: g where relu_out > 0 or NaN, else 0 (PyTorch's threshold_backward).
template <typename Acc>
[[gnu::always_inline]] inline void relu_mask_loop(const Acc* g, const Acc* relu_out, Acc* masked,
                                                  int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    masked[i] = relu_out[i] <= Acc(0) ? Acc(0) : g[i];
}

// sum(g) and sum(g (x - mean)), added to the running sums.
template <typename Acc>
struct GradSums {
  Acc g = 0, g_centered = 0;
};
template <typename Acc>
[[gnu::always_inline]] inline void grad_sums_loop(const Acc* g, const Acc* x, int64_t n, Acc mean,
                                                  GradSums<Acc>& sums) {
  Acc sum_g = 0, sum_g_centered = 0;
#pragma omp simd reduction(+ : sum_g, sum_g_centered)
  for (int64_t i = 0; i < n; ++i) {
    sum_g += g[i];
    sum_g_centered += g[i] * (x[i] - mean);
  }
  sums.g += sum_g;
  sums.g_centered += sum_g_centered;
}

// dx = scale (g - mean_g - (x - mean) slope).
template <typename Acc>
[[gnu::always_inline]] inline void grad_input_loop(const Acc* g, const Acc* x, int64_t n, Acc mean,
                                                   Acc scale, Acc mean_g, Acc slope, Acc* dx) {
  for (int64_t i = 0; i < n; ++i)
    dx[i] = scale * (g[i] - mean_g - (x[i] - mean) * slope);
}

EMBER_CLONE_FOR_SIMD float squared_deviations_run(const float* x, int64_t n, float mean) {
  return squared_deviations_loop(x, n, mean);
}
EMBER_CLONE_FOR_SIMD void affine_run(const float* x, float a, float b, float* y, int64_t n) {
  affine_loop(x, a, b, y, n);
}
EMBER_CLONE_FOR_SIMD void affine_relu_run(const float* x, float a, float b, float* y, int64_t n) {
  affine_relu_loop(x, a, b, y, n);
}
EMBER_CLONE_FOR_SIMD void relu_mask_run(const float* g, const float* relu_out, float* masked,
                                        int64_t n) {
  relu_mask_loop(g, relu_out, masked, n);
}
EMBER_CLONE_FOR_SIMD void grad_sums_run(const float* g, const float* x, int64_t n, float mean,
                                        GradSums<float>& sums) {
  grad_sums_loop(g, x, n, mean, sums);
}
EMBER_CLONE_FOR_SIMD void grad_input_run(const float* g, const float* x, int64_t n, float mean,
                                         float scale, float mean_g, float slope, float* dx) {
  grad_input_loop(g, x, n, mean, scale, mean_g, slope, dx);
}

double squared_deviations_run(const double* x, int64_t n, double mean) {
  return squared_deviations_loop(x, n, mean);
}
void affine_run(const double* x, double a, double b, double* y, int64_t n) {
  affine_loop(x, a, b, y, n);
}
void affine_relu_run(const double* x, double a, double b, double* y, int64_t n) {
  affine_relu_loop(x, a, b, y, n);
}
void relu_mask_run(const double* g, const double* relu_out, double* masked, int64_t n) {
  relu_mask_loop(g, relu_out, masked, n);
}
void grad_sums_run(const double* g, const double* x, int64_t n, double mean,
                   GradSums<double>& sums) {
  grad_sums_loop(g, x, n, mean, sums);
}
void grad_input_run(const double* g, const double* x, int64_t n, double mean, double scale,
                    double mean_g, double slope, double* dx) {
  grad_input_loop(g, x, n, mean, scale, mean_g, slope, dx);
}

// body(offset, length) for the chunks of plane (n, c): offsets into the whole tensor.
template <typename Body>
[[gnu::always_inline]] inline void for_each_chunk_of_channel(int64_t c, int64_t batch,
                                                             int64_t channels, int64_t spatial,
                                                             Body body) {
  for (int64_t n = 0; n < batch; ++n) {
    const int64_t plane = (n * channels + c) * spatial;
    for (int64_t begin = 0; begin < spatial; begin += kChunk)
      body(plane + begin, std::min(kChunk, spatial - begin));
  }
}

}  // namespace

template <typename T>
void batch_norm_statistics(const T* x, acc_t<T>* mean, acc_t<T>* variance, int64_t batch,
                           int64_t channels, int64_t spatial) {
  using Acc = acc_t<T>;
  const Acc count = static_cast<Acc>(batch * spatial);
  const int threads = threads_for(batch * channels * spatial * 2);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    Acc buffer[kChunk];
    Acc total = 0;
    for_each_chunk_of_channel(c, batch, channels, spatial, [&](int64_t offset, int64_t length) {
      total += sum_run(accumulate_run(x + offset, buffer, length), length);
    });
    const Acc m = count > 0 ? total / count : Acc(0);
    Acc squares = 0;
    for_each_chunk_of_channel(c, batch, channels, spatial, [&](int64_t offset, int64_t length) {
      squares += squared_deviations_run(accumulate_run(x + offset, buffer, length), length, m);
    });
    mean[c] = m;
    variance[c] = count > 0 ? squares / count : Acc(0);
  }
}

template <typename T>
void batch_norm_apply(const T* x, const acc_t<T>* scale, const acc_t<T>* shift, T* y, int64_t batch,
                      int64_t channels, int64_t spatial, bool relu) {
  using Acc = acc_t<T>;
  const int threads = threads_for(batch * channels * spatial);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t plane = 0; plane < batch * channels; ++plane) {
    const int64_t c = plane % channels;
    Acc in_buffer[kChunk], out_buffer[kChunk];
    for (int64_t begin = 0; begin < spatial; begin += kChunk) {
      const int64_t offset = plane * spatial + begin, length = std::min(kChunk, spatial - begin);
      Acc* out = accumulate_destination(y + offset, out_buffer);
      const Acc* in = accumulate_run(x + offset, in_buffer, length);
      if (relu) {
        affine_relu_run(in, scale[c], shift[c], out, length);
      } else {
        affine_run(in, scale[c], shift[c], out, length);
      }
      store_accumulated(out, y + offset, length);
    }
  }
}

template <typename T>
void batch_norm_backward(const T* grad_out, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                         const acc_t<T>* weight, T* grad_x, acc_t<T>* grad_weight,
                         acc_t<T>* grad_bias, int64_t batch, int64_t channels, int64_t spatial,
                         bool training, const T* relu_out) {
  using Acc = acc_t<T>;
  const Acc count = static_cast<Acc>(batch * spatial);
  const int threads = threads_for(batch * channels * spatial * 4);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    Acc g_buffer[kChunk], x_buffer[kChunk], out_buffer[kChunk], relu_buffer[kChunk],
        masked_buffer[kChunk];
    // The gradient of the batch norm's output: grad_out, through ReLU's backward when fused.
    auto gradient_run = [&](int64_t offset, int64_t length) {
      const Acc* g = accumulate_run(grad_out + offset, g_buffer, length);
      if (!relu_out) return g;
      relu_mask_run(g, accumulate_run(relu_out + offset, relu_buffer, length), masked_buffer,
                    length);
      return static_cast<const Acc*>(masked_buffer);
    };
    const Acc m = mean[c], s = rstd[c];
    const Acc w = weight ? weight[c] : Acc(1);
    GradSums<Acc> sums;
    for_each_chunk_of_channel(c, batch, channels, spatial, [&](int64_t offset, int64_t length) {
      grad_sums_run(gradient_run(offset, length), accumulate_run(x + offset, x_buffer, length),
                    length, m, sums);
    });
    const Acc sum_g_xhat = sums.g_centered * s;  // xhat = (x - mean) rstd
    if (grad_weight) grad_weight[c] = sum_g_xhat;
    if (grad_bias) grad_bias[c] = sums.g;
    if (!grad_x) continue;
    const Acc mean_g = training && count > 0 ? sums.g / count : Acc(0);
    const Acc mean_g_xhat = training && count > 0 ? sum_g_xhat / count : Acc(0);
    // w s (g - mean_g - xhat mean_g_xhat), with xhat mean_g_xhat = (x - m) (s mean_g_xhat)
    for_each_chunk_of_channel(c, batch, channels, spatial, [&](int64_t offset, int64_t length) {
      Acc* out = accumulate_destination(grad_x + offset, out_buffer);
      if (!training) {
        // g w s alone: x does not enter, so a NaN or infinite x leaves its gradient finite, as
        // in PyTorch (the centred form would multiply it by a zero slope).
        affine_run(gradient_run(offset, length), w * s, Acc(0), out, length);
        store_accumulated(out, grad_x + offset, length);
        return;
      }
      grad_input_run(gradient_run(offset, length), accumulate_run(x + offset, x_buffer, length),
                     length, m, w * s, mean_g, s * mean_g_xhat, out);
      store_accumulated(out, grad_x + offset, length);
    });
  }
}

#define EMBER_INSTANTIATE_BATCH_NORM(T)                                                      \
  template void batch_norm_statistics<T>(const T*, acc_t<T>*, acc_t<T>*, int64_t, int64_t,   \
                                         int64_t);                                           \
  template void batch_norm_apply<T>(const T*, const acc_t<T>*, const acc_t<T>*, T*, int64_t, \
                                    int64_t, int64_t, bool);                                 \
  template void batch_norm_backward<T>(const T*, const T*, const acc_t<T>*, const acc_t<T>*, \
                                       const acc_t<T>*, T*, acc_t<T>*, acc_t<T>*, int64_t,   \
                                       int64_t, int64_t, bool, const T*);
EMBER_INSTANTIATE_BATCH_NORM(float)
EMBER_INSTANTIATE_BATCH_NORM(double)
EMBER_INSTANTIATE_BATCH_NORM(Half)
EMBER_INSTANTIATE_BATCH_NORM(BFloat16)
#undef EMBER_INSTANTIATE_BATCH_NORM

}  // namespace ember::kernels::cpu
