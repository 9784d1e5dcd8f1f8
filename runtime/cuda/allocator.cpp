// CUDA caching allocator, one per device.
//
// cudaMalloc and cudaFree are slow and cudaFree synchronises the whole device, so freed blocks are
// cached (runtime/caching_allocator.h) in size classes of 512 B steps up to 1 MiB, then quarter
// powers of two.
//
// Blocks are not tied to streams: a freed block may be reused at once because every op on a
// device is queued on its current stream, which orders the reuse after the last use. Work queued
// on other streams must be synchronised by its owner before its tensors die.
#include <memory>
#include <mutex>
#include <string>

#include "runtime/caching_allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda_hooks.h"
#include "runtime/error.h"

namespace ember {
namespace {

constexpr size_t kSmallStep = 512;
constexpr size_t kSmallLimit = size_t{1} << 20;
constexpr int kMaxDevices = 64;

class CudaCachingAllocator final : public CachingAllocator {
 public:
  explicit CudaCachingAllocator(int device_index)
      : CachingAllocator(detail::concat("CUDA allocator (cuda:", device_index, ")"), kSmallStep,
                         kSmallLimit),
        device_index_(device_index) {}

 private:
  void* system_allocate(size_t size) override {
    cuda::DeviceGuard guard(device_index_);
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, size);
    if (status == cudaErrorMemoryAllocation) {
      static_cast<void>(cudaGetLastError());  // clear the sticky error; the caller retries
      return nullptr;
    }
    if (status != cudaSuccess) {
      EMBER_FAIL(kernels::cuda::cuda_error_message(status, "cudaMalloc", __FILE__, __LINE__),
                 " (allocating ", size, " bytes on cuda:", device_index_, ")");
    }
    return ptr;
  }
  void system_free(void* ptr) override {
    cuda::DeviceGuard guard(device_index_);
    EMBER_CUDA_CHECK(cudaFree(ptr));
  }
  std::string out_of_memory_hint() const override {
    return "reduce the batch size or free tensors that are still referenced";
  }

  const int device_index_;
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
