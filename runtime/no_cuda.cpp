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

namespace cuda_hooks {

Allocator& caching_allocator(int device_index) {
  check_device_available(Device::cuda(device_index));
  EMBER_FAIL("unreachable: CUDA allocator without CUDA");
}

void copy_bytes(void*, const void*, size_t, CopyKind, int device_index) {
  check_device_available(Device::cuda(device_index));
}

void synchronize(int device_index) {
  check_device_available(Device::cuda(device_index));
}

}  // namespace cuda_hooks
}  // namespace ember
