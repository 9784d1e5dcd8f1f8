// Mean and variance in one pass, mergeable (Welford's update, Chan et al.'s parallel merge).
//
//   WelfordStats s;                       // the statistics of no values
//   s = merge(s, of_values(v, n));        // fold in a run of values
//   s = merge(s, other);                  // fold in another thread's, block's or split's
//   mean = s.mean; variance = s.m2 / s.count (biased), s.m2 / (s.count - 1) (unbiased)
//
// m2 is the sum of squared deviations from the mean. Unlike sum(x^2) - sum(x)^2 / n it never
// subtracts two large, nearly equal numbers, so f32 keeps the variance of values with a large
// mean (f16 activations around 1000 with a spread of 1). Merging is exact in real arithmetic in any
// order; in floating point, a fixed merge order gives bitwise repeatable results.
//
// The same code runs on the host (tested there) and in CUDA kernels (batch norm's statistics).
#pragma once

#include "kernels/common/scalar_types.h"

namespace ember {

template <typename Acc>
struct WelfordStats {
  Acc count = 0;  // kept in Acc: it weighs the merges (exact up to 2^24 values in f32)
  Acc mean = 0;
  Acc m2 = 0;
};

// The statistics of a and b together. Either may be empty (count 0).
template <typename Acc>
EMBER_HOST_DEVICE WelfordStats<Acc> merge(const WelfordStats<Acc>& a, const WelfordStats<Acc>& b) {
  const Acc count = a.count + b.count;
  if (count == Acc(0)) return a;
  const Acc delta = b.mean - a.mean;
  const Acc b_share = b.count / count;
  WelfordStats<Acc> out;
  out.count = count;
  out.mean = a.mean + delta * b_share;
  out.m2 = a.m2 + b.m2 + delta * delta * a.count * b_share;
  return out;
}

// The statistics of values[0 .. n): their mean first, then the squared deviations from it (a
// two-pass variance over registers; n is small, e.g. one 16-byte vector).
template <typename Acc, int n>
EMBER_HOST_DEVICE WelfordStats<Acc> of_values(const Acc (&values)[n]) {
  Acc total = 0;
  for (int i = 0; i < n; ++i)
    total += values[i];
  WelfordStats<Acc> out;
  out.count = Acc(n);
  out.mean = total / Acc(n);
  for (int i = 0; i < n; ++i) {
    const Acc d = values[i] - out.mean;
    out.m2 += d * d;
  }
  return out;
}

}  // namespace ember
