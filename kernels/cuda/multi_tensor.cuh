// The device side of multi-tensor launches (the plan is in multi_tensor_plan.h): the chunk of a
// block, and loads and stores of four elements at a time.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/convert_values.cuh"
#include "kernels/cuda/multi_tensor_plan.h"

namespace ember::kernels::cuda {

// The element range [begin, end) of this block's chunk, and its tensor.
struct BlockChunk {
  int tensor;
  int64_t begin, end;
};
template <int Lists>
__device__ __forceinline__ BlockChunk block_chunk(const TensorListArgs<Lists>& args) {
  const int tensor = args.block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(args.block_chunk[blockIdx.x]) * kMultiTensorChunkSize;
  const int64_t size = args.sizes[tensor];
  const int64_t end = begin + kMultiTensorChunkSize < size ? begin + kMultiTensorChunkSize : size;
  return {tensor, begin, end};
}

// Four elements of T, loaded and stored as one 16-byte (f32) or 8-byte (f16, bf16) access.
template <typename T>
struct alignas(4 * sizeof(T)) Vector4 {
  T values[4];
};

template <typename T>
__device__ __forceinline__ bool aligned_for_vector4(const void* pointer) {
  return pointer == nullptr || reinterpret_cast<uintptr_t>(pointer) % (4 * sizeof(T)) == 0;
}

// Elements [i, i + count) of `base` (count <= 4) as floats; a whole aligned group of four in one
// access when `vector`.
template <typename T>
__device__ __forceinline__ void load4(const T* base, int64_t i, int count, bool vector,
                                      float (&out)[4]) {
  if (vector) {
    const Vector4<T> v = *reinterpret_cast<const Vector4<T>*>(base + i);
    convert_values(v.values, out);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k)
      out[k] = k < count ? static_cast<float>(base[i + k]) : 0.0f;
  }
}

// Stores floats into elements [i, i + count) of `base`, rounding to T (nearest even).
template <typename T>
__device__ __forceinline__ void store4(T* base, int64_t i, int count, bool vector,
                                       const float (&in)[4]) {
  if (vector) {
    Vector4<T> v;
    convert_values(in, v.values);
    *reinterpret_cast<Vector4<T>*>(base + i) = v;
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (k < count) base[i + k] = T(in[k]);
  }
}

}  // namespace ember::kernels::cuda
