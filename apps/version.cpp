#include <iostream>

#include "apps/commands.h"
#include "runtime/device.h"

namespace ember::apps {

int run_version(int, char**) {
  std::cout << "ember 0.1.0\n"
            << "  CUDA backend: " << (cuda_compiled() ? "built" : "not built") << "\n"
            << "  CUDA devices visible: " << cuda_device_count() << "\n"
            << "  MPI backend: " << (EMBER_WITH_MPI ? "built" : "not built") << "\n"
            << "  NCCL backend: " << (EMBER_WITH_NCCL ? "built" : "not built") << "\n";
  return 0;
}

}  // namespace ember::apps
