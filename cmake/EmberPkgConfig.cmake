# ember.pc, for builds that use pkg-config rather than CMake (a Makefile, meson):
#
#   PKG_CONFIG_PATH=/opt/ember/lib/pkgconfig c++ $(pkg-config --cflags ember) main.cpp \
#     $(pkg-config --libs ember)
#
# ember's own part is relative to the file (${pcfiledir}), so the installed tree can be moved.
# Its dependencies are named by the paths this build found them at (OpenBLAS, zlib, MPI, the
# CUDA libraries, cuDNN, NCCL), as emberConfig.cmake's find_dependency would find them again;
# shared libraries outside the compiler's own folders get a run path. Included by
# EmberInstall.cmake.

# The libraries in link order: each layer before the layers it uses (DESIGN.md), kernels last.
set(_pc_libs "")
set(_pc_layers ${EMBER_LAYERS})
list(REVERSE _pc_layers)
foreach(layer IN LISTS _pc_layers ITEMS ember_kernels)
  string(APPEND _pc_libs " -l${layer}")
endforeach()

set(_pc_cflags "-std=c++20 ${OpenMP_CXX_FLAGS} -pthread")
foreach(feature CUDA MPI NCCL)  # 0 or 1, as ember_flags and ember_distributed define them
  if(EMBER_WITH_${feature})
    string(APPEND _pc_cflags " -DEMBER_WITH_${feature}=1")
  else()
    string(APPEND _pc_cflags " -DEMBER_WITH_${feature}=0")
  endif()
endforeach()
if(EMBER_SANITIZE)
  string(APPEND _pc_cflags " -fsanitize=${EMBER_SANITIZE} -fno-omit-frame-pointer")
  string(APPEND _pc_libs " -fsanitize=${EMBER_SANITIZE}")
endif()

# Shared libraries by path; a run path for each folder the linker would not search by itself.
set(_pc_rpaths "")
set(_pc_shared ${BLAS_LIBRARIES} ${ZLIB_LIBRARIES})
set(_pc_includes "")
if(EMBER_WITH_CUDA)
  list(APPEND _pc_shared ${CUDA_cudart_LIBRARY} ${CUDA_cublas_LIBRARY} ${CUDA_cublasLt_LIBRARY})
  list(APPEND _pc_includes ${CUDAToolkit_INCLUDE_DIRS})
endif()
if(EMBER_WITH_CUDNN)
  list(APPEND _pc_shared ${EMBER_CUDNN_LIBRARY})
  list(APPEND _pc_includes ${EMBER_CUDNN_INCLUDE_DIR})
endif()
if(EMBER_WITH_MPI)
  list(APPEND _pc_shared ${MPI_CXX_LIBRARIES})
  list(APPEND _pc_includes ${MPI_CXX_INCLUDE_DIRS})
endif()
if(EMBER_WITH_NCCL)
  list(APPEND _pc_shared ${EMBER_NCCL_LIBRARY})
  list(APPEND _pc_includes ${EMBER_NCCL_INCLUDE_DIR})
endif()
foreach(library IN LISTS _pc_shared)
  string(APPEND _pc_libs " ${library}")
  if(NOT IS_ABSOLUTE "${library}")  # a flag such as -lm, passed on as it is
    continue()
  endif()
  get_filename_component(folder ${library} DIRECTORY)
  if(NOT folder IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES AND NOT folder IN_LIST _pc_rpaths)
    list(APPEND _pc_rpaths ${folder})
  endif()
endforeach()
foreach(folder IN LISTS _pc_rpaths)
  string(APPEND _pc_libs " -Wl,-rpath,${folder}")
endforeach()
string(APPEND _pc_libs " ${OpenMP_CXX_FLAGS} -pthread")
list(REMOVE_DUPLICATES _pc_includes)
foreach(folder IN LISTS _pc_includes)
  if(NOT folder IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
    string(APPEND _pc_cflags " -I${folder}")
  endif()
endforeach()

# ${pcfiledir} is <prefix>/<libdir>/pkgconfig: the prefix is as many folders up.
file(RELATIVE_PATH _pc_up /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" _pc_up "${_pc_up}")
file(WRITE ${PROJECT_BINARY_DIR}/ember.pc
"# ember ${PROJECT_VERSION} for pkg-config; written by cmake/EmberPkgConfig.cmake.
prefix=\${pcfiledir}/${_pc_up}
includedir=\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}/ember
libdir=\${prefix}/${CMAKE_INSTALL_LIBDIR}

Name: ember
Description: C++20/CUDA deep-learning training runtime (tensors, autograd, layers, optimizers, data-parallel training)
Version: ${PROJECT_VERSION}
Cflags: -I\${includedir} ${_pc_cflags}
Libs: -L\${libdir}${_pc_libs}
")
install(FILES ${PROJECT_BINARY_DIR}/ember.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT ember_development)
unset(_pc_layers)
unset(_pc_libs)
unset(_pc_cflags)
unset(_pc_rpaths)
unset(_pc_shared)
unset(_pc_includes)
unset(_pc_up)
