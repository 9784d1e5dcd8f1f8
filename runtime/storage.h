// Storage: one allocation on one device, shared by a tensor and all of its views.
//
// It also holds the version counter: every in-place write to any view bumps it, and autograd
// compares it with the version a node saved to catch "modified after being saved" errors.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "runtime/device.h"

namespace ember {

class Storage {
 public:
  // Allocates `nbytes` from the device's caching allocator.
  Storage(size_t nbytes, Device device);
  struct Pinned {};
  // Allocates `nbytes` of pinned (page-locked) host memory: a CPU storage that CUDA copies to and
  // from asynchronously (needs CUDA and a GPU).
  Storage(size_t nbytes, Pinned);
  // Wraps memory ember does not own; `deleter` (may be empty) runs when the storage dies.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool is_pinned() const { return pinned_; }
  // Whether the memory came from one of ember's allocators (not from_blob's caller).
  bool owns_allocation() const { return owns_allocation_; }

  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::function<void(void*)> deleter_;  // empty: memory came from allocator_for(device_)
  bool owns_allocation_ = false;
  bool pinned_ = false;  // from cuda_hooks::pinned_allocator()
  std::atomic<uint32_t> version_{0};
};

}  // namespace ember
