#include <cstdint>

#include "kernels/common/convert.h"
#include "kernels/common/cross_entropy.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/loss.h"
#include "kernels/cuda/row_reduce.cuh"

namespace ember::kernels::cuda {
namespace {

namespace dm = device_math;
using rows::Combine;
using rows::Group;

__device__ __forceinline__ int64_t grid_start() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_step() {
  return static_cast<int64_t>(blockDim.x) * gridDim.x;
}

// False for ±inf and NaN (whose x - x is NaN).
template <typename Acc>
__device__ __forceinline__ bool is_finite(Acc x) {
  return x - x == Acc(0);
}

// The shift kernels/cpu/loss.cpp subtracts before exponentiating: the largest logit, or 0 when
// that is not finite, so that an all -inf row keeps lse = -inf rather than NaN.
template <typename Acc>
__device__ __forceinline__ Acc logsumexp_shift(Acc largest) {
  return is_finite(largest) ? largest : Acc(0);
}

// The loss of position p from its row's logsumexp and sum of logits (class c at row[c * inner]).
template <typename T, typename Acc = acc_t<T>>
__device__ __forceinline__ void write_loss(int64_t p, const T* row, int64_t inner,
                                           const int64_t* target, int64_t classes,
                                           int64_t ignore_index, Acc smoothing, Acc lse, Acc values,
                                           Acc* loss, Acc* logsumexp) {
  logsumexp[p] = lse;
  const int64_t t = target[p];
  if (t == ignore_index) {
    loss[p] = 0;
    return;
  }
  loss[p] = smoothed_cross_entropy(lse, convert<Acc>(row[t * inner]), values, classes, smoothing);
}

// inner == 1. logits (N, C) -> loss, logsumexp (N): a warp or a block per row.
template <bool kBlock, typename T>
__global__ void __launch_bounds__(rows::kMaxThreads)
    cross_entropy_rows_kernel(const T* logits, const int64_t* target, int64_t batch,
                              int64_t classes, int64_t ignore_index, double label_smoothing,
                              acc_t<T>* loss, acc_t<T>* logsumexp, bool vectorised) {
  using Acc = acc_t<T>;
  using G = Group<kBlock>;
  const Acc smoothing = static_cast<Acc>(label_smoothing);
  for (int64_t r = G::first_row(); r < batch; r += G::row_step()) {
    const T* x = logits + r * classes;
    Acc largest = rows::negative_infinity<Acc>();
    rows::for_each<kBlock>(x, classes, vectorised, [&](int64_t, T value) {
      largest = rows::combine<Combine::max_skip_nan>(largest, convert<Acc>(value));
    });
    largest =
        G::template all_reduce<Combine::max_skip_nan>(largest, rows::negative_infinity<Acc>());
    const Acc shift = logsumexp_shift(largest);
    Acc total = 0, values = 0;
    rows::for_each<kBlock>(x, classes, vectorised, [&](int64_t, T value) {
      const Acc a = convert<Acc>(value);
      total += dm::exp(a - shift);
      values += a;
    });
    total = G::template all_reduce<Combine::sum>(total, Acc(0));
    values = G::template all_reduce<Combine::sum>(values, Acc(0));
    if (G::rank() == 0) {
      write_loss<T>(r, x, 1, target, classes, ignore_index, smoothing, shift + dm::log(total),
                    values, loss, logsumexp);
    }
  }
}

// inner > 1. logits (N, C, inner) -> loss, logsumexp (N, inner): a thread per position.
template <typename T>
__global__ void cross_entropy_positions_kernel(const T* logits, const int64_t* target,
                                               int64_t batch, int64_t classes, int64_t inner,
                                               int64_t ignore_index, double label_smoothing,
                                               acc_t<T>* loss, acc_t<T>* logsumexp) {
  using Acc = acc_t<T>;
  const Acc smoothing = static_cast<Acc>(label_smoothing);
  for (int64_t p = grid_start(); p < batch * inner; p += grid_step()) {
    const int64_t n = p / inner, s = p % inner;
    const T* row = logits + n * classes * inner + s;
    Acc largest = rows::negative_infinity<Acc>();
    for (int64_t c = 0; c < classes; ++c)
      largest = rows::combine<Combine::max_skip_nan>(largest, convert<Acc>(row[c * inner]));
    const Acc shift = logsumexp_shift(largest);
    Acc total = 0, values = 0;
    for (int64_t c = 0; c < classes; ++c) {
      const Acc a = convert<Acc>(row[c * inner]);
      total += dm::exp(a - shift);
      values += a;
    }
    write_loss<T>(p, row, inner, target, classes, ignore_index, smoothing, shift + dm::log(total),
                  values, loss, logsumexp);
  }
}

// grad_logits (N, C, inner): one thread per element.
template <typename T>
__global__ void cross_entropy_backward_kernel(const T* logits, const int64_t* target,
                                              const acc_t<T>* logsumexp, const acc_t<T>* grad,
                                              int64_t grad_step, double grad_multiplier,
                                              int64_t batch, int64_t classes, int64_t inner,
                                              int64_t ignore_index, double label_smoothing,
                                              T* grad_logits) {
  using Acc = acc_t<T>;
  const Acc smoothing = static_cast<Acc>(label_smoothing);
  const Acc uniform_share = smoothing / static_cast<Acc>(classes);
  const Acc multiplier = static_cast<Acc>(grad_multiplier);
  const int64_t total = batch * classes * inner;
  for (int64_t i = grid_start(); i < total; i += grid_step()) {
    const int64_t s = i % inner, c = (i / inner) % classes, n = i / (inner * classes);
    const int64_t p = n * inner + s;
    const int64_t t = target[p];
    if (t == ignore_index) {
      grad_logits[i] = convert<T>(Acc(0));
      continue;
    }
    const Acc scale = grad[p * grad_step] * multiplier;
    const Acc softmax = dm::exp(convert<Acc>(logits[i]) - logsumexp[p]);
    const Acc onehot = c == t ? Acc(1) - smoothing : Acc(0);
    grad_logits[i] = convert<T>(scale * (softmax - onehot - uniform_share));
  }
}

template <typename T>
__global__ void nll_forward_kernel(const T* log_probs, const int64_t* target, int64_t batch,
                                   int64_t classes, int64_t inner, int64_t ignore_index,
                                   acc_t<T>* loss) {
  using Acc = acc_t<T>;
  for (int64_t p = grid_start(); p < batch * inner; p += grid_step()) {
    const int64_t n = p / inner, s = p % inner;
    const int64_t t = target[p];
    loss[p] = t == ignore_index ? Acc(0) : -convert<Acc>(log_probs[(n * classes + t) * inner + s]);
  }
}

template <typename T>
__global__ void nll_backward_kernel(const int64_t* target, const acc_t<T>* grad, int64_t grad_step,
                                    double grad_multiplier, int64_t batch, int64_t classes,
                                    int64_t inner, int64_t ignore_index, T* grad_log_probs) {
  using Acc = acc_t<T>;
  const Acc multiplier = static_cast<Acc>(grad_multiplier);
  const int64_t total = batch * classes * inner;
  for (int64_t i = grid_start(); i < total; i += grid_step()) {
    const int64_t s = i % inner, c = (i / inner) % classes, n = i / (inner * classes);
    const int64_t p = n * inner + s;
    const int64_t t = target[p];
    const bool hit = t != ignore_index && c == t;
    grad_log_probs[i] = convert<T>(hit ? -grad[p * grad_step] * multiplier : Acc(0));
  }
}

}  // namespace

template <typename T>
void cross_entropy_forward(const T* logits, const int64_t* target, int64_t batch, int64_t classes,
                           int64_t inner, int64_t ignore_index, double label_smoothing,
                           acc_t<T>* loss, acc_t<T>* logsumexp, cudaStream_t stream) {
  if (batch == 0 || inner == 0) return;
  if (inner > 1) {
    cross_entropy_positions_kernel<T><<<blocks_for(batch * inner), kThreadsPerBlock, 0, stream>>>(
        logits, target, batch, classes, inner, ignore_index, label_smoothing, loss, logsumexp);
    EMBER_CUDA_CHECK_LAUNCH("cross_entropy: cross_entropy_positions_kernel<<<>>>");
    return;
  }
  const rows::LaunchShape shape = rows::launch_shape(batch, classes);
  const bool vectorised = rows::vector_aligned<T>(classes, {logits});
  if (shape.block_per_row) {
    cross_entropy_rows_kernel<true, T><<<shape.blocks, shape.threads, 0, stream>>>(
        logits, target, batch, classes, ignore_index, label_smoothing, loss, logsumexp, vectorised);
  } else {
    cross_entropy_rows_kernel<false, T><<<shape.blocks, shape.threads, 0, stream>>>(
        logits, target, batch, classes, ignore_index, label_smoothing, loss, logsumexp, vectorised);
  }
  EMBER_CUDA_CHECK_LAUNCH("cross_entropy: cross_entropy_rows_kernel<<<>>>");
}

template <typename T>
void cross_entropy_backward(const T* logits, const int64_t* target, const acc_t<T>* logsumexp,
                            const acc_t<T>* grad, int64_t grad_step, double grad_multiplier,
                            int64_t batch, int64_t classes, int64_t inner, int64_t ignore_index,
                            double label_smoothing, T* grad_logits, cudaStream_t stream) {
  const int64_t total = batch * classes * inner;
  if (total == 0) return;
  cross_entropy_backward_kernel<T><<<blocks_for(total), kThreadsPerBlock, 0, stream>>>(
      logits, target, logsumexp, grad, grad_step, grad_multiplier, batch, classes, inner,
      ignore_index, label_smoothing, grad_logits);
  EMBER_CUDA_CHECK_LAUNCH("cross_entropy_backward: cross_entropy_backward_kernel<<<>>>");
}

template <typename T>
void nll_forward(const T* log_probs, const int64_t* target, int64_t batch, int64_t classes,
                 int64_t inner, int64_t ignore_index, acc_t<T>* loss, cudaStream_t stream) {
  if (batch * inner == 0) return;
  nll_forward_kernel<T><<<blocks_for(batch * inner), kThreadsPerBlock, 0, stream>>>(
      log_probs, target, batch, classes, inner, ignore_index, loss);
  EMBER_CUDA_CHECK_LAUNCH("nll_loss: nll_forward_kernel<<<>>>");
}

template <typename T>
void nll_backward(const int64_t* target, const acc_t<T>* grad, int64_t grad_step,
                  double grad_multiplier, int64_t batch, int64_t classes, int64_t inner,
                  int64_t ignore_index, T* grad_log_probs, cudaStream_t stream) {
  const int64_t total = batch * classes * inner;
  if (total == 0) return;
  nll_backward_kernel<T><<<blocks_for(total), kThreadsPerBlock, 0, stream>>>(
      target, grad, grad_step, grad_multiplier, batch, classes, inner, ignore_index,
      grad_log_probs);
  EMBER_CUDA_CHECK_LAUNCH("nll_loss backward: nll_backward_kernel<<<>>>");
}

#define EMBER_INSTANTIATE_LOSS(T)                                                              \
  template void cross_entropy_forward<T>(const T*, const int64_t*, int64_t, int64_t, int64_t,  \
                                         int64_t, double, acc_t<T>*, acc_t<T>*, cudaStream_t); \
  template void cross_entropy_backward<T>(const T*, const int64_t*, const acc_t<T>*,           \
                                          const acc_t<T>*, int64_t, double, int64_t, int64_t,  \
                                          int64_t, int64_t, double, T*, cudaStream_t);         \
  template void nll_forward<T>(const T*, const int64_t*, int64_t, int64_t, int64_t, int64_t,   \
                               acc_t<T>*, cudaStream_t);                                       \
  template void nll_backward<T>(const int64_t*, const acc_t<T>*, int64_t, double, int64_t,     \
                                int64_t, int64_t, int64_t, T*, cudaStream_t);
EMBER_INSTANTIATE_LOSS(float)
EMBER_INSTANTIATE_LOSS(double)
EMBER_INSTANTIATE_LOSS(Half)
EMBER_INSTANTIATE_LOSS(BFloat16)
#undef EMBER_INSTANTIATE_LOSS

}  // namespace ember::kernels::cuda
