// DistributedSampler: each rank visits its own share of a dataset, as PyTorch's
// torch.utils.data.distributed.DistributedSampler does.
//
//   dist::DistributedSampler sampler(dataset.size(), world->size(), world->rank(),
//                                    {.shuffle = true, .seed = 42});
//   for (epoch ...) { sampler.set_epoch(epoch); loader.run_epoch(sampler.epoch_indices()); }
//
// Every rank draws the same permutation of 0 .. n-1 (seed + epoch, so each epoch differs and every
// run repeats), makes it evenly divisible by num_replicas, and takes every num_replicas-th index
// starting at its rank. Without drop_last the permutation is padded by repeating its first indices
// (a few samples are seen twice per epoch); with drop_last its tail is dropped instead. Every rank
// gets size() indices, so every rank runs the same number of batches: collectives stay matched.
// The permutation comes from ember's Philox randperm: deterministic, but not PyTorch's numbers.
#pragma once

#include <cstdint>
#include <vector>

#include "data/sampler.h"

namespace ember::dist {

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;  // the same on every rank
  bool drop_last = false;
};

class DistributedSampler : public data::Sampler {
 public:
  // dataset_size >= 0, num_replicas >= 1, 0 <= rank < num_replicas; throws otherwise.
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                     const DistributedSamplerOptions& options = {});

  // This rank's indices for the current epoch (set_epoch), in visiting order.
  std::vector<int64_t> epoch_indices() override;
  // Indices per rank: ceil(n / num_replicas), or floor(n / num_replicas) with drop_last.
  int64_t size() const override { return num_samples_; }
  // Indices over all ranks: size() * num_replicas.
  int64_t total_size() const { return num_samples_ * num_replicas_; }

  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }
  const DistributedSamplerOptions& options() const { return options_; }

 private:
  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  DistributedSamplerOptions options_;
  int64_t num_samples_;
};

}  // namespace ember::dist
