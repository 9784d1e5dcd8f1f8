// CUDA caching allocator, one per device.
//
// cudaMalloc and cudaFree are slow and cudaFree synchronises the whole device, so freed blocks are
// kept in per-size-class free lists and handed out again. Requests round up to a size class
// (512 B steps up to 1 MiB, then quarter powers of two), so that slightly different sizes share
// blocks without wasting more than a quarter.
//
// Blocks are not tied to streams: a freed block may be reused at once because every op on a
// device is queued on its current stream, which orders the reuse after the last use. Work queued
// on other streams must be synchronised by its owner before its tensors die.
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda_hooks.h"
#include "runtime/error.h"

namespace ember {
namespace {

constexpr size_t kSmallStep = 512;
constexpr size_t kSmallLimit = size_t{1} << 20;
constexpr int kMaxDevices = 64;

size_t round_to_size_class(size_t nbytes) {
  if (nbytes <= kSmallLimit)
    return nbytes == 0 ? kSmallStep : (nbytes + kSmallStep - 1) / kSmallStep * kSmallStep;
  size_t power = kSmallLimit;
  while (power * 2 < nbytes)
    power *= 2;
  const size_t step = power / 4;
  return (nbytes + step - 1) / step * step;
}

class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int device_index) : device_index_(device_index) {}

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
      cuda::DeviceGuard guard(device_index_);
      cudaError_t status = cudaMalloc(&ptr, size);
      if (status == cudaErrorMemoryAllocation) {
        // Cached blocks of other sizes may be what is missing: give them back and try once more.
        static_cast<void>(cudaGetLastError());
        release_cached_locked();
        status = cudaMalloc(&ptr, size);
      }
      if (status == cudaErrorMemoryAllocation) {
        static_cast<void>(cudaGetLastError());
        EMBER_FAIL("CUDA allocator: out of memory on cuda:", device_index_, " allocating ", nbytes,
                   " bytes (", stats_.str(),
                   "); reduce the batch size or free tensors that are still referenced");
      }
      if (status != cudaSuccess) {
        EMBER_FAIL(kernels::cuda::cuda_error_message(status, "cudaMalloc", __FILE__, __LINE__),
                   " (allocating ", nbytes, " bytes on cuda:", device_index_, ")");
      }
      stats_.reserved_bytes += size;
    }
    block_sizes_[ptr] = size;
    stats_.allocated_bytes += size;
    if (stats_.allocated_bytes > stats_.peak_allocated_bytes)
      stats_.peak_allocated_bytes = stats_.allocated_bytes;
    return ptr;
  }

  void deallocate(void* ptr) override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = block_sizes_.find(ptr);
    EMBER_CHECK(it != block_sizes_.end(), "CUDA allocator (cuda:", device_index_,
                "): freeing a pointer it did not allocate");
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
    cuda::DeviceGuard guard(device_index_);
    for (auto& [size, blocks] : free_blocks_) {
      for (void* ptr : blocks)
        EMBER_CUDA_CHECK(cudaFree(ptr));
      stats_.reserved_bytes -= size * blocks.size();
      blocks.clear();
    }
  }

  const int device_index_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_blocks_;
  std::unordered_map<void*, size_t> block_sizes_;
  AllocatorStats stats_;
};

}  // namespace

namespace cuda_hooks {

Allocator& caching_allocator(int device_index) {
  check_device_available(Device::cuda(device_index));
  EMBER_CHECK(device_index < kMaxDevices, "CUDA allocator: device index ", device_index,
              " is out of range (expected 0 .. ", kMaxDevices - 1, ")");
  // Never destroyed: tensors in static storage may outlive any function-local static, and
  // cudaFree after the CUDA runtime has shut down at exit would fail.
  static std::mutex mutex;
  static auto* allocators = new std::unique_ptr<CudaCachingAllocator>[kMaxDevices];
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<CudaCachingAllocator>& slot = allocators[device_index];
  if (!slot) slot = std::make_unique<CudaCachingAllocator>(device_index);
  return *slot;
}

}  // namespace cuda_hooks
}  // namespace ember
