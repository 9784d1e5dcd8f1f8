#include <iostream>

#include "apps/commands.h"
#include "apps/flags.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace ember::apps {

int run_version(int argc, char** argv) {
  if (asks_for_help(argc, argv)) {
    std::cout << "usage: ember version\n  prints ember's version and build options\n";
    return 0;
  }
  EMBER_CHECK(argc <= 1, "version: takes no arguments, got '", argc > 1 ? argv[1] : "",
              "' (ember version prints the version and build options)");
  std::cout << "ember 0.1.0\n"
            << "  CUDA backend: " << (cuda_compiled() ? "built" : "not built") << "\n"
            << "  CUDA devices visible: " << cuda_device_count() << "\n"
            << "  MPI backend: " << (EMBER_WITH_MPI ? "built" : "not built") << "\n"
            << "  NCCL backend: " << (EMBER_WITH_NCCL ? "built" : "not built") << "\n"
            << "  OpenBLAS kernels: " << blas_kernels_description() << "\n";
  return 0;
}

}  // namespace ember::apps
