# Install rules and the files behind find_package(ember):
#
#   cmake --install build --prefix /opt/ember --component ember_development   # libraries + headers
#   cmake --install build --prefix /opt/ember                                  # and the ember command
#
# and then, in a project of a user's own:
#
#   find_package(ember 0.1 REQUIRED)            # CMAKE_PREFIX_PATH=/opt/ember
#   target_link_libraries(your_program PRIVATE ember::ember)
#
# Layout under the prefix:
#   include/ember/<layer>/...h       the public headers, included as "nn/nn.h" (as in the repository)
#   lib/libember_<layer>.a           one static library per layer (DESIGN.md)
#   lib/cmake/ember/                 emberConfig.cmake, its version file and the exported targets
#   lib/pkgconfig/ember.pc           the same for pkg-config (cmake/EmberPkgConfig.cmake)
#   bin/ember                        the command (component ember_cli)
# The installed tree refers to nothing in the source or build folder, so it can be moved.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(EMBER_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ember)
set(EMBER_INSTALL_HEADERS_IN ${CMAKE_INSTALL_INCLUDEDIR}/ember)
if(NOT EMBER_INSTALL_HEADERS_IN STREQUAL "include/ember")
  message(FATAL_ERROR "ember: CMAKE_INSTALL_INCLUDEDIR must stay 'include' (ember_flags names include/ember)")
endif()

# What a program needs to link ember: the layers, ember_flags, and the interface libraries made
# for found dependencies (cuDNN, NCCL). Imported targets of CMake's own modules (OpenMP::, BLAS::,
# ZLIB::, CUDA::, MPI::) are found again by emberConfig.cmake.
set(EMBER_EXPORTED_TARGETS ember ember_flags ${EMBER_LAYERS} ember_kernels)
foreach(dependency ember_cudnn ember_nccl)
  if(TARGET ${dependency})
    list(APPEND EMBER_EXPORTED_TARGETS ${dependency})
  endif()
endforeach()
list(REMOVE_DUPLICATES EMBER_EXPORTED_TARGETS)
install(TARGETS ${EMBER_EXPORTED_TARGETS} EXPORT emberTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT ember_development)
install(EXPORT emberTargets NAMESPACE ember:: DESTINATION ${EMBER_INSTALL_CMAKEDIR}
  COMPONENT ember_development)

# Every header of the layers' folders (the CUDA ones too: they only need the toolkit's headers).
foreach(layer runtime kernels nn optim data distributed engines)
  if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${layer})
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer} DESTINATION ${EMBER_INSTALL_HEADERS_IN}
      COMPONENT ember_development FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")
  endif()
endforeach()

foreach(feature CUDA CUDNN MPI NCCL)  # written into emberConfig.cmake as ON or OFF
  if(NOT EMBER_WITH_${feature})
    set(EMBER_WITH_${feature} OFF)
  endif()
endforeach()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/emberConfig.cmake.in
  ${PROJECT_BINARY_DIR}/emberConfig.cmake INSTALL_DESTINATION ${EMBER_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API, so 0.1 accepts 0.1.* only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/emberConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/emberConfig.cmake ${PROJECT_BINARY_DIR}/emberConfigVersion.cmake
  DESTINATION ${EMBER_INSTALL_CMAKEDIR} COMPONENT ember_development)

include(EmberPkgConfig)  # lib/pkgconfig/ember.pc

if(TARGET ember_cli)
  # The installed command keeps the run paths of the libraries it links outside the system's
  # folders (cuDNN and NCCL under /usr/local/cuda, a wheel's, MPI's), as the built one has them.
  set_target_properties(ember_cli PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS ember_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT ember_cli)
endif()
