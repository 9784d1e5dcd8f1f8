// Direct 2-D convolution on the CPU for stride 1, dilation 1, groups 1, computed in f32 with no
// im2col: the forward pass, and the gradient wrt the input (a convolution of grad_output with the
// flipped, transposed weights).
//
//   input (N, C, H, W), weight (K, C, R, S) -> output (N, K, P, Q), P = H + 2 pad_h - R + 1
//
// Each image is copied (converted to f32) into a zero-bordered plane per channel, rows Wp = W +
// 2 pad_w wide. Output pixel (p, q) is then computed at the flat position i = p Wp + q of a
// plane with the same row width, and its taps sit at i + r Wp + s in every input plane: a run of
// 16 consecutive positions reads 16 consecutive inputs, whatever the row boundaries. The
// positions q >= Q of each row are computed and dropped (2 pad_w / Wp of the work). A register
// tile of 8 output channels x 48 positions accumulates over c, r, s with the weights packed as
// [K / 8][C][R][S][8], so that the 8 broadcasts of a tap read consecutive floats.
//
// Compiled for AVX-512, AVX2 and baseline x86-64, picked at run time (tests can force one).
#pragma once

#include <cstdint>

#include "kernels/common/conv_params.h"

namespace ember::kernels::cpu {

// Stride 1, dilation 1, one group, a kernel larger than 1x1 (1x1 is a plain GEMM) and rows wide
// enough that the dropped positions are a small part of the work.
bool conv2d_direct_applies(const Conv2dParams& params);
// The gradient wrt the input as a direct convolution also needs padding <= kernel size - 1.
bool conv2d_direct_applies_to_grad_input(const Conv2dParams& params);
// The gradient wrt the weight: also at least half of the rounded-up channels real (C >= 8).
bool conv2d_direct_applies_to_grad_weight(const Conv2dParams& params);

// output (N, K, P, Q) = conv(input, weight) + bias; `bias` may be null. T: float, Half, BFloat16.
template <typename T>
void conv2d_direct_forward(const Conv2dParams& params, const T* input, const T* weight,
                           const T* bias, T* output);

// grad_input (N, C, H, W) from grad_output (N, K, P, Q) and weight (K, C, R, S); overwritten.
template <typename T>
void conv2d_direct_grad_input(const Conv2dParams& params, const T* grad_output, const T* weight,
                              T* grad_input);

// grad_weight (K, C, R, S) from input (N, C, H, W) and grad_output (N, K, P, Q); overwritten.
// Runs wherever conv2d_direct_applies does, but computes C rounded up to 16 channels: with few
// input channels (an RGB or grey first layer) the GEMM path is faster, see below.
template <typename T>
void conv2d_direct_grad_weight(const Conv2dParams& params, const T* input, const T* grad_output,
                               T* grad_weight);

// Which instruction set the direct kernels (these and conv2d_small.h's) use. `best` picks the
// widest the CPU supports; tests force the others to keep every variant checked. Returns false (and
// changes nothing) when the CPU cannot run the one asked for.
enum class DirectConvIsa { best, avx512, avx2, baseline };
bool set_conv2d_direct_isa(DirectConvIsa isa);

}  // namespace ember::kernels::cpu
