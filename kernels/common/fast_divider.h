// Division by a divisor fixed before a kernel starts, with a multiply-high, an add and a shift.
//
// The CUDA elementwise loop turns an element's linear index into its position along each dim
// (a quotient and a remainder per dim). A 64-bit `/` and `%` is a software routine on the GPU,
// some dozens of instructions each, so a broadcast op (conv2d's bias add over an (N, C, H, W)
// output) was bound by its index arithmetic rather than by memory. For indices below 2^31 this
// divides exactly as `n / d` does, by Granlund and Montgomery's method ("Division by invariant
// integers using multiplication", 1994): with s = ceil(log2 d) and m = floor(2^32 (2^s - d) / d)
// + 1, n / d = (mulhi(n, m) + n) >> s, where mulhi is the high 32 bits of the 64-bit product.
// The sum stays below 2^32 because n < 2^31 and mulhi(n, m) <= n.
//
// The same code runs on the host (tests/runtime/fast_divider_test.cpp checks it against `/`) and
// in CUDA kernels.
#pragma once

#include <cstdint>

#include "kernels/common/scalar_types.h"  // EMBER_HOST_DEVICE

namespace ember::kernels {

// Indices and divisors up to this bound take the fast division.
inline constexpr int64_t kFastDivisionLimit = (int64_t{1} << 31) - 1;

struct FastDivider {
  uint32_t divisor = 1;
  uint32_t multiplier = 1;  // m above; 1 for d = 1 (mulhi is then 0 and s = 0)
  uint32_t shift = 0;       // s above

  FastDivider() = default;
  // d in [1, kFastDivisionLimit].
  explicit FastDivider(uint32_t d) : divisor(d) {
    while ((uint64_t{1} << shift) < d)
      ++shift;
    const uint64_t numerator = (uint64_t{1} << 32) * ((uint64_t{1} << shift) - d);
    multiplier = static_cast<uint32_t>(numerator / d + 1);
  }

  // n / divisor, for n in [0, kFastDivisionLimit].
  EMBER_HOST_DEVICE uint32_t quotient(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t high = __umulhi(n, multiplier);
#else
    const uint32_t high = static_cast<uint32_t>((uint64_t{n} * multiplier) >> 32);
#endif
    return (high + n) >> shift;
  }
};

}  // namespace ember::kernels
