// `ember` on a CPU whose OpenBLAS took kernels far below what the CPU runs: the program starts
// itself again with OPENBLAS_CORETYPE naming better ones (kernels/cpu/blas_kernels_advice.h says
// when and why). OpenBLAS reads the variable once, when it loads, so only a new process image can
// change its choice. The restart is an exec of the same program with the same arguments, first
// thing in main: the same process (the same pid, so a launcher such as mpirun sees nothing), before
// any file, thread or MPI connection exists.
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "apps/commands.h"
#include "kernels/cpu/blas_kernels_advice.h"
#include "kernels/cpu/gemm.h"

namespace ember::apps {

namespace {

// Tells the restarted process which kernels OpenBLAS had taken, for `ember version`.
constexpr const char* kOverruledKernels = "EMBER_OPENBLAS_OVERRULED";

}  // namespace

void restart_with_better_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice, or this restart's
  const std::string chosen = kernels::cpu::blas_kernels();
  const std::string better =
      kernels::cpu::better_blas_kernels(chosen, kernels::cpu::this_cpu_vector_support());
  if (better.empty()) return;
  setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
  setenv(kOverruledKernels, chosen.c_str(), 1);
  execv("/proc/self/exe", argv);
  // The exec failed (no /proc, say): carry on with OpenBLAS's own choice, and leave no variable
  // behind that would say otherwise.
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kOverruledKernels);
}

std::string blas_kernels_description() {
  std::string text = kernels::cpu::blas_kernels();
  if (const char* overruled = std::getenv(kOverruledKernels)) {
    text += " (OPENBLAS_CORETYPE, set by ember: OpenBLAS took its ";
    text += overruled;
    text += " kernels on this CPU)";
  } else if (std::getenv("OPENBLAS_CORETYPE") != nullptr) {
    text += " (OPENBLAS_CORETYPE)";
  } else {
    text += " (OpenBLAS's choice)";
  }
  return text;
}

}  // namespace ember::apps
