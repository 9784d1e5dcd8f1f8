#include "runtime/device.h"

#include <cstdlib>

#include "runtime/block_allocator.h"
#include "runtime/error.h"

namespace ember {

Device Device::parse(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string number = text.substr(5);
    bool digits = !number.empty() && number.size() < 4;
    for (char c : number)
      digits = digits && c >= '0' && c <= '9';
    if (digits) return Device::cuda(std::stoi(number));
  }
  EMBER_FAIL("unknown device '", text, "': expected 'cpu', 'cuda' or 'cuda:N'");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::ostream& operator<<(std::ostream& os, const Device& device) {
  return os << device.str();
}

void check_device_available(const Device& device) {
  if (device.is_cpu()) return;
  EMBER_CHECK(cuda_compiled(), "device ", device,
              " requested, but this build of ember has no CUDA support: rebuild with "
              "-DEMBER_CUDA=ON on a machine with the CUDA toolkit, or use the cpu device");
  const int count = cuda_device_count();
  EMBER_CHECK(count > 0, "device ", device,
              " requested, but no CUDA GPU is visible (is there a GPU and its driver? "
              "CUDA_VISIBLE_DEVICES=",
              std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "<unset>",
              "); use the cpu device");
  EMBER_CHECK(device.index >= 0 && device.index < count, "device ", device, " requested, but only ",
              count, " CUDA device(s) are visible (cuda:0 .. cuda:", count - 1, ")");
}

std::string cuda::DeviceProperties::str() const {
  return detail::concat(name, " (sm_", major, minor, ", ", multiprocessor_count, " SMs, ",
                        format_bytes(total_memory), ")");
}

}  // namespace ember
