// CUDA streams as the runtime sees them (built only with CUDA). Every op on a device is queued
// on that device's current stream; StreamGuard swaps it for a scope.
//
// The current stream is per thread (and per device), as in PyTorch.
#pragma once

#include <cuda_runtime_api.h>

namespace ember::cuda {

// The stream ops on `device_index` are queued on (the legacy default stream unless changed).
cudaStream_t current_stream(int device_index);
void set_current_stream(int device_index, cudaStream_t stream);

// Makes `stream` the calling thread's current stream on `device_index` for a scope.
class StreamGuard {
 public:
  StreamGuard(int device_index, cudaStream_t stream)
      : device_index_(device_index), previous_(current_stream(device_index)) {
    set_current_stream(device_index, stream);
  }
  ~StreamGuard() { set_current_stream(device_index_, previous_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_index_;
  cudaStream_t previous_;
};

}  // namespace ember::cuda
