// Whether OpenBLAS runs kernels far below what this CPU can run, and which it should take instead.
//
// OpenBLAS (built with DYNAMIC_ARCH, as Debian's) picks its kernels from the CPU's family and
// model when the library loads. A model it does not know may send it to its oldest x86-64 kernels:
// Debian 12's OpenBLAS 0.3.21 takes "Prescott" (SSE3) on Intel's Emerald Rapids (family 6, model
// 207), an AVX-512 CPU. On 2 cores of one, sgemm at 1024^2 ran at 61 GFLOP/s with those kernels
// and at 295 GFLOP/s (92% of the FMA units' measured ceiling) with its Cooperlake ones; ember's
// GPT-like model trained 2.4x faster (bench/results/cpu-blas-kernels-2026-11-30.md). OpenBLAS takes
// a choice from the environment, OPENBLAS_CORETYPE, read once when it loads.
//
// `ember` (apps/main.cpp) asks this before anything else and, when OpenBLAS's choice is one of
// these old kernels on a CPU with AVX2 or AVX-512 and OPENBLAS_CORETYPE is not set, starts itself
// again with OPENBLAS_CORETYPE set to the kernels the CPU runs. A program that embeds ember can
// set the variable itself; ember's library does not change it.
#pragma once

#include <string>
#include <string_view>

namespace ember::kernels::cpu {

// What an x86-64 CPU runs that OpenBLAS's kernels are named after.
struct CpuVectorSupport {
  bool avx2_fma = false;
  bool avx512 = false;       // AVX-512 F, VL, BW and DQ: OpenBLAS's SkylakeX kernels
  bool avx512_bf16 = false;  // and AVX512_BF16: its Cooperlake kernels
};

// This CPU's, from the compiler's cpuid built-ins (all false off x86-64).
CpuVectorSupport this_cpu_vector_support();

// The OpenBLAS kernels (an OPENBLAS_CORETYPE value) to take on a CPU with `cpu`, instead of
// `chosen` (OpenBLAS's own choice, as openblas_get_corename names it); "" when `chosen` is fine:
// anything but the pre-AVX2 kernels, or a CPU without AVX2 and FMA. Only a choice below AVX2 on a
// CPU that has it is overruled: between AVX2 and AVX-512 kernels OpenBLAS's choice stands (on
// AMD's Zen it takes its AVX2 "Zen" kernels by design).
std::string better_blas_kernels(std::string_view chosen, const CpuVectorSupport& cpu);

// OpenBLAS's kernels here, for a report: "SkylakeX", or "Prescott (pre-AVX2 kernels on a CPU that
// runs Cooperlake's: set OPENBLAS_CORETYPE=Cooperlake)" when better_blas_kernels has advice. The
// benchmark programs print it (ember's library does not: a program sets the variable itself).
std::string blas_kernels_report();

}  // namespace ember::kernels::cpu
