// The CUDA side of runtime/cuda_hooks.h and device.h's queries (runtime/no_cuda.cpp without CUDA).
#include <memory>

#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/event.h"
#include "runtime/cuda/stream.h"
#include "runtime/cuda_hooks.h"
#include "runtime/device.h"

namespace ember {

bool cuda_compiled() {
  return true;
}

int cuda_device_count() {
  // Counted once: the CUDA runtime reads CUDA_VISIBLE_DEVICES once per process anyway. A machine
  // without a GPU or without a driver is not an error here: it has zero devices.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());  // clear the error so later calls do not see it
      return 0;
    }
    return n;
  }();
  return count;
}

namespace cuda {

DeviceProperties device_properties(int device_index) {
  check_device_available(Device::cuda(device_index));
  cudaDeviceProp prop{};
  EMBER_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_index));
  DeviceProperties properties;
  properties.name = prop.name;
  properties.total_memory = prop.totalGlobalMem;
  properties.major = prop.major;
  properties.minor = prop.minor;
  properties.multiprocessor_count = prop.multiProcessorCount;
  return properties;
}

std::pair<size_t, size_t> memory_info(int device_index) {
  check_device_available(Device::cuda(device_index));
  DeviceGuard guard(device_index);
  size_t free = 0, total = 0;
  EMBER_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return {free, total};
}

void set_device(int device_index) {
  check_device_available(Device::cuda(device_index));
  EMBER_CUDA_CHECK(cudaSetDevice(device_index));
}

int current_device() {
  if (cuda_device_count() == 0) return -1;
  int device = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

}  // namespace cuda

namespace cuda_hooks {

void copy_bytes(void* dst, const void* src, size_t nbytes, CopyKind kind, int device_index,
                const void* pinned_host_block) {
  check_device_available(Device::cuda(device_index));
  if (nbytes == 0) return;
  cuda::DeviceGuard guard(device_index);
  const cudaStream_t stream = cuda::current_stream(device_index);
  if (pinned_host_block != nullptr) {
    // Left running: the copy engine reads or writes the pinned block while the host goes on, so
    // the block must not be handed out again before the copy has completed.
    EMBER_CUDA_CHECK(cudaMemcpyAsync(
        dst, src, nbytes,
        kind == CopyKind::host_to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
        stream));
    cuda::pinned_host_allocator().record_stream(
        const_cast<void*>(pinned_host_block),
        StreamRef{reinterpret_cast<uintptr_t>(stream), device_index});
    return;
  }
  switch (kind) {
    case CopyKind::host_to_device:
      // Synchronised: the caller may free or change the host buffer as soon as this returns.
      EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream));
      EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
      return;
    case CopyKind::device_to_host:
      EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream));
      EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
      return;
  }
}

void copy_between_devices(void* dst, int dst_device, const void* src, int src_device,
                          size_t nbytes) {
  check_device_available(Device::cuda(src_device));
  check_device_available(Device::cuda(dst_device));
  if (nbytes == 0) return;
  const cudaStream_t src_stream = cuda::current_stream(src_device);
  const cudaStream_t dst_stream = cuda::current_stream(dst_device);
  // Nobody may still be using the destination's memory: the copy waits for its device's stream.
  // (Streams of two devices are not ordered with each other, not even the legacy default ones.)
  cuda::Event dst_ready, copied;
  dst_ready.record(dst_stream, dst_device);
  {
    cuda::DeviceGuard guard(src_device);  // the legacy default stream is the current device's
    dst_ready.wait(src_stream);
    EMBER_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, nbytes, src_stream));
  }
  copied.record(src_stream, src_device);
  cuda::DeviceGuard guard(dst_device);
  copied.wait(dst_stream);
}

void synchronize(int device_index) {
  check_device_available(Device::cuda(device_index));
  cuda::DeviceGuard guard(device_index);
  EMBER_CUDA_CHECK(cudaDeviceSynchronize());
}

std::function<void()> host_fence(int device_index) {
  check_device_available(Device::cuda(device_index));
  auto event = std::make_shared<cuda::Event>();
  event->record(device_index);
  return [event] { event->synchronize(); };
}

}  // namespace cuda_hooks
}  // namespace ember
