// Current streams are per thread and per device, as in PyTorch: a thread that sets a stream
// affects only its own ops, so no locking is needed and threads cannot race on the choice.
#include "runtime/cuda/stream.h"

#include <vector>

#include "runtime/error.h"

namespace ember::cuda {
namespace {

constexpr int kMaxDevices = 64;

std::vector<cudaStream_t>& thread_streams() {
  // nullptr is the legacy default stream: ordered with every other blocking stream.
  thread_local std::vector<cudaStream_t> streams(kMaxDevices, nullptr);
  return streams;
}

void check_index(int device_index, const char* what) {
  EMBER_CHECK(device_index >= 0 && device_index < kMaxDevices, what, ": CUDA device index ",
              device_index, " is out of range (expected 0 .. ", kMaxDevices - 1, ")");
}

}  // namespace

cudaStream_t current_stream(int device_index) {
  check_index(device_index, "current_stream");
  return thread_streams()[static_cast<size_t>(device_index)];
}

void set_current_stream(int device_index, cudaStream_t stream) {
  check_index(device_index, "set_current_stream");
  thread_streams()[static_cast<size_t>(device_index)] = stream;
}

}  // namespace ember::cuda
