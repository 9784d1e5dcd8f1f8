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

template <typename T>
void sum_leading(const T* in, sum_output_t<T>* out, int64_t leading, int64_t outer, int64_t reduce,
                 int64_t inner) {
  using Out = sum_output_t<T>;
  using Acc = sum_acc_t<T>;
  constexpr bool kFloating = std::is_floating_point_v<Acc>;
  using Total = std::conditional_t<kFloating, double, int64_t>;  // across blocks
  const int64_t outputs = outer * inner;
  if (outputs == 0) return;
  // Adds block (l, o), reduce x inner values, into output o's inner totals; column holds inner
  // running sums in Acc (f32 for 16-bit types, as sum's column path).
  const auto add_block = [&](int64_t l, int64_t o, Total* totals, std::vector<Acc>& column) {
    const T* block = in + (l * outer + o) * reduce * inner;
    if (inner == 1) {
      if constexpr (kFloating) {
        totals[0] += sum_row(block, reduce);
      } else {
        totals[0] += sum_row_integer(block, reduce);
      }
      return;
    }
    std::fill(column.begin(), column.end(), Acc(0));
    for (int64_t r = 0; r < reduce; ++r) {
      const T* row = block + r * inner;
      for (int64_t i = 0; i < inner; ++i)
        column[i] += convert<Acc>(row[i]);
    }
    for (int64_t i = 0; i < inner; ++i)
      totals[i] += static_cast<Total>(column[i]);
  };
  const auto write = [&](int64_t index, Total total) {
    if constexpr (kFloating) {
      out[index] = convert<Out>(static_cast<Acc>(total));
    } else {
      out[index] = static_cast<Out>(total);
    }
  };
  const int threads = threads_for(leading * outer * reduce * inner);
  std::vector<std::vector<Total>> partial(static_cast<size_t>(threads));
  int team = 1;  // the threads OpenMP gave the region (no more than asked for)
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    // Each thread takes whole outputs when there are enough of them (no partials to add up),
    // else a share of the leading index, whose totals are added in thread order at the end.
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    if (t == 0) team = nt;
    std::vector<Acc> column(static_cast<size_t>(inner));
    if (outer >= nt) {
      const int64_t chunk = (outer + nt - 1) / nt;
      const int64_t begin = std::min(outer, chunk * t), end = std::min(outer, begin + chunk);
      std::vector<Total> totals(static_cast<size_t>(inner));
      for (int64_t o = begin; o < end; ++o) {
        std::fill(totals.begin(), totals.end(), Total(0));
        for (int64_t l = 0; l < leading; ++l)
          add_block(l, o, totals.data(), column);
        for (int64_t i = 0; i < inner; ++i)
          write(o * inner + i, totals[i]);
      }
    } else {
      const int64_t chunk = (leading + nt - 1) / nt;
      const int64_t begin = std::min(leading, chunk * t), end = std::min(leading, begin + chunk);
      std::vector<Total>& totals = partial[t];
      totals.assign(static_cast<size_t>(outputs), Total(0));
      for (int64_t l = begin; l < end; ++l) {
        for (int64_t o = 0; o < outer; ++o)
          add_block(l, o, totals.data() + o * inner, column);
      }
    }
  }
  if (outer >= team) return;
  for (int64_t index = 0; index < outputs; ++index) {
    Total total = 0;
    for (int t = 0; t < team; ++t)
      total += partial[t][index];
    write(index, total);
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

template void sum_leading<float>(const float*, float*, int64_t, int64_t, int64_t, int64_t);
template void sum_leading<double>(const double*, double*, int64_t, int64_t, int64_t, int64_t);
template void sum_leading<Half>(const Half*, Half*, int64_t, int64_t, int64_t, int64_t);
template void sum_leading<BFloat16>(const BFloat16*, BFloat16*, int64_t, int64_t, int64_t, int64_t);
template void sum_leading<int32_t>(const int32_t*, int64_t*, int64_t, int64_t, int64_t, int64_t);
template void sum_leading<int64_t>(const int64_t*, int64_t*, int64_t, int64_t, int64_t, int64_t);
template void sum_leading<uint8_t>(const uint8_t*, int64_t*, int64_t, int64_t, int64_t, int64_t);
template void sum_leading<bool>(const bool*, int64_t*, int64_t, int64_t, int64_t, int64_t);

}  // namespace ember::kernels::cpu
