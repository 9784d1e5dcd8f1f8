# Finds cuDNN 9: CUDNN_ROOT, the CUDA toolkit, system paths, then PyTorch's nvidia-cudnn wheel.
# cuDNN is optional: when found, defines the imported target ember::cudnn, sets EMBER_WITH_CUDNN ON
# and EMBER_CUDNN_TARGET to ember::cudnn; otherwise EMBER_WITH_CUDNN is OFF, EMBER_CUDNN_TARGET is
# empty, and the kernels that would use it fall back to ember's own.
set(EMBER_WITH_CUDNN OFF)
set(EMBER_CUDNN_TARGET "")
set(_cudnn_hints ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR} /usr/local/cuda)
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_FOUND)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c "import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__) if nvidia.cudnn.__file__ else list(nvidia.cudnn.__path__)[0])"
    OUTPUT_VARIABLE _cudnn_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_cudnn_wheel)
    list(APPEND _cudnn_hints ${_cudnn_wheel})
  endif()
endif()
find_path(EMBER_CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cudnn_hints} PATH_SUFFIXES include)
find_library(EMBER_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${_cudnn_hints} PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
if(NOT EMBER_CUDNN_INCLUDE_DIR OR NOT EMBER_CUDNN_LIBRARY)
  message(STATUS "ember: cuDNN 9 not found (looked in: ${_cudnn_hints}); building without it (set CUDNN_ROOT to use it)")
  return()
endif()
if(NOT TARGET ember::cudnn)
  add_library(ember::cudnn UNKNOWN IMPORTED)
  set_target_properties(ember::cudnn PROPERTIES IMPORTED_LOCATION ${EMBER_CUDNN_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${EMBER_CUDNN_INCLUDE_DIR}
    INTERFACE_COMPILE_DEFINITIONS EMBER_WITH_CUDNN=1)
endif()
set(EMBER_WITH_CUDNN ON)
set(EMBER_CUDNN_TARGET ember::cudnn)
message(STATUS "ember: cuDNN ${EMBER_CUDNN_LIBRARY}")
