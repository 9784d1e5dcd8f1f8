#include "runtime/dtype.h"

#include "runtime/error.h"

namespace ember {

size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::u8:
    case DType::boolean:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  for (DType d : kAllDTypes) {
    if (name == dtype_name(d)) return d;
  }
  if (name == "float32" || name == "float") return DType::f32;
  if (name == "float64" || name == "double") return DType::f64;
  if (name == "float16" || name == "fp16" || name == "half") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  EMBER_FAIL("unknown dtype '", name, "': expected one of f32, f64, f16, bf16, i32, i64, u8, bool");
}

std::ostream& operator<<(std::ostream& os, DType dtype) {
  return os << dtype_name(dtype);
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // PyTorch's table restricted to ember's dtypes. Index order: f32 f64 f16 bf16 i32 i64 u8 bool.
  using D = DType;
  static constexpr DType kTable[8][8] = {
      /* f32  */ {D::f32, D::f64, D::f32, D::f32, D::f32, D::f32, D::f32, D::f32},
      /* f64  */ {D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64},
      /* f16  */ {D::f32, D::f64, D::f16, D::f32, D::f16, D::f16, D::f16, D::f16},
      /* bf16 */ {D::f32, D::f64, D::f32, D::bf16, D::bf16, D::bf16, D::bf16, D::bf16},
      /* i32  */ {D::f32, D::f64, D::f16, D::bf16, D::i32, D::i64, D::i32, D::i32},
      /* i64  */ {D::f32, D::f64, D::f16, D::bf16, D::i64, D::i64, D::i64, D::i64},
      /* u8   */ {D::f32, D::f64, D::f16, D::bf16, D::i32, D::i64, D::u8, D::u8},
      /* bool */ {D::f32, D::f64, D::f16, D::bf16, D::i32, D::i64, D::u8, D::boolean},
  };
  return kTable[static_cast<int>(a)][static_cast<int>(b)];
}

}  // namespace ember
