#include <cstdint>

#include "kernels/cuda/amp.h"
#include "kernels/cuda/multi_tensor.cuh"

namespace ember::kernels::cuda {
namespace {

using UnscaleArgs = TensorListArgs<1>;

// Each thread takes four consecutive elements at a time (one 16-byte access for f32 when aligned).
// The check looks at the input value, as the CPU kernel does.
template <typename T>
__global__ void __launch_bounds__(kMultiTensorThreads)
    unscale_kernel(UnscaleArgs args, float* found_inf, const float* scale) {
  const BlockChunk c = block_chunk(args);
  T* grad = static_cast<T*>(args.pointers[0][c.tensor]);
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(*scale));
  const bool aligned = aligned_for_vector4<T>(grad);
  bool non_finite = false;
  for (int64_t i = c.begin + 4 * static_cast<int64_t>(threadIdx.x); i < c.end;
       i += 4 * static_cast<int64_t>(blockDim.x)) {
    const int count = c.end - i < 4 ? static_cast<int>(c.end - i) : 4;
    const bool vector = aligned && count == 4;
    float values[4];
    load4(grad, i, count, vector, values);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      non_finite = non_finite || (k < count && !isfinite(values[k]));
      values[k] = __fmul_rn(values[k], inv_scale);
    }
    store4(grad, i, count, vector, values);
  }
  // Every writer stores the same value: no atomic needed.
  if (non_finite) *found_inf = 1.0f;
}

__global__ void update_scale_kernel(float* scale, int64_t* growth_tracker, const float* found_inf,
                                    bool host_found_inf, float growth_factor, float backoff_factor,
                                    int64_t growth_interval) {
  // found_inf is null when no gradient of this step was on the device (GradScaler passes none).
  if (host_found_inf || (found_inf != nullptr && *found_inf != 0.0f)) {
    *scale = __fmul_rn(*scale, backoff_factor);
    *growth_tracker = 0;
  } else {
    const int64_t successful = *growth_tracker + 1;
    if (successful == growth_interval) {
      const float grown = __fmul_rn(*scale, growth_factor);
      if (isfinite(grown)) *scale = grown;
      *growth_tracker = 0;
    } else {
      *growth_tracker = successful;
    }
  }
}

}  // namespace

template <typename T>
void amp_unscale_and_check(const std::vector<GradTensor>& grads, float* found_inf,
                           const float* scale, cudaStream_t stream) {
  std::vector<TensorListEntry<1>> entries;
  entries.reserve(grads.size());
  for (const GradTensor& g : grads) {
    TensorListEntry<1> entry;
    entry.pointers = {g.data};
    entry.size = g.size;
    entries.push_back(entry);
  }
  multi_tensor_apply<1>(entries, [&](const UnscaleArgs& args, int blocks) {
    unscale_kernel<T><<<blocks, kMultiTensorThreads, 0, stream>>>(args, found_inf, scale);
    EMBER_CUDA_CHECK_LAUNCH("amp_unscale_and_check<<<>>>");
  });
}

void amp_update_scale(float* scale, int64_t* growth_tracker, const float* found_inf,
                      bool host_found_inf, float growth_factor, float backoff_factor,
                      int64_t growth_interval, cudaStream_t stream) {
  update_scale_kernel<<<1, 1, 0, stream>>>(scale, growth_tracker, found_inf, host_found_inf,
                                           growth_factor, backoff_factor, growth_interval);
  EMBER_CUDA_CHECK_LAUNCH("amp_update_scale<<<>>>");
}

template void amp_unscale_and_check<float>(const std::vector<GradTensor>&, float*, const float*,
                                           cudaStream_t);
template void amp_unscale_and_check<Half>(const std::vector<GradTensor>&, float*, const float*,
                                          cudaStream_t);
template void amp_unscale_and_check<BFloat16>(const std::vector<GradTensor>&, float*, const float*,
                                              cudaStream_t);

}  // namespace ember::kernels::cuda
