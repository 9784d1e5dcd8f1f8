# Finds what distributed/ needs and decides which process-group backends it builds.
#   EMBER_MPI=ON (default): the MPI backend (Debian: libopenmpi-dev openmpi-bin). OFF: a world of
#     one process only (distributed/local/).
#   EMBER_NCCL=AUTO: the NCCL backend when the CUDA backend is on and nccl.h / libnccl are found
#     (the CUDA toolkit's, or NCCL_ROOT). It needs MPI to broadcast NCCL's unique id.
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

if(EMBER_WITH_CUDA AND EMBER_WITH_MPI AND NOT EMBER_NCCL STREQUAL "OFF")
  find_path(EMBER_NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS})
  find_library(EMBER_NCCL_LIBRARY nccl HINTS ${NCCL_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR})
  if(EMBER_NCCL_INCLUDE_DIR AND EMBER_NCCL_LIBRARY)
    set(EMBER_WITH_NCCL ON)
    add_library(ember_nccl INTERFACE)
    target_include_directories(ember_nccl INTERFACE ${EMBER_NCCL_INCLUDE_DIR})
    target_link_libraries(ember_nccl INTERFACE ${EMBER_NCCL_LIBRARY})
    list(APPEND EMBER_DISTRIBUTED_LIBRARIES ember_nccl)
  elseif(EMBER_NCCL STREQUAL "ON")
    message(FATAL_ERROR "EMBER_NCCL=ON but nccl.h / libnccl were not found (set NCCL_ROOT)")
  endif()
elseif(EMBER_NCCL STREQUAL "ON")
  message(FATAL_ERROR "EMBER_NCCL=ON needs the CUDA backend and MPI (EMBER_CUDA, EMBER_MPI)")
endif()
if(NOT EMBER_WITH_NCCL)
  list(APPEND EMBER_DISTRIBUTED_EXCLUDE "/distributed/nccl/")
endif()

set(EMBER_DISTRIBUTED_DEFINITIONS EMBER_WITH_MPI=$<BOOL:${EMBER_WITH_MPI}> EMBER_WITH_NCCL=$<BOOL:${EMBER_WITH_NCCL}>)
message(STATUS "ember: distributed backends: MPI ${EMBER_WITH_MPI}, NCCL ${EMBER_WITH_NCCL}")
