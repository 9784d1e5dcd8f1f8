// The CUDA elementwise loop: a grid-stride walk over a StridedLayout that hands each element's
// per-operand offsets (in elements) to a functor.
//
//   launch_strided<2>("unary<<<>>>", layout, UnaryBody<T>{...}, stream);
//
// `body(offsets)` handles one element: offsets[k] is operand k's offset from its base pointer.
// A flat layout (every operand dense, one dim) uses the linear index itself for every operand.
// Any other walks its dims with a quotient and a remainder each: FastDivider's (a multiply-high
// and a shift) when the layout has fewer than 2^31 elements, 64-bit `/` and `%` beyond.
//
// Vectorised flat path. A Body may also define
//   static constexpr int kVector;              elements per thread: 16 bytes of its widest operand
//   void vector(int64_t first) const;          elements first .. first + kVector - 1, every
//                                              operand dense, loaded and stored as one Packet each
//   bool vector_aligned() const;               (host) every operand's base pointer is aligned to
//                                              kVector elements of its type
// Only bodies whose operands are all floating point have one (vector_width). When the layout is
// flat and the pointers are aligned, each thread moves 16 bytes per operand in one load or store
// (LDG.E.128 / STG.E.128 for 16-byte operands) and the last numel % kVector elements go through
// `body(offsets)`. Misaligned views (x.slice(0, 1, n): the base pointer is one
// element in) take the scalar flat path; strided layouts are unchanged.
#pragma once

#include <cuda_runtime.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/common/fast_divider.h"
#include "kernels/common/scalar_types.h"
#include "kernels/common/strided_layout.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/row_vector_plan.h"

namespace ember::kernels::cuda {

// W elements of T as one aligned access: a Packet<float, 4> is one 16-byte load.
template <typename T, int W>
struct alignas(sizeof(T) * W) Packet {
  T values[W];
};

// Elements per thread on the vectorised path: 16 bytes of the widest of the operand types (a
// f32 -> bf16 copy moves 4 elements: 16 bytes read, 8 written). 1 (no vectorised path) unless
// every type is a floating-point one: each vectorised body is a second kernel, and compile time
// is spent where the bytes are (activations, gradients, optimizer state), not on integer masks.
template <typename T>
inline constexpr bool kVectorisable = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                      std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename First, typename... Rest>
constexpr int vector_width() {
  if constexpr (!(kVectorisable<First> && ... && kVectorisable<Rest>)) {
    return 1;
  } else {
    size_t widest = sizeof(First);
    ((widest = sizeof(Rest) > widest ? sizeof(Rest) : widest), ...);
    return static_cast<int>(16 / widest);
  }
}

template <int W, typename T>
__device__ __forceinline__ Packet<T, W> load_packet(const T* base, int64_t first) {
  return *reinterpret_cast<const Packet<T, W>*>(base + first);
}

template <int W, typename T>
__device__ __forceinline__ void store_packet(T* base, int64_t first, const Packet<T, W>& packet) {
  *reinterpret_cast<Packet<T, W>*>(base + first) = packet;
}

// packet_aligned and packet_aligned_operands (host) are in row_vector_plan.h.

template <int N>
__device__ __forceinline__ void strided_offsets(const StridedLayout& layout, int64_t linear,
                                                int64_t (&offsets)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k)
    offsets[k] = 0;
  for (int d = layout.ndim - 1; d >= 0; --d) {
    const int64_t size = layout.sizes[d];
    const int64_t index = linear % size;
    linear /= size;
#pragma unroll
    for (int k = 0; k < N; ++k)
      offsets[k] += index * layout.strides[k][d];
  }
}

// The layout's sizes as FastDividers, for a layout of fewer than 2^31 elements.
struct SizeDividers {
  FastDivider sizes[kMaxDims];
};

inline SizeDividers size_dividers(const StridedLayout& layout) {
  SizeDividers dividers;
  for (int d = 0; d < layout.ndim; ++d)
    dividers.sizes[d] = FastDivider(static_cast<uint32_t>(layout.sizes[d]));
  return dividers;
}

// strided_offsets with 32-bit index arithmetic: linear < 2^31.
template <int N>
__device__ __forceinline__ void strided_offsets_32(const StridedLayout& layout,
                                                   const SizeDividers& dividers, uint32_t linear,
                                                   int64_t (&offsets)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k)
    offsets[k] = 0;
  for (int d = layout.ndim - 1; d >= 0; --d) {
    const uint32_t quotient = dividers.sizes[d].quotient(linear);
    const int64_t index = linear - quotient * dividers.sizes[d].divisor;
    linear = quotient;
#pragma unroll
    for (int k = 0; k < N; ++k)
      offsets[k] += index * layout.strides[k][d];
  }
}

// The layout and its dividers travel by value as kernel parameters (488 + 144 bytes, well under
// the 4 KiB limit). index32: numel < 2^31, and the dims are walked with `dividers` (one kernel
// with both walks, not one per walk: every elementwise body instantiates it).
template <int N, typename Body>
__global__ void strided_kernel(StridedLayout layout, SizeDividers dividers, int64_t numel,
                               bool flat, bool index32, Body body) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel;
       i += step) {
    int64_t offsets[N];
    if (flat) {
#pragma unroll
      for (int k = 0; k < N; ++k)
        offsets[k] = i;
    } else if (index32) {
      strided_offsets_32<N>(layout, dividers, static_cast<uint32_t>(i), offsets);
    } else {
      strided_offsets<N>(layout, i, offsets);
    }
    body(offsets);
  }
}

// Every operand dense and packet-aligned: thread t handles packets t, t + step, ..., then the
// tail elements (fewer than kVector) one at a time.
template <int N, typename Body>
__global__ void vector_kernel(int64_t numel, Body body) {
  constexpr int W = Body::kVector;
  const int64_t packets = numel / W;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t p = thread; p < packets; p += step)
    body.vector(p * W);
  for (int64_t i = packets * W + thread; i < numel; i += step) {
    int64_t offsets[N];
#pragma unroll
    for (int k = 0; k < N; ++k)
      offsets[k] = i;
    body(offsets);
  }
}

// A body with a vectorised path (taken when its kVector > 1). A body that defines none still
// compiles: it always takes strided_kernel.
template <typename Body>
concept VectorBody = requires(const Body& body) {
  { Body::kVector } -> std::convertible_to<int>;
  { body.vector_aligned() } -> std::convertible_to<bool>;
};

template <int N, typename Body>
void launch_strided(const char* what, const StridedLayout& layout, const Body& body,
                    cudaStream_t stream) {
  const int64_t numel = layout.numel();
  if (numel == 0) return;
  const bool flat = layout.is_flat();
  if constexpr (VectorBody<Body>) {
    if constexpr (Body::kVector > 1) {
      if (flat && body.vector_aligned()) {
        const int64_t packets = (numel + Body::kVector - 1) / Body::kVector;
        vector_kernel<N, Body><<<blocks_for(packets), kThreadsPerBlock, 0, stream>>>(numel, body);
        EMBER_CUDA_CHECK_LAUNCH(what);
        return;
      }
    }
  }
  const bool index32 = !flat && numel <= kFastDivisionLimit;
  strided_kernel<N, Body><<<blocks_for(numel), kThreadsPerBlock, 0, stream>>>(
      layout, index32 ? size_dividers(layout) : SizeDividers{}, numel, flat, index32, body);
  EMBER_CUDA_CHECK_LAUNCH(what);
}

}  // namespace ember::kernels::cuda
