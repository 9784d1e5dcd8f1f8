// DeviceGuard: makes `device_index` the calling thread's current CUDA device for a scope, and
// restores the previous one after, even if code inside the scope selected yet another (the
// allocator and copies run on the device they are asked for, whatever device the caller had
// selected). One exception, as in PyTorch: a previous device that has no context yet (a fresh
// thread's default device 0, never used) is not restored, since selecting it would create one.
#pragma once

#include <cuda_runtime_api.h>

namespace ember::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device_index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;  // the caller's device, restored at the end of the scope
};

}  // namespace ember::cuda
