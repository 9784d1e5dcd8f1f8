#include "runtime/cuda/event.h"

#include <utility>

#include "runtime/cuda/check.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/stream.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace ember::cuda {

Event::~Event() {
  if (event_ != nullptr) static_cast<void>(cudaEventDestroy(event_));
}

Event::Event(Event&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)),
      device_index_(other.device_index_),
      enable_timing_(other.enable_timing_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) static_cast<void>(cudaEventDestroy(event_));
    event_ = std::exchange(other.event_, nullptr);
    device_index_ = other.device_index_;
    enable_timing_ = other.enable_timing_;
  }
  return *this;
}

void Event::record(cudaStream_t stream, int device_index) {
  check_device_available(Device::cuda(device_index));
  EMBER_CHECK(event_ == nullptr || device_index == device_index_, "Event::record: the event ",
              "belongs to cuda:", device_index_,
              " and cannot be recorded on a stream of cuda:", device_index,
              "; use one event per device");
  DeviceGuard guard(device_index);
  if (event_ == nullptr) {
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(
        &event_, enable_timing_ ? cudaEventDefault : cudaEventDisableTiming));
    device_index_ = device_index;
  }
  EMBER_CUDA_CHECK(cudaEventRecord(event_, stream));
}

void Event::record(int device_index) {
  record(current_stream(device_index), device_index);
}

void Event::wait(cudaStream_t stream) const {
  if (event_ == nullptr) return;
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}

void Event::synchronize() const {
  if (event_ == nullptr) return;
  EMBER_CUDA_CHECK(cudaEventSynchronize(event_));
}

bool Event::query() const {
  if (event_ == nullptr) return true;
  return EMBER_CUDA_QUERY(cudaEventQuery(event_));
}

float Event::elapsed_ms(const Event& end) const {
  EMBER_CHECK(enable_timing_ && end.enable_timing_,
              "Event::elapsed_ms: both events need timing (construct them with "
              "Event(/*enable_timing=*/true))");
  EMBER_CHECK(event_ != nullptr && end.event_ != nullptr,
              "Event::elapsed_ms: both events must be recorded first");
  float ms = 0.0f;
  EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

}  // namespace ember::cuda
