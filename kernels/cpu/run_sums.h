// Sums of dense runs, split across vector lanes and compiled for AVX-512 and AVX2 as well as the
// baseline (the build does not use -ffast-math, so a plain `total += x[i]` loop stays sequential
// and scalar). 16-bit runs are widened to f32 in chunks and summed in f32. Internal to
// kernels/cpu.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/common/scalar_types.h"
#include "kernels/cpu/convert_runs.h"

namespace ember::kernels::cpu {

// sum(x[0, n)), f32 lanes added pairwise at the end.
float sum_run(const float* x, int64_t n);
// f64 keeps a sequential loop: it is the reference precision.
double sum_run(const double* x, int64_t n);

// sum(x[0, n)) of a 16-bit run, in f32.
template <typename T>
requires std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>
float sum_run(const T* x, int64_t n) {
  constexpr int64_t kChunk = 1024;
  float buffer[kChunk];
  float total = 0.0f;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t length = std::min(kChunk, n - begin);
    widen_to_f32(x + begin, buffer, length);
    total += sum_run(static_cast<const float*>(buffer), length);
  }
  return total;
}

}  // namespace ember::kernels::cpu
