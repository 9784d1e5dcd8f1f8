// Error checking for CUDA calls made by the kernels layer.
//
// kernels/ sits below runtime/ (and its ember::Error), so a failed launch here throws
// kernels::cuda::CudaError, a std::runtime_error; runtime/cuda/check.h's EMBER_CUDA_CHECK throws
// ember::Error with the same message. Both name the call, file, line, CUDA's own message, and a
// hint.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace ember::kernels::cuda {

class CudaError : public std::runtime_error {
 public:
  explicit CudaError(const std::string& message) : std::runtime_error(message) {}
};

// "CUDA error: <call> failed at <file>:<line>: <cudaGetErrorString> (<name>); is a GPU visible?
// ..."
std::string cuda_error_message(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line);

}  // namespace ember::kernels::cuda

#define EMBER_CUDA_KERNEL_CHECK(call)                                                          \
  do {                                                                                         \
    const cudaError_t ember_cuda_status_ = (call);                                             \
    if (ember_cuda_status_ != cudaSuccess)                                                     \
      ::ember::kernels::cuda::throw_cuda_error(ember_cuda_status_, #call, __FILE__, __LINE__); \
  } while (false)

// After a kernel launch: reports a bad launch configuration or an earlier asynchronous fault.
// `what` names the launch ("unary<<<>>>").
#define EMBER_CUDA_CHECK_LAUNCH(what)                                                         \
  do {                                                                                        \
    const cudaError_t ember_cuda_status_ = cudaGetLastError();                                \
    if (ember_cuda_status_ != cudaSuccess)                                                    \
      ::ember::kernels::cuda::throw_cuda_error(ember_cuda_status_, what, __FILE__, __LINE__); \
  } while (false)
