// What the CUDA test files (tests/cuda/*.cpp) share: skipping a GPU test when no device is
// visible (saying why), the message of the ember::Error a callable throws, a tensor's raw bytes,
// and the comparisons of a CUDA result with the CPU's: element-wise at cuda_tolerance(dtype), and
// norm-wise for long sums.
//
// Header-only; compiles in every build (with or without CUDA).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace ember::testing {

// Why no CUDA device is visible: the build has no CUDA, or the driver reports no GPU.
inline std::string no_device_reason() {
  if (!cuda_compiled()) return "this build of ember has no CUDA support (-DEMBER_CUDA=OFF)";
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return "cudaGetDeviceCount reports no GPU (CUDA_VISIBLE_DEVICES=" +
         std::string(visible ? visible : "<unset>") + ")";
}

// Skips the current test when no CUDA device is visible: "no CUDA device visible: <reason>".
// An optional note says what the test needs the GPU for, appended after "; ":
//   EMBER_SKIP_WITHOUT_GPU("this test trains on the GPU");
#define EMBER_SKIP_WITHOUT_GPU(...)                                                            \
  do {                                                                                         \
    if (::ember::cuda_device_count() == 0)                                                     \
      GTEST_SKIP() << "no CUDA device visible: "                                               \
                   << ::ember::testing::no_device_reason() __VA_OPT__(<< "; " << __VA_ARGS__); \
  } while (false)

// The message of the ember::Error `fn` throws ("" and a test failure when it throws none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an ember::Error";
  return "";
}

// The raw bytes of a tensor's elements (any device, any layout), in order, on the host.
inline std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor host = t.detach().to(Device::cpu()).contiguous();
  std::vector<unsigned char> bytes(host.nbytes());
  if (!bytes.empty()) std::memcpy(bytes.data(), host.data_ptr(), bytes.size());
  return bytes;
}

// Relative tolerance of a CUDA result against the CPU's, per dtype: about one rounding of the
// result (both devices compute 16-bit dtypes in f32 and round once).
inline double cuda_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return 2e-3;
    case DType::bf16:
      return 1e-2;
    case DType::f64:
      return 1e-12;
    default:
      return 1e-5;
  }
}

// Empty when `actual` (any device; moved to the CPU) matches `expected` within
// |a - e| <= tol * (|e| + 1) (exactly for integral dtypes; NaN matches NaN, infinities must be
// equal), else a description of the first mismatch. Shapes and dtypes must be the same. A bool
// byte other than 0 or 1 (an element left as the allocator's poison) is a mismatch too. A float
// element left as poison is NaN: caught wherever the CPU's value is not NaN, so tests place their
// NaN inputs away from the ends of the vector paths.
inline std::string mismatch(const Tensor& actual_any_device, const Tensor& expected, double tol) {
  const Tensor actual = actual_any_device.to(Device::cpu());
  if (actual.sizes() != expected.sizes())
    return "shapes differ: " + describe(actual) + " vs " + describe(expected);
  if (actual.dtype() != expected.dtype())
    return "dtypes differ: " + describe(actual) + " vs " + describe(expected);
  if (actual.dtype() == DType::boolean) {  // a byte other than 0 and 1 is no bool: the 0xFF poison
    const std::vector<unsigned char> bytes = bytes_of(actual);
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (bytes[i] > 1) {
        return "element " + std::to_string(i) + " holds the byte " + std::to_string(bytes[i]) +
               ", not a bool: never written?";
      }
    }
  }
  const bool exact = !is_floating(expected.dtype());
  const std::vector<double> a = to_vector<double>(actual), e = to_vector<double>(expected);
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == e[i] || (std::isnan(a[i]) && std::isnan(e[i]))) continue;  // equal infinities too
    const bool ok = exact ? a[i] == e[i] : std::abs(a[i] - e[i]) <= tol * (std::abs(e[i]) + 1.0);
    if (!ok) {
      return "element " + std::to_string(i) + ": cuda " + std::to_string(a[i]) + ", cpu " +
             std::to_string(e[i]) + " (tolerance " + std::to_string(tol) + ")";
    }
  }
  return "";
}

// Empty when |a - e| <= tol * (|e| + scale) for every element, with scale = max(max |e|, floor):
// a norm-wise comparison, for results that are long sums with cancellation (a weight gradient
// sums thousands of products, some elements near 0 whose neighbours reach 100; a relative check
// per element asks those for precision the sum never had). A wrong index still shows: it moves
// an element by about max |e|. Else the first element that differs. Shapes must be the same.
inline std::string mismatch_normwise(const Tensor& actual_any_device, const Tensor& expected,
                                     double tol, double floor = 0) {
  if (actual_any_device.sizes() != expected.sizes())
    return "shapes differ: " + describe(actual_any_device) + " vs " + describe(expected);
  const auto host = [](const Tensor& t) {
    return to_vector<double>(t.detach().to(Device::cpu()).to(DType::f64).contiguous());
  };
  const std::vector<double> a = host(actual_any_device), e = host(expected);
  double scale = floor;
  for (double v : e)
    scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(e[i]) ||
        std::abs(a[i] - e[i]) > tol * (std::abs(e[i]) + scale))
      return "element " + std::to_string(i) + ": cuda " + std::to_string(a[i]) + ", cpu " +
             std::to_string(e[i]) + " (tensor scale " + std::to_string(scale) + ")";
  }
  return "";
}

}  // namespace ember::testing
