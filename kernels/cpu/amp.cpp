#include "kernels/cpu/amp.h"

#include <algorithm>
#include <cmath>

#include "kernels/common/convert.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu {

template <typename T>
bool amp_unscale_and_check(T* grad, int64_t n, float inv_scale) {
  bool found_inf = false;
  const int threads = threads_for(n);
#pragma omp parallel num_threads(threads) if (threads > 1) reduction(|| : found_inf)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t begin = std::min<int64_t>(n, chunk * t);
    const int64_t end = std::min<int64_t>(n, begin + chunk);
    // Branch-free: count non-finite values instead of leaving the loop, so it vectorises.
    int64_t non_finite = 0;
    for (int64_t i = begin; i < end; ++i) {
      const float value = convert<float>(grad[i]);
      non_finite += std::isfinite(value) ? 0 : 1;
      grad[i] = convert<T>(value * inv_scale);
    }
    found_inf = found_inf || non_finite != 0;
  }
  return found_inf;
}

template bool amp_unscale_and_check<float>(float*, int64_t, float);
template bool amp_unscale_and_check<Half>(Half*, int64_t, float);
template bool amp_unscale_and_check<BFloat16>(BFloat16*, int64_t, float);

}  // namespace ember::kernels::cpu
