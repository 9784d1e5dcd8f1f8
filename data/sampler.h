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

}  // namespace ember::data
