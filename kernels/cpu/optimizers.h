// Fused CPU optimizer updates: one loop per parameter tensor that does the whole step per element.
//
//   master (n) f32, grad (n) G in {f32, f16, bf16}, state (n) f32 -> master, state updated in
//   place; model (n) M in {f16, bf16} (optional) receives the new master rounded to nearest even.
//
// Each element runs exactly the f32 operations, in the same order, that the reference path in
// optim/ (written with ember ops) runs, so both give bit-identical results. The hyper-parameters
// that PyTorch computes in double on the host (bias corrections, step size, 1 - lr * wd) are
// computed in double here too and rounded once to f32, as PyTorch does when it hands a Python
// number to an f32 kernel.
#pragma once

#include <cstdint>

#include "kernels/common/scalar_types.h"

namespace ember::kernels::cpu {

struct SgdHyper {
  double lr = 0.0;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
  bool first_step = false;  // the momentum buffer is set to the gradient instead of updated
};

// The f32 constants of one SGD step, shared with the reference path.
struct SgdScalars {
  float weight_decay, momentum, one_minus_dampening, neg_lr;
};
SgdScalars sgd_scalars(const SgdHyper& hyper);

// momentum_buffer may be null when momentum == 0; model may be null (the master is the param).
template <typename Grad, typename Model>
void sgd_step(float* master, const Grad* grad, float* momentum_buffer, Model* model, int64_t n,
              const SgdHyper& hyper);

struct AdamHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;        // the step count after this step's increment (1 on the first step)
  bool decoupled = false;  // AdamW: p *= 1 - lr * wd before the update, instead of L2 on the grad
  bool amsgrad = false;
  bool maximize = false;
};

// The f32 constants of one Adam step, shared with the reference path. exp_avg moves toward the
// gradient by torch.lerp's formula, which picks its form by the weight (|w| < 0.5 or not).
struct AdamScalars {
  float weight_decay;           // L2 term (Adam)
  float decay;                  // 1 - lr * wd (AdamW)
  float lerp_weight;            // 1 - beta1
  float one_minus_lerp_weight;  // 1 - (1 - beta1), in f32 as torch.lerp computes it
  bool lerp_from_start;         // |lerp_weight| < 0.5
  float beta2, one_minus_beta2;
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float eps;
  float neg_step_size;  // -lr / (1 - beta1^step)
};
AdamScalars adam_scalars(const AdamHyper& hyper);

// max_exp_avg_sq may be null unless amsgrad; model may be null (the master is the param).
template <typename Grad, typename Model>
void adam_step(float* master, const Grad* grad, float* exp_avg, float* exp_avg_sq,
               float* max_exp_avg_sq, Model* model, int64_t n, const AdamHyper& hyper);

}  // namespace ember::kernels::cpu
