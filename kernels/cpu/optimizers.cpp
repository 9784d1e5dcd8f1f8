#include "kernels/cpu/optimizers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/common/convert.h"
#include "kernels/cpu/convert_runs.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/vector_math.h"

// adam_run's selects become blends and its square root the instruction alone because
// CMakeLists.txt compiles this file with -fno-trapping-math and -fno-math-errno.

namespace ember::kernels::cpu {

SgdScalars sgd_scalars(const SgdHyper& hyper) {
  return {static_cast<float>(hyper.weight_decay), static_cast<float>(hyper.momentum),
          static_cast<float>(1.0 - hyper.dampening), static_cast<float>(-hyper.lr)};
}

AdamScalars adam_scalars(const AdamHyper& hyper) {
  AdamScalars s{};
  s.weight_decay = static_cast<float>(hyper.weight_decay);
  s.decay = static_cast<float>(1.0 - hyper.lr * hyper.weight_decay);
  s.lerp_weight = static_cast<float>(1.0 - hyper.beta1);
  s.one_minus_lerp_weight = 1.0f - s.lerp_weight;
  s.lerp_from_start = std::abs(s.lerp_weight) < 0.5f;
  s.beta2 = static_cast<float>(hyper.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - hyper.beta2);
  const double step = static_cast<double>(hyper.step);
  const double bias_correction1 = 1.0 - std::pow(hyper.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(hyper.beta2, step);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(hyper.eps);
  s.neg_step_size = static_cast<float>(-(hyper.lr / bias_correction1));
  return s;
}

namespace {

// Splits [0, n) across threads once there is enough work; `body(begin, end)` runs one slice.
template <typename Body>
void parallel_slices(int64_t n, Body body) {
  const int threads = threads_for(n);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t begin = std::min<int64_t>(n, chunk * t);
    const int64_t end = std::min<int64_t>(n, begin + chunk);
    if (begin < end) body(begin, end);
  }
}

// Runs `step(begin, count, g)` over [0, n) in chunks of count <= kOptimizerChunk elements, the
// slices split across threads; g is the chunk's gradient in f32 (a 16-bit gradient widened in one
// run by convert_runs.h, so that the step itself is an f32 loop). After each chunk, its master
// weights are rounded into the model's 16-bit copy, when there is one.
constexpr int64_t kOptimizerChunk = 512;

template <typename Grad, typename Model, typename Step>
void over_f32_chunks(int64_t n, const Grad* grad, const float* master, Model* model, Step step) {
  parallel_slices(n, [&](int64_t begin, int64_t end) {
    float widened[kOptimizerChunk];
    for (int64_t chunk = begin; chunk < end; chunk += kOptimizerChunk) {
      const int64_t m = std::min(kOptimizerChunk, end - chunk);
      step(chunk, m, accumulate_run(grad + chunk, widened, m));
      if (model) narrow_from_f32(master + chunk, model + chunk, m);
    }
  });
}

// Adam's options, the same for every element of a step.
struct AdamFlags {
  bool maximize, decoupled, l2;
};

// One element of Adam's update: the parameter after AdamW's decay, and the new moments.
struct AdamMoments {
  float p, m, v;
};

[[gnu::always_inline]] inline AdamMoments adam_moments(float p, float g, float m_old, float v_old,
                                                       const AdamScalars& s, const AdamFlags& f) {
  g = f.maximize ? -g : g;
  p = f.decoupled ? p * s.decay : p;
  g = f.l2 ? g + s.weight_decay * p : g;
  const float m = s.lerp_from_start ? m_old + s.lerp_weight * (g - m_old)
                                    : g - (g - m_old) * s.one_minus_lerp_weight;
  const float v = v_old * s.beta2 + s.one_minus_beta2 * g * g;
  return {p, m, v};
}

// The new parameter, from the second moment the denominator uses (v, or amsgrad's maximum).
[[gnu::always_inline]] inline float adam_parameter(float p, float m, float v_used,
                                                   const AdamScalars& s) {
  const float denom = std::sqrt(v_used) / s.bias_correction2_sqrt + s.eps;
  return p + s.neg_step_size * m / denom;
}

// Adam's update of one chunk, compiled for AVX-512 and AVX2 as well as the baseline. The options
// are selects rather than branches, so the loop vectorises. The operations and their order are
// those of the reference path, and this file is compiled without FMA contraction
// (CMakeLists.txt), so every ISA gives the same bits.
EMBER_CLONE_FOR_SIMD void adam_run(float* __restrict master, const float* __restrict grads,
                                   float* __restrict exp_avg, float* __restrict exp_avg_sq,
                                   int64_t count, const AdamScalars s, const AdamFlags flags) {
  for (int64_t j = 0; j < count; ++j) {
    const AdamMoments e = adam_moments(master[j], grads[j], exp_avg[j], exp_avg_sq[j], s, flags);
    exp_avg[j] = e.m;
    exp_avg_sq[j] = e.v;
    master[j] = adam_parameter(e.p, e.m, e.v, s);
  }
}

// amsgrad: the denominator uses the running maximum of v; torch.maximum propagates NaN. Two
// passes over the chunk (it is in L1): the moments and the decayed parameter, then the maximum and
// the update. Each pass vectorises on its own; as one loop, GCC 12 kept the options' selects in it
// and left it scalar. The operations and their order are the one-loop form's, so the bits are too.
EMBER_CLONE_FOR_SIMD void amsgrad_moments_run(float* __restrict master,
                                              const float* __restrict grads,
                                              float* __restrict exp_avg,
                                              float* __restrict exp_avg_sq, int64_t count,
                                              const AdamScalars s, const AdamFlags flags) {
  for (int64_t j = 0; j < count; ++j) {
    const AdamMoments e = adam_moments(master[j], grads[j], exp_avg[j], exp_avg_sq[j], s, flags);
    exp_avg[j] = e.m;
    exp_avg_sq[j] = e.v;
    master[j] = e.p;
  }
}

EMBER_CLONE_FOR_SIMD void amsgrad_update_run(float* __restrict master,
                                             const float* __restrict exp_avg,
                                             const float* __restrict exp_avg_sq,
                                             float* __restrict max_exp_avg_sq, int64_t count,
                                             const AdamScalars s) {
  for (int64_t j = 0; j < count; ++j) {
    const float v = exp_avg_sq[j], v_max_old = max_exp_avg_sq[j];
    const float v_used = ((v_max_old != v_max_old) | (v_max_old > v)) ? v_max_old : v;
    max_exp_avg_sq[j] = v_used;
    master[j] = adam_parameter(master[j], exp_avg[j], v_used, s);
  }
}

void amsgrad_run(float* master, const float* grads, float* exp_avg, float* exp_avg_sq,
                 float* max_exp_avg_sq, int64_t count, const AdamScalars s, const AdamFlags flags) {
  amsgrad_moments_run(master, grads, exp_avg, exp_avg_sq, count, s, flags);
  amsgrad_update_run(master, exp_avg, exp_avg_sq, max_exp_avg_sq, count, s);
}

}  // namespace

template <typename Grad, typename Model>
void sgd_step(float* master, const Grad* grad, float* momentum_buffer, Model* model, int64_t n,
              const SgdHyper& hyper) {
  const SgdScalars s = sgd_scalars(hyper);
  const bool use_momentum = hyper.momentum != 0.0;
  const bool use_decay = hyper.weight_decay != 0.0;
  over_f32_chunks(n, grad, master, model, [&](int64_t begin, int64_t count, const float* grads) {
    for (int64_t i = begin, j = 0; j < count; ++i, ++j) {
      float p = master[i];
      float d = grads[j];
      if (hyper.maximize) d = -d;
      if (use_decay) d = d + s.weight_decay * p;
      if (use_momentum) {
        float buf =
            hyper.first_step ? d : momentum_buffer[i] * s.momentum + s.one_minus_dampening * d;
        momentum_buffer[i] = buf;
        d = hyper.nesterov ? d + s.momentum * buf : buf;
      }
      master[i] = p + s.neg_lr * d;
    }
  });
}

template <typename Grad, typename Model>
void adam_step(float* master, const Grad* grad, float* exp_avg, float* exp_avg_sq,
               float* max_exp_avg_sq, Model* model, int64_t n, const AdamHyper& hyper) {
  const AdamScalars s = adam_scalars(hyper);
  const bool l2 = !hyper.decoupled && hyper.weight_decay != 0.0;
  const bool decoupled = hyper.decoupled && hyper.weight_decay != 0.0;
  const AdamFlags flags{hyper.maximize, decoupled, l2};
  over_f32_chunks(n, grad, master, model, [&](int64_t begin, int64_t count, const float* grads) {
    if (hyper.amsgrad) {
      amsgrad_run(master + begin, grads, exp_avg + begin, exp_avg_sq + begin,
                  max_exp_avg_sq + begin, count, s, flags);
    } else {
      adam_run(master + begin, grads, exp_avg + begin, exp_avg_sq + begin, count, s, flags);
    }
  });
}

#define EMBER_INSTANTIATE_OPTIMIZERS(Grad, Model)                                           \
  template void sgd_step<Grad, Model>(float*, const Grad*, float*, Model*, int64_t,         \
                                      const SgdHyper&);                                     \
  template void adam_step<Grad, Model>(float*, const Grad*, float*, float*, float*, Model*, \
                                       int64_t, const AdamHyper&);
EMBER_INSTANTIATE_OPTIMIZERS(float, float)
EMBER_INSTANTIATE_OPTIMIZERS(Half, Half)
EMBER_INSTANTIATE_OPTIMIZERS(BFloat16, BFloat16)
#undef EMBER_INSTANTIATE_OPTIMIZERS

}  // namespace ember::kernels::cpu
