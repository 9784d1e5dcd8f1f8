// What the CPU's stride-1 convolution kernels (conv2d_direct.h, conv2d_small.h) share: the
// conditions both need, the geometry of one image's convolution (the forward, or the gradient wrt
// the input computed as a convolution), the bias in f32, aligned workspaces, and the instruction
// set this CPU runs.
// Internal to kernels/cpu.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <vector>

#include "kernels/common/conv_params.h"
#include "kernels/cpu/conv2d_direct.h"

namespace ember::kernels::cpu {

// Stride 1, dilation 1, one group, a kernel larger than 1x1 (1x1 is a plain GEMM) and nothing
// empty: what both kernels compute.
inline bool is_stride_one_single_group(const Conv2dParams& p) {
  return p.stride_h == 1 && p.stride_w == 1 && p.dilation_h == 1 && p.dilation_w == 1 &&
         p.groups == 1 && p.kernel_height * p.kernel_width > 1 && p.in_channels > 0 &&
         p.out_channels > 0 && p.out_height() > 0 && p.out_width() > 0;
}

// The gradient wrt the input as a convolution pads grad_output by kernel size - 1 - pad on each
// side (StrideOneConv::grad_input): a pad beyond kernel size - 1 would be negative.
inline bool grad_input_is_a_convolution(const Conv2dParams& p) {
  return p.pad_h <= p.kernel_height - 1 && p.pad_w <= p.kernel_width - 1;
}

// One stride-1 convolution of an image, with weights (Kout, Cin, R, S):
//   in (Cin, H, W), zero-bordered to (Cin, Hp, Wp) -> out (Kout, P, Q)
//   Hp = H + 2 pad_h, P = Hp - R + 1; likewise Wp and Q.
struct StrideOneConv {
  int64_t Cin, Kout, H, W, R, S, pad_h, pad_w;
  int64_t P, Q, Hp, Wp;

  StrideOneConv(int64_t cin, int64_t kout, int64_t h, int64_t w, int64_t r, int64_t s, int64_t ph,
                int64_t pw)
      : Cin(cin), Kout(kout), H(h), W(w), R(r), S(s), pad_h(ph), pad_w(pw) {
    Hp = H + 2 * pad_h;
    Wp = W + 2 * pad_w;
    P = Hp - R + 1;
    Q = Wp - S + 1;
  }

  // input (C, H, W) -> output (K, P, Q).
  static StrideOneConv forward(const Conv2dParams& p) {
    return {p.in_channels,   p.out_channels, p.in_height, p.in_width,
            p.kernel_height, p.kernel_width, p.pad_h,     p.pad_w};
  }

  // grad_output (K, P, Q) -> grad_input (C, H, W):
  //   grad_input[c][h][w] = sum over k, r, s of dy[k][h + pad_h - r][w + pad_w - s] w[k][c][r][s]
  // a convolution of dy padded by (R - 1 - pad_h, S - 1 - pad_w) with the weights flipped in r
  // and s and transposed to (C, K, R, S). Needs grad_input_is_a_convolution.
  static StrideOneConv grad_input(const Conv2dParams& p) {
    const int64_t R = p.kernel_height, S = p.kernel_width;
    return {p.out_channels,  p.in_channels,  p.out_height(), p.out_width(), R, S,
            R - 1 - p.pad_h, S - 1 - p.pad_w};
  }
};

// bias (count) in f32; empty when bias is null.
template <typename T>
std::vector<float> bias_in_f32(const T* bias, int64_t count) {
  std::vector<float> out;
  if (bias != nullptr) {
    out.resize(static_cast<size_t>(count));
    for (int64_t k = 0; k < count; ++k)
      out[static_cast<size_t>(k)] = static_cast<float>(bias[k]);
  }
  return out;
}

// 64-byte aligned f32 storage (whole cache lines for the vector stores), zeroed only when asked:
// a workspace that is written before it is read skips the serial fill.
struct AlignedFloats {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> data;
  explicit AlignedFloats(int64_t count, bool zero) {
    const size_t bytes = (static_cast<size_t>(count) * sizeof(float) + 63) / 64 * 64;
    data.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!data) throw std::bad_alloc();
    if (zero) std::memset(data.get(), 0, bytes);
  }
  float* get() const { return data.get(); }
};

// Both kernels have AVX-512 and AVX2 clones (target attributes) beside the baseline x86-64 code.
#if defined(__x86_64__) && defined(__GNUC__)
#define EMBER_HAS_ISA_CLONES 1
#endif

// The instruction set `isa` on this CPU: `best` resolved to the widest it runs; nullopt when it
// cannot run the one asked for.
inline std::optional<DirectConvIsa> runnable_isa(DirectConvIsa isa) {
#ifdef EMBER_HAS_ISA_CLONES
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (isa == DirectConvIsa::best)
    return avx512 ? DirectConvIsa::avx512 : avx2 ? DirectConvIsa::avx2 : DirectConvIsa::baseline;
  if ((isa == DirectConvIsa::avx512 && !avx512) || (isa == DirectConvIsa::avx2 && !avx2))
    return std::nullopt;
  return isa;
#else
  if (isa == DirectConvIsa::best) return DirectConvIsa::baseline;
  if (isa != DirectConvIsa::baseline) return std::nullopt;
  return isa;
#endif
}

}  // namespace ember::kernels::cpu
