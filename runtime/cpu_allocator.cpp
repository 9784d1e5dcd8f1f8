// The CPU caching allocator: 64-byte aligned blocks (a cache line, and an AVX-512 vector), size
// classes of 64 B steps up to 4 KiB, then quarter powers of two (runtime/caching_allocator.h).
#include <cstdlib>

#include "runtime/caching_allocator.h"
#include "runtime/error.h"

namespace ember {
namespace {

constexpr size_t kAlignment = 64;

class CpuCachingAllocator final : public CachingAllocator {
 public:
  CpuCachingAllocator() : CachingAllocator("CPU allocator", kAlignment, 4096) {}

 private:
  void* system_allocate(size_t size) override { return std::aligned_alloc(kAlignment, size); }
  void system_free(void* ptr) override { std::free(ptr); }
  std::string out_of_memory_hint() const override {
    return "reduce the batch size or free tensors that are still referenced";
  }
};

}  // namespace

std::string AllocatorStats::str() const {
  return detail::concat("allocated ", allocated_bytes, " B, reserved ", reserved_bytes, " B, peak ",
                        peak_allocated_bytes, " B, ", num_segments, " segments, ", num_allocs,
                        " allocs (", num_cache_hits, " from the cache), ", num_frees, " frees, ",
                        num_ooms, " out of memory, ", num_system_allocs,
                        " allocations from the system in ", system_alloc_seconds, " s");
}

Allocator& cpu_allocator() {
  // Never destroyed: tensors in static storage may outlive any function-local static.
  static auto* allocator = new CpuCachingAllocator();
  return *allocator;
}

}  // namespace ember
