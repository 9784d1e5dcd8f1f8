#include "runtime/cuda/device_guard.h"

#include "runtime/cuda/check.h"

namespace ember::cuda {

DeviceGuard::DeviceGuard(int device_index) {
  int current = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device_index) {
    EMBER_CUDA_CHECK(cudaSetDevice(device_index));
    previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  // A destructor must not throw; restoring the device the caller had cannot sensibly fail.
  if (previous_ >= 0) static_cast<void>(cudaSetDevice(previous_));
}

}  // namespace ember::cuda
