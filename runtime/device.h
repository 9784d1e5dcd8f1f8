// Device: where a tensor's storage lives ("cpu", "cuda:0").
#pragma once

#include <ostream>
#include <string>

namespace ember {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return Device{DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return Device{DeviceType::cuda, index}; }
  // "cpu", "cuda", "cuda:1"; anything else is an error that lists the accepted forms.
  static Device parse(const std::string& text);

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;
  bool operator==(const Device&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Device& device);

// Whether this build of ember was compiled with CUDA, and how many GPUs it can see (0 without).
bool cuda_compiled();
int cuda_device_count();
// Throws a clear error unless `device` can be used: built with CUDA, and the GPU is present.
void check_device_available(const Device& device);

}  // namespace ember
