// Device: where a tensor's storage lives ("cpu", "cuda:0").
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>

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

namespace cuda {

// What a GPU is (cudaGetDeviceProperties). Both functions throw the error of
// check_device_available when there is no such GPU, or no CUDA in the build.
struct DeviceProperties {
  std::string name;         // "NVIDIA H100 80GB HBM3"
  size_t total_memory = 0;  // bytes
  int major = 0;            // compute capability major.minor: 9.0 on an H100
  int minor = 0;
  int multiprocessor_count = 0;
  std::string str() const;  // "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.19 GiB)"
};
DeviceProperties device_properties(int device_index);
// Free and total bytes of the GPU now (cudaMemGetInfo): other processes' memory included.
std::pair<size_t, size_t> memory_info(int device_index);
// Makes `device_index` the calling thread's current GPU (cudaSetDevice), as torch.cuda.set_device
// does: what it launches without naming a device (the kernels of ops, which run on the current
// device's streams) goes there. The engines call it for their GPU, so that rank k of a node
// works on cuda:k. Throws the error of check_device_available when there is no such GPU.
void set_device(int device_index);
// The calling thread's current GPU (cudaGetDevice), or -1 in a build without CUDA or without a
// GPU: what a helper thread sets (set_device) to work on its creator's GPU.
int current_device();

}  // namespace cuda

}  // namespace ember
