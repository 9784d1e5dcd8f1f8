// The loop shared by the CPU reductions other than sum: every line (o, :, i) of a dense
// (outer, reduce, inner) array folded to one accumulator value.
//
//   in (outer, reduce, inner) -> out (outer, inner), in the accumulator type
//
// An op is a small struct:
//   Acc identity;                          // the fold's starting value
//   Acc step(Acc acc, Acc x, Acc param);   // folds one element in; `param` is the line's own
//                                          //   value from a previous pass (mean, max) or 0
//   Acc merge(Acc a, Acc b);               // combines two partial folds
// Steps must be branch-free (ternaries, not ifs) so the lane loops below vectorise.
// Internal to kernels/cpu: not part of any public header.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/common/convert.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu::detail {

// Contiguous lines (inner == 1): eight independent lanes keep the steps pipelined.
template <typename T, typename Acc, typename Op>
Acc fold_row(const T* x, int64_t n, Acc param, const Op& op) {
  Acc lanes[8];
  for (int l = 0; l < 8; ++l)
    lanes[l] = op.identity;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l)
      lanes[l] = op.step(lanes[l], convert<Acc>(x[i + l]), param);
  }
  for (; i < n; ++i)
    lanes[0] = op.step(lanes[0], convert<Acc>(x[i]), param);
  Acc total = lanes[0];
  for (int l = 1; l < 8; ++l)
    total = op.merge(total, lanes[l]);
  return total;
}

// Strided lines (inner > 1): a block of up to kColumnBlock neighbouring lines is folded together,
// one row of the block at a time, which vectorises across the block.
inline constexpr int64_t kColumnBlock = 64;

template <typename T, typename Acc, typename Op>
void fold_lines(const T* in, Acc* out, int64_t outer, int64_t reduce, int64_t inner,
                const Acc* params, const Op& op) {
  if (inner == 1) {
    if (outer < omp_get_max_threads() && reduce >= 2 * kParallelGrain) {
      // Few long rows: split each row across the threads, then merge the partial folds.
      for (int64_t o = 0; o < outer; ++o) {
        const Acc param = params ? params[o] : Acc(0);
        const T* row = in + o * reduce;
        const int threads = threads_for(reduce);
        std::vector<Acc> partial(threads, op.identity);
#pragma omp parallel num_threads(threads)
        {
          const int t = omp_get_thread_num(), nt = omp_get_num_threads();
          const int64_t chunk = (reduce + nt - 1) / nt;
          const int64_t begin = std::min(reduce, chunk * t), end = std::min(reduce, begin + chunk);
          partial[t] = fold_row(row + begin, end - begin, param, op);
        }
        Acc total = op.identity;
        for (const Acc& p : partial)
          total = op.merge(total, p);
        out[o] = total;
      }
      return;
    }
    const int threads = threads_for(outer * reduce);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t o = 0; o < outer; ++o)
      out[o] = fold_row(in + o * reduce, reduce, params ? params[o] : Acc(0), op);
    return;
  }
  const int64_t blocks_per_outer = (inner + kColumnBlock - 1) / kColumnBlock;
  const int64_t tasks = outer * blocks_per_outer;
  const int threads = threads_for(outer * reduce * inner);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t o = task / blocks_per_outer;
    const int64_t begin = (task % blocks_per_outer) * kColumnBlock;
    const int64_t width = std::min(kColumnBlock, inner - begin);
    Acc acc[kColumnBlock];
    Acc param[kColumnBlock];
    for (int64_t l = 0; l < width; ++l) {
      acc[l] = op.identity;
      param[l] = params ? params[o * inner + begin + l] : Acc(0);
    }
    for (int64_t r = 0; r < reduce; ++r) {
      const T* row = in + (o * reduce + r) * inner + begin;
      for (int64_t l = 0; l < width; ++l)
        acc[l] = op.step(acc[l], convert<Acc>(row[l]), param[l]);
    }
    for (int64_t l = 0; l < width; ++l)
      out[o * inner + begin + l] = acc[l];
  }
}

}  // namespace ember::kernels::cpu::detail
