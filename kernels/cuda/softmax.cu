#include <cstdint>

#include "kernels/common/convert.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/row_reduce.cuh"
#include "kernels/cuda/softmax.h"

namespace ember::kernels::cuda {
namespace {

namespace dm = device_math;
using rows::Combine;
using rows::Group;

// inner == 1. in (outer, n) -> out (outer, n): a warp or a block per row (rows::Group).
// Mirrors kernels/cpu/softmax.cpp's softmax_row: NaN-propagating max, sum of exp(x - max), then
// y = exp(x - max) / sum or y = x - (max + log(sum)).
template <bool kBlock, typename T>
__global__ void __launch_bounds__(rows::kMaxThreads)
    softmax_rows_kernel(const T* in, T* out, int64_t outer, int64_t n, bool log, bool vectorised) {
  using Acc = acc_t<T>;
  using G = Group<kBlock>;
  for (int64_t r = G::first_row(); r < outer; r += G::row_step()) {
    const T* x = in + r * n;
    T* y = out + r * n;
    Acc m = rows::negative_infinity<Acc>();
    rows::for_each<kBlock>(x, n, vectorised, [&](int64_t, T value) {
      m = rows::combine<Combine::max_keep_nan>(m, convert<Acc>(value));
    });
    m = G::template all_reduce<Combine::max_keep_nan>(m, rows::negative_infinity<Acc>());
    Acc total = 0;
    rows::for_each<kBlock>(x, n, vectorised,
                           [&](int64_t, T value) { total += dm::exp(convert<Acc>(value) - m); });
    total = G::template all_reduce<Combine::sum>(total, Acc(0));
    if (log) {
      const Acc shift = m + dm::log(total);
      rows::map<kBlock>(
          y, x, static_cast<const T*>(nullptr), n, vectorised,
          [=](int64_t, T value, T) { return convert<T>(convert<Acc>(value) - shift); });
    } else {
      const Acc scale = Acc(1) / total;
      rows::map<kBlock>(y, x, static_cast<const T*>(nullptr), n, vectorised,
                        [=](int64_t, T value, T) {
                          return convert<T>(dm::exp(convert<Acc>(value) - m) * scale);
                        });
    }
  }
}

// inner == 1 backward. grad_out, out (outer, n) -> grad_in (outer, n).
template <bool kBlock, typename T>
__global__ void __launch_bounds__(rows::kMaxThreads)
    softmax_backward_rows_kernel(const T* grad_out, const T* out, T* grad_in, int64_t outer,
                                 int64_t n, bool log, bool vectorised) {
  using Acc = acc_t<T>;
  using G = Group<kBlock>;
  for (int64_t r = G::first_row(); r < outer; r += G::row_step()) {
    const T* g = grad_out + r * n;
    const T* y = out + r * n;
    // dot = sum(g * y) (softmax) or sum(g) (log_softmax): g is walked, y read at the same index.
    Acc dot = 0;
    rows::for_each<kBlock>(g, n, vectorised, [&](int64_t k, T value) {
      dot += log ? convert<Acc>(value) : convert<Acc>(value) * convert<Acc>(y[k]);
    });
    dot = G::template all_reduce<Combine::sum>(dot, Acc(0));
    rows::map<kBlock>(grad_in + r * n, g, y, n, vectorised, [=](int64_t, T g_value, T y_value) {
      const Acc gk = convert<Acc>(g_value), yk = convert<Acc>(y_value);
      return convert<T>(log ? gk - dm::exp(yk) * dot : yk * (gk - dot));
    });
  }
}

// inner > 1. One thread per line (o, i): line values at base + r * inner, r < dim.
template <typename T>
__global__ void softmax_lines_kernel(const T* in, T* out, int64_t outer, int64_t dim, int64_t inner,
                                     bool log) {
  using Acc = acc_t<T>;
  const int64_t lines = outer * inner;
  for (int64_t line = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; line < lines;
       line += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t o = line / inner, i = line % inner;
    const T* x = in + o * dim * inner + i;
    T* y = out + o * dim * inner + i;
    Acc m = rows::negative_infinity<Acc>();
    for (int64_t r = 0; r < dim; ++r)
      m = rows::combine<Combine::max_keep_nan>(m, convert<Acc>(x[r * inner]));
    Acc total = 0;
    for (int64_t r = 0; r < dim; ++r)
      total += dm::exp(convert<Acc>(x[r * inner]) - m);
    const Acc shift_or_scale = log ? m + dm::log(total) : Acc(1) / total;
    for (int64_t r = 0; r < dim; ++r) {
      const Acc value = convert<Acc>(x[r * inner]);
      y[r * inner] = convert<T>(log ? value - shift_or_scale : dm::exp(value - m) * shift_or_scale);
    }
  }
}

template <typename T>
__global__ void softmax_backward_lines_kernel(const T* grad_out, const T* out, T* grad_in,
                                              int64_t outer, int64_t dim, int64_t inner, bool log) {
  using Acc = acc_t<T>;
  const int64_t lines = outer * inner;
  for (int64_t line = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; line < lines;
       line += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t o = line / inner, i = line % inner;
    const int64_t base = o * dim * inner + i;
    Acc dot = 0;
    for (int64_t r = 0; r < dim; ++r) {
      const Acc g = convert<Acc>(grad_out[base + r * inner]);
      dot += log ? g : g * convert<Acc>(out[base + r * inner]);
    }
    for (int64_t r = 0; r < dim; ++r) {
      const int64_t k = base + r * inner;
      const Acc g = convert<Acc>(grad_out[k]), y = convert<Acc>(out[k]);
      grad_in[k] = convert<T>(log ? g - dm::exp(y) * dot : y * (g - dot));
    }
  }
}

}  // namespace

template <typename T>
void softmax(const T* in, T* out, int64_t outer, int64_t dim, int64_t inner, bool log,
             cudaStream_t stream) {
  if (outer == 0 || dim == 0 || inner == 0) return;
  if (inner > 1) {
    softmax_lines_kernel<T><<<blocks_for(outer * inner), kThreadsPerBlock, 0, stream>>>(
        in, out, outer, dim, inner, log);
    EMBER_CUDA_CHECK_LAUNCH("softmax: softmax_lines_kernel<<<>>>");
    return;
  }
  const rows::LaunchShape shape = rows::launch_shape(outer, dim);
  const bool vectorised = rows::vector_aligned<T>(dim, {in, out});
  if (shape.block_per_row) {
    softmax_rows_kernel<true, T>
        <<<shape.blocks, shape.threads, 0, stream>>>(in, out, outer, dim, log, vectorised);
  } else {
    softmax_rows_kernel<false, T>
        <<<shape.blocks, shape.threads, 0, stream>>>(in, out, outer, dim, log, vectorised);
  }
  EMBER_CUDA_CHECK_LAUNCH("softmax: softmax_rows_kernel<<<>>>");
}

template <typename T>
void softmax_backward(const T* grad_out, const T* out, T* grad_in, int64_t outer, int64_t dim,
                      int64_t inner, bool log, cudaStream_t stream) {
  if (outer == 0 || dim == 0 || inner == 0) return;
  if (inner > 1) {
    softmax_backward_lines_kernel<T><<<blocks_for(outer * inner), kThreadsPerBlock, 0, stream>>>(
        grad_out, out, grad_in, outer, dim, inner, log);
    EMBER_CUDA_CHECK_LAUNCH("softmax_backward: softmax_backward_lines_kernel<<<>>>");
    return;
  }
  const rows::LaunchShape shape = rows::launch_shape(outer, dim);
  const bool vectorised = rows::vector_aligned<T>(dim, {grad_out, out, grad_in});
  if (shape.block_per_row) {
    softmax_backward_rows_kernel<true, T><<<shape.blocks, shape.threads, 0, stream>>>(
        grad_out, out, grad_in, outer, dim, log, vectorised);
  } else {
    softmax_backward_rows_kernel<false, T><<<shape.blocks, shape.threads, 0, stream>>>(
        grad_out, out, grad_in, outer, dim, log, vectorised);
  }
  EMBER_CUDA_CHECK_LAUNCH("softmax_backward: softmax_backward_rows_kernel<<<>>>");
}

#define EMBER_INSTANTIATE_SOFTMAX(T)                                                         \
  template void softmax<T>(const T*, T*, int64_t, int64_t, int64_t, bool, cudaStream_t);     \
  template void softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t, int64_t, bool, \
                                    cudaStream_t);
EMBER_INSTANTIATE_SOFTMAX(float)
EMBER_INSTANTIATE_SOFTMAX(double)
EMBER_INSTANTIATE_SOFTMAX(Half)
EMBER_INSTANTIATE_SOFTMAX(BFloat16)
#undef EMBER_INSTANTIATE_SOFTMAX

}  // namespace ember::kernels::cuda
