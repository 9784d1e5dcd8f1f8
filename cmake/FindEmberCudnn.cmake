# Finds cuDNN 9: CUDNN_ROOT, the CUDA toolkit, system paths, then PyTorch's nvidia-cudnn wheel.
# cuDNN is optional: when found, defines the target ember_cudnn (ember::cudnn once installed), sets
# EMBER_WITH_CUDNN ON and EMBER_CUDNN_TARGET to ember_cudnn; otherwise EMBER_WITH_CUDNN is OFF,
# EMBER_CUDNN_TARGET is empty, and the kernels that would use it fall back to ember's own.
# An interface library rather than an imported one, so that find_package(ember) can carry it.
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
if(NOT TARGET ember_cudnn)
  add_library(ember_cudnn INTERFACE)
  target_include_directories(ember_cudnn INTERFACE ${EMBER_CUDNN_INCLUDE_DIR})
  target_link_libraries(ember_cudnn INTERFACE ${EMBER_CUDNN_LIBRARY})
  target_compile_definitions(ember_cudnn INTERFACE EMBER_WITH_CUDNN=1)
  set_target_properties(ember_cudnn PROPERTIES EXPORT_NAME cudnn)
endif()
set(EMBER_WITH_CUDNN ON)
set(EMBER_CUDNN_TARGET ember_cudnn)
message(STATUS "ember: cuDNN ${EMBER_CUDNN_LIBRARY}")
