// The caching logic of the CPU allocator: size classes, per-class free lists, and statistics. A
// backend says only how to take memory from the system and give it back. (The CUDA allocators
// split segments into blocks and keep pools per stream instead: runtime/block_allocator.h.)
//
// Requests round up to a size class (multiples of `small_step` up to `small_limit`, then quarter
// steps between powers of two), so slightly different sizes share blocks while wasting at most a
// quarter. Freed blocks wait in their class's free list and are handed out again before new
// memory is taken: training allocates the same sizes every step.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/allocator.h"

namespace ember {

class CachingAllocator : public Allocator {
 public:
  void* allocate(size_t nbytes) final;
  void deallocate(void* ptr) final;
  AllocatorStats stats() const final;
  void reset_peak() final;
  void empty_cache() final;

 protected:
  // `name` appears in errors ("CPU allocator", "CUDA allocator (cuda:0)").
  CachingAllocator(std::string name, size_t small_step, size_t small_limit);
  // Memory of exactly `size` bytes from the system, or nullptr when it has none: the cache is
  // then emptied and the request tried once more before it fails.
  virtual void* system_allocate(size_t size) = 0;
  virtual void system_free(void* ptr) = 0;
  // Appended to the out-of-memory error: what the user can do.
  virtual std::string out_of_memory_hint() const = 0;

 private:
  size_t round_to_size_class(size_t nbytes) const;
  void release_cached_locked();

  const std::string name_;
  const size_t small_step_;
  const size_t small_limit_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_blocks_;
  std::unordered_map<void*, size_t> block_sizes_;
  AllocatorStats stats_;
};

}  // namespace ember
