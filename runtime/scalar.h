// Scalar: a number passed to an op (`t + 2`, `full(shape, 0.5)`), remembering whether it was
// written as a bool, an integer or a float, because PyTorch's promotion rules care:
// an i64 tensor plus 2 stays i64, plus 2.0 becomes f32.
#pragma once

#include <cstdint>
#include <type_traits>

#include "runtime/dtype.h"

namespace ember {

class Scalar {
 public:
  enum class Kind : uint8_t { boolean, integer, floating };

  Scalar() = default;
  Scalar(bool v) : kind_(Kind::boolean), integer_(v), floating_(v) {}  // NOLINT
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v)
      : kind_(Kind::integer),
        integer_(static_cast<int64_t>(v)),
        floating_(static_cast<double>(v)) {}  // NOLINT
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::floating), floating_(static_cast<double>(v)) {}  // NOLINT
  Scalar(Half v) : Scalar(static_cast<float>(v)) {}                          // NOLINT
  Scalar(BFloat16 v) : Scalar(static_cast<float>(v)) {}                      // NOLINT

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::floating; }
  double to_double() const { return floating_; }
  int64_t to_int() const {
    return kind_ == Kind::floating ? static_cast<int64_t>(floating_) : integer_;
  }
  // The dtype a bare number of this kind has in type promotion (f32 is the default float).
  DType default_dtype() const {
    return kind_ == Kind::floating  ? DType::f32
           : kind_ == Kind::integer ? DType::i64
                                    : DType::boolean;
  }

 private:
  Kind kind_ = Kind::integer;
  int64_t integer_ = 0;
  double floating_ = 0.0;
};

}  // namespace ember
