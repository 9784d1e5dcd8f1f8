// GCC vector types of f32 for the hand-vectorised CPU kernels: one zmm, ymm or xmm register in the
// function compiled for AVX-512, AVX2 or baseline x86-64 (target attributes). Internal to
// kernels/cpu.
#pragma once

namespace ember::kernels::cpu {

typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));

}  // namespace ember::kernels::cpu
