// CPU loss kernels over class-index targets.
//
//   scores (N, C, inner) dense, target (N, inner) -> per-position values (N, inner)
//
// (N, C) logits are inner = 1; (N, C, d1, d2, ...) logits flatten the d's into inner, so class c
// of position (n, s) is scores[(n * C + c) * inner + s]. Targets equal to ignore_index give 0 loss
// and 0 gradient. Arithmetic is in acc_t<T> (f32 for f16/bf16). Targets are trusted here: the
// runtime checks them first with check_targets.
#pragma once

#include <cstdint>

#include "kernels/common/scalar_types.h"

namespace ember::kernels::cpu {

struct TargetCheck {
  int64_t first_invalid = -1;  // position of the first target outside [0, C) and not ignored
  int64_t counted = 0;         // targets that are not ignore_index
};

template <typename I>
TargetCheck check_targets(const I* target, int64_t count, int64_t classes, int64_t ignore_index);

// One fused log-softmax + NLL per position, with PyTorch's label smoothing:
//   loss = (1 - eps) * (lse - x_t) + eps * (lse - mean_c x_c),   lse = log sum_c exp(x_c)
// logsumexp (N, inner) is kept for the backward.
template <typename T, typename I>
void cross_entropy_forward(const T* logits, const I* target, int64_t batch, int64_t classes,
                           int64_t inner, int64_t ignore_index, double label_smoothing,
                           acc_t<T>* loss, acc_t<T>* logsumexp);

// grad_logits (N, C, inner) = scale * (softmax - (1 - eps) onehot(t) - eps / C), where
// scale = grad[position * grad_step] * grad_multiplier (grad_step 0: one upstream value for all),
// and 0 where the target is ignored.
template <typename T, typename I>
void cross_entropy_backward(const T* logits, const I* target, const acc_t<T>* logsumexp,
                            const acc_t<T>* grad, int64_t grad_step, double grad_multiplier,
                            int64_t batch, int64_t classes, int64_t inner, int64_t ignore_index,
                            double label_smoothing, T* grad_logits);

// loss (N, inner) = -log_probs[n, t, s]
template <typename T, typename I>
void nll_forward(const T* log_probs, const I* target, int64_t batch, int64_t classes, int64_t inner,
                 int64_t ignore_index, acc_t<T>* loss);

// grad_log_probs (N, C, inner): -scale at the target class, 0 elsewhere (every element written).
template <typename T, typename I>
void nll_backward(const I* target, const acc_t<T>* grad, int64_t grad_step, double grad_multiplier,
                  int64_t batch, int64_t classes, int64_t inner, int64_t ignore_index,
                  T* grad_log_probs);

}  // namespace ember::kernels::cpu
