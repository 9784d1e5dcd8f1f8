// CPU caching allocator.
//
// Requests are rounded up to a size class (64 B steps up to 4 KiB, then quarter powers of two), so
// that slightly different sizes share blocks without wasting more than a quarter. Freed blocks go
// into a per-class free list and are handed out again before new memory is taken from the system.
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/error.h"

namespace ember {
namespace {

constexpr size_t kAlignment = 64;

size_t round_to_size_class(size_t nbytes) {
  if (nbytes <= 4096)
    return nbytes == 0 ? kAlignment : (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  // Quarter steps between powers of two: 4096, 5120, 6144, 7168, 8192, 10240, ...
  size_t power = 4096;
  while (power * 2 < nbytes)
    power *= 2;
  const size_t step = power / 4;
  return (nbytes + step - 1) / step * step;
}

class CpuCachingAllocator final : public Allocator {
 public:
  ~CpuCachingAllocator() override { empty_cache(); }

  void* allocate(size_t nbytes) override {
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
      ptr = std::aligned_alloc(kAlignment, size);
      if (ptr == nullptr) {
        release_cached_locked();
        ptr = std::aligned_alloc(kAlignment, size);
      }
      EMBER_CHECK(ptr != nullptr, "CPU allocator: out of memory allocating ", nbytes, " bytes (",
                  stats_.str(), ")");
      stats_.reserved_bytes += size;
    }
    block_sizes_[ptr] = size;
    stats_.allocated_bytes += size;
    if (stats_.allocated_bytes > stats_.peak_allocated_bytes) {
      stats_.peak_allocated_bytes = stats_.allocated_bytes;
    }
    return ptr;
  }

  void deallocate(void* ptr) override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = block_sizes_.find(ptr);
    EMBER_CHECK(it != block_sizes_.end(), "CPU allocator: freeing a pointer it did not allocate");
    const size_t size = it->second;
    block_sizes_.erase(it);
    stats_.allocated_bytes -= size;
    free_blocks_[size].push_back(ptr);
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked();
  }

 private:
  void release_cached_locked() {
    for (auto& [size, blocks] : free_blocks_) {
      for (void* ptr : blocks)
        std::free(ptr);
      stats_.reserved_bytes -= size * blocks.size();
      blocks.clear();
    }
  }

  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_blocks_;
  std::unordered_map<void*, size_t> block_sizes_;
  AllocatorStats stats_;
};

}  // namespace

std::string AllocatorStats::str() const {
  return detail::concat("allocated ", allocated_bytes, " B, reserved ", reserved_bytes, " B, peak ",
                        peak_allocated_bytes, " B");
}

Allocator& cpu_allocator() {
  // Never destroyed: tensors in static storage may outlive any function-local static.
  static auto* allocator = new CpuCachingAllocator();
  return *allocator;
}

}  // namespace ember
