// The subcommands of the `ember` program; each takes (argc, argv) with argv[0] its own name.
#pragma once

#include <string>

namespace ember::apps {

int run_demo(int argc, char** argv);
int run_version(int argc, char** argv);
int run_ckpt(int argc, char** argv);
int run_train(int argc, char** argv);
int run_report(int argc, char** argv);

// Before anything else in main: when OpenBLAS took its pre-AVX2 kernels on a CPU with AVX2 or
// AVX-512 and OPENBLAS_CORETYPE is not set, runs this program again (exec, the same pid and
// arguments) with OPENBLAS_CORETYPE naming the kernels the CPU runs; returns otherwise.
void restart_with_better_blas_kernels(char** argv);
// "Cooperlake (OPENBLAS_CORETYPE, set by ember: OpenBLAS took its Prescott kernels on this CPU)",
// "SkylakeX (OpenBLAS's choice)", ...: for `ember version`.
std::string blas_kernels_description();

}  // namespace ember::apps
