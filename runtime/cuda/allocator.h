// The CUDA caching allocators (built only with CUDA): one BlockAllocator
// (runtime/block_allocator.h) per device over cudaMalloc, and one over pinned host memory
// (cudaHostAlloc) for asynchronous copies. Storage reaches them through runtime/cuda_hooks.h; this
// header is for code that needs more: streams, statistics, poisoning.
#pragma once

#include <cuda_runtime_api.h>

#include "runtime/block_allocator.h"
#include "runtime/tensor.h"

namespace ember::cuda {

// The caching allocator of cuda:`device_index` (throws a clear error without that GPU).
BlockAllocator& device_allocator(int device_index);
// The caching allocator of pinned (page-locked) host memory.
BlockAllocator& pinned_host_allocator();

// Says that `tensor` (on a GPU, or pinned on the host) is used by work queued on `stream`, a
// stream of device `device_index`: when the tensor's memory is freed it is not handed out
// again before that work has completed. Needed when a stream other than the one the memory was
// allocated on uses it (as torch.Tensor.record_stream).
void record_stream(const Tensor& tensor, cudaStream_t stream, int device_index);

// Poisoning: every new device block is filled with 0xFF bytes (NaN in every floating dtype),
// so that a kernel that leaves part of its output unwritten is caught by the tests. Off unless
// the environment says EMBER_CUDA_POISON=1 or this turns it on (for every device). A value
// other than 0 or 1 in the variable throws on the first allocation.
void set_poison_allocations(bool poison);
bool poison_allocations();

// Gives the cached, unused memory of every device allocator and of the pinned allocator back.
void empty_cache();

}  // namespace ember::cuda
