# Decides whether ember builds its CUDA backend (EMBER_WITH_CUDA) and finds the CUDA libraries.
#   EMBER_CUDA=AUTO: on when nvcc is found (a machine with nvcc and no GPU still builds everything).
#   EMBER_CUDA=ON: nvcc must be found.
# cuDNN is searched for in the CUDA toolkit, in CUDNN_ROOT, and in PyTorch's pip wheels
# (nvidia/cudnn under site-packages), which is where the GPU machine keeps it.
set(EMBER_WITH_CUDA OFF)
if(NOT EMBER_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(EMBER_WITH_CUDA ON)
  elseif(EMBER_CUDA STREQUAL "ON")
    message(FATAL_ERROR "EMBER_CUDA=ON but no CUDA compiler (nvcc) was found; set CMAKE_CUDA_COMPILER or use -DEMBER_CUDA=OFF")
  endif()
endif()

if(EMBER_WITH_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  include(FindEmberCudnn)
  set(EMBER_CUDA_LIBRARIES CUDA::cudart CUDA::cublas CUDA::cublasLt ${EMBER_CUDNN_TARGET})
  message(STATUS "ember: CUDA backend ON (architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "ember: CUDA backend OFF")
endif()
