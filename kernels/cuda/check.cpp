#include "kernels/cuda/check.h"

#include <sstream>

namespace ember::kernels::cuda {

std::string cuda_error_message(cudaError_t status, const char* call, const char* file, int line) {
  std::ostringstream message;
  message << "CUDA error: " << call << " failed at " << file << ":" << line << ": "
          << cudaGetErrorString(status) << " (" << cudaGetErrorName(status)
          << "); is a GPU visible? check nvidia-smi and CUDA_VISIBLE_DEVICES";
  return message.str();
}

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  // A failed runtime call stays in CUDA's per-thread last-error slot until cudaGetLastError()
  // reads it: cleared here, or the next EMBER_CUDA_CHECK_LAUNCH would blame it on its kernel.
  // (A sticky error, a fault inside a kernel, stays: the context is unusable from then on.)
  static_cast<void>(cudaGetLastError());
  throw CudaError(cuda_error_message(status, call, file, line));
}

}  // namespace ember::kernels::cuda
