#include "kernels/cpu/reduce.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/common/convert.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu {
namespace {

template <typename T>
using sum_acc_t = std::conditional_t<std::is_floating_point_v<acc_t<T>>, acc_t<T>, int64_t>;

// Sum of n dense values; eight independent partial sums keep the adds pipelined, and block sums
// are combined in double so that rounding error does not grow with n.
template <typename T>
double sum_row(const T* x, int64_t n) {
  using Acc = sum_acc_t<T>;
  constexpr int64_t kBlock = 4096;
  double total = 0;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    Acc lanes[8] = {};
    int64_t i = start;
    for (; i + 8 <= end; i += 8) {
      for (int l = 0; l < 8; ++l)
        lanes[l] += convert<Acc>(x[i + l]);
    }
    for (; i < end; ++i)
      lanes[0] += convert<Acc>(x[i]);
    Acc block = 0;
    for (int l = 0; l < 8; ++l)
      block += lanes[l];
    total += static_cast<double>(block);
  }
  return total;
}

template <typename T>
int64_t sum_row_integer(const T* x, int64_t n) {
  int64_t total = 0;
  for (int64_t i = 0; i < n; ++i)
    total += static_cast<int64_t>(x[i]);
  return total;
}

}  // namespace

template <typename T>
void sum(const T* in, sum_output_t<T>* out, int64_t outer, int64_t reduce, int64_t inner) {
  using Out = sum_output_t<T>;
  using Acc = sum_acc_t<T>;
  constexpr bool kFloating = std::is_floating_point_v<Acc>;
  if (inner == 1) {
    // Row sums: parallel over rows, or over one long row's blocks.
    if (outer == 1 && reduce >= kParallelGrain * 2) {
      const int threads = threads_for(reduce);
      std::vector<double> partial(threads, 0.0);
      std::vector<int64_t> partial_int(threads, 0);
#pragma omp parallel num_threads(threads)
      {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t chunk = (reduce + nt - 1) / nt;
        const int64_t begin = std::min(reduce, chunk * t), end = std::min(reduce, begin + chunk);
        if constexpr (kFloating) {
          partial[t] = sum_row(in + begin, end - begin);
        } else {
          partial_int[t] = sum_row_integer(in + begin, end - begin);
        }
      }
      if constexpr (kFloating) {
        double total = 0;
        for (double p : partial)
          total += p;
        out[0] = convert<Out>(static_cast<Acc>(total));
      } else {
        int64_t total = 0;
        for (int64_t p : partial_int)
          total += p;
        out[0] = static_cast<Out>(total);
      }
      return;
    }
    const int threads = threads_for(outer * reduce);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t o = 0; o < outer; ++o) {
      if constexpr (kFloating) {
        out[o] = convert<Out>(static_cast<Acc>(sum_row(in + o * reduce, reduce)));
      } else {
        out[o] = static_cast<Out>(sum_row_integer(in + o * reduce, reduce));
      }
    }
    return;
  }
  // Column sums: accumulate whole rows of `inner` values, which vectorises across the row.
  const int threads = threads_for(outer * reduce * inner);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    std::vector<Acc> acc(inner);
    // Split over outer when there is enough of it, else over chunks of inner.
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const bool split_outer = outer >= nt;
    const int64_t o_chunk = split_outer ? (outer + nt - 1) / nt : outer;
    const int64_t o_begin = split_outer ? std::min(outer, o_chunk * t) : 0;
    const int64_t o_end = split_outer ? std::min(outer, o_begin + o_chunk) : outer;
    const int64_t i_chunk = split_outer ? inner : (inner + nt - 1) / nt;
    const int64_t i_begin = split_outer ? 0 : std::min(inner, i_chunk * t);
    const int64_t i_end = split_outer ? inner : std::min(inner, i_begin + i_chunk);
    for (int64_t o = o_begin; o < o_end; ++o) {
      std::fill(acc.begin() + i_begin, acc.begin() + i_end, Acc(0));
      for (int64_t r = 0; r < reduce; ++r) {
        const T* row = in + (o * reduce + r) * inner;
        for (int64_t i = i_begin; i < i_end; ++i)
          acc[i] += convert<Acc>(row[i]);
      }
      for (int64_t i = i_begin; i < i_end; ++i)
        out[o * inner + i] = convert<Out>(acc[i]);
    }
  }
}

template void sum<float>(const float*, float*, int64_t, int64_t, int64_t);
template void sum<double>(const double*, double*, int64_t, int64_t, int64_t);
template void sum<Half>(const Half*, Half*, int64_t, int64_t, int64_t);
template void sum<BFloat16>(const BFloat16*, BFloat16*, int64_t, int64_t, int64_t);
template void sum<int32_t>(const int32_t*, int64_t*, int64_t, int64_t, int64_t);
template void sum<int64_t>(const int64_t*, int64_t*, int64_t, int64_t, int64_t);
template void sum<uint8_t>(const uint8_t*, int64_t*, int64_t, int64_t, int64_t);
template void sum<bool>(const bool*, int64_t*, int64_t, int64_t, int64_t);

}  // namespace ember::kernels::cpu
