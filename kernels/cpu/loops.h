// The CPU elementwise loop: walks a StridedLayout and hands contiguous runs to an inner function.
//
//   for_each_run<2>(layout, {out, in}, {sizeof(Out), sizeof(In)},
//                   [](int64_t n, char* const* ptrs, const int64_t* strides) { ... });
//
// `inner(n, ptrs, strides)` processes n elements; ptrs[k] is operand k's first element and
// strides[k] its step in elements along the run. The work is split across OpenMP threads once
// there is enough of it; each thread gets whole runs (or a slice of the one flat run).
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "kernels/common/strided_layout.h"

namespace ember::kernels::cpu {

// Below this many elements an op runs on one thread: forking costs more than it saves.
inline constexpr int64_t kParallelGrain = 32768;

inline int threads_for(int64_t work) {
  if (work < kParallelGrain) return 1;
  return static_cast<int>(std::min<int64_t>(omp_get_max_threads(), work / (kParallelGrain / 2)));
}

template <int N, typename Inner>
void for_each_run(const StridedLayout& layout, const std::array<char*, N>& base,
                  const std::array<int64_t, N>& elem_size, Inner inner) {
  const int64_t numel = layout.numel();
  if (numel == 0) return;
  const int ndim = layout.ndim;
  if (ndim <= 1) {
    // One run: split it into per-thread slices.
    std::array<int64_t, N> step{};
    for (int k = 0; k < N; ++k)
      step[k] = ndim == 0 ? 0 : layout.strides[k][0];
    const int threads = threads_for(numel);
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t chunk = (numel + nt - 1) / nt;
      const int64_t begin = std::min<int64_t>(numel, chunk * t);
      const int64_t end = std::min<int64_t>(numel, begin + chunk);
      if (begin < end) {
        std::array<char*, N> ptrs;
        for (int k = 0; k < N; ++k)
          ptrs[k] = base[k] + begin * step[k] * elem_size[k];
        inner(end - begin, ptrs.data(), step.data());
      }
    }
    return;
  }
  // Several dims: the innermost is the run; the outer dims are walked by a flat index.
  const int64_t run = layout.sizes[ndim - 1];
  const int64_t outer = numel / run;
  std::array<int64_t, N> step{};
  for (int k = 0; k < N; ++k)
    step[k] = layout.strides[k][ndim - 1];
  const int threads = threads_for(numel);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t chunk = (outer + nt - 1) / nt;
    const int64_t begin = std::min<int64_t>(outer, chunk * t);
    const int64_t end = std::min<int64_t>(outer, begin + chunk);
    for (int64_t o = begin; o < end; ++o) {
      std::array<char*, N> ptrs;
      for (int k = 0; k < N; ++k)
        ptrs[k] = base[k];
      int64_t rest = o;
      for (int d = ndim - 2; d >= 0; --d) {
        const int64_t i = rest % layout.sizes[d];
        rest /= layout.sizes[d];
        for (int k = 0; k < N; ++k)
          ptrs[k] += i * layout.strides[k][d] * elem_size[k];
      }
      inner(run, ptrs.data(), step.data());
    }
  }
}

}  // namespace ember::kernels::cpu
