// Samplers decide which dataset indices a loader visits in an epoch, and in what order.
// DataLoader asks its sampler once per epoch; distributed/ adds DistributedSampler.
#pragma once

#include <cstdint>
#include <vector>

namespace ember::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The dataset indices of the current epoch, in visiting order.
  virtual std::vector<int64_t> epoch_indices() = 0;
  // How many indices epoch_indices() returns.
  virtual int64_t size() const = 0;
  // Called before each epoch (the runner does it); shufflers mix the epoch into their seed.
  virtual void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

 protected:
  int64_t epoch_ = 0;
};

// 0, 1, ..., n - 1.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n) : n_(n) {}
  std::vector<int64_t> epoch_indices() override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

// A permutation of 0 .. n - 1 drawn from Philox with seed + epoch (as PyTorch's
// DistributedSampler does), so every epoch differs and every run repeats.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {}
  std::vector<int64_t> epoch_indices() override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

}  // namespace ember::data
