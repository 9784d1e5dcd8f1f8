// Multi-tensor launches (PyTorch's multi_tensor_apply): one kernel updates a list of tensors.
// This header plans the launches; multi_tensor.cuh holds the device side.
//
//   tensors (T) of n_t elements each, `Lists` pointers per tensor (param, grad, states, ...)
//   -> blocks of kMultiTensorChunkSize elements: block b works on chunk block_chunk[b] of tensor
//      block_tensor[b].
//
// The pointers and the block table travel by value as a kernel parameter (under the 4 KiB limit),
// so a step over hundreds of parameters costs a handful of launches and no host-to-device copy.
// When the table fills up (kMultiTensorMaxTensors tensors or kMultiTensorMaxBlocks blocks) the
// batch is launched and a new one starts; a tensor cut in two by that carries on in the next batch.
//
// Plain C++ (no CUDA): the batching is tested on machines without a GPU.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace ember::kernels::cuda {

inline constexpr int kMultiTensorMaxTensors = 24;
inline constexpr int kMultiTensorMaxBlocks = 320;
inline constexpr int64_t kMultiTensorChunkSize = 65536;  // elements per block (a multiple of 4)
inline constexpr int kMultiTensorThreads = 512;

// Pointers are untyped: the kernel casts each list to its element type.
template <int Lists>
struct TensorListArgs {
  void* pointers[Lists][kMultiTensorMaxTensors];
  int64_t sizes[kMultiTensorMaxTensors];
  unsigned char block_tensor[kMultiTensorMaxBlocks];
  int block_chunk[kMultiTensorMaxBlocks];
};
static_assert(sizeof(TensorListArgs<6>) < 3600, "kernel parameters are limited to 4 KiB");

// One tensor of a multi-tensor launch: its `Lists` pointers (null where a list is unused) and its
// element count.
template <int Lists>
struct TensorListEntry {
  std::array<void*, Lists> pointers{};
  int64_t size = 0;
};

// Calls `launch(args, blocks)` once per batch; `launch` queues a kernel of `blocks` blocks.
template <int Lists, typename Launch>
void multi_tensor_apply(const std::vector<TensorListEntry<Lists>>& tensors, Launch&& launch) {
  TensorListArgs<Lists> args{};
  int tensor_count = 0, block_count = 0;
  for (const TensorListEntry<Lists>& entry : tensors) {
    if (entry.size == 0) continue;
    for (int k = 0; k < Lists; ++k)
      args.pointers[k][tensor_count] = entry.pointers[k];
    args.sizes[tensor_count] = entry.size;
    ++tensor_count;
    const int64_t chunks = (entry.size + kMultiTensorChunkSize - 1) / kMultiTensorChunkSize;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      args.block_tensor[block_count] = static_cast<unsigned char>(tensor_count - 1);
      args.block_chunk[block_count] = static_cast<int>(chunk);
      ++block_count;
      const bool last_chunk = chunk == chunks - 1;
      const bool blocks_full = block_count == kMultiTensorMaxBlocks;
      const bool tensors_full = tensor_count == kMultiTensorMaxTensors;
      if (blocks_full || (tensors_full && last_chunk)) {
        launch(args, block_count);
        block_count = 0;
        if (last_chunk) {
          tensor_count = 0;
        } else {
          // The current tensor continues in the next batch, as its slot 0.
          for (int k = 0; k < Lists; ++k)
            args.pointers[k][0] = args.pointers[k][tensor_count - 1];
          args.sizes[0] = args.sizes[tensor_count - 1];
          tensor_count = 1;
        }
      }
    }
  }
  if (block_count > 0) launch(args, block_count);
}

}  // namespace ember::kernels::cuda
