#include "runtime/allocator.h"

#include "runtime/cuda_hooks.h"

namespace ember {

Allocator& allocator_for(const Device& device) {
  if (device.is_cpu()) return cpu_allocator();
  check_device_available(device);
  return cuda_hooks::caching_allocator(device.index);
}

}  // namespace ember
