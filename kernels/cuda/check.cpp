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
  throw CudaError(cuda_error_message(status, call, file, line));
}

}  // namespace ember::kernels::cuda
