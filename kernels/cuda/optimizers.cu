#include <cstdint>
#include <type_traits>

#include "kernels/common/scalar_types.h"
#include "kernels/cuda/multi_tensor.cuh"
#include "kernels/cuda/optimizers.h"

namespace ember::kernels::cuda {
namespace {

// The pointer lists of an optimizer launch.
enum List : int { kMaster = 0, kGrad, kModel, kState0, kState1, kState2, kLists };
using OptimizerArgs = TensorListArgs<kLists>;

struct SgdFlags {
  cpu::SgdScalars scalars;
  bool maximize, use_decay, use_momentum, first_step, nesterov;
};

struct AdamFlags {
  cpu::AdamScalars scalars;
  bool maximize, l2, decoupled, amsgrad;
};

// The CPU kernel's loop body (kernels/cpu/optimizers.cpp), one rounding per operation.
__device__ __forceinline__ void sgd_element(const SgdFlags& f, float& p, float g, float& buffer) {
  const cpu::SgdScalars& s = f.scalars;
  float d = g;
  if (f.maximize) d = -d;
  if (f.use_decay) d = __fadd_rn(d, __fmul_rn(s.weight_decay, p));
  if (f.use_momentum) {
    const float buf = f.first_step ? d
                                   : __fadd_rn(__fmul_rn(buffer, s.momentum),
                                               __fmul_rn(s.one_minus_dampening, d));
    buffer = buf;
    d = f.nesterov ? __fadd_rn(d, __fmul_rn(s.momentum, buf)) : buf;
  }
  p = __fadd_rn(p, __fmul_rn(s.neg_lr, d));
}

__device__ __forceinline__ void adam_element(const AdamFlags& f, float& p, float g, float& exp_avg,
                                             float& exp_avg_sq, float& max_exp_avg_sq) {
  const cpu::AdamScalars& s = f.scalars;
  if (f.maximize) g = -g;
  if (f.decoupled) p = __fmul_rn(p, s.decay);
  if (f.l2) g = __fadd_rn(g, __fmul_rn(s.weight_decay, p));
  const float m_old = exp_avg;
  const float m = s.lerp_from_start
                      ? __fadd_rn(m_old, __fmul_rn(s.lerp_weight, __fsub_rn(g, m_old)))
                      : __fsub_rn(g, __fmul_rn(__fsub_rn(g, m_old), s.one_minus_lerp_weight));
  const float v =
      __fadd_rn(__fmul_rn(exp_avg_sq, s.beta2), __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
  exp_avg = m;
  exp_avg_sq = v;
  float v_used = v;
  if (f.amsgrad) {
    const float v_max_old = max_exp_avg_sq;
    // torch.maximum: NaN propagates.
    v_used = (isnan(v_max_old) || v_max_old > v) ? v_max_old : v;
    max_exp_avg_sq = v_used;
  }
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v_used), s.bias_correction2_sqrt), s.eps);
  p = __fadd_rn(p, __fdiv_rn(__fmul_rn(s.neg_step_size, m), denom));
}

// One block per chunk (unused states are null pointers: the caller nulls them); each thread takes
// four consecutive elements at a time. The chunk starts at a multiple of 4, so with aligned
// pointers every full group is one vector access per list.
template <typename Grad, typename Model, typename Flags>
__global__ void __launch_bounds__(kMultiTensorThreads)
    optimizer_kernel(OptimizerArgs args, Flags flags) {
  const BlockChunk c = block_chunk(args);
  float* master = static_cast<float*>(args.pointers[kMaster][c.tensor]);
  const Grad* grad = static_cast<const Grad*>(args.pointers[kGrad][c.tensor]);
  Model* model = static_cast<Model*>(args.pointers[kModel][c.tensor]);
  float* states[3] = {static_cast<float*>(args.pointers[kState0][c.tensor]),
                      static_cast<float*>(args.pointers[kState1][c.tensor]),
                      static_cast<float*>(args.pointers[kState2][c.tensor])};
  const bool aligned = aligned_for_vector4<float>(master) && aligned_for_vector4<Grad>(grad) &&
                       aligned_for_vector4<Model>(model) && aligned_for_vector4<float>(states[0]) &&
                       aligned_for_vector4<float>(states[1]) &&
                       aligned_for_vector4<float>(states[2]);
  for (int64_t i = c.begin + 4 * static_cast<int64_t>(threadIdx.x); i < c.end;
       i += 4 * static_cast<int64_t>(blockDim.x)) {
    const int count = c.end - i < 4 ? static_cast<int>(c.end - i) : 4;
    const bool vector = aligned && count == 4;
    float p[4], g[4], s[3][4] = {};
    load4(master, i, count, vector, p);
    load4(grad, i, count, vector, g);
#pragma unroll
    for (int k = 0; k < 3; ++k)
      if (states[k] != nullptr) load4(states[k], i, count, vector, s[k]);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (std::is_same_v<Flags, SgdFlags>) {
        sgd_element(flags, p[e], g[e], s[0][e]);
      } else {
        adam_element(flags, p[e], g[e], s[0][e], s[1][e], s[2][e]);
      }
    }
    store4(master, i, count, vector, p);
#pragma unroll
    for (int k = 0; k < 3; ++k)
      if (states[k] != nullptr) store4(states[k], i, count, vector, s[k]);
    if (model != nullptr) store4(model, i, count, vector, p);
  }
}

template <typename Grad, typename Model, typename Flags>
void launch_optimizer(const char* what, const std::vector<OptimizerTensors>& params,
                      const Flags& flags, cudaStream_t stream) {
  std::vector<TensorListEntry<kLists>> entries;
  entries.reserve(params.size());
  for (const OptimizerTensors& t : params) {
    TensorListEntry<kLists> entry;
    entry.pointers = {t.master,   const_cast<void*>(t.grad), t.model, t.states[0], t.states[1],
                      t.states[2]};
    entry.size = t.size;
    entries.push_back(entry);
  }
  multi_tensor_apply<kLists>(entries, [&](const OptimizerArgs& args, int blocks) {
    optimizer_kernel<Grad, Model, Flags><<<blocks, kMultiTensorThreads, 0, stream>>>(args, flags);
    EMBER_CUDA_CHECK_LAUNCH(what);
  });
}

}  // namespace

template <typename Grad, typename Model>
void sgd_step(const std::vector<OptimizerTensors>& params, const cpu::SgdHyper& hyper,
              cudaStream_t stream) {
  SgdFlags flags;
  flags.scalars = cpu::sgd_scalars(hyper);
  flags.maximize = hyper.maximize;
  flags.use_decay = hyper.weight_decay != 0.0;
  flags.use_momentum = hyper.momentum != 0.0;
  flags.first_step = hyper.first_step;
  flags.nesterov = hyper.nesterov;
  launch_optimizer<Grad, Model>("sgd_step<<<>>>", params, flags, stream);
}

template <typename Grad, typename Model>
void adam_step(const std::vector<OptimizerTensors>& params, const cpu::AdamHyper& hyper,
               cudaStream_t stream) {
  AdamFlags flags;
  flags.scalars = cpu::adam_scalars(hyper);
  flags.maximize = hyper.maximize;
  flags.l2 = !hyper.decoupled && hyper.weight_decay != 0.0;
  flags.decoupled = hyper.decoupled && hyper.weight_decay != 0.0;
  flags.amsgrad = hyper.amsgrad;
  launch_optimizer<Grad, Model>("adam_step<<<>>>", params, flags, stream);
}

#define EMBER_INSTANTIATE_CUDA_OPTIMIZERS(Grad, Model)                                            \
  template void sgd_step<Grad, Model>(const std::vector<OptimizerTensors>&, const cpu::SgdHyper&, \
                                      cudaStream_t);                                              \
  template void adam_step<Grad, Model>(const std::vector<OptimizerTensors>&,                      \
                                       const cpu::AdamHyper&, cudaStream_t);
EMBER_INSTANTIATE_CUDA_OPTIMIZERS(float, float)
EMBER_INSTANTIATE_CUDA_OPTIMIZERS(Half, Half)
EMBER_INSTANTIATE_CUDA_OPTIMIZERS(BFloat16, BFloat16)
#undef EMBER_INSTANTIATE_CUDA_OPTIMIZERS

}  // namespace ember::kernels::cuda
