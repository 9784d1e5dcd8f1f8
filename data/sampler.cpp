#include "data/sampler.h"

#include <numeric>

#include "runtime/ops.h"

namespace ember::data {

std::vector<int64_t> SequentialSampler::epoch_indices() {
  std::vector<int64_t> indices(static_cast<size_t>(n_));
  std::iota(indices.begin(), indices.end(), 0);
  return indices;
}

std::vector<int64_t> RandomSampler::epoch_indices() {
  Generator generator(seed_ + static_cast<uint64_t>(epoch_));
  return to_vector<int64_t>(randperm(n_, &generator));
}

}  // namespace ember::data
