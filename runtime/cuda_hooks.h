// The runtime's few needs from the CUDA backend beyond kernels: the allocator, copies between
// host and device, and synchronisation. Implemented in runtime/cuda/ when ember is built with
// CUDA, and by runtime/no_cuda.cpp (clear errors) otherwise.
#pragma once

#include <cstddef>
#include <functional>

#include "runtime/allocator.h"

namespace ember::cuda_hooks {

Allocator& caching_allocator(int device_index);
// Pinned (page-locked) host memory, cached; a clear error without CUDA or without a GPU.
Allocator& pinned_allocator();
// Between the host and a device; `kind` picks the direction. Ordered on the current stream
// of `device_index`. Copies to or from the host complete before returning, unless the host side
// is pinned and `pinned_host_block` names its block (the pointer pinned_allocator() returned):
// the copy is then left running, and the block is not reused before it has completed.
enum class CopyKind { host_to_device, device_to_host };
void copy_bytes(void* dst, const void* src, size_t nbytes, CopyKind kind, int device_index,
                const void* pinned_host_block = nullptr);
// A copy from one GPU's memory to another's (peer to peer where the devices allow it, else
// staged by the driver), left running. Ordered both ways, as PyTorch's cross-device copy: it
// starts after the work queued so far on the current streams of both devices, and later work on
// either stream waits for it; it runs on the source's stream, so freeing either buffer after
// this returns is safe.
void copy_between_devices(void* dst, int dst_device, const void* src, int src_device,
                          size_t nbytes);
void synchronize(int device_index);
// Marks the work queued so far on the current stream of `device_index`; the function returned
// waits on the host until that work has completed, from any thread (MPI's staging waits there
// for a device-to-host copy before it reads the host buffer).
std::function<void()> host_fence(int device_index);

}  // namespace ember::cuda_hooks
