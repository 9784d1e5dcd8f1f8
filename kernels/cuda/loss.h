// CUDA loss kernels over class-index targets, queued on `stream`: the same contract as
// kernels/cpu/loss.h, with i64 targets only (the runtime converts i32 targets) that the runtime
// has already checked (kernels/cpu/loss.h's check_targets, on a host copy).
//
//   scores (N, C, inner) dense, target (N, inner) -> per-position values (N, inner)
//
// Class c of position p = (n, s) is scores[(n * C + c) * inner + s]. inner == 1 ((N, C) logits):
// a warp per row of up to 1024 classes, a block per longer row (kernels/cuda/row_reduce.cuh);
// inner > 1: a thread per position. The backward kernels write every element of the gradient
// with one thread each, from the saved logsumexp: no reduction is needed there.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/scalar_types.h"

namespace ember::kernels::cuda {

// loss = (1 - eps) * (lse - x_t) + eps * (lse - mean_c x_c), 0 where t == ignore_index;
// logsumexp (N, inner) kept for the backward (-inf for a row of -inf, as on the CPU).
template <typename T>
void cross_entropy_forward(const T* logits, const int64_t* target, int64_t batch, int64_t classes,
                           int64_t inner, int64_t ignore_index, double label_smoothing,
                           acc_t<T>* loss, acc_t<T>* logsumexp, cudaStream_t stream);

// grad_logits (N, C, inner) = scale * (softmax - (1 - eps) onehot(t) - eps / C), where
// scale = grad[position * grad_step] * grad_multiplier, and 0 where the target is ignored.
template <typename T>
void cross_entropy_backward(const T* logits, const int64_t* target, const acc_t<T>* logsumexp,
                            const acc_t<T>* grad, int64_t grad_step, double grad_multiplier,
                            int64_t batch, int64_t classes, int64_t inner, int64_t ignore_index,
                            double label_smoothing, T* grad_logits, cudaStream_t stream);

// loss (N, inner) = -log_probs[n, t, s], 0 where t == ignore_index.
template <typename T>
void nll_forward(const T* log_probs, const int64_t* target, int64_t batch, int64_t classes,
                 int64_t inner, int64_t ignore_index, acc_t<T>* loss, cudaStream_t stream);

// grad_log_probs (N, C, inner): -scale at the target class, 0 elsewhere (every element written).
template <typename T>
void nll_backward(const int64_t* target, const acc_t<T>* grad, int64_t grad_step,
                  double grad_multiplier, int64_t batch, int64_t classes, int64_t inner,
                  int64_t ignore_index, T* grad_log_probs, cudaStream_t stream);

}  // namespace ember::kernels::cuda
