// StreamBlocker: holds a CUDA stream back until release() (or the end of its scope), so that
// work queued after it is certainly still pending while a test looks. A host function on the
// stream spins on a flag; it gives up after 20 s, so a call that wrongly synchronises the stream
// makes the test fail instead of hang. The flag is shared with the host function, which may
// still be reading it after the blocker is gone.
//
// Only in builds with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <memory>

#include "runtime/cuda/check.h"

namespace ember::testing {

class StreamBlocker {
 public:
  explicit StreamBlocker(cudaStream_t stream)
      : released_(std::make_shared<std::atomic<bool>>(false)) {
    auto* held = new Flag(released_);  // the host function's reference, freed by it
    const cudaError_t status = cudaLaunchHostFunc(stream, &StreamBlocker::hold, held);
    if (status != cudaSuccess) delete held;
    EMBER_CUDA_CHECK(status);
  }
  ~StreamBlocker() { release(); }
  StreamBlocker(const StreamBlocker&) = delete;
  StreamBlocker& operator=(const StreamBlocker&) = delete;

  void release() { released_->store(true); }

 private:
  using Flag = std::shared_ptr<std::atomic<bool>>;

  static void CUDART_CB hold(void* held) {
    const std::unique_ptr<Flag> flag(static_cast<Flag*>(held));
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!(*flag)->load() && std::chrono::steady_clock::now() < give_up) {
    }
  }

  Flag released_;
};

}  // namespace ember::testing
