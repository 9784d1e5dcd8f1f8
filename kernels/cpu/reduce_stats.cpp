// CPU reductions beyond sum: extremes, arg-extremes, variance, logsumexp, norms. All but the
// arg-extremes are folds driven by detail::fold_lines (kernels/cpu/reduce_lines.h).
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/common/convert.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/reduce_lines.h"

namespace ember::kernels::cpu {
namespace {

template <typename Acc>
constexpr bool is_nan(Acc v) {
  if constexpr (std::is_floating_point_v<Acc>) {
    return v != v;
  } else {
    return false;
  }
}

template <typename Acc>
constexpr Acc lowest_value() {
  if constexpr (std::is_floating_point_v<Acc>) return -std::numeric_limits<Acc>::infinity();
  return std::numeric_limits<Acc>::lowest();
}

template <typename Acc>
constexpr Acc highest_value() {
  if constexpr (std::is_floating_point_v<Acc>) return std::numeric_limits<Acc>::infinity();
  return std::numeric_limits<Acc>::max();
}

// NaN-propagating max / min: once acc is NaN every comparison is false and it stays NaN.
template <typename Acc>
struct MaxOp {
  Acc identity = lowest_value<Acc>();
  Acc step(Acc acc, Acc x, Acc) const { return (x > acc || is_nan(x)) ? x : acc; }
  Acc merge(Acc a, Acc b) const { return step(a, b, Acc(0)); }
};

template <typename Acc>
struct MinOp {
  Acc identity = highest_value<Acc>();
  Acc step(Acc acc, Acc x, Acc) const { return (x < acc || is_nan(x)) ? x : acc; }
  Acc merge(Acc a, Acc b) const { return step(a, b, Acc(0)); }
};

template <typename Acc>
struct SumOp {
  Acc identity = 0;
  Acc step(Acc acc, Acc x, Acc) const { return acc + x; }
  Acc merge(Acc a, Acc b) const { return a + b; }
};

template <typename Acc>
struct SquaredDeviationOp {  // param: the line's mean
  Acc identity = 0;
  Acc step(Acc acc, Acc x, Acc mean) const { return acc + (x - mean) * (x - mean); }
  Acc merge(Acc a, Acc b) const { return a + b; }
};

template <typename Acc>
struct SumExpOp {  // param: the line's shift (its max)
  Acc identity = 0;
  Acc step(Acc acc, Acc x, Acc shift) const { return acc + std::exp(x - shift); }
  Acc merge(Acc a, Acc b) const { return a + b; }
};

template <typename Acc>
struct AbsMaxOp {
  Acc identity = 0;
  Acc step(Acc acc, Acc x, Acc) const {
    const Acc a = std::abs(x);
    return (a > acc || is_nan(a)) ? a : acc;
  }
  Acc merge(Acc a, Acc b) const { return (b > a || is_nan(b)) ? b : a; }
};

template <typename Acc>
struct AbsMinOp {
  Acc identity = std::numeric_limits<Acc>::infinity();
  Acc step(Acc acc, Acc x, Acc) const {
    const Acc a = std::abs(x);
    return (a < acc || is_nan(a)) ? a : acc;
  }
  Acc merge(Acc a, Acc b) const { return (b < a || is_nan(b)) ? b : a; }
};

template <typename Acc>
struct AbsSumOp {
  Acc identity = 0;
  Acc step(Acc acc, Acc x, Acc) const { return acc + std::abs(x); }
  Acc merge(Acc a, Acc b) const { return a + b; }
};

template <typename Acc>
struct SquareSumOp {
  Acc identity = 0;
  Acc step(Acc acc, Acc x, Acc) const { return acc + x * x; }
  Acc merge(Acc a, Acc b) const { return a + b; }
};

template <typename Acc>
struct NonZeroCountOp {
  Acc identity = 0;
  Acc step(Acc acc, Acc x, Acc) const { return acc + (x != Acc(0) ? Acc(1) : Acc(0)); }
  Acc merge(Acc a, Acc b) const { return a + b; }
};

template <typename Acc>
struct AbsPowerSumOp {  // general p
  Acc identity = 0;
  Acc p;
  Acc step(Acc acc, Acc x, Acc) const { return acc + std::pow(std::abs(x), p); }
  Acc merge(Acc a, Acc b) const { return a + b; }
};

// Folds every line into a buffer of Acc, then maps it into `out`.
template <typename T, typename Acc, typename Op, typename Finish>
void fold_and_store(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner,
                    const Acc* params, const Op& op, Finish finish) {
  std::vector<Acc> folded(static_cast<size_t>(outer * inner));
  detail::fold_lines(in, folded.data(), outer, reduce, inner, params, op);
  for (size_t k = 0; k < folded.size(); ++k)
    out[k] = convert<T>(finish(folded[k]));
}

// Whether `x` beats the current best for an arg-extreme (strictly: the first occurrence stays).
template <bool kMax, typename Acc>
bool beats(Acc x, Acc best) {
  if (is_nan(best)) return false;
  if (is_nan(x)) return true;
  return kMax ? x > best : x < best;
}

template <bool kMax, typename T>
void arg_extreme(const T* in, int64_t* out, int64_t outer, int64_t reduce, int64_t inner) {
  using Acc = acc_t<T>;
  const int threads = threads_for(outer * reduce * inner);
  if (inner == 1) {
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t o = 0; o < outer; ++o) {
      const T* row = in + o * reduce;
      Acc best = convert<Acc>(row[0]);
      int64_t best_index = 0;
      for (int64_t r = 1; r < reduce; ++r) {
        const Acc x = convert<Acc>(row[r]);
        if (beats<kMax>(x, best)) {
          best = x;
          best_index = r;
        }
      }
      out[o] = best_index;
    }
    return;
  }
  // Strided lines: walk the rows of the (reduce, inner) slab, updating every line's best.
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t o = 0; o < outer; ++o) {
    std::vector<Acc> best(static_cast<size_t>(inner));
    int64_t* best_index = out + o * inner;
    const T* slab = in + o * reduce * inner;
    for (int64_t i = 0; i < inner; ++i) {
      best[i] = convert<Acc>(slab[i]);
      best_index[i] = 0;
    }
    for (int64_t r = 1; r < reduce; ++r) {
      const T* row = slab + r * inner;
      for (int64_t i = 0; i < inner; ++i) {
        const Acc x = convert<Acc>(row[i]);
        if (beats<kMax>(x, best[i])) {
          best[i] = x;
          best_index[i] = r;
        }
      }
    }
  }
}

}  // namespace

template <typename T>
void amax(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner) {
  using Acc = acc_t<T>;
  fold_and_store(in, out, outer, reduce, inner, static_cast<const Acc*>(nullptr), MaxOp<Acc>{},
                 [](Acc v) { return v; });
}

template <typename T>
void amin(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner) {
  using Acc = acc_t<T>;
  fold_and_store(in, out, outer, reduce, inner, static_cast<const Acc*>(nullptr), MinOp<Acc>{},
                 [](Acc v) { return v; });
}

template <typename T>
void argmax(const T* in, int64_t* out, int64_t outer, int64_t reduce, int64_t inner) {
  arg_extreme<true>(in, out, outer, reduce, inner);
}

template <typename T>
void argmin(const T* in, int64_t* out, int64_t outer, int64_t reduce, int64_t inner) {
  arg_extreme<false>(in, out, outer, reduce, inner);
}

template <typename T>
void variance(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner,
              int64_t correction) {
  using Acc = acc_t<T>;
  std::vector<Acc> mean(static_cast<size_t>(outer * inner));
  detail::fold_lines(in, mean.data(), outer, reduce, inner, static_cast<const Acc*>(nullptr),
                     SumOp<Acc>{});
  for (Acc& m : mean)
    m /= static_cast<Acc>(reduce);
  const Acc divisor = static_cast<Acc>(std::max<int64_t>(0, reduce - correction));
  fold_and_store(in, out, outer, reduce, inner, mean.data(), SquaredDeviationOp<Acc>{},
                 [divisor](Acc squares) { return squares / divisor; });
}

template <typename T>
void logsumexp(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner) {
  using Acc = acc_t<T>;
  std::vector<Acc> shift(static_cast<size_t>(outer * inner));
  detail::fold_lines(in, shift.data(), outer, reduce, inner, static_cast<const Acc*>(nullptr),
                     MaxOp<Acc>{});
  // An infinite max cannot be subtracted (inf - inf); PyTorch shifts such lines by 0 instead.
  for (Acc& m : shift)
    m = std::isinf(m) ? Acc(0) : m;
  std::vector<Acc> sums(shift.size());
  detail::fold_lines(in, sums.data(), outer, reduce, inner, shift.data(), SumExpOp<Acc>{});
  for (size_t k = 0; k < sums.size(); ++k)
    out[k] = convert<T>(shift[k] + std::log(sums[k]));
}

template <typename T>
void norm(const T* in, T* out, int64_t outer, int64_t reduce, int64_t inner, double p) {
  using Acc = acc_t<T>;
  const Acc* none = nullptr;
  const auto same = [](Acc v) { return v; };
  if (std::isinf(p) && p > 0) {
    fold_and_store(in, out, outer, reduce, inner, none, AbsMaxOp<Acc>{}, same);
  } else if (std::isinf(p)) {
    fold_and_store(in, out, outer, reduce, inner, none, AbsMinOp<Acc>{}, same);
  } else if (p == 0) {
    fold_and_store(in, out, outer, reduce, inner, none, NonZeroCountOp<Acc>{}, same);
  } else if (p == 1) {
    fold_and_store(in, out, outer, reduce, inner, none, AbsSumOp<Acc>{}, same);
  } else if (p == 2) {
    fold_and_store(in, out, outer, reduce, inner, none, SquareSumOp<Acc>{},
                   [](Acc v) { return std::sqrt(v); });
  } else {
    const Acc inverse = static_cast<Acc>(1.0 / p);
    fold_and_store(in, out, outer, reduce, inner, none, AbsPowerSumOp<Acc>{0, static_cast<Acc>(p)},
                   [inverse](Acc v) { return std::pow(v, inverse); });
  }
}

#define EMBER_INSTANTIATE_EXTREMES(T)                                     \
  template void amax<T>(const T*, T*, int64_t, int64_t, int64_t);         \
  template void amin<T>(const T*, T*, int64_t, int64_t, int64_t);         \
  template void argmax<T>(const T*, int64_t*, int64_t, int64_t, int64_t); \
  template void argmin<T>(const T*, int64_t*, int64_t, int64_t, int64_t);
#define EMBER_INSTANTIATE_STATISTICS(T)                                        \
  template void variance<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t); \
  template void logsumexp<T>(const T*, T*, int64_t, int64_t, int64_t);         \
  template void norm<T>(const T*, T*, int64_t, int64_t, int64_t, double);

EMBER_FOR_EACH_NUMERIC_TYPE(EMBER_INSTANTIATE_EXTREMES)
EMBER_INSTANTIATE_STATISTICS(float)
EMBER_INSTANTIATE_STATISTICS(double)
EMBER_INSTANTIATE_STATISTICS(Half)
EMBER_INSTANTIATE_STATISTICS(BFloat16)

}  // namespace ember::kernels::cpu
