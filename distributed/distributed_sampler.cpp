#include "distributed/distributed_sampler.h"

#include <numeric>

#include "runtime/error.h"
#include "runtime/ops.h"
#include "runtime/random.h"

namespace ember::dist {

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       const DistributedSamplerOptions& options)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), options_(options) {
  EMBER_CHECK(dataset_size >= 0, "DistributedSampler: dataset_size must be >= 0, got ",
              dataset_size);
  EMBER_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1, got ",
              num_replicas);
  EMBER_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank,
              " is out of range: expected 0 <= rank < num_replicas (", num_replicas, ")");
  const int64_t replicas = num_replicas;
  // drop_last: the largest share every rank can have without repeats; else the smallest share
  // that covers the dataset.
  num_samples_ =
      options.drop_last ? dataset_size / replicas : (dataset_size + replicas - 1) / replicas;
}

std::vector<int64_t> DistributedSampler::epoch_indices() {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    // Every rank seeds alike, so every rank draws the same permutation and the shares are disjoint.
    Generator generator(options_.seed + static_cast<uint64_t>(epoch_));
    order = to_vector<int64_t>(randperm(dataset_size_, &generator));
  } else {
    order.resize(static_cast<size_t>(dataset_size_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }

  const int64_t total = total_size();
  if (total > dataset_size_) {
    // Pad with the first indices, cycling when the padding is longer than the dataset.
    order.reserve(static_cast<size_t>(total));
    for (int64_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) {
      order.push_back(order[static_cast<size_t>(i % dataset_size_)]);
    }
  } else {
    order.resize(static_cast<size_t>(total));
  }

  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += num_replicas_)
    mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace ember::dist
