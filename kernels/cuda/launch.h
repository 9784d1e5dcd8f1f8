// Launch shapes for the grid-stride kernels (check.h, included, has the launch check).
#pragma once

#include "kernels/cuda/check.h"

namespace ember::kernels::cuda {

// Threads per block and blocks for a grid-stride loop over n elements.
inline constexpr int kThreadsPerBlock = 256;
inline unsigned blocks_for(long long n) {
  constexpr long long kMaxBlocks = 65535;  // grid-stride loops cover the rest
  const long long blocks = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned>(blocks < kMaxBlocks ? (blocks < 1 ? 1 : blocks) : kMaxBlocks);
}

}  // namespace ember::kernels::cuda
