// Direct 2-D convolution on the CPU for small planes (at most 64 output pixels: resnet9's 8x8 and
// 4x4 stages), stride 1, dilation 1, groups 1, computed in f32: the forward pass, the gradient wrt
// the input (a convolution of grad_output with the flipped, transposed weights), and the gradient
// wrt the weight.
//
//   input (N, C, H, W), weight (K, C, R, S) -> output (N, K, P, Q), P = H + 2 pad_h - R + 1
//
// conv2d_direct.h vectorises along the pixels of a row, which wastes most of a vector on rows of
// 4 or 8. Here the vectors run along the output channels instead. The images of a chunk are
// copied channels last into zero-bordered planes, xp (N, Hp, Wp, C), and the weights packed as
// (R S, C, K'), K' = K rounded up to a whole block of channels. A register tile of 6 output pixels
// (of any images: a list of offsets into xp) x 64 channels accumulates over (r, s, c):
//   acc[pixel][k] += xp[pixel's corner + (r Wp + s) C + c] (a broadcast) * w[r S + s][c][k]
// which computes no padded position at all, and reads each packed weight vector once per tile.
// The result, pixels x channels, is transposed back to (N, K, P, Q).
//
// The gradient wrt the weight sums over the pixels of the batch instead: with grad_output also
// channels last, dy (N P Q, K), a register tile of 6 (s, c) pairs of one kernel row (S C
// consecutive floats of xp from a pixel's corner) x 64 output channels accumulates
//   acc[(s, c)][k] += xp[pixel's corner + r Wp C + (s, c)] (a broadcast) * dy[pixel][k]
// over every pixel of the batch; each tile's sums are its own (no reduction between threads), so
// the result does not depend on the thread count.
//
// Compiled for AVX-512, AVX2 and baseline x86-64, picked at run time with the direct kernels
// (set_conv2d_direct_isa in conv2d_direct.h switches both).
#pragma once

#include <cstdint>

#include "kernels/common/conv_params.h"
#include "kernels/cpu/conv2d_direct.h"

namespace ember::kernels::cpu {

// Stride 1, dilation 1, one group, a kernel larger than 1x1, at most 64 output pixels per image
// and at least 32 output channels (so that rounding K up to a block wastes little).
bool conv2d_small_applies(const Conv2dParams& params);
// The gradient wrt the input: the same conditions on the transposed convolution (at most 64
// input pixels, at least 32 input channels), and padding <= kernel size - 1.
bool conv2d_small_applies_to_grad_input(const Conv2dParams& params);
// The gradient wrt the weight: at most 64 output pixels per image and at least 32 input channels.
// (Tried on resnet9's 16x16 stages, 32 -> 32 and 32 -> 64 channels, 2 threads: the backward took
// 5.9-6.2 and 8.1 ms against the direct kernel's 3.8-4.0 and 7.1-7.5.)
bool conv2d_small_applies_to_grad_weight(const Conv2dParams& params);

// output (N, K, P, Q) = conv(input, weight) + bias; `bias` may be null. T: float, Half, BFloat16.
template <typename T>
void conv2d_small_forward(const Conv2dParams& params, const T* input, const T* weight,
                          const T* bias, T* output);

// grad_input (N, C, H, W) from grad_output (N, K, P, Q) and weight (K, C, R, S); overwritten.
template <typename T>
void conv2d_small_grad_input(const Conv2dParams& params, const T* grad_output, const T* weight,
                             T* grad_input);

// grad_weight (K, C, R, S) from input (N, C, H, W) and grad_output (N, K, P, Q); overwritten.
template <typename T>
void conv2d_small_grad_weight(const Conv2dParams& params, const T* input, const T* grad_output,
                              T* grad_weight);

// The instruction set of the small-plane kernels; false (nothing changed) when the CPU cannot run
// it. set_conv2d_direct_isa calls it.
bool set_conv2d_small_isa(DirectConvIsa isa);

}  // namespace ember::kernels::cpu
