// The CUDA memory sources behind runtime/cuda/allocator.h: the bookkeeping (splitting, merging,
// per-stream pools, events, out-of-memory retry) is runtime/block_allocator.cpp's, tested on the
// CPU; what is here is the thin layer of CUDA calls a GPU run must check.
#include "runtime/cuda/allocator.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/cuda/check.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/stream.h"
#include "runtime/cuda_hooks.h"
#include "runtime/env.h"
#include "runtime/error.h"

namespace ember::cuda {
namespace {

constexpr int kMaxDevices = 64;

cudaStream_t stream_of(StreamRef stream) {
  return reinterpret_cast<cudaStream_t>(stream.handle);
}

// Events and memory requests of both sources: on the device of the stream.
class CudaEvents : public MemorySource {
 public:
  void* record_event(StreamRef stream) override {
    DeviceGuard guard(stream.device);
    cudaEvent_t event = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    EMBER_CUDA_CHECK(cudaEventRecord(event, stream_of(stream)));
    return event;
  }
  bool event_completed(void* event) override {
    return EMBER_CUDA_QUERY(cudaEventQuery(static_cast<cudaEvent_t>(event)));
  }
  void synchronize_event(void* event) override {
    EMBER_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  }
  void destroy_event(void* event) override {
    EMBER_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
  }
};

// cudaMalloc on one device.
class DeviceMemory final : public CudaEvents {
 public:
  explicit DeviceMemory(int device_index) : device_index_(device_index) {}
  std::string out_of_memory_prefix() const override {
    return detail::concat("CUDA out of memory on cuda:", device_index_);
  }
  void* allocate(size_t size) override {
    DeviceGuard guard(device_index_);
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, size);
    if (status == cudaErrorMemoryAllocation) {
      static_cast<void>(cudaGetLastError());  // clear the error; the allocator retries
      return nullptr;
    }
    if (status != cudaSuccess) {
      EMBER_FAIL(kernels::cuda::cuda_error_message(status, "cudaMalloc", __FILE__, __LINE__),
                 " (allocating ", size, " bytes on cuda:", device_index_, ")");
    }
    return ptr;
  }
  void free(void* ptr) override {
    DeviceGuard guard(device_index_);
    EMBER_CUDA_CHECK(cudaFree(ptr));
  }
  StreamRef current_stream() const override {
    return StreamRef{reinterpret_cast<uintptr_t>(cuda::current_stream(device_index_)),
                     device_index_};
  }
  void fill(void* ptr, size_t size, unsigned char value, StreamRef stream) override {
    DeviceGuard guard(device_index_);
    EMBER_CUDA_CHECK(cudaMemsetAsync(ptr, value, size, stream_of(stream)));
  }
  std::pair<size_t, size_t> device_memory() const override {
    DeviceGuard guard(device_index_);
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      return {0, 0};
    }
    return {free, total};
  }

 private:
  const int device_index_;
};

// cudaHostAlloc: page-locked host memory, which the GPU's copy engines read and write directly
// (what makes cudaMemcpyAsync from the host asynchronous). Host blocks have no stream of their
// own: every use on a stream is a record_stream.
class PinnedHostMemory final : public CudaEvents {
 public:
  std::string out_of_memory_prefix() const override {
    return "out of pinned (page-locked) host memory";
  }
  void* allocate(size_t size) override {
    void* ptr = nullptr;
    // Portable: page-locked for every GPU's context, not only the current one's.
    const cudaError_t status = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
    if (status == cudaErrorMemoryAllocation) {
      static_cast<void>(cudaGetLastError());
      return nullptr;
    }
    if (status != cudaSuccess) {
      EMBER_FAIL(kernels::cuda::cuda_error_message(status, "cudaHostAlloc", __FILE__, __LINE__),
                 " (allocating ", size, " bytes of pinned host memory)");
    }
    return ptr;
  }
  void free(void* ptr) override { EMBER_CUDA_CHECK(cudaFreeHost(ptr)); }
  StreamRef current_stream() const override { return StreamRef{}; }
  void fill(void* ptr, size_t size, unsigned char value, StreamRef) override {
    std::memset(ptr, value, size);
  }
  std::pair<size_t, size_t> device_memory() const override { return {0, 0}; }
};

std::atomic<bool>& poison_flag() {
  static std::atomic<bool> flag{env_switch(
      "EMBER_CUDA_POISON", false, "fill every new device block with NaN bytes, for the tests")};
  return flag;
}

// Never destroyed: tensors in static storage may outlive any function-local static, and
// cudaFree after the CUDA runtime has shut down at exit would fail.
std::mutex allocators_mutex;
BlockAllocator** device_allocators() {
  static auto* allocators = new BlockAllocator*[kMaxDevices]();
  return allocators;
}

}  // namespace

BlockAllocator& device_allocator(int device_index) {
  check_device_available(Device::cuda(device_index));
  EMBER_CHECK(device_index < kMaxDevices, "CUDA allocator: device index ", device_index,
              " is out of range (expected 0 .. ", kMaxDevices - 1, ")");
  std::lock_guard<std::mutex> lock(allocators_mutex);
  BlockAllocator*& slot = device_allocators()[device_index];
  if (slot == nullptr) {
    const bool poison = poison_flag().load();  // first: a bad EMBER_CUDA_POISON throws here
    slot = new BlockAllocator(std::make_unique<DeviceMemory>(device_index));
    slot->set_poison(poison);
  }
  return *slot;
}

BlockAllocator& pinned_host_allocator() {
  EMBER_CHECK(cuda_device_count() > 0,
              "pinned (page-locked) host memory needs a CUDA GPU, and none is visible "
              "(CUDA_VISIBLE_DEVICES=",
              std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "<unset>",
              "); use ordinary CPU tensors");
  static auto* allocator = new BlockAllocator(std::make_unique<PinnedHostMemory>());
  return *allocator;
}

void record_stream(const Tensor& tensor, cudaStream_t stream, int device_index) {
  const StreamRef use{reinterpret_cast<uintptr_t>(stream), device_index};
  const Storage& storage = *tensor.storage();
  if (storage.is_pinned()) {
    pinned_host_allocator().record_stream(storage.data(), use);
    return;
  }
  EMBER_CHECK(tensor.is_cuda() && storage.owns_allocation(), "record_stream: ", describe(tensor),
              " is neither a CUDA tensor nor pinned memory from ember's allocators");
  device_allocator(tensor.device().index).record_stream(storage.data(), use);
}

void set_poison_allocations(bool poison) {
  poison_flag().store(poison);
  std::lock_guard<std::mutex> lock(allocators_mutex);
  for (int i = 0; i < kMaxDevices; ++i) {
    if (device_allocators()[i] != nullptr) device_allocators()[i]->set_poison(poison);
  }
}

bool poison_allocations() {
  return poison_flag().load();
}

void empty_cache() {
  for (int i = 0; i < cuda_device_count() && i < kMaxDevices; ++i)
    device_allocator(i).empty_cache();
  if (cuda_device_count() > 0) pinned_host_allocator().empty_cache();
}

}  // namespace ember::cuda

namespace ember::cuda_hooks {

Allocator& caching_allocator(int device_index) {
  return cuda::device_allocator(device_index);
}

Allocator& pinned_allocator() {
  return cuda::pinned_host_allocator();
}

}  // namespace ember::cuda_hooks
