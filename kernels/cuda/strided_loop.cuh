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
// element in) take the scalar flat path.
//
// Vectorised row path, for layouts that are not flat but whose innermost dim (the row) every
// operand walks densely or not at all: conv2d's bias add, x (N, C, H, W) + bias (1, C, 1, 1),
// is the layout [N, C, H*W] with bias strides [0, 1, 0]. A Body may also define
//   void vector_row(const RowPacket<N>& at) const;   kVector elements of one row: operand k's
//                                                    first at at.first[k], the rest one element
//                                                    apart, or all the same element when bit k of
//                                                    at.broadcast is set (load_row_packet)
//   uint32_t aligned_operands() const;               (host) bit k: operand k's base pointer is
//                                                    aligned to kVector elements of its type
// When row_vector_plan.h's plan_row_vectors allows it (the row a whole number of packets, the
// dense operands' packets all aligned, fewer than 2^31 elements), each thread walks the dims once
// per packet instead of once per element, and moves a dense operand's packet in one access; a
// broadcast operand's element is loaded once for the packet. Any other layout (a row of 49
// elements, a row-padding stride that is not a multiple of kVector, a view one element in) takes
// the scalar strided path, whose values are the same bit for bit: the arithmetic per element
// (convert to Acc, apply, convert back) does not change.
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

// Where one packet of the row path lies: operand k's offset of its first element, and which
// operands are broadcast along the row (bit k: operand k's innermost stride is 0). `broadcast` is
// the same for every packet of a launch, so its tests do not diverge.
template <int N>
struct RowPacket {
  int64_t first[N];
  uint32_t broadcast;
};

// Operand `operand`'s packet at `at`: W elements in one access, or its one element W times when
// it is broadcast along the row.
template <int W, typename T, int N>
__device__ __forceinline__ Packet<T, W> load_row_packet(const T* base, const RowPacket<N>& at,
                                                        int operand) {
  if (at.broadcast >> operand & 1u) {
    const T value = base[at.first[operand]];
    Packet<T, W> packet;
#pragma unroll
    for (int j = 0; j < W; ++j)
      packet.values[j] = value;
    return packet;
  }
  return load_packet<W>(base, at.first[operand]);
}

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

// The row path: thread t handles packets t, t + step, ..., each W elements of one row. One walk
// of the dims per packet, from its first element (linear p * W). packets * W < 2^31, so p * W
// and p + step fit in 32 bits.
template <int N, typename Body>
__global__ void row_vector_kernel(StridedLayout layout, SizeDividers dividers, uint32_t packets,
                                  uint32_t row_broadcast, Body body) {
  constexpr uint32_t W = Body::kVector;
  const uint32_t step = blockDim.x * gridDim.x;
  for (uint32_t p = blockIdx.x * blockDim.x + threadIdx.x; p < packets; p += step) {
    RowPacket<N> at;
    at.broadcast = row_broadcast;
    strided_offsets_32<N>(layout, dividers, p * W, at.first);
    body.vector_row(at);
  }
}

// A body with a vectorised path (taken when its kVector > 1). A body that defines none still
// compiles: it always takes strided_kernel.
template <typename Body>
concept VectorBody = requires(const Body& body) {
  { Body::kVector } -> std::convertible_to<int>;
  { body.vector_aligned() } -> std::convertible_to<bool>;
};

// A vectorised body with a row path too, over N operands.
template <typename Body, int N>
concept RowVectorBody = VectorBody<Body> && requires(const Body& body, const RowPacket<N>& at) {
  body.vector_row(at);
  { body.aligned_operands() } -> std::convertible_to<uint32_t>;
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
      if constexpr (RowVectorBody<Body, N>) {
        const RowVectorPlan plan = plan_row_vectors(layout, Body::kVector, body.aligned_operands());
        if (plan.usable) {
          const int64_t packets = numel / Body::kVector;
          row_vector_kernel<N, Body><<<blocks_for(packets), kThreadsPerBlock, 0, stream>>>(
              layout, size_dividers(layout), static_cast<uint32_t>(packets), plan.row_broadcast,
              body);
          EMBER_CUDA_CHECK_LAUNCH(what);
          return;
        }
      }
    }
  }
  const bool index32 = !flat && numel <= kFastDivisionLimit;
  strided_kernel<N, Body><<<blocks_for(numel), kThreadsPerBlock, 0, stream>>>(
      layout, index32 ? size_dividers(layout) : SizeDividers{}, numel, flat, index32, body);
  EMBER_CUDA_CHECK_LAUNCH(what);
}

}  // namespace ember::kernels::cuda
