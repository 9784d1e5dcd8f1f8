// Tensor creation: empty, zeros, ones, full, arange, linspace, eye, from host data.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/common/convert.h"
#include "runtime/allocator.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"

namespace ember {

namespace {
void check_shape(const Shape& shape, const char* op) {
  for (int64_t s : shape) {
    EMBER_CHECK(s >= 0, op, ": negative size in shape ", shape_str(shape));
  }
}

// The bytes of `elements` values of dtype, checked: a product past what any allocation can hold
// is an error, where size_t arithmetic would wrap around and allocate a few bytes for a huge
// tensor (which the next write then overruns).
size_t storage_bytes(int64_t elements, DType dtype, const Shape& shape, const char* op) {
  const int64_t size = static_cast<int64_t>(element_size(dtype));
  EMBER_CHECK(elements >= 0 && elements <= kMaxAllocationBytes / size, op, ": shape ",
              shape_str(shape), " of ", dtype, " needs ", elements, " x ", size,
              " bytes, more than any allocation can hold (2^60 bytes)");
  return static_cast<size_t>(elements * size);
}

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}
}  // namespace

Tensor empty(const Shape& shape, TensorOptions options) {
  check_shape(shape, "empty");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(
      storage_bytes(shape_numel(shape), options.dtype, shape, "empty"), options.device);
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = options.dtype;
  return finish(Tensor(std::move(impl)), options);
}

Tensor empty_pinned(const Shape& shape, DType dtype) {
  check_shape(shape, "empty_pinned");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(
      storage_bytes(shape_numel(shape), dtype, shape, "empty_pinned"), Storage::Pinned{});
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor empty_strided(const Shape& shape, const Shape& strides, TensorOptions options) {
  check_shape(shape, "empty_strided");
  EMBER_CHECK(shape.size() == strides.size(), "empty_strided: shape ", shape_str(shape),
              " and strides ", shape_str(strides), " differ in length");
  int64_t span = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    EMBER_CHECK(strides[i] >= 0, "empty_strided: negative stride in ", shape_str(strides));
    if (shape[i] == 0) span = 0;
  }
  if (span != 0) {
    for (size_t i = 0; i < shape.size(); ++i) {
      int64_t reach = 0;  // (shape[i] - 1) strides[i], checked: past int64 it wrapped negative
      EMBER_CHECK(!__builtin_mul_overflow(shape[i] - 1, strides[i], &reach) &&
                      !__builtin_add_overflow(span, reach, &span),
                  "empty_strided: shape ", shape_str(shape), " with strides ", shape_str(strides),
                  " reaches past what an int64 counts");
    }
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(
      storage_bytes(span, options.dtype, shape, "empty_strided"), options.device);
  impl->sizes = shape;
  impl->strides = strides;
  impl->dtype = options.dtype;
  return finish(Tensor(std::move(impl)), options);
}

Tensor full(const Shape& shape, const Scalar& value, TensorOptions options) {
  const bool requires_grad = options.requires_grad;
  options.requires_grad = false;
  Tensor t = empty(shape, options);
  t.fill_(value);
  if (requires_grad) t.requires_grad_(true);
  return t;
}

Tensor zeros(const Shape& shape, TensorOptions options) {
  return full(shape, 0, options);
}
Tensor ones(const Shape& shape, TensorOptions options) {
  return full(shape, 1, options);
}

Tensor empty_like(const Tensor& t) {
  return empty(t.sizes(), TensorOptions(t.dtype(), t.device()));
}
Tensor zeros_like(const Tensor& t) {
  return zeros(t.sizes(), TensorOptions(t.dtype(), t.device()));
}
Tensor ones_like(const Tensor& t) {
  return ones(t.sizes(), TensorOptions(t.dtype(), t.device()));
}
Tensor full_like(const Tensor& t, const Scalar& value) {
  return full(t.sizes(), value, TensorOptions(t.dtype(), t.device()));
}

Tensor scalar_tensor(const Scalar& value, TensorOptions options) {
  return full({}, value, options);
}

Tensor arange(const Scalar& end, std::optional<TensorOptions> options) {
  return arange(0, end, 1, options);
}

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step,
              std::optional<TensorOptions> options) {
  const bool all_integers = !start.is_floating() && !end.is_floating() && !step.is_floating();
  TensorOptions resolved =
      options.value_or(all_integers ? TensorOptions(DType::i64) : TensorOptions(DType::f32));
  const double first = start.to_double(), last = end.to_double(), delta = step.to_double();
  EMBER_CHECK(delta != 0.0, "arange: step must be nonzero");
  EMBER_CHECK(std::isfinite(first) && std::isfinite(last) && std::isfinite(delta),
              "arange: start, end and step must be finite, got ", first, ", ", last, ", ", delta);
  EMBER_CHECK((delta > 0 && first <= last) || (delta < 0 && first >= last), "arange: the range [",
              first, ", ", last, ") is empty or runs against step ", delta,
              "; expected start <= end for a positive step and start >= end for a negative one");
  const int64_t count = static_cast<int64_t>(std::ceil((last - first) / delta));
  const bool requires_grad = resolved.requires_grad;
  Tensor host = empty({count}, TensorOptions(resolved.dtype, Device::cpu()));
  dispatch_numeric(resolved.dtype, "arange", [&]<typename T>() {
    T* out = host.data<T>();
    if (all_integers) {
      for (int64_t i = 0; i < count; ++i)
        out[i] = convert<T>(start.to_int() + i * step.to_int());
    } else {
      for (int64_t i = 0; i < count; ++i)
        out[i] = convert<T>(first + static_cast<double>(i) * delta);
    }
  });
  Tensor result = host.to(resolved.device);
  if (requires_grad) result.requires_grad_(true);
  return result;
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  EMBER_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got ", steps);
  Tensor host = empty({steps}, TensorOptions(options.dtype, Device::cpu()));
  dispatch_floating(options.dtype, "linspace", [&]<typename T>() {
    T* out = host.data<T>();
    const double delta = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
    // Both halves step from their own end, as PyTorch does, so the last value is exactly `end`.
    const int64_t half = (steps + 1) / 2;
    for (int64_t i = 0; i < steps; ++i)
      out[i] = convert<T>(i < half ? start + delta * static_cast<double>(i)
                                   : end - delta * static_cast<double>(steps - 1 - i));
  });
  Tensor result = host.to(options.device);
  if (options.requires_grad) result.requires_grad_(true);
  return result;
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions options) {
  const int64_t cols = m.value_or(n);
  EMBER_CHECK(n >= 0 && cols >= 0, "eye: sizes must be non-negative, got n = ", n, ", m = ", cols);
  Tensor host = zeros({n, cols}, TensorOptions(options.dtype, Device::cpu()));
  dispatch_all(options.dtype, "eye", [&]<typename T>() {
    T* out = host.data<T>();
    for (int64_t i = 0; i < std::min(n, cols); ++i)
      out[i * cols + i] = convert<T>(1);
  });
  Tensor result = host.to(options.device);
  if (options.requires_grad) result.requires_grad_(true);
  return result;
}

namespace {
template <typename Host>
Tensor from_host(const std::vector<Host>& values, const Shape& shape, TensorOptions options) {
  check_shape(shape, "from_vector");
  EMBER_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
              "from_vector: ", values.size(), " values do not fill shape ", shape_str(shape), " (",
              shape_numel(shape), " elements)");
  Tensor host = empty(shape, TensorOptions(options.dtype, Device::cpu()));
  dispatch_all(options.dtype, "from_vector", [&]<typename T>() {
    T* out = host.data<T>();
    for (size_t i = 0; i < values.size(); ++i)
      out[i] = convert<T>(values[i]);
  });
  Tensor result = host.to(options.device);
  if (options.requires_grad) result.requires_grad_(true);
  return result;
}
}  // namespace

Tensor from_vector(const std::vector<float>& values, const Shape& shape, TensorOptions options) {
  return from_host(values, shape, options);
}
Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions options) {
  return from_host(values, shape, options);
}
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, TensorOptions options) {
  return from_host(values, shape, options);
}

Tensor from_blob(void* data, const Shape& shape, DType dtype) {
  check_shape(shape, "from_blob");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(
      data, storage_bytes(shape_numel(shape), dtype, shape, "from_blob"), Device::cpu(), nullptr);
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

template <typename T>
std::vector<T> to_vector(const Tensor& t) {
  NoGradGuard no_grad;
  const Tensor host = t.to(Device::cpu()).contiguous();
  std::vector<T> values(static_cast<size_t>(host.numel()));
  dispatch_all(host.dtype(), "to_vector", [&]<typename S>() {
    const S* in = static_cast<const S*>(host.data_ptr());
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = convert<T>(in[i]);
  });
  return values;
}

template std::vector<float> to_vector<float>(const Tensor&);
template std::vector<double> to_vector<double>(const Tensor&);
template std::vector<int64_t> to_vector<int64_t>(const Tensor&);
template std::vector<int32_t> to_vector<int32_t>(const Tensor&);
template std::vector<uint8_t> to_vector<uint8_t>(const Tensor&);
template std::vector<bool> to_vector<bool>(const Tensor&);
template std::vector<Half> to_vector<Half>(const Tensor&);
template std::vector<BFloat16> to_vector<BFloat16>(const Tensor&);

}  // namespace ember
