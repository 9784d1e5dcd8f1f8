// Fused multi-tensor CUDA optimizer steps: the same updates as kernels/cpu/optimizers.h, for a
// list of parameters in a few launches (kernels/cuda/multi_tensor.cuh), queued on `stream`.
//
//   per parameter: master (n) f32, grad (n) Grad in {f32, f16, bf16}, states (n) f32 -> master,
//   states updated in place; model (n) Model in {f16, bf16} (optional) receives the new master
//   rounded to nearest even.
//
// Every element runs the CPU kernel's f32 operations in the same order, each rounded on its own
// (__fmul_rn and friends: no fused multiply-add), so a GPU step gives the CPU's bits: a GPU run
// must check that (tests/cuda/optim_test.cpp). Groups of four elements are loaded and stored in one
// 16-byte access when every pointer of the parameter is aligned for it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/optimizers.h"

namespace ember::kernels::cuda {

// One parameter of a fused step. Device pointers; a state that the step does not use is null.
struct OptimizerTensors {
  float* master = nullptr;
  const void* grad = nullptr;  // Grad (n)
  void* model = nullptr;       // Model (n), or null when the master is the parameter
  // SGD: {momentum_buffer}; Adam: {exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad)}.
  float* states[3] = {nullptr, nullptr, nullptr};
  int64_t size = 0;
};

// Every parameter takes the step `hyper` describes (first_step included): the caller batches
// parameters whose hyper-parameters agree.
template <typename Grad, typename Model>
void sgd_step(const std::vector<OptimizerTensors>& params, const cpu::SgdHyper& hyper,
              cudaStream_t stream);

// Every parameter takes the step `hyper` describes (its step count included).
template <typename Grad, typename Model>
void adam_step(const std::vector<OptimizerTensors>& params, const cpu::AdamHyper& hyper,
               cudaStream_t stream);

}  // namespace ember::kernels::cuda
