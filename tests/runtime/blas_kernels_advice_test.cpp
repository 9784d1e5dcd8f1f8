// When `ember` overrules OpenBLAS's choice of kernels (kernels/cpu/blas_kernels_advice.h): only a
// pre-AVX2 choice on a CPU with AVX2, and then the best kernels the CPU runs.
#include "kernels/cpu/blas_kernels_advice.h"

#include <gtest/gtest.h>

namespace ember::kernels::cpu {
namespace {

constexpr CpuVectorSupport kSse{};
constexpr CpuVectorSupport kAvx2{.avx2_fma = true};
constexpr CpuVectorSupport kAvx512{.avx2_fma = true, .avx512 = true};
constexpr CpuVectorSupport kAvx512Bf16{.avx2_fma = true, .avx512 = true, .avx512_bf16 = true};

TEST(BlasKernelsAdvice, PrescottOnAnAvx512Bf16CpuTakesCooperlake) {
  // Debian 12's OpenBLAS 0.3.21 on Intel's Emerald Rapids (family 6, model 207).
  EXPECT_EQ(better_blas_kernels("Prescott", kAvx512Bf16), "Cooperlake");
  EXPECT_EQ(better_blas_kernels("Prescott", kAvx512), "SkylakeX");
  EXPECT_EQ(better_blas_kernels("Prescott", kAvx2), "Haswell");
}

TEST(BlasKernelsAdvice, EveryPreAvx2ChoiceIsOverruledWhateverItsCase) {
  for (const char* name : {"Unknown", "Katmai", "Core2", "Penryn", "Nehalem", "Opteron_SSE3",
                           "Barcelona", "Sandybridge", "SANDYBRIDGE", "prescott", "Piledriver"}) {
    EXPECT_EQ(better_blas_kernels(name, kAvx512Bf16), "Cooperlake") << name;
  }
}

TEST(BlasKernelsAdvice, AnAvx2OrAvx512ChoiceStands) {
  // Between AVX2 and AVX-512 kernels OpenBLAS's choice is kept: on AMD's Zen it takes its AVX2
  // "Zen" kernels by design.
  for (const char* name :
       {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", "Excavator", "Steamroller"}) {
    EXPECT_EQ(better_blas_kernels(name, kAvx512Bf16), "") << name;
  }
}

TEST(BlasKernelsAdvice, ACpuWithoutAvx2KeepsWhatOpenBlasTook) {
  EXPECT_EQ(better_blas_kernels("Prescott", kSse), "");
  EXPECT_EQ(better_blas_kernels("Sandybridge", kSse), "");
}

TEST(BlasKernelsAdvice, NamesThatOnlyStartLikeAnOldOneAreNotOld) {
  EXPECT_EQ(better_blas_kernels("Prescott2", kAvx512), "");
  EXPECT_EQ(better_blas_kernels("", kAvx512), "");
  EXPECT_EQ(better_blas_kernels("Opteron", kAvx512), "SkylakeX");
}

TEST(BlasKernelsAdvice, ThisCpusSupportIsConsistent) {
  const CpuVectorSupport cpu = this_cpu_vector_support();
  EXPECT_TRUE(!cpu.avx512_bf16 || cpu.avx512);
}

}  // namespace
}  // namespace ember::kernels::cpu
