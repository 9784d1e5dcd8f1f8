// DataLoader: batches of a dataset in sampler order, built ahead on a background thread.
//
//   data::DataLoader loader(dataset, {.batch_size = 128, .shuffle = true, .seed = 1});
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.set_epoch(epoch);               // a new shuffle each epoch, the same every run
//     for (const data::Batch& batch : loader) { ... batch.inputs, batch.targets ... }
//   }
//
// Without set_epoch, each pass is the next epoch: a loop that never calls it still gets a new
// shuffle and new random transforms every pass, as a PyTorch DataLoader's RandomSampler draws a
// new permutation each time it is iterated (the order still repeats from run to run). A sampler
// passed in is left to its owner then (PyTorch's DistributedSampler also needs set_epoch).
//
// While the model works on one batch, the worker thread gathers and transforms the next
// `prefetch_batches`. An exception in the worker reaches the loop that iterates. Leaving the loop
// early stops the worker.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"
#include "data/transforms.h"

namespace ember::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;  // ignored when a sampler is given
  uint64_t seed = 0;     // shuffling and random transforms; mixed with the epoch
  bool drop_last = false;
  int prefetch_batches = 2;  // 0: build each batch on the iterating thread
  // Build the batches in pinned (page-locked) host memory, as PyTorch's pin_memory=True: the
  // engines then copy them to the GPU asynchronously (Tensor::to(device, non_blocking)). Needs a
  // visible CUDA GPU.
  bool pin_memory = false;
  std::vector<Transform> transforms = {};  // applied to batch.inputs, in order
};

class DataLoader {
  struct Epoch;

 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
             std::shared_ptr<Sampler> sampler = nullptr);

  int64_t num_batches() const;
  int64_t batch_size() const { return options_.batch_size; }
  const Dataset& dataset() const { return *dataset_; }
  const std::shared_ptr<const Dataset>& dataset_ptr() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  Sampler& sampler() { return *sampler_; }
  // Passes the epoch to the sampler and reseeds the random transforms, for the next pass.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    const Batch& operator*() const { return current_; }
    const Batch* operator->() const { return &current_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return done() == other.done(); }

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<Epoch> epoch);
    bool done() const { return epoch_ == nullptr; }
    std::shared_ptr<Epoch> epoch_;
    Batch current_;
  };

  // Starts an epoch: one pass over the sampler's indices.
  Iterator begin();
  Iterator end() { return Iterator(); }

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
  bool owns_sampler_ = false;  // made from options.shuffle, not passed in
  int64_t epoch_ = 0;
  bool epoch_announced_ = true;  // set_epoch since the last pass began (or none begun yet)
};

}  // namespace ember::data
