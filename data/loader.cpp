#include "data/loader.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "runtime/device.h"
#include "runtime/error.h"

namespace ember::data {

// One pass over the data: the batch plan, and the worker that fills a bounded queue from it.
struct DataLoader::Epoch {
  std::shared_ptr<const Dataset> dataset;
  std::vector<std::vector<int64_t>> batches;  // dataset indices of each batch
  std::vector<Transform> transforms;
  Generator generator;
  bool pin_memory = false;
  int pin_device = -1;  // the GPU the worker makes current (pinned memory), -1: none
  size_t capacity = 0;  // 0: synchronous

  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Batch> ready;
  size_t next_to_build = 0;  // synchronous mode and worker progress
  size_t taken = 0;
  bool stop = false;
  std::exception_ptr error;
  std::thread worker;

  Batch build(size_t b) {
    Batch batch = dataset->get_batch(batches[b]);
    for (const Transform& transform : transforms)
      batch.inputs = transform(batch.inputs, generator);
    if (pin_memory) {
      batch.inputs = batch.inputs.contiguous().pin_memory();
      if (batch.targets.defined()) batch.targets = batch.targets.contiguous().pin_memory();
    }
    return batch;
  }

  void fail(std::exception_ptr failure) {
    std::lock_guard<std::mutex> lock(mutex);
    error = std::move(failure);
    changed.notify_all();
  }

  void run_worker() {
    if (pin_device >= 0) {
      try {
        cuda::set_device(pin_device);
      } catch (...) {
        fail(std::current_exception());
        return;
      }
    }
    for (size_t b = 0; b < batches.size(); ++b) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] { return stop || ready.size() < capacity; });
        if (stop) return;
      }
      Batch batch;
      try {
        batch = build(b);
      } catch (...) {
        fail(std::current_exception());
        return;
      }
      std::lock_guard<std::mutex> lock(mutex);
      ready.push_back(std::move(batch));
      changed.notify_all();
    }
  }

  // The next batch, or nothing at the end of the epoch.
  std::optional<Batch> next() {
    if (taken == batches.size()) return std::nullopt;
    if (capacity == 0) return build(taken++);
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return !ready.empty() || error != nullptr; });
    if (ready.empty()) std::rethrow_exception(error);
    Batch batch = std::move(ready.front());
    ready.pop_front();
    ++taken;
    changed.notify_all();
    return batch;
  }

  ~Epoch() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    changed.notify_all();
    if (worker.joinable()) worker.join();
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
                       std::shared_ptr<Sampler> sampler)
    : dataset_(std::move(dataset)), options_(std::move(options)), sampler_(std::move(sampler)) {
  EMBER_CHECK(dataset_ != nullptr, "DataLoader: the dataset is null");
  EMBER_CHECK(options_.batch_size > 0, "DataLoader: batch_size must be positive, got ",
              options_.batch_size);
  EMBER_CHECK(options_.prefetch_batches >= 0, "DataLoader: prefetch_batches must be >= 0, got ",
              options_.prefetch_batches);
  EMBER_CHECK(!options_.pin_memory || cuda_device_count() > 0,
              "DataLoader: pin_memory needs a CUDA GPU (pinned memory only speeds up copies to "
              "one), and ",
              cuda_compiled() ? "no GPU is visible" : "this build of ember has no CUDA support",
              "; leave pin_memory off");
  if (!sampler_) {
    owns_sampler_ = true;
    if (options_.shuffle) {
      sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed);
    } else {
      sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
    }
  }
}

int64_t DataLoader::num_batches() const {
  const int64_t n = sampler_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

void DataLoader::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  epoch_announced_ = true;
  sampler_->set_epoch(epoch);
}

DataLoader::Iterator DataLoader::begin() {
  // A pass that no set_epoch announced is the next epoch (the header says why).
  if (!epoch_announced_) {
    ++epoch_;
    if (owns_sampler_) sampler_->set_epoch(epoch_);
  }
  epoch_announced_ = false;
  auto epoch = std::make_shared<Epoch>();
  epoch->dataset = dataset_;
  epoch->transforms = options_.transforms;
  epoch->pin_memory = options_.pin_memory;
  // A stream of its own for the transforms, distinct from the sampler's seed + epoch.
  epoch->generator.set_state(
      {(options_.seed ^ 0x9E3779B97F4A7C15ull) + static_cast<uint64_t>(epoch_), 0});
  const std::vector<int64_t> indices = sampler_->epoch_indices();
  const size_t b = static_cast<size_t>(options_.batch_size);
  for (size_t start = 0; start < indices.size(); start += b) {
    const size_t stop = std::min(indices.size(), start + b);
    if (options_.drop_last && stop - start < b) break;
    epoch->batches.emplace_back(indices.begin() + static_cast<std::ptrdiff_t>(start),
                                indices.begin() + static_cast<std::ptrdiff_t>(stop));
  }
  epoch->capacity = static_cast<size_t>(options_.prefetch_batches);
  if (epoch->capacity > 0 && !epoch->batches.empty()) {
    Epoch* raw = epoch.get();
    // The worker pins on its creator's GPU: a thread that never set one works on cuda:0, and
    // under mpirun every rank's worker would make a CUDA context there.
    epoch->pin_device = epoch->pin_memory ? cuda::current_device() : -1;
    epoch->worker = std::thread([raw] { raw->run_worker(); });
  }
  return Iterator(std::move(epoch));
}

DataLoader::Iterator::Iterator(std::shared_ptr<Epoch> epoch) : epoch_(std::move(epoch)) {
  ++*this;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  std::optional<Batch> batch = epoch_->next();
  if (batch) {
    current_ = std::move(*batch);
  } else {
    epoch_.reset();  // joins the worker
    current_ = Batch();
  }
  return *this;
}

}  // namespace ember::data
