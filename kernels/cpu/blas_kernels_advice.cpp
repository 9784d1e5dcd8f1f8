#include "kernels/cpu/blas_kernels_advice.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "kernels/cpu/gemm.h"

namespace ember::kernels::cpu {

namespace {

// OpenBLAS's x86 kernel sets without AVX2 (the names of its dynamic.c, as openblas_get_corename
// returns them), compared without case.
constexpr std::array<std::string_view, 20> kPreAvx2Kernels = {
    "Unknown",   "Katmai", "Coppermine",  "Northwood", "Prescott",  "Banias",    "Atom",
    "Core2",     "Penryn", "Dunnington",  "Nehalem",   "Athlon",    "Opteron",   "Opteron_SSE3",
    "Barcelona", "Nano",   "Sandybridge", "Bobcat",    "Bulldozer", "Piledriver"};

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

CpuVectorSupport this_cpu_vector_support() {
  CpuVectorSupport cpu;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  cpu.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  cpu.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  cpu.avx512_bf16 = cpu.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
  return cpu;
}

std::string better_blas_kernels(std::string_view chosen, const CpuVectorSupport& cpu) {
  if (!cpu.avx2_fma) return "";
  const bool old = std::any_of(kPreAvx2Kernels.begin(), kPreAvx2Kernels.end(),
                               [&](std::string_view name) { return same_name(chosen, name); });
  if (!old) return "";
  if (cpu.avx512_bf16) return "Cooperlake";
  if (cpu.avx512) return "SkylakeX";
  return "Haswell";
}

std::string blas_kernels_report() {
  const std::string chosen = blas_kernels();
  const std::string better = better_blas_kernels(chosen, this_cpu_vector_support());
  if (better.empty()) return chosen;
  return chosen + " (pre-AVX2 kernels on a CPU that runs " + better +
         "'s: set OPENBLAS_CORETYPE=" + better + ")";
}

}  // namespace ember::kernels::cpu
