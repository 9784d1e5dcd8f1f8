// CUDA mixed-precision helpers for the gradient scaler (kernels/cpu/amp.h on the GPU), queued on
// `stream`, with the scaler's state on the device so that no step needs a host synchronisation
// until someone asks whether the step runs.
//
//   grads: a list of (pointer, n) of T in {f32, f16, bf16}; scale, found_inf: f32 (1);
//   growth_tracker: i64 (1).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/common/scalar_types.h"

namespace ember::kernels::cuda {

struct GradTensor {
  void* data = nullptr;  // T (size), dense
  int64_t size = 0;
};

// Multiplies every gradient in place by 1/scale (the reciprocal taken in double and rounded to
// f32, as PyTorch's scaler does) and sets *found_inf to 1 when any input value is Inf or NaN (it
// is never cleared here). One multi-tensor pass (PyTorch's
// _amp_foreach_non_finite_check_and_unscale_).
template <typename T>
void amp_unscale_and_check(const std::vector<GradTensor>& grads, float* found_inf,
                           const float* scale, cudaStream_t stream);

// torch._amp_update_scale_ on device values, in f32 like kernels/cpu's scaler: on Inf/NaN
// (*found_inf != 0 or host_found_inf; found_inf may be null) scale *= backoff and the tracker
// resets; else the tracker counts a good step and, at growth_interval, scale *= growth when that
// stays finite.
void amp_update_scale(float* scale, int64_t* growth_tracker, const float* found_inf,
                      bool host_found_inf, float growth_factor, float backoff_factor,
                      int64_t growth_interval, cudaStream_t stream);

}  // namespace ember::kernels::cuda
