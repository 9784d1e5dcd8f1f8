// Allocators hand out device memory for Storage. Both the CPU and the CUDA allocator cache freed
// blocks for reuse, because training allocates the same sizes every step and a fresh 64 MB
// buffer costs page faults (CPU) or a device synchronisation (cudaFree).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/device.h"

namespace ember {

// More than any machine holds (an exbibyte): a larger request is a size computed wrong, refused
// with an error before the size arithmetic (its size class, the byte count) can wrap around.
inline constexpr int64_t kMaxAllocationBytes = int64_t{1} << 60;

struct AllocatorStats {
  size_t allocated_bytes = 0;       // in blocks handed out now
  size_t reserved_bytes = 0;        // held from the system: handed out plus cached
  size_t peak_allocated_bytes = 0;  // the most ever handed out at once
  size_t num_allocs = 0;            // requests served
  size_t num_cache_hits = 0;        // requests served from the cache
  size_t num_frees = 0;             // blocks handed back
  size_t num_segments = 0;          // allocations held from the system now
  size_t num_ooms = 0;              // requests that failed for lack of memory
  size_t num_system_allocs = 0;     // calls for new memory from the system (malloc, cudaMalloc),
                                    // failed ones included
  double system_alloc_seconds = 0;  // the host time those calls took
  std::string str() const;
};

// Calls `allocate` (the system's allocation: it returns the memory or nullptr) and counts the
// call and its time in `stats`.
template <typename Allocate>
void* count_system_alloc(AllocatorStats& stats, Allocate&& allocate) {
  const auto start = std::chrono::steady_clock::now();
  void* ptr = allocate();
  stats.system_alloc_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++stats.num_system_allocs;
  return ptr;
}

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for at least `nbytes` bytes (nbytes may be 0: a valid, unique pointer).
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak() = 0;
  // Returns the cached, unused blocks to the system.
  virtual void empty_cache() = 0;
};

// The process-wide CPU caching allocator: 64-byte aligned blocks.
Allocator& cpu_allocator();
// The allocator for `device` (the CUDA one exists only in builds with CUDA).
Allocator& allocator_for(const Device& device);

}  // namespace ember
