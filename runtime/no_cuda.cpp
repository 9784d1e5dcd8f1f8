// Built when ember has no CUDA: the device is known, every use of it says why it cannot work.
#include "runtime/cuda_hooks.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace ember {

bool cuda_compiled() {
  return false;
}
int cuda_device_count() {
  return 0;
}

namespace cuda {

DeviceProperties device_properties(int device_index) {
  check_device_available(Device::cuda(device_index));
  EMBER_FAIL("unreachable: CUDA device properties without CUDA");
}

std::pair<size_t, size_t> memory_info(int device_index) {
  check_device_available(Device::cuda(device_index));
  EMBER_FAIL("unreachable: CUDA memory information without CUDA");
}

void set_device(int device_index) {
  check_device_available(Device::cuda(device_index));
  EMBER_FAIL("unreachable: a current GPU without CUDA");
}

int current_device() {
  return -1;
}

}  // namespace cuda

namespace cuda_hooks {

Allocator& caching_allocator(int device_index) {
  check_device_available(Device::cuda(device_index));
  EMBER_FAIL("unreachable: CUDA allocator without CUDA");
}

Allocator& pinned_allocator() {
  EMBER_FAIL(
      "pinned (page-locked) host memory needs CUDA, and this build of ember has no CUDA support: "
      "rebuild with -DEMBER_CUDA=ON, or use ordinary CPU tensors");
}

void copy_bytes(void*, const void*, size_t, CopyKind, int device_index, const void*) {
  check_device_available(Device::cuda(device_index));
}

void copy_between_devices(void*, int dst_device, const void*, int src_device, size_t) {
  check_device_available(Device::cuda(src_device));
  check_device_available(Device::cuda(dst_device));
}

void synchronize(int device_index) {
  check_device_available(Device::cuda(device_index));
}

std::function<void()> host_fence(int device_index) {
  check_device_available(Device::cuda(device_index));
  return [] {};
}

}  // namespace cuda_hooks
}  // namespace ember
