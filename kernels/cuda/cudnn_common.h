// What the two cuDNN convolution paths (cudnn_conv.cpp, cudnn_graph_conv.cpp) share:
//   EMBER_CUDNN_CHECK(call)  a status other than success becomes a CudnnError (a CudaError) that
//                            names the call, where it was made and cuDNN's own words for the
//                            status;
//   cudnn_data_type(dtype)   ember's convolution dtype in cuDNN's terms.
// Include it only where EMBER_WITH_CUDNN is set.
#pragma once

#include <cudnn.h>

#include <sstream>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cudnn_conv.h"

namespace ember::kernels::cuda {

// cuDNN refused a call (a status other than success), as opposed to a CUDA runtime error, which
// may come from any kernel before it: the graph path passes a refused plan over, not a broken
// device.
class CudnnError : public CudaError {
 public:
  using CudaError::CudaError;
};

[[noreturn]] inline void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file,
                                           int line) {
  std::ostringstream message;
  message << "cuDNN error: " << call << " failed at " << file << ":" << line << ": "
          << cudnnGetErrorString(status) << " (status " << static_cast<int>(status)
          << "); is the cuDNN library the one ember was built against (cuDNN " << CUDNN_MAJOR << "."
          << CUDNN_MINOR << ")?";
  throw CudnnError(message.str());
}

inline cudnnDataType_t cudnn_data_type(ConvDataType dtype) {
  switch (dtype) {
    case ConvDataType::f32:
      return CUDNN_DATA_FLOAT;
    case ConvDataType::f64:
      return CUDNN_DATA_DOUBLE;
    case ConvDataType::f16:
      return CUDNN_DATA_HALF;
    case ConvDataType::bf16:
      return CUDNN_DATA_BFLOAT16;
  }
  return CUDNN_DATA_FLOAT;
}

}  // namespace ember::kernels::cuda

#define EMBER_CUDNN_CHECK(call)                                                                  \
  do {                                                                                           \
    const cudnnStatus_t ember_cudnn_status_ = (call);                                            \
    if (ember_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                             \
      ::ember::kernels::cuda::throw_cudnn_error(ember_cudnn_status_, #call, __FILE__, __LINE__); \
  } while (false)
