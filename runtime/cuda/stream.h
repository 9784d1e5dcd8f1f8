// CUDA streams as the runtime sees them (built only with CUDA). Every op on a device is queued
// on that device's current stream; StreamGuard swaps it for a scope.
#pragma once

#include <cuda_runtime_api.h>

namespace ember::cuda {

// The stream ops on `device_index` are queued on (the legacy default stream unless changed).
cudaStream_t current_stream(int device_index);
void set_current_stream(int device_index, cudaStream_t stream);

}  // namespace ember::cuda
