// Picks the C++ element type for a runtime DType and calls a generic lambda with it:
//
//   dispatch_floating(t.dtype(), "exp", [&]<typename T>() { kernels::cpu::unary<T>(...); });
//
// An unsupported dtype is an error naming the op and the dtypes it accepts.
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/error.h"

namespace ember {

template <typename Fn>
decltype(auto) dispatch_floating(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      return fn.template operator()<float>();
    case DType::f64:
      return fn.template operator()<double>();
    case DType::f16:
      return fn.template operator()<Half>();
    case DType::bf16:
      return fn.template operator()<BFloat16>();
    default:
      EMBER_FAIL(op, ": expected a floating-point tensor (f32, f64, f16 or bf16), got ", dtype);
  }
}

// f32 and f64 only (ops without a reduced-precision kernel).
template <typename Fn>
decltype(auto) dispatch_f32_f64(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      return fn.template operator()<float>();
    case DType::f64:
      return fn.template operator()<double>();
    default:
      EMBER_FAIL(op, ": expected an f32 or f64 tensor, got ", dtype);
  }
}

// Every dtype but bool.
template <typename Fn>
decltype(auto) dispatch_numeric(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::i32:
      return fn.template operator()<int32_t>();
    case DType::i64:
      return fn.template operator()<int64_t>();
    case DType::u8:
      return fn.template operator()<uint8_t>();
    case DType::boolean:
      EMBER_FAIL(op, ": not supported for bool tensors");
    default:
      return dispatch_floating(dtype, op, std::forward<Fn>(fn));
  }
}

template <typename Fn>
decltype(auto) dispatch_all(DType dtype, const char* op, Fn&& fn) {
  if (dtype == DType::boolean) return fn.template operator()<bool>();
  return dispatch_numeric(dtype, op, std::forward<Fn>(fn));
}

// Integer index tensors: i32 or i64.
template <typename Fn>
decltype(auto) dispatch_index(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::i32:
      return fn.template operator()<int32_t>();
    case DType::i64:
      return fn.template operator()<int64_t>();
    default:
      EMBER_FAIL(op, ": expected an index tensor of dtype i64 or i32, got ", dtype);
  }
}

}  // namespace ember
