#include "runtime/cuda/device_guard.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include "runtime/cuda/check.h"

namespace ember::cuda {

namespace {

// Whether `device_index` has its primary context already. Since CUDA 12, cudaSetDevice creates
// it, and a context costs hundreds of MiB of that GPU's memory: a thread that started on its
// default device 0 without ever using it (a worker thread of rank k, which works on cuda:k) must
// not be "restored" to device 0, or every rank ends up holding a context on GPU 0. PyTorch's
// guard skips such a restore the same way. Unknown (a driver without the entry points): true,
// restore as usual.
bool has_primary_context(int device_index) {
  struct Driver {
    PFN_cuDeviceGet_v2000 device_get = nullptr;
    PFN_cuDevicePrimaryCtxGetState_v7000 primary_state = nullptr;
  };
  static const Driver driver = [] {
    Driver found;
    void* pointer = nullptr;
    cudaDriverEntryPointQueryResult result{};
    if (cudaGetDriverEntryPointByVersion("cuDeviceGet", &pointer, 12000, cudaEnableDefault,
                                         &result) == cudaSuccess &&
        result == cudaDriverEntryPointSuccess)
      found.device_get = reinterpret_cast<PFN_cuDeviceGet_v2000>(pointer);
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &pointer, 12000,
                                         cudaEnableDefault, &result) == cudaSuccess &&
        result == cudaDriverEntryPointSuccess)
      found.primary_state = reinterpret_cast<PFN_cuDevicePrimaryCtxGetState_v7000>(pointer);
    static_cast<void>(cudaGetLastError());  // a failed lookup must not reach the next launch
    return found;
  }();
  if (driver.device_get == nullptr || driver.primary_state == nullptr) return true;
  CUdevice device{};
  unsigned int flags = 0;
  int active = 0;
  if (driver.device_get(&device, device_index) != CUDA_SUCCESS ||
      driver.primary_state(device, &flags, &active) != CUDA_SUCCESS)
    return true;
  return active != 0;
}

}  // namespace

DeviceGuard::DeviceGuard(int device_index) {
  EMBER_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device_index) EMBER_CUDA_CHECK(cudaSetDevice(device_index));
}

DeviceGuard::~DeviceGuard() {
  // Restored even when the guard had nothing to switch: code inside the scope may have selected
  // another device (as PyTorch's guard does). A destructor must not throw; restoring the device
  // the caller had cannot sensibly fail, and if it does, CUDA's last-error slot is cleared so that
  // the next kernel launch's check does not report it as its own.
  int current = previous_;
  if (cudaGetDevice(&current) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return;
  }
  if (current == previous_ || !has_primary_context(previous_)) return;
  if (cudaSetDevice(previous_) != cudaSuccess) static_cast<void>(cudaGetLastError());
}

}  // namespace ember::cuda
