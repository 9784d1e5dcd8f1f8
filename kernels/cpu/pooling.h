// 2-D pooling on the CPU over dense planes: x (planes = N C, H, W) -> y (planes, P, Q).
// Planes are split across OpenMP threads; each plane is one thread's, forward and backward, so
// the backward scatter needs no atomics. 16-bit floats accumulate in f32.
#pragma once

#include <cstdint>

#include "kernels/common/pool_windows.h"

namespace ember::kernels::cpu {

using kernels::Pool2dGeometry;  // kernels/common/pool_windows.h

// indices (planes, P, Q): the flat position h W + w of each maximum inside its plane (the first
// one on ties; a NaN wins and propagates, as in PyTorch), or -1 for a dilated window that holds
// padding only (its output is -inf).
template <typename T>
void max_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y, int64_t* indices);
// grad_x (planes, H, W) = grad_y scattered back to the saved positions (overwrites grad_x); an
// index of -1 sends its gradient nowhere.
template <typename T>
void max_pool2d_backward(const Pool2dGeometry& g, const T* grad_y, const int64_t* indices,
                         T* grad_x);

// count_include_pad: divide by the window clipped to the padded input (PyTorch), else by the
// number of real input elements in it; g.divisor_override, when set, replaces either.
template <typename T>
void avg_pool2d_forward(const Pool2dGeometry& g, bool count_include_pad, const T* x, T* y);
template <typename T>
void avg_pool2d_backward(const Pool2dGeometry& g, bool count_include_pad, const T* grad_y,
                         T* grad_x);

// Bins of PyTorch's adaptive pooling: rows [floor(i H / P), ceil((i + 1) H / P)), likewise
// columns. The stride/kernel/padding fields of `g` are unused.
template <typename T>
void adaptive_avg_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y);
template <typename T>
void adaptive_avg_pool2d_backward(const Pool2dGeometry& g, const T* grad_y, T* grad_x);

}  // namespace ember::kernels::cpu
