# Decides whether ember builds its CUDA backend (EMBER_WITH_CUDA) and finds the CUDA libraries.
#   EMBER_CUDA=AUTO: on when nvcc is found (a machine with nvcc and no GPU still builds everything).
#   EMBER_CUDA=ON: nvcc must be found.
# cuDNN (optional) is searched for in the CUDA toolkit, in CUDNN_ROOT, and in PyTorch's pip wheels
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
  # CMake before 3.26 does not know that nvcc 12+ speaks C++20: teach it the flag.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  # nvcc's own warnings and the host compiler's (-Wall -Wextra, as for C++) on ember's .cu files;
  # errors too when EMBER_WERROR is on. Set here because every .cu file in the build is ember's.
  string(APPEND CMAKE_CUDA_FLAGS " -Xcompiler=-Wall,-Wextra,-Wno-unknown-pragmas")
  if(EMBER_WERROR)
    string(APPEND CMAKE_CUDA_FLAGS " -Werror=all-warnings -Xcompiler=-Werror")
  endif()
  include(FindEmberCudnn)
  set(EMBER_CUDA_LIBRARIES CUDA::cudart CUDA::cublas CUDA::cublasLt ${EMBER_CUDNN_TARGET})
  message(STATUS "ember: CUDA backend ON (architectures ${CMAKE_CUDA_ARCHITECTURES}, cuDNN ${EMBER_WITH_CUDNN})")
else()
  message(STATUS "ember: CUDA backend OFF")
endif()
