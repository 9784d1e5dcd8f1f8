#include "runtime/cuda/device_guard.h"

#include "runtime/cuda/check.h"

namespace ember::cuda {

DeviceGuard::DeviceGuard(int device_index) {
  EMBER_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device_index) EMBER_CUDA_CHECK(cudaSetDevice(device_index));
}

DeviceGuard::~DeviceGuard() {
  // Restored even when the guard had nothing to switch: code inside the scope may have selected
  // another device (as PyTorch's guard does). A destructor must not throw; restoring the device
  // the caller had cannot sensibly fail.
  int current = previous_;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_)
    static_cast<void>(cudaSetDevice(previous_));
}

}  // namespace ember::cuda
