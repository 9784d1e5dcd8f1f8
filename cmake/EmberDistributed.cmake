# Finds what distributed/ needs and decides which process-group backends it builds.
#   EMBER_MPI=ON (default): the MPI backend (Debian: libopenmpi-dev openmpi-bin). OFF: a world of
#     one process only (distributed/local/).
#   EMBER_NCCL=AUTO: the NCCL backend when the CUDA backend is on and nccl.h / libnccl are found
#     (NCCL_ROOT, the CUDA toolkit's, or PyTorch's nvidia-nccl wheel, whose library is only
#     libnccl.so.2). With MPI, NCCL's unique id is broadcast over MPI; without it (EMBER_MPI=OFF)
#     the NCCL group is a world of one process (one GPU), for tests and single-GPU DDP.
set(EMBER_DISTRIBUTED_LIBRARIES "")
set(EMBER_DISTRIBUTED_EXCLUDE "")
set(EMBER_WITH_MPI OFF)
set(EMBER_WITH_NCCL OFF)

if(EMBER_MPI)
  find_package(MPI REQUIRED COMPONENTS CXX)
  set(EMBER_WITH_MPI ON)
  list(APPEND EMBER_DISTRIBUTED_LIBRARIES MPI::MPI_CXX)
  list(APPEND EMBER_DISTRIBUTED_EXCLUDE "/distributed/local/")
  find_program(EMBER_MPIEXEC_FOUND NAMES mpirun mpiexec HINTS ${MPI_HOME}/bin)
  # The real file: OpenMPI derives its prefix from the path it was started by, and the /bin of a
  # merged-/usr Debian gives the prefix "/", which it refuses.
  if(EMBER_MPIEXEC_FOUND)
    get_filename_component(EMBER_MPIEXEC ${EMBER_MPIEXEC_FOUND} REALPATH)
  endif()
else()
  list(APPEND EMBER_DISTRIBUTED_EXCLUDE "/distributed/mpi/")
endif()

if(EMBER_WITH_CUDA AND NOT EMBER_NCCL STREQUAL "OFF")
  set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"
      OUTPUT_VARIABLE _nccl_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_nccl_wheel)
      list(APPEND _nccl_hints ${_nccl_wheel})
    endif()
  endif()
  find_path(EMBER_NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES include)
  find_library(EMBER_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_nccl_hints}
    ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  if(EMBER_NCCL_INCLUDE_DIR AND EMBER_NCCL_LIBRARY)
    set(EMBER_WITH_NCCL ON)
    add_library(ember_nccl INTERFACE)
    target_include_directories(ember_nccl INTERFACE ${EMBER_NCCL_INCLUDE_DIR})
    target_link_libraries(ember_nccl INTERFACE ${EMBER_NCCL_LIBRARY})
    set_target_properties(ember_nccl PROPERTIES EXPORT_NAME nccl)  # ember::nccl once installed
    list(APPEND EMBER_DISTRIBUTED_LIBRARIES ember_nccl)
    message(STATUS "ember: NCCL ${EMBER_NCCL_LIBRARY} (${EMBER_NCCL_INCLUDE_DIR})")
  elseif(EMBER_NCCL STREQUAL "ON")
    message(FATAL_ERROR "EMBER_NCCL=ON but nccl.h / libnccl were not found (looked in: "
      "${_nccl_hints}; set NCCL_ROOT)")
  endif()
elseif(EMBER_NCCL STREQUAL "ON")
  message(FATAL_ERROR "EMBER_NCCL=ON needs the CUDA backend (EMBER_CUDA)")
endif()
if(NOT EMBER_WITH_NCCL)
  list(APPEND EMBER_DISTRIBUTED_EXCLUDE "/distributed/nccl/")
endif()

set(EMBER_DISTRIBUTED_DEFINITIONS EMBER_WITH_MPI=$<BOOL:${EMBER_WITH_MPI}> EMBER_WITH_NCCL=$<BOOL:${EMBER_WITH_NCCL}>)
message(STATUS "ember: distributed backends: MPI ${EMBER_WITH_MPI}, NCCL ${EMBER_WITH_NCCL}")
