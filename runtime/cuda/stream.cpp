// Current streams are per thread and per device, as in PyTorch: a thread that sets a stream
// affects only its own ops, so no locking is needed and threads cannot race on the choice.
#include "runtime/cuda/stream.h"

#include <array>
#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime/cuda/check.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/device.h"
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

Stream::Stream(int device_index, Kind kind, int priority) : device_index_(device_index) {
  check_device_available(Device::cuda(device_index));
  DeviceGuard guard(device_index);
  EMBER_CUDA_CHECK(cudaStreamCreateWithPriority(
      &stream_, kind == Kind::blocking ? cudaStreamDefault : cudaStreamNonBlocking, priority));
}

namespace {

// Waits for the stream's work before destroying it: the caching allocator keeps the blocks freed
// on it in a pool keyed by the handle, and CUDA may give the same handle to the next stream,
// which must not start using those blocks while this one's work still runs.
void destroy_stream(cudaStream_t stream) {
  static_cast<void>(cudaStreamSynchronize(stream));
  static_cast<void>(cudaStreamDestroy(stream));
}

}  // namespace

Stream::~Stream() {
  if (stream_ != nullptr) destroy_stream(stream_);
}

Stream::Stream(Stream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), device_index_(other.device_index_) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) destroy_stream(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
    device_index_ = other.device_index_;
  }
  return *this;
}

void Stream::synchronize() const {
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

bool Stream::query() const {
  return EMBER_CUDA_QUERY(cudaStreamQuery(stream_));
}

cudaStream_t stream_from_pool(int device_index) {
  check_index(device_index, "stream_from_pool");
  check_device_available(Device::cuda(device_index));
  struct DevicePool {
    std::once_flag created;
    std::array<cudaStream_t, kStreamPoolSize> streams{};
    std::atomic<unsigned> next{0};
  };
  // Never destroyed: streams may be in use while static objects are torn down at exit.
  static auto* pools = new std::array<DevicePool, kMaxDevices>();
  DevicePool& pool = (*pools)[static_cast<size_t>(device_index)];
  std::call_once(pool.created, [&] {
    DeviceGuard guard(device_index);
    for (cudaStream_t& stream : pool.streams)
      EMBER_CUDA_CHECK(cudaStreamCreate(&stream));
  });
  return pool.streams[pool.next.fetch_add(1) % kStreamPoolSize];
}

}  // namespace ember::cuda
