// CUDA streams as the runtime sees them (built only with CUDA). Every op on a device is queued
// on that device's current stream; StreamGuard swaps it for a scope. Stream owns a new stream;
// stream_from_pool lends one of a few long-lived streams per device (creating and destroying
// streams is slow, and a destroyed stream's handle may be reused by the next one).
//
// The current stream is per thread (and per device), as in PyTorch.
#pragma once

#include <cuda_runtime_api.h>

#include "runtime/cuda/device_guard.h"

namespace ember::cuda {

// The stream ops on `device_index` are queued on (the legacy default stream unless changed).
cudaStream_t current_stream(int device_index);
void set_current_stream(int device_index, cudaStream_t stream);

// The current stream of `device_index`, with that device made the calling thread's current one
// for as long as the object lives: PyTorch's per-op device guard. A kernel must be launched on a
// stream of the current device, and a kernel's own queries and scratch allocations
// (cudaMallocAsync, multiprocessor counts) go to the current device, so an op on cuda:1 tensors
// from a thread that had cuda:0 selected needs both. As an argument, it lives until the call
// returns:
//   kernels::cuda::add(..., cuda::StreamOnDevice(out.device().index));
// Stored, hold the object itself, not the cudaStream_t it converts to (that would drop the guard
// at the end of the statement):
//   const cuda::StreamOnDevice stream(x.device().index);
class StreamOnDevice {
 public:
  explicit StreamOnDevice(int device_index)
      : guard_(device_index), stream_(current_stream(device_index)) {}
  operator cudaStream_t() const { return stream_; }  // NOLINT: implicit, to pass it as a stream
  cudaStream_t get() const { return stream_; }

 private:
  DeviceGuard guard_;
  cudaStream_t stream_;
};

// Makes `stream` the calling thread's current stream on `device_index` for a scope.
class StreamGuard {
 public:
  StreamGuard(int device_index, cudaStream_t stream)
      : device_index_(device_index), previous_(current_stream(device_index)) {
    set_current_stream(device_index, stream);
  }
  ~StreamGuard() { set_current_stream(device_index_, previous_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_index_;
  cudaStream_t previous_;
};

// An owned stream on one device, destroyed with the object once its work has completed (the
// destructor waits for it). Blocking by default: ordered with the legacy default stream, so that
// work on the default stream waits for it, as ember's ops and copies expect; a non-blocking one
// is ordered with nothing but what events say.
class Stream {
 public:
  enum class Kind { blocking, non_blocking };
  explicit Stream(int device_index, Kind kind = Kind::blocking, int priority = 0);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  int device_index() const { return device_index_; }
  // Waits on the host until the work queued so far has completed.
  void synchronize() const;
  // Whether the work queued so far has completed.
  bool query() const;

 private:
  cudaStream_t stream_ = nullptr;
  int device_index_ = 0;
};

// One of kStreamPoolSize blocking streams of `device_index`, round robin, created on first use
// and never destroyed (for work that wants to overlap with the default stream).
constexpr int kStreamPoolSize = 8;
cudaStream_t stream_from_pool(int device_index);

}  // namespace ember::cuda
