// Event: a point in a stream's work (built only with CUDA). Record it on one stream, then make
// another stream wait for it, wait for it on the host, or time the work between two events.
//
//   cuda::Event start(/*enable_timing=*/true), stop(true);
//   start.record(0);  // the current stream of cuda:0
//   ... ops ...
//   stop.record(0);
//   stop.synchronize();
//   float ms = start.elapsed_ms(stop);
#pragma once

#include <cuda_runtime_api.h>

namespace ember::cuda {

class Event {
 public:
  // Without timing, recording and waiting are cheaper (the usual case for ordering streams).
  explicit Event(bool enable_timing = false) : enable_timing_(enable_timing) {}
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Marks the work queued so far on `stream` of device `device_index` (the event belongs to that
  // device from its first record on). The second form uses the device's current stream.
  void record(cudaStream_t stream, int device_index);
  void record(int device_index);
  // Makes later work on `stream` wait for the recorded work (no host wait); a no-op before the
  // first record, as in CUDA.
  void wait(cudaStream_t stream) const;
  // Waits on the host for the recorded work.
  void synchronize() const;
  // Whether the recorded work has completed (true before the first record).
  bool query() const;
  // Milliseconds from this event to `end`; both recorded with timing and completed.
  float elapsed_ms(const Event& end) const;

  bool recorded() const { return event_ != nullptr; }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;  // created on the first record, on its device
  int device_index_ = -1;
  bool enable_timing_ = false;
};

}  // namespace ember::cuda
