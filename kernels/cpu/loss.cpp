#include "kernels/cpu/loss.h"

#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "kernels/common/convert.h"
#include "kernels/common/cross_entropy.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/vector_math.h"

namespace ember::kernels::cpu {
namespace {

// Dense f32 rows (inner == 1, the (N, C) case), on the vectorisable exp: only this region is
// compiled without trapping math, so that the selects become vector blends.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#endif
EMBER_NO_TRAPPING_MATH

struct RowStats {
  float logsumexp;
  float sum;  // of the logits, for label smoothing
};

// One row of logits x (n): its logsumexp (-inf for an all -inf row, NaN if any x is NaN) and sum.
EMBER_CLONE_FOR_SIMD RowStats row_stats_f32(const float* x, int64_t n) {
  float largest = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : largest)
  for (int64_t c = 0; c < n; ++c)
    largest = x[c] > largest ? x[c] : largest;
  // An all -inf row keeps lse = -inf rather than NaN from (-inf) - (-inf).
  const float shift = std::isfinite(largest) ? largest : 0.0f;
  float total = 0, values = 0;
#pragma omp simd reduction(+ : total, values)
  for (int64_t c = 0; c < n; ++c) {
    total += exp_vectorisable(x[c] - shift);
    values += x[c];
  }
  return {shift + std::log(total), values};
}

// grad (n) = scale * (softmax(x) - onehot(target) * on_target - uniform_share).
EMBER_CLONE_FOR_SIMD void row_grad_f32(const float* x, float lse, float scale, int64_t target,
                                       float on_target, float uniform_share, float* grad,
                                       int64_t n) {
  for (int64_t c = 0; c < n; ++c) {
    const float onehot = c == target ? on_target : 0.0f;
    grad[c] = scale * (exp_vectorisable(x[c] - lse) - onehot - uniform_share);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// Position's logits row (class c at row[c * inner]) -> {logsumexp, sum of the logits}.
template <typename T>
std::pair<acc_t<T>, acc_t<T>> row_logsumexp_and_sum(const T* row, int64_t classes, int64_t inner) {
  using A = acc_t<T>;
  if constexpr (std::is_same_v<T, float>) {
    if (inner == 1) {
      const RowStats stats = row_stats_f32(row, classes);
      return {stats.logsumexp, stats.sum};
    }
  }
  A largest = -std::numeric_limits<A>::infinity();
  for (int64_t c = 0; c < classes; ++c)
    largest = std::max(largest, static_cast<A>(row[c * inner]));
  // An all -inf row keeps lse = -inf rather than NaN from (-inf) - (-inf).
  const A shift = std::isfinite(largest) ? largest : A(0);
  A total = 0, values = 0;
  for (int64_t c = 0; c < classes; ++c) {
    const A x = static_cast<A>(row[c * inner]);
    total += std::exp(x - shift);
    values += x;
  }
  return {shift + std::log(total), values};
}

}  // namespace

template <typename I>
TargetCheck check_targets(const I* target, int64_t count, int64_t classes, int64_t ignore_index) {
  TargetCheck check;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t t = static_cast<int64_t>(target[k]);
    if (t == ignore_index) continue;
    if (t < 0 || t >= classes) {
      check.first_invalid = k;
      return check;
    }
    ++check.counted;
  }
  return check;
}

template <typename T, typename I>
void cross_entropy_forward(const T* logits, const I* target, int64_t batch, int64_t classes,
                           int64_t inner, int64_t ignore_index, double label_smoothing,
                           acc_t<T>* loss, acc_t<T>* logsumexp) {
  using A = acc_t<T>;
  const A smoothing = static_cast<A>(label_smoothing);
  const int64_t positions = batch * inner;
  const int threads = threads_for(positions * classes);
#pragma omp parallel for num_threads(threads) if (threads > 1)
  for (int64_t p = 0; p < positions; ++p) {
    const int64_t n = p / inner, s = p % inner;
    const T* row = logits + n * classes * inner + s;  // class c at row[c * inner]
    const auto [lse, values] = row_logsumexp_and_sum(row, classes, inner);
    logsumexp[p] = lse;
    const int64_t t = static_cast<int64_t>(target[p]);
    if (t == ignore_index) {
      loss[p] = 0;
      continue;
    }
    loss[p] =
        smoothed_cross_entropy(lse, static_cast<A>(row[t * inner]), values, classes, smoothing);
  }
}

template <typename T, typename I>
void cross_entropy_backward(const T* logits, const I* target, const acc_t<T>* logsumexp,
                            const acc_t<T>* grad, int64_t grad_step, double grad_multiplier,
                            int64_t batch, int64_t classes, int64_t inner, int64_t ignore_index,
                            double label_smoothing, T* grad_logits) {
  using A = acc_t<T>;
  const A smoothing = static_cast<A>(label_smoothing);
  const A uniform_share = smoothing / static_cast<A>(classes);
  const int64_t positions = batch * inner;
  const int threads = threads_for(positions * classes);
#pragma omp parallel for num_threads(threads) if (threads > 1)
  for (int64_t p = 0; p < positions; ++p) {
    const int64_t n = p / inner, s = p % inner;
    const int64_t base = n * classes * inner + s;
    const int64_t t = static_cast<int64_t>(target[p]);
    if (t == ignore_index) {
      for (int64_t c = 0; c < classes; ++c)
        grad_logits[base + c * inner] = convert<T>(A(0));
      continue;
    }
    const A scale = grad[p * grad_step] * static_cast<A>(grad_multiplier);
    const A lse = logsumexp[p];
    if constexpr (std::is_same_v<T, float>) {
      if (inner == 1) {
        row_grad_f32(logits + base, lse, scale, t, A(1) - smoothing, uniform_share,
                     grad_logits + base, classes);
        continue;
      }
    }
    for (int64_t c = 0; c < classes; ++c) {
      const A softmax = std::exp(static_cast<A>(logits[base + c * inner]) - lse);
      const A onehot = c == t ? A(1) - smoothing : A(0);
      grad_logits[base + c * inner] = convert<T>(scale * (softmax - onehot - uniform_share));
    }
  }
}

template <typename T, typename I>
void nll_forward(const T* log_probs, const I* target, int64_t batch, int64_t classes, int64_t inner,
                 int64_t ignore_index, acc_t<T>* loss) {
  using A = acc_t<T>;
  const int64_t positions = batch * inner;
  const int threads = threads_for(positions);
#pragma omp parallel for num_threads(threads) if (threads > 1)
  for (int64_t p = 0; p < positions; ++p) {
    const int64_t n = p / inner, s = p % inner;
    const int64_t t = static_cast<int64_t>(target[p]);
    loss[p] = t == ignore_index ? A(0) : -static_cast<A>(log_probs[(n * classes + t) * inner + s]);
  }
}

template <typename T, typename I>
void nll_backward(const I* target, const acc_t<T>* grad, int64_t grad_step, double grad_multiplier,
                  int64_t batch, int64_t classes, int64_t inner, int64_t ignore_index,
                  T* grad_log_probs) {
  using A = acc_t<T>;
  const int64_t positions = batch * inner;
  const int threads = threads_for(positions * classes);
#pragma omp parallel for num_threads(threads) if (threads > 1)
  for (int64_t p = 0; p < positions; ++p) {
    const int64_t n = p / inner, s = p % inner;
    const int64_t base = n * classes * inner + s;
    const int64_t t = static_cast<int64_t>(target[p]);
    for (int64_t c = 0; c < classes; ++c)
      grad_log_probs[base + c * inner] = convert<T>(A(0));
    if (t != ignore_index) {
      grad_log_probs[base + t * inner] =
          convert<T>(-grad[p * grad_step] * static_cast<A>(grad_multiplier));
    }
  }
}

template TargetCheck check_targets<int32_t>(const int32_t*, int64_t, int64_t, int64_t);
template TargetCheck check_targets<int64_t>(const int64_t*, int64_t, int64_t, int64_t);

#define EMBER_INSTANTIATE_LOSS(T, I)                                                               \
  template void cross_entropy_forward<T, I>(const T*, const I*, int64_t, int64_t, int64_t,         \
                                            int64_t, double, acc_t<T>*, acc_t<T>*);                \
  template void cross_entropy_backward<T, I>(const T*, const I*, const acc_t<T>*, const acc_t<T>*, \
                                             int64_t, double, int64_t, int64_t, int64_t, int64_t,  \
                                             double, T*);                                          \
  template void nll_forward<T, I>(const T*, const I*, int64_t, int64_t, int64_t, int64_t,          \
                                  acc_t<T>*);                                                      \
  template void nll_backward<T, I>(const I*, const acc_t<T>*, int64_t, double, int64_t, int64_t,   \
                                   int64_t, int64_t, T*);
#define EMBER_INSTANTIATE_LOSS_TYPES(T) \
  EMBER_INSTANTIATE_LOSS(T, int32_t)    \
  EMBER_INSTANTIATE_LOSS(T, int64_t)
EMBER_INSTANTIATE_LOSS_TYPES(float)
EMBER_INSTANTIATE_LOSS_TYPES(double)
EMBER_INSTANTIATE_LOSS_TYPES(Half)
EMBER_INSTANTIATE_LOSS_TYPES(BFloat16)
#undef EMBER_INSTANTIATE_LOSS_TYPES
#undef EMBER_INSTANTIATE_LOSS

}  // namespace ember::kernels::cpu
