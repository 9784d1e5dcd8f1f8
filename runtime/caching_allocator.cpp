#include "runtime/caching_allocator.h"

#include "runtime/error.h"

namespace ember {

CachingAllocator::CachingAllocator(std::string name, size_t small_step, size_t small_limit)
    : name_(std::move(name)), small_step_(small_step), small_limit_(small_limit) {}

size_t CachingAllocator::round_to_size_class(size_t nbytes) const {
  if (nbytes <= small_limit_)
    return nbytes == 0 ? small_step_ : (nbytes + small_step_ - 1) / small_step_ * small_step_;
  // Quarter steps between powers of two: 4096, 5120, 6144, 7168, 8192, 10240, ...
  size_t power = small_limit_;
  while (power * 2 < nbytes)
    power *= 2;
  const size_t step = power / 4;
  return (nbytes + step - 1) / step * step;
}

void* CachingAllocator::allocate(size_t nbytes) {
  EMBER_CHECK(nbytes <= static_cast<size_t>(kMaxAllocationBytes), name_, ": ", nbytes,
              " bytes asked, more than any allocation can hold (2^60 bytes)");
  const size_t size = round_to_size_class(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.num_allocs;
  void* ptr = nullptr;
  auto it = free_blocks_.find(size);
  if (it != free_blocks_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    ++stats_.num_cache_hits;
  } else {
    const auto from_the_system = [&] { return system_allocate(size); };
    ptr = count_system_alloc(stats_, from_the_system);
    if (ptr == nullptr) {
      // Cached blocks of other sizes may be what is missing: give them back and try once more.
      release_cached_locked();
      ptr = count_system_alloc(stats_, from_the_system);
    }
    if (ptr == nullptr) ++stats_.num_ooms;
    EMBER_CHECK(ptr != nullptr, name_, ": out of memory allocating ", nbytes, " bytes (",
                stats_.str(), "); ", out_of_memory_hint());
    stats_.reserved_bytes += size;
    ++stats_.num_segments;
  }
  block_sizes_[ptr] = size;
  stats_.allocated_bytes += size;
  if (stats_.allocated_bytes > stats_.peak_allocated_bytes)
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
  return ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = block_sizes_.find(ptr);
  EMBER_CHECK(it != block_sizes_.end(), name_, ": freeing a pointer it did not allocate");
  const size_t size = it->second;
  block_sizes_.erase(it);
  stats_.allocated_bytes -= size;
  ++stats_.num_frees;
  free_blocks_[size].push_back(ptr);
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

void CachingAllocator::release_cached_locked() {
  for (auto& [size, blocks] : free_blocks_) {
    for (void* ptr : blocks)
      system_free(ptr);
    stats_.reserved_bytes -= size * blocks.size();
    stats_.num_segments -= blocks.size();
    blocks.clear();
  }
}

}  // namespace ember
