// 2-D convolution on the CPU, forward and backward.
//
//   input (N, C, H, W), weight (K, C / G, R, S), bias (K) -> output (N, K, P, Q)
//
// Stride 1, dilation 1, one group, kernels larger than 1x1, in f32, f16 and bf16: direct
// kernels (conv2d_direct.h) for the output, grad_input and grad_weight (the last only with 8
// input channels or more); a GEMM at these shapes (K = 32 rows) runs far below the FMA units'
// peak. Planes of 64 output pixels or fewer with 32 channels or more take the small-plane
// kernels instead (conv2d_small.h: the vectors along channels). Everything else (strides,
// dilation, groups, 1x1, narrow images, f64) takes im2col + GEMM (OpenBLAS), described below.
//
// All tensors dense (NCHW). Each image is unfolded into columns cols (C R S, P Q) and multiplied
// by the weight viewed as (K, C R S), one product per group; the GEMM writes the output (or the
// gradient) in place through its leading dimension. With at least as many images as threads,
// every OpenMP thread takes whole images (unfold, single-threaded GEMM, fold back) in its own
// workspace: no thread waits on another. Inside an image the columns are unfolded one band of
// output rows at a time (about 256 KiB), so they are still in L2 when the GEMM reads them.
// With fewer images, images run one after the other with a parallel unfold and a threaded GEMM.
// f16 and bf16 are unfolded straight into f32 columns and computed in f32.
//
// Small images (a few hundred output pixels or fewer) are taken several at a time: their columns
// side by side make one wider GEMM, (K, C R S) @ (C R S, B P Q), whose result is scattered back
// into NCHW (and likewise for both gradients); threads take whole groups of images.
#pragma once

#include "kernels/common/conv_params.h"

namespace ember::kernels::cpu {

// `bias` may be null.
template <typename T>
void conv2d_forward(const Conv2dParams& params, const T* input, const T* weight, const T* bias,
                    T* output);

// From grad_output (N, K, P, Q): grad_input (N, C, H, W), grad_weight (K, C / G, R, S) and
// grad_bias (K), each computed only when its pointer is not null (all overwritten, not
// accumulated). Only the input and the weight are needed: the columns are unfolded again.
template <typename T>
void conv2d_backward(const Conv2dParams& params, const T* input, const T* weight,
                     const T* grad_output, T* grad_input, T* grad_weight, T* grad_bias);

// How many images the im2col + GEMM path unfolds side by side into one GEMM (f32 columns): more
// than 1 for small images (see conv2d.cpp), 1 otherwise. Depends on the OpenMP thread count.
int64_t conv2d_images_per_gemm(const Conv2dParams& params);

}  // namespace ember::kernels::cpu
