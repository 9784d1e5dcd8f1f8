// Cross-entropy with label smoothing at one position, the formula the CPU and CUDA kernels share.
// For a row of C logits x with logsumexp lse, target class t and smoothing s (PyTorch's
// label_smoothing: the target distribution is (1 - s) one-hot(t) + s / C):
//   loss = (1 - s) (lse - x[t]) + s (lse - sum_c x[c] / C)
// (s = 0: the negative log-likelihood lse - x[t] alone, without the sum).
#pragma once

#include <cstdint>

#include "kernels/common/scalar_types.h"

namespace ember::kernels {

template <typename Acc>
EMBER_HOST_DEVICE Acc smoothed_cross_entropy(Acc lse, Acc target_logit, Acc logit_sum,
                                             int64_t classes, Acc smoothing) {
  const Acc nll = lse - target_logit;
  if (smoothing == Acc(0)) return nll;
  const Acc smooth = lse - logit_sum / static_cast<Acc>(classes);
  return (Acc(1) - smoothing) * nll + smoothing * smooth;
}

}  // namespace ember::kernels
