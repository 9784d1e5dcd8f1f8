// DType: the element types ember stores, and PyTorch's type-promotion rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

#include "kernels/common/scalar_types.h"

namespace ember {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8, boolean };

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                       DType::i32, DType::i64, DType::u8,  DType::boolean};

size_t element_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32", "bf16", "bool", ...
DType parse_dtype(const std::string& name);
std::ostream& operator<<(std::ostream& os, DType dtype);

inline bool is_floating(DType d) {
  return d == DType::f32 || d == DType::f64 || d == DType::f16 || d == DType::bf16;
}
inline bool is_integral(DType d, bool include_bool) {
  return d == DType::i32 || d == DType::i64 || d == DType::u8 ||
         (include_bool && d == DType::boolean);
}
inline bool is_reduced_float(DType d) {
  return d == DType::f16 || d == DType::bf16;
}

// The dtype two tensors of the same priority promote to (PyTorch's promoteTypes table).
DType promote_types(DType a, DType b);

// The dtype arithmetic on these dtypes happens in: f32 for f16/bf16, the dtype itself otherwise.
inline DType accumulate_dtype(DType d) {
  return is_reduced_float(d) ? DType::f32 : d;
}

// The C++ type stored for each dtype, and back.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::f16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::u8;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::boolean;
};
template <typename T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace ember
